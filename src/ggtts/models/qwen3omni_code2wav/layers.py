"""Code2wav's convolutional layers: causal (transposed) convolutions, SnakeBeta, ConvNeXt, the decoder blocks.

Attribute names are transformers' (``Qwen3OmniMoeCode2Wav``), so ``state_dict()`` keys are the checkpoint's names
after ``code2wav.``. Every layer takes an optional ``state`` (streaming): each causal convolution keeps the inputs
its next call needs in place of its zero padding, each transposed convolution the overlap that spills past its
input's end, so a stream of pushes yields the samples of one-shot decoding.

The decoder runs in channels-last layout: its activations are 4-D ``(B, C, 1, T)`` tensors stored time-major and
its convolutions are 2-D ones over that layout, their weights kept in the same layout (the model's ``prepare`` turns
them into :mod:`ggtts.models.layers.channels_last`'s drop-ins after loading). oneDNN runs these about twice as fast
as the 1-D convolutions where the channels are few and the signal long (the last decoder blocks: 96 and 192 channels
over 16-48 thousand samples a second of audio); the maths is the same. The 3-D path remains for modules not
prepared.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.channels_last import ChannelsLastConvTranspose1d, pad_left, zeros_before

StreamState = dict[nn.Module, torch.Tensor]  # per layer: past inputs, overlap spill, or keys and values
SNAKE_EPS = 1e-9  # upstream SnakeBeta's no_div_by_zero
CONVNEXT_KERNEL = 7  # depthwise convolution of each ConvNeXt block
CONVNEXT_LN_EPS = 1e-6  # its LayerNorm
CONVNEXT_EXPANSION = 4  # pointwise hidden width, times the block's width
DECODER_KERNEL = 7  # the decoder's input and output convolutions and each residual unit's first convolution
RESIDUAL_DILATIONS = (1, 3, 9)  # one residual unit per dilation, after each decoder block's upsampling


def _per_channel(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-channel vector ``(C,)`` shaped to broadcast over ``like`` (``(B, C, T)`` or ``(B, C, 1, T)``)."""
    return v.view(-1, *([1] * (like.dim() - 2)))


class CausalConvNet(nn.Module):
    """Stride-1 convolution padded with ``(kernel - 1) * dilation`` zeros on the left: output length = input."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.left_pad = (kernel - 1) * dilation

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        return pad_left(x, self.left_pad)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:  # (B, C, [1,] T)
        if state is None:
            return self.conv(self._pad(x))
        if x.shape[-1] == 0:
            return x.new_zeros(x.shape[0], self.conv.out_channels, *x.shape[2:])
        past = state.get(self)
        if past is None:  # laid out as x: so the joined input (and what is kept of it) stays channels-last
            past = zeros_before(x, self.left_pad)
        x = torch.cat([past, x], dim=-1)
        if self.left_pad:
            state[self] = x[..., x.shape[-1] - self.left_pad :]
        return self.conv(x)


class CausalTransConvNet(nn.Module):
    """Upsampling by ``stride`` with a transposed convolution whose first and last ``kernel - stride`` samples are
    dropped: ``T`` inputs -> ``T * stride - (kernel - stride)`` samples. With ``kernel == 2 * stride`` (the decoder
    blocks) each sample needs its frame and the next, and the last ``stride`` samples, which would need a frame
    not yet given, are not returned."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, trim_left: bool = True) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.trim = kernel - stride  # at the end, and at the start where trim_left
        self.trim_left = trim_left  # Qwen3-TTS's 12 Hz decoder trims the end only: T inputs -> T * stride samples

    def _conv(self, x: torch.Tensor, bias: bool) -> torch.Tensor:
        if isinstance(self.conv, ChannelsLastConvTranspose1d):  # prepared: 4-D channels-last (or 3-D) inputs
            return self.conv(x, bias=bias)
        return F.conv_transpose1d(x, self.conv.weight, self.conv.bias if bias else None, self.stride)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        if state is None:
            y = self._conv(x, bias=True)  # (B, C_out, [1,] (T - 1) * stride + kernel)
            return y[..., self.trim if self.trim_left else 0 : y.shape[-1] - self.trim]
        if x.shape[-1] == 0:
            return x.new_zeros(x.shape[0], self.conv.out_channels, *x.shape[2:])
        first = self not in state
        c = self.conv
        n = x.shape[-1] * self.stride
        y = self._conv(x, bias=False)  # (B, C_out, [1,] n + trim)
        if not first:
            y[..., : self.trim] += state[self]  # overlap-add the previous call's spill
        state[self] = y[..., n:]  # the spill: it needs the next frame's contribution too
        out = y[..., :n] if c.bias is None else y[..., :n] + _per_channel(c.bias, y)
        return out[..., self.trim :] if first and self.trim_left else out  # upstream's left trim, once


