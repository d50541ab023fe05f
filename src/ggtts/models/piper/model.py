"""Piper's VITS at inference: phoneme ids -> text encoder -> durations -> prior -> reversed flow -> HiFi-GAN.

Module attributes follow the voice's tensor names (the VITS module paths of piper's training code), so the
strict GGUF loader fills them as they are. Only the inference direction exists here: the duration predictor
and the flows run in reverse, from noise to latents, as ``SynthesizerTrn.infer`` runs them. Noise is drawn from
a ``torch.Generator`` the caller seeds; with both noise scales at 0 the result is deterministic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.errors import InputError
from ggtts.models.layers.bfloat16 import to_bfloat16
from ggtts.models.layers.channel_norm import ChannelLayerNorm
from ggtts.models.layers.channels_last import channels_last, channels_last_convolutions, narrow_convolution
from ggtts.models.piper.config import PiperConfig

LRELU_SLOPE = 0.1
MIN_BIN = 1e-3  # the spline's smallest bin width and height, and its smallest derivative
MASK_FILL = -1e4  # attention scores at padded positions


def _same_conv(c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1, bias: bool = True) -> nn.Conv1d:
    return nn.Conv1d(
        c_in, c_out, kernel, dilation=dilation, padding=dilation * (kernel - 1) // 2, groups=groups, bias=bias
    )


# ---- text encoder ----------------------------------------------------------------------------------------------
class RelativeAttention(nn.Module):
    """Multi-head self-attention with learned relative-position terms on keys and values, ``window`` positions
    each way (one table shared by all heads); farther pairs get none."""

    def __init__(self, channels: int, n_heads: int, window: int) -> None:
        super().__init__()
        self.n_heads, self.window = n_heads, window
        self.head = channels // n_heads
        self.conv_q, self.conv_k, self.conv_v, self.conv_o = (nn.Conv1d(channels, channels, 1) for _ in range(4))
        self.emb_rel_k = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head))
        self.emb_rel_v = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head))

    def _relative_index(self, length: int, device: torch.device) -> torch.Tensor:
        """(T, T): row i, column j -> the table row of offset j - i, or the zero row past the window."""
        pos = torch.arange(length, device=device)
        offset = pos[None, :] - pos[:, None]
        inside = offset.abs() <= self.window
        return torch.where(inside, offset + self.window, torch.full_like(offset, 2 * self.window + 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, c, t = x.shape
        h, d = self.n_heads, self.head

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, h, d, t).transpose(2, 3)  # (B, H, T, D)

        q = heads(self.conv_q(x)) / math.sqrt(d)
        k, v = heads(self.conv_k(x)), heads(self.conv_v(x))
        zero = self.emb_rel_k.new_zeros(1, d)
        table_k = torch.cat([self.emb_rel_k[0], zero])  # (2W + 2, D): the last row is "out of the window"
        table_v = torch.cat([self.emb_rel_v[0], zero])
        index = self._relative_index(t, x.device).expand(b, h, t, t)
        scores = q @ k.transpose(-2, -1) + torch.gather(q @ table_k.T, -1, index)
        scores = scores.masked_fill(mask == 0, MASK_FILL)
        weights = torch.softmax(scores, dim=-1)
        out = weights @ v
        by_offset = weights.new_zeros(b, h, t, table_v.shape[0]).scatter_add_(-1, index, weights)
        out = out + by_offset @ table_v
        return self.conv_o(out.transpose(2, 3).reshape(b, c, t))


class FeedForward(nn.Module):
    def __init__(self, channels: int, filter_channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, ((self.kernel - 1) // 2, self.kernel // 2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_1(self._pad(x * mask)))
        return self.conv_2(self._pad(x * mask)) * mask


class AttentionStack(nn.Module):
    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        n = cfg.n_layers
        self.attn_layers = nn.ModuleList(RelativeAttention(cfg.hidden, cfg.n_heads, cfg.window_size) for _ in range(n))
        self.norm_layers_1 = nn.ModuleList(ChannelLayerNorm(cfg.hidden) for _ in range(n))
        self.ffn_layers = nn.ModuleList(FeedForward(cfg.hidden, cfg.filter, cfg.kernel_size) for _ in range(n))
        self.norm_layers_2 = nn.ModuleList(ChannelLayerNorm(cfg.hidden) for _ in range(n))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pair_mask = mask.unsqueeze(2) * mask.unsqueeze(-1)  # (B, 1, T, T)
        x = x * mask
        for attn, norm_1, ffn, norm_2 in zip(
            self.attn_layers, self.norm_layers_1, self.ffn_layers, self.norm_layers_2, strict=True
        ):
            x = norm_1(x + attn(x, pair_mask))
            x = norm_2(x + ffn(x, mask))
        return x * mask


class TextEncoder(nn.Module):
    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        self.hidden = cfg.hidden
        self.emb = nn.Embedding(cfg.n_vocab, cfg.hidden)
        self.encoder = AttentionStack(cfg)
        self.proj = nn.Conv1d(cfg.hidden, 2 * cfg.inter, 1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (encoded text (B, hidden, T), prior means, prior log-scales (B, inter, T))."""
        x = (self.emb(ids) * math.sqrt(self.hidden)).transpose(1, 2)
        x = self.encoder(x * mask, mask)
        mean, log_scale = (self.proj(x) * mask).chunk(2, dim=1)
        return x, mean, log_scale