class SnakeBeta(nn.Module):
    """``x + sin(x * e^alpha)^2 / (e^beta + eps)`` per channel: ``alpha`` and ``beta`` are stored as logarithms."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(the frequency ``e^alpha``, the magnitude ``1 / (e^beta + eps)``)."""
        return torch.exp(self.alpha), (torch.exp(self.beta) + SNAKE_EPS).reciprocal()

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:  # (B, C, [1,] T)
        freq, inv_mag = self.coefficients()
        if x.dim() == 4:  # channels-last: work on the (B, 1, T, C) view, channels innermost (vectorised, no copy)
            v = x.permute(0, 2, 3, 1)
            return (v * freq).sin_().square_().mul_(inv_mag).add_(v).permute(0, 3, 1, 2)
        s = (x * freq[:, None]).sin_().square_()
        return s.mul_(inv_mag[:, None]).add_(x)


class FoldedSnakeBeta(SnakeBeta):
    """SnakeBeta with ``alpha`` holding the frequency and ``beta`` the magnitude themselves, as llama.cpp's
    Qwen3-TTS files store them."""

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.alpha, self.beta


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConvNet(dim, dim, CONVNEXT_KERNEL, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=CONVNEXT_LN_EPS)
        self.pwconv1 = nn.Linear(dim, CONVNEXT_EXPANSION * dim)
        self.pwconv2 = nn.Linear(CONVNEXT_EXPANSION * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:  # (B, C, T)
        h = self.norm(self.dwconv(x, state).transpose(1, 2))  # (B, T, C)
        h = self.pwconv2(F.gelu(self.pwconv1(h)))
        return x + (self.gamma * h).transpose(1, 2)


class UpsampleStage(nn.ModuleList):
    """``upsample.i``: a transposed convolution (kernel = stride = ratio), then a ConvNeXt block."""

    def __init__(self, dim: int, ratio: int, trim_left: bool = True) -> None:
        super().__init__([CausalTransConvNet(dim, dim, ratio, ratio, trim_left), ConvNeXtBlock(dim)])

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for layer in self:
            x = layer(x, state)
        return x


class DecoderResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int, snake: type[SnakeBeta] = SnakeBeta) -> None:
        super().__init__()
        self.act1 = snake(dim)
        self.conv1 = CausalConvNet(dim, dim, DECODER_KERNEL, dilation=dilation)
        self.act2 = snake(dim)
        self.conv2 = CausalConvNet(dim, dim, 1)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x), state)), state)


class DecoderBlock(nn.Module):
    """SnakeBeta, upsampling by ``rate`` (kernel ``2 * rate``, width halved), then a residual unit per dilation."""

    def __init__(
        self, c_in: int, c_out: int, rate: int, trim_left: bool = True, snake: type[SnakeBeta] = SnakeBeta
    ) -> None:
        super().__init__()
        units = [DecoderResidualUnit(c_out, d, snake) for d in RESIDUAL_DILATIONS]
        self.block = nn.ModuleList([snake(c_in), CausalTransConvNet(c_in, c_out, 2 * rate, rate, trim_left), *units])

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, state)
        return x