# ---- duration predictors ---------------------------------------------------------------------------------------
class DilatedSeparableConvs(nn.Module):
    """Depth-wise convolutions with dilations kernel**i, each with a point-wise one, norms and GELU, residual."""

    def __init__(self, channels: int, kernel: int, n_layers: int) -> None:
        super().__init__()
        self.convs_sep = nn.ModuleList(
            _same_conv(channels, channels, kernel, dilation=kernel**i, groups=channels) for i in range(n_layers)
        )
        self.convs_1x1 = nn.ModuleList(nn.Conv1d(channels, channels, 1) for _ in range(n_layers))
        self.norms_1 = nn.ModuleList(ChannelLayerNorm(channels) for _ in range(n_layers))
        self.norms_2 = nn.ModuleList(ChannelLayerNorm(channels) for _ in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        if cond is not None:
            x = x + cond
        for sep, pointwise, norm_1, norm_2 in zip(
            self.convs_sep, self.convs_1x1, self.norms_1, self.norms_2, strict=True
        ):
            y = F.gelu(norm_1(sep(x * mask)))
            x = x + F.gelu(norm_2(pointwise(y)))
        return x * mask


def _inverse_spline(
    y: torch.Tensor, widths: torch.Tensor, heights: torch.Tensor, slopes: torch.Tensor, bound: float
) -> torch.Tensor:
    """The inverse of a monotonic rational-quadratic spline on [-bound, bound] (identity outside), from its
    unnormalized bin widths and heights (..., K) and inner knot slopes (..., K - 1)."""
    bins = widths.shape[-1]
    inside = (y >= -bound) & (y <= bound)
    out = y.clone()
    if not bool(inside.any()):
        return out
    y, widths, heights, slopes = y[inside], widths[inside], heights[inside], slopes[inside]
    edge = math.log(math.expm1(1 - MIN_BIN))  # an outer knot slope of exactly 1: the tails join smoothly
    slopes = F.pad(slopes, (1, 1), value=edge)

    def knots(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        size = MIN_BIN + (1 - MIN_BIN * bins) * torch.softmax(raw, dim=-1)
        cum = F.pad(torch.cumsum(size, dim=-1), (1, 0))
        cum = 2 * bound * cum - bound
        cum[..., 0], cum[..., -1] = -bound, bound
        return cum, cum[..., 1:] - cum[..., :-1]

    cum_x, bin_w = knots(widths)
    cum_y, bin_h = knots(heights)
    slopes = MIN_BIN + F.softplus(slopes)
    edges = cum_y.clone()
    edges[..., -1] += 1e-6
    k = (torch.sum(y[..., None] >= edges, dim=-1) - 1).clamp(0, bins - 1)[..., None]

    def at(t: torch.Tensor) -> torch.Tensor:
        return t.gather(-1, k)[..., 0]

    x0, w, y0, h = at(cum_x), at(bin_w), at(cum_y), at(bin_h)
    s = h / w
    d0, d1 = at(slopes), at(slopes[..., 1:])
    dy = y - y0
    a = dy * (d0 + d1 - 2 * s) + h * (s - d0)
    b = h * d0 - dy * (d0 + d1 - 2 * s)
    c = -s * dy
    root = (2 * c) / (-b - torch.sqrt(b * b - 4 * a * c))
    out[inside] = root * w + x0
    return out


class SplineFlow(nn.Module):
    """One coupling step of the stochastic duration predictor: the second channel through a spline whose knots
    come from the first channel and the text."""

    def __init__(self, channels: int, kernel: int, n_layers: int, bins: int, tail_bound: float) -> None:
        super().__init__()
        self.channels, self.bins, self.tail_bound = channels, bins, tail_bound
        self.pre = nn.Conv1d(1, channels, 1)
        self.convs = DilatedSeparableConvs(channels, kernel, n_layers)
        self.proj = nn.Conv1d(channels, 3 * bins - 1, 1)

    def reverse(self, z: torch.Tensor, mask: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        z0, z1 = z[:, :1], z[:, 1:]
        h = self.proj(self.convs(self.pre(z0), mask, cond=text)) * mask  # (B, 3K - 1, T)
        h = h.transpose(1, 2)  # (B, T, 3K - 1)
        scale = math.sqrt(self.channels)
        widths, heights, slopes = (
            h[..., : self.bins] / scale,
            h[..., self.bins : 2 * self.bins] / scale,
            h[..., 2 * self.bins :],
        )
        z1 = _inverse_spline(z1[:, 0], widths, heights, slopes, self.tail_bound)[:, None]
        return torch.cat([z0, z1], dim=1) * mask


class Affine(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def reverse(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (z - self.m) * torch.exp(-self.logs) * mask


class StochasticDurations(nn.Module):
    """Log-durations drawn by running the flows backwards from noise (scaled by ``noise_w``), conditioned on
    the text. The flow next to the affine one is trained but never used at inference, so it is not kept."""

    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        c = cfg.dp_filter
        self.pre = nn.Conv1d(cfg.hidden, c, 1)
        self.convs = DilatedSeparableConvs(c, cfg.dp_kernel, cfg.dp_layers)
        self.proj = nn.Conv1d(c, c, 1)
        if cfg.gin:
            self.cond = nn.Conv1d(cfg.gin, c, 1)
        # upstream's list: [affine, (spline, flip) x n]; inference runs it backwards, skipping the first spline
        flows: dict[str, nn.Module] = {"0": Affine(2)}
        for i in range(1, cfg.dp_flows):
            flows[str(2 * i + 1)] = SplineFlow(c, cfg.dp_kernel, cfg.dp_layers, cfg.dp_bins, cfg.dp_tail_bound)
        self.flows = nn.ModuleDict(flows)
        self.n_flows = cfg.dp_flows

    def forward(
        self, text: torch.Tensor, mask: torch.Tensor, speaker: torch.Tensor | None, noise: torch.Tensor
    ) -> torch.Tensor:
        x = self.pre(text)
        if speaker is not None:
            x = x + self.cond(speaker)
        x = self.proj(self.convs(x, mask)) * mask
        z = noise
        for i in range(self.n_flows - 1, 0, -1):
            z = torch.flip(z, [1])
            spline = self.flows[str(2 * i + 1)]
            assert isinstance(spline, SplineFlow)
            z = spline.reverse(z, mask, x)
        z = torch.flip(z, [1])
        affine = self.flows["0"]
        assert isinstance(affine, Affine)
        return affine.reverse(z, mask)[:, :1]


class PlainDurations(nn.Module):
    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        c, k = cfg.dp_filter, cfg.dp_kernel
        self.conv_1 = nn.Conv1d(cfg.hidden, c, k, padding=k // 2)
        self.norm_1 = ChannelLayerNorm(c)
        self.conv_2 = nn.Conv1d(c, c, k, padding=k // 2)
        self.norm_2 = ChannelLayerNorm(c)
        self.proj = nn.Conv1d(c, 1, 1)
        if cfg.gin:
            self.cond = nn.Conv1d(cfg.gin, cfg.hidden, 1)

    def forward(
        self, text: torch.Tensor, mask: torch.Tensor, speaker: torch.Tensor | None, noise: torch.Tensor
    ) -> torch.Tensor:
        x = text if speaker is None else text + self.cond(speaker)
        x = self.norm_1(torch.relu(self.conv_1(x * mask)))
        x = self.norm_2(torch.relu(self.conv_2(x * mask)))
        return self.proj(x * mask) * mask


# ---- flow ------------------------------------------------------------------------------------------------------
class WaveNet(nn.Module):
    def __init__(self, channels: int, kernel: int, dilation_rate: int, n_layers: int, gin: int) -> None:
        super().__init__()
        self.channels = channels
        self.in_layers = nn.ModuleList(
            _same_conv(channels, 2 * channels, kernel, dilation=dilation_rate**i) for i in range(n_layers)
        )
        self.res_skip_layers = nn.ModuleList(
            nn.Conv1d(channels, 2 * channels if i < n_layers - 1 else channels, 1) for i in range(n_layers)
        )
        if gin:
            self.cond_layer = nn.Conv1d(gin, 2 * channels * n_layers, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, speaker: torch.Tensor | None) -> torch.Tensor:
        c = self.channels
        cond = self.cond_layer(speaker) if speaker is not None else None
        out = torch.zeros_like(x)
        last = len(self.in_layers) - 1
        for i, (conv, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=True)):
            a = conv(x)
            if cond is not None:
                a = a + cond[:, 2 * c * i : 2 * c * (i + 1)]
            y = res_skip(torch.tanh(a[:, :c]) * torch.sigmoid(a[:, c:]))
            if i < last:
                x = (x + y[:, :c]) * mask
                out = out + y[:, c:]
            else:
                out = out + y
        return out * mask


class Coupling(nn.Module):
    """Mean-only affine coupling: the second half of the channels shifted by a WaveNet of the first half."""

    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        half = cfg.inter // 2
        self.pre = nn.Conv1d(half, cfg.hidden, 1)
        self.enc = WaveNet(cfg.hidden, cfg.flow_kernel, cfg.flow_dilation_rate, cfg.flow_layers, cfg.gin)
        self.post = nn.Conv1d(cfg.hidden, half, 1)

    def reverse(self, z: torch.Tensor, mask: torch.Tensor, speaker: torch.Tensor | None) -> torch.Tensor:
        z0, z1 = z.chunk(2, dim=1)
        shift = self.post(self.enc(self.pre(z0) * mask, mask, speaker)) * mask
        return torch.cat([z0, (z1 - shift) * mask], dim=1)


class CouplingFlow(nn.Module):
    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        self.flows = nn.ModuleDict({str(2 * i): Coupling(cfg) for i in range(cfg.flow_couplings)})
        self.n_couplings = cfg.flow_couplings

    def reverse(self, z: torch.Tensor, mask: torch.Tensor, speaker: torch.Tensor | None) -> torch.Tensor:
        for i in range(self.n_couplings - 1, -1, -1):
            z = torch.flip(z, [1])  # each coupling is followed by a channel flip
            coupling = self.flows[str(2 * i)]
            assert isinstance(coupling, Coupling)
            z = coupling.reverse(z, mask, speaker)
        return z


# ---- decoder ---------------------------------------------------------------------------------------------------
class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_same_conv(channels, channels, kernel, dilation=d) for d in dilations)
        self.convs2 = nn.ModuleList(_same_conv(channels, channels, kernel) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in place on the convolutions' fresh outputs: a new tensor per step cost as much again as the step itself
        # at 32 channels and 22,050 steps a second (the allocator's fresh pages); the same sums
        for c1, c2 in zip(self.convs1, self.convs2, strict=True):
            x = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE, inplace=True)).add_(x)
        return x


class ResBlock2(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_same_conv(channels, channels, kernel, dilation=d) for d in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = conv(F.leaky_relu(x, LRELU_SLOPE)).add_(x)  # in place on the fresh output, as ResBlock1
        return x


class Generator(nn.Module):
    """HiFi-GAN: transposed convolutions, each followed by the mean of its multi-receptive-field resblocks."""

    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        c0 = cfg.upsample_initial
        self.conv_pre = nn.Conv1d(cfg.inter, c0, 7, padding=3)
        if cfg.gin:
            self.cond = nn.Conv1d(cfg.gin, c0, 1)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(c0 >> i, c0 >> (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernels, strict=True))
        )
        block = ResBlock1 if cfg.resblock == "1" else ResBlock2
        self.n_kernels = len(cfg.resblock_kernels)
        self.resblocks = nn.ModuleList(
            block(c0 >> (i + 1), k, d)
            for i in range(len(self.ups))
            for k, d in zip(cfg.resblock_kernels, cfg.resblock_dilations, strict=True)
        )
        self.conv_post = nn.Conv1d(c0 >> len(self.ups), 1, 7, padding=3, bias=False)
        self.channels_last = False  # the upsampling stages run channels-last (use_channels_last)

    def forward(self, z: torch.Tensor, speaker: torch.Tensor | None) -> torch.Tensor:
        x = self.conv_pre(z)
        if speaker is not None:
            x = x + self.cond(speaker)
        if self.channels_last:
            x = channels_last(x)  # (B, C, 1, T), time-major
        for i, up in enumerate(self.ups):
            # x is this forward's own from here on (conv_pre's output, then each stage's mean): changed in place
            x = up(F.leaky_relu(x, LRELU_SLOPE, inplace=True))
            blocks = self.resblocks[i * self.n_kernels : (i + 1) * self.n_kernels]
            total = blocks[0](x)
            for block in blocks[1:]:
                total.add_(block(x))
            x = total.div_(self.n_kernels)
        if x.dim() == 4:  # channels-last: conv_post over the time-major rows, with no copy to (B, C, T)
            return torch.tanh(narrow_convolution(F.leaky_relu(x, inplace=True), self.conv_post))
        return torch.tanh(self.conv_post(F.leaky_relu(x)))  # torch's default slope here, as upstream

    def use_channels_last(self, dtype: torch.dtype | None = None) -> int:
        """The upsampling and resblock stages run over a channels-last layout from now on
        (:mod:`ggtts.models.layers.channels_last`: the same maths, 1.4x faster on a CPU here), their products in
        ``dtype`` (None: float32, as the weights). How many convolutions were turned."""
        self.channels_last = True
        return channels_last_convolutions(self.ups, dtype) + channels_last_convolutions(self.resblocks, dtype)

    def use_bfloat16(self) -> int:
        """The upsampling and resblock convolutions multiply in bfloat16 from now on, giving float32 back
        (channels-last where the stages already are, else :mod:`ggtts.models.layers.bfloat16`); ``conv_pre`` and
        ``conv_post`` stay float32. How many were turned. A choice of speed over float32's parity (what it changes:
        docs/benchmarks.md, Piper)."""
        if self.channels_last:
            return self.use_channels_last(torch.bfloat16)
        return to_bfloat16(self.ups) + to_bfloat16(self.resblocks)


def _randn(shape: tuple[int, ...], generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    """Normal noise drawn on the CPU (so a seed gives the same draw on every device), then moved."""
    return torch.randn(shape, generator=generator).to(device=like.device, dtype=like.dtype)


# ---- the whole voice -------------------------------------------------------------------------------------------
@dataclass
class Synthesis:
    audio: torch.Tensor  # (B, samples)
    durations: torch.Tensor  # (B, T_text): latent frames per phoneme id (hop_length samples each)


class PiperModel(nn.Module):
    def __init__(self, cfg: PiperConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.enc_p = TextEncoder(cfg)
        self.dp: nn.Module = StochasticDurations(cfg) if cfg.stochastic_durations else PlainDurations(cfg)
        self.flow = CouplingFlow(cfg)
        self.dec = Generator(cfg)
        if cfg.gin:
            self.emb_g = nn.Embedding(cfg.n_speakers, cfg.gin)

    def encode(
        self, ids: torch.Tensor, speaker: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One utterance's ids (1, T) -> (text, prior means, prior log-scales, mask, speaker embedding)."""
        mask = torch.ones(1, 1, ids.shape[1], dtype=torch.float32, device=ids.device)
        text, mean, log_scale = self.enc_p(ids, mask)
        g = None
        if self.cfg.gin:
            index = torch.tensor([speaker or 0], device=ids.device)
            g = self.emb_g(index).unsqueeze(-1)  # (1, gin, 1)
        return text, mean, log_scale, mask, g

    def durations(
        self,
        text: torch.Tensor,
        mask: torch.Tensor,
        g: torch.Tensor | None,
        noise_w: float,
        length_scale: float,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Latent frames per phoneme id, (1, T) integers (as floats): ceil(exp(log-duration) * length_scale)."""
        if self.cfg.stochastic_durations:  # the plain predictor draws nothing (the prior's draw comes next)
            noise = _randn((text.shape[0], 2, text.shape[2]), generator, text) * noise_w
        else:
            noise = text.new_zeros(text.shape[0], 2, text.shape[2])
        log_w = self.dp(text, mask, g, noise)
        return torch.ceil(torch.exp(log_w) * mask * length_scale)[:, 0]

    def decode(
        self,
        mean: torch.Tensor,
        log_scale: torch.Tensor,
        frames: torch.Tensor,
        g: torch.Tensor | None,
        noise_scale: float,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Priors spread over their frames, noise, the reversed flow and the decoder -> audio (1, samples)."""
        repeats = frames[0].long()
        if int(repeats.sum()) < 1:  # upstream keeps one frame, which no phoneme covers: zeros
            mean, log_scale = mean.new_zeros(1, mean.shape[1], 1), log_scale.new_zeros(1, mean.shape[1], 1)
        else:
            mean = torch.repeat_interleave(mean, repeats, dim=2)
            log_scale = torch.repeat_interleave(log_scale, repeats, dim=2)
        # upstream's randn_like keeps the strides of its expanded prior, which is laid out time-major, and torch
        # fills such a tensor element by element (not in the blocks of a contiguous one): the same draw is a
        # (1, frames, channels) tensor, transposed, then filled
        noise = torch.empty(mean.shape[0], mean.shape[2], mean.shape[1]).transpose(1, 2).normal_(generator=generator)
        noise = noise.to(device=mean.device, dtype=mean.dtype)
        z_p = mean + noise * torch.exp(log_scale) * noise_scale
        y_mask = torch.ones(1, 1, z_p.shape[2], dtype=z_p.dtype, device=z_p.device)
        z = self.flow.reverse(z_p, y_mask, g)
        return self.dec(z * y_mask, g)[:, 0]

    def synthesize(
        self,
        ids: torch.Tensor,
        *,
        noise_scale: float,
        length_scale: float,
        noise_w: float,
        speaker: int | None = None,
        generator: torch.Generator | None = None,
        max_frames_per_id: int | None = None,
    ) -> Synthesis:
        """One utterance, ids (1, T) -> audio (1, frames * hop) in [-1, 1] and the frames of each id. The noise is
        drawn on the CPU: ``generator`` is a CPU one, whatever the model's device. A draw of more than
        ``max_frames_per_id`` frames per id is an InputError before the decoder runs."""
        text, mean, log_scale, mask, g = self.encode(ids, speaker)
        frames = self.durations(text, mask, g, noise_w, length_scale, generator)
        total = float(frames.sum())
        if not math.isfinite(total):
            raise InputError("the voice's duration predictor gave durations that are not finite (a damaged voice?)")
        if max_frames_per_id is not None and total > max_frames_per_id * ids.shape[1]:
            raise InputError(
                f"the voice drew {total:.0f} frames for {ids.shape[1]} phoneme ids (noise_w {noise_w:g}, "
                f"length scale {length_scale:g}); lower noise_w"
            )
        audio = self.decode(mean, log_scale, frames, g, noise_scale, generator)
        return Synthesis(audio, frames)
