"""NeMo nano codec decoder: FSQ codes -> latent -> causal HiFi-GAN (HalfSnake activations) -> waveform.

Module attribute names are NeMo's (``AudioCodecModel.vector_quantizer`` and ``.audio_decoder``, weight norm folded
into plain ``weight``), so ``state_dict()`` keys are the upstream names and the GGUF names are their magpie-tts.cpp
shortening (``NanoCodec.tensor_name``). Every convolution is causal: it pads on the left only, and a transposed
convolution drops the samples that spill past the input's end. So the audio of a frame depends on that frame and
those before it, and decoding in chunks, each causal layer keeping its past between them (:class:`NanoCodecStream`),
gives the same samples.

On a CPU the upsampling stages run over a channels-last layout (:meth:`NanoCodec.use_channels_last`: activations
``(B, C, 1, T)`` stored time-major, 2-D convolutions, :mod:`ggtts.models.layers.channels_last`): the same maths,
several times faster where the channels are few and the signal long (the last stages: 27-108 channels at 5-22 kHz).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import NanoCodec as K
from ggtts.models.layers.channels_last import (
    ChannelsLastConvTranspose1d,
    channels_last,
    channels_last_convolutions,
    pad_left,
    zeros_before,
)
from ggtts.models.layers.gguf_state import load_module_from_gguf
from ggtts.models.nanocodec.config import NanoCodecConfig

if TYPE_CHECKING:
    from ggtts.models.nanocodec.static_stream import StaticStreams

StreamState = dict[nn.Module, torch.Tensor]  # each causal layer's past inputs (or overlap spill) between pushes
SNAKE_EPS = 1e-9  # NeMo's snake(): x + sin(alpha x)^2 / (alpha + eps)
LEAKY_RELU_SLOPE = 0.01  # torch.nn.LeakyReLU's default, which NeMo's "lrelu" and HalfSnake use
CLAMP_RANGE = (-1.0, 1.0)  # NeMo's ClampActivation


# ---- activations (NeMo's CodecActivation and what it wraps) ------------------------------------------------------
class Snake(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T) or (B, C, 1, T)
        alpha = self.alpha if x.dim() == 3 else self.alpha.unsqueeze(-1)
        return x + (alpha + SNAKE_EPS).reciprocal() * torch.sin(alpha * x).pow(2)


class HalfSnake(nn.Module):
    """Snake on the first ``channels // 2`` channels, leaky ReLU on the rest (the larger half when odd)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.snake_channels = channels // 2
        self.snake_act = Snake(self.snake_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        head, tail = x[:, : self.snake_channels], x[:, self.snake_channels :]
        if x.dim() == 4:  # channels-last: written into one tensor of x's layout (a cat would lose it)
            y = F.leaky_relu(x, LEAKY_RELU_SLOPE)
            y[:, : self.snake_channels] = self.snake_act(head)
            return y
        return torch.cat([self.snake_act(head), F.leaky_relu(tail, LEAKY_RELU_SLOPE)], dim=1)


def _activation(name: str, channels: int) -> nn.Module:
    if name == "half_snake":
        return HalfSnake(channels)
    if name == "snake":
        return Snake(channels)
    if name == "lrelu":
        return nn.LeakyReLU(LEAKY_RELU_SLOPE)
    return nn.ELU()  # NanoCodecConfig admits no other name


class CodecActivation(nn.Module):
    def __init__(self, name: str, channels: int) -> None:
        super().__init__()
        self.activation = _activation(name, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(x)


# ---- causal convolutions -----------------------------------------------------------------------------------------
class CausalConv1d(nn.Module):
    """Stride-1 convolution padded with ``(kernel - 1) * dilation`` zeros on the left: output length = input length."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation)
        self.left_pad = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        """``state`` (streaming): the last inputs of the previous call stand in for the zero padding."""
        if state is None:
            return self.conv(pad_left(x, self.left_pad))
        past = state.get(self)
        x = torch.cat([zeros_before(x, self.left_pad) if past is None else past, x], dim=-1)
        if self.left_pad:
            state[self] = x[..., x.shape[-1] - self.left_pad :]
        return self.conv(x)


class CausalConvTranspose1d(nn.Module):
    """Upsampling by ``rate``: one grouped transposed convolution (kernel ``2 * rate``, a group per output channel),
    its last ``kernel - rate`` samples (the spill past the input's end) dropped: output length = rate * input."""

    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, 2 * rate, stride=rate, groups=c_out)
        self.rate = rate

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        """(B, C_in, T) -> (B, C_out, T * rate). ``state`` (streaming): the previous call's spill past its end is
        added to this call's first samples (overlap-add), and this call's spill is kept."""
        n = x.shape[-1] * self.rate
        if state is None:
            return self.conv(x)[..., :n]
        c = self.conv
        if isinstance(c, ChannelsLastConvTranspose1d):
            y = c(x, bias=False)
        else:
            y = F.conv_transpose1d(x, c.weight, None, c.stride, 0, 0, c.groups)  # (B, C_out, n + kernel - rate)
        spill = state.get(self)
        if spill is not None:
            y[..., : spill.shape[-1]] += spill
        state[self] = y[..., n:]
        out = y[..., :n]
        return out if c.bias is None else out + c.bias.view(-1, *[1] * (out.dim() - 2))


# ---- residual layers ---------------------------------------------------------------------------------------------
class ResidualBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilation: int, activation: str) -> None:
        super().__init__()
        self.input_activation = CodecActivation(activation, channels)
        self.input_conv = CausalConv1d(channels, channels, kernel, dilation)
        self.skip_activation = CodecActivation(activation, channels)
        self.skip_conv = CausalConv1d(channels, channels, kernel)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        h = self.input_conv(self.input_activation(x), state)
        return x + self.skip_conv(self.skip_activation(h), state)


class HiFiGANResBlock(nn.Module):
    """One kernel size: a residual block per dilation, in sequence."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], activation: str) -> None:
        super().__init__()
        self.res_blocks = nn.ModuleList(ResidualBlock(channels, kernel, d, activation) for d in dilations)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for block in self.res_blocks:
            x = block(x, state)
        return x


class HiFiGANResLayer(nn.Module):
    """A branch per kernel size, averaged (summed in NeMo's order, then divided)."""

    def __init__(self, channels: int, cfg: NanoCodecConfig) -> None:
        super().__init__()
        self.res_blocks = nn.ModuleList(
            HiFiGANResBlock(channels, k, cfg.resblock_dilations, cfg.activation) for k in cfg.resblock_kernel_sizes
        )

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return sum((block(x, state) for block in self.res_blocks), torch.zeros_like(x)) / len(self.res_blocks)


class CausalHiFiGANDecoder(nn.Module):
    def __init__(self, cfg: NanoCodecConfig) -> None:
        super().__init__()
        self.pre_conv = CausalConv1d(cfg.latent_dim, cfg.base_channels, cfg.in_kernel_size)
        n = len(cfg.up_sample_rates)
        self.activations = nn.ModuleList(CodecActivation(cfg.activation, cfg.channels(i)) for i in range(n))
        self.up_sample_conv_layers = nn.ModuleList(
            CausalConvTranspose1d(cfg.channels(i), cfg.channels(i + 1), rate)
            for i, rate in enumerate(cfg.up_sample_rates)
        )
        self.res_layers = nn.ModuleList(HiFiGANResLayer(cfg.channels(i + 1), cfg) for i in range(n))
        self.post_activation = CodecActivation(cfg.activation, cfg.channels(n))
        self.post_conv = CausalConv1d(cfg.channels(n), 1, cfg.out_kernel_size)
        self.output_activation = cfg.output_activation
        self.channels_last = False  # the upsampling stages run channels-last (NanoCodec.use_channels_last)

    def forward(self, latent: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        """(B, latent_dim, T) -> (B, T * hop); ``state`` carries every causal layer's past between calls."""
        x = self.pre_conv(latent, state)
        if self.channels_last:
            x = channels_last(x)  # (B, C, 1, T), time-major
        for act, up, res in zip(self.activations, self.up_sample_conv_layers, self.res_layers, strict=True):
            x = res(up(act(x), state), state)  # (B, C / 2, [1,] T * rate)
        if x.dim() == 4:
            x = x.squeeze(2).contiguous()
        x = self.post_conv(self.post_activation(x), state).squeeze(1)  # (B, T * hop)
        return torch.tanh(x) if self.output_activation == "tanh" else x.clamp(*CLAMP_RANGE)


# ---- FSQ ---------------------------------------------------------------------------------------------------------
class FSQBuffers(nn.Module):
    """One group's FSQ constants as NeMo stores them, ``(1, D, 1)``: read from the file and checked, not used."""

    dim_base_index: torch.Tensor
    num_levels: torch.Tensor

    def __init__(self, dims: int) -> None:
        super().__init__()
        self.register_buffer("dim_base_index", torch.zeros(1, dims, 1))
        self.register_buffer("num_levels", torch.zeros(1, dims, 1))


class GroupFiniteScalarQuantizer(nn.Module):
    """Codes ``(B, G, T)`` -> latent ``(B, G * D, T)``: each code's mixed-radix digits (the first dimension varies
    fastest), centred and scaled into [-1, 1] per dimension as NeMo's ``FiniteScalarQuantizer.decode`` does."""

    levels: torch.Tensor  # (1, 1, D, 1) levels per dimension
    base: torch.Tensor  # (1, 1, D, 1) place value of each dimension's digit

    def __init__(self, cfg: NanoCodecConfig) -> None:
        super().__init__()
        self.fsqs = nn.ModuleList(FSQBuffers(len(cfg.fsq_levels)) for _ in range(cfg.num_codebooks))
        levels = torch.tensor(cfg.fsq_levels, dtype=torch.long)
        base = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.long), levels[:-1]]), 0)
        self.register_buffer("levels", levels.view(1, 1, -1, 1), persistent=False)  # (1, 1, D, 1)
        self.register_buffer("base", base.view(1, 1, -1, 1), persistent=False)

    def check_buffers(self, path: Path | str) -> None:
        """GGUFError unless the file's FSQ tensors are the levels and bases of the metadata's ``fsq_levels``."""
        for i, fsq in enumerate(self.fsqs):
            for name, want in (("num_levels", self.levels), ("dim_base_index", self.base)):
                got = getattr(fsq, name)
                if not torch.equal(got.flatten().cpu(), want.flatten().to(got.dtype).cpu()):
                    tensor = K.tensor_name(f"vector_quantizer.fsqs.{i}.{name}")
                    raise GGUFError(
                        f"{path}: tensor '{tensor}' is {got.flatten().tolist()}, but the FSQ levels "
                        f"{self.levels.flatten().tolist()} give {want.flatten().tolist()}"
                    )

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        digits = (codes.unsqueeze(2) // self.base) % self.levels  # (B, G, D, T)
        half = self.levels // 2
        latent = (digits - half) / half  # true division: float32, as NeMo's
        return latent.flatten(1, 2)  # (B, G * D, T): the groups one after another


# ---- the codec ---------------------------------------------------------------------------------------------------
class NanoCodec(nn.Module):
    def __init__(self, cfg: NanoCodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vector_quantizer = GroupFiniteScalarQuantizer(cfg)
        self.audio_decoder = CausalHiFiGANDecoder(cfg)
        self.static: StaticStreams | None = None  # use_static_streams

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str | torch.device = "cpu") -> NanoCodec:
        model = cls(NanoCodecConfig.from_gguf(gguf))
        load_module_from_gguf(model, gguf, gguf_name=K.tensor_name)
        model.vector_quantizer.check_buffers(gguf.path)
        model = model.to(device).eval()
        if torch.device(device).type == "cpu":
            model.use_channels_last()
        return model

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles leave the fixed-tensor streams behind (their graphs read this codec's tensors): a
        copy makes its own, of the same sizes, on first use."""
        state = dict(super().__getstate__())
        static = state.get("static")
        state["static"] = None
        state["_static_settings"] = None if static is None else (static.sizes, static.capture)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        settings = state.pop("_static_settings", None)
        super().__setstate__(state)
        if isinstance(settings, tuple):
            sizes, capture = settings
            self.use_static_streams(sizes, capture)

    @property
    def device(self) -> torch.device:
        return self.audio_decoder.post_conv.conv.weight.device

    def use_channels_last(self) -> int:
        """The decoder's upsampling stages (the transposed convolutions and the residual layers) run channels-last
        from now on: the same maths. Call before a stream starts. How many convolutions were turned."""
        decoder = self.audio_decoder
        decoder.channels_last = True
        return channels_last_convolutions(decoder.up_sample_conv_layers) + channels_last_convolutions(
            decoder.res_layers
        )

    def check_codes(self, codes: torch.Tensor) -> None:
        """InputError unless ``codes`` is an integer ``(codebooks, frames)`` or ``(batch, codebooks, frames)``
        tensor of this codec's codebook count and code range."""
        cfg = self.cfg
        if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
            raise InputError(f"audio codes must be integers, not {codes.dtype}")
        if codes.dim() not in (2, 3):
            raise InputError(
                f"audio codes have shape {list(codes.shape)}; expected (codebooks, frames) or "
                "(batch, codebooks, frames)"
            )
        if codes.shape[-2] != cfg.num_codebooks:
            raise InputError(
                f"audio codes have {codes.shape[-2]} codebooks (shape {list(codes.shape)}); this codec decodes "
                f"{cfg.num_codebooks}"
            )
        if codes.numel():
            bad = (codes < 0) | (codes >= cfg.codebook_size)
            if bool(bad.any()):
                where = bad.nonzero()[0].tolist()
                raise InputError(
                    f"audio code {int(codes[tuple(where)])} at {where} is out of range: this codec has codes "
                    f"0..{cfg.codebook_size - 1}"
                )

    def dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``([B,] codebooks, T)`` -> the decoder's input ``([B,] latent_dim, T)``."""
        self.check_codes(codes)
        latent = self.vector_quantizer(codes.to(self.device, torch.long).reshape(-1, *codes.shape[-2:]))
        return latent if codes.dim() == 3 else latent.squeeze(0)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(codebooks, T)`` -> float32 audio ``(T * hop,)``; ``(B, codebooks, T)`` -> ``(B, T * hop)``."""
        self.check_codes(codes)
        batched = codes if codes.dim() == 3 else codes.unsqueeze(0)
        if batched.shape[-1] == 0:
            audio = torch.zeros(batched.shape[0], 0, device=self.device)
        else:
            audio = self.audio_decoder(self.vector_quantizer(batched.to(self.device, torch.long))).float()
        return audio if codes.dim() == 3 else audio.squeeze(0)

    def use_static_streams(self, sizes: Sequence[int], capture: bool = True) -> None:
        """From now on :meth:`stream` decodes over fixed tensors, each push made of pushes of ``sizes`` frames
        (1 among them), each size a replayed CUDA graph where the codec is on CUDA and ``capture``
        (:mod:`ggtts.models.nanocodec.static_stream`; eagerly elsewhere: what the CPU tests run)."""
        from ggtts.models.nanocodec.static_stream import StaticStreams

        self.static = StaticStreams(self, sizes, capture)

    def stream(self) -> NanoCodecStream:
        """A new stream: ``push`` frames of codes, get their audio (over fixed tensors after
        :meth:`use_static_streams`: one stream at a time then)."""
        if self.static is not None:
            from ggtts.models.nanocodec.static_stream import StaticStream

            return StaticStream(self.static)
        return NanoCodecStream(self)

    def decode_stream(self, codes: torch.Tensor, chunk_frames: int) -> Iterator[torch.Tensor]:
        """``decode(codes)`` in pieces of ``chunk_frames`` frames (the last may be shorter), each decoded with every
        causal layer's state from the pieces before; their concatenation equals ``decode(codes)`` up to float
        rounding."""
        if chunk_frames < 1:
            raise InputError(f"chunk_frames must be at least 1, not {chunk_frames}")
        self.check_codes(codes)
        stream = self.stream()
        for start in range(0, codes.shape[-1], chunk_frames):
            yield stream.push(codes[..., start : start + chunk_frames])


class NanoCodecStream:
    """Incremental decoding: ``push`` new frames of codes, get their audio. Each causal convolution keeps the inputs
    its next call needs in place of zero padding (and each transposed convolution its overlap past the end), so a
    push costs what its own frames cost in one-shot decoding, and the pieces join to the one-shot audio."""

    def __init__(self, codec: NanoCodec) -> None:
        self.codec = codec
        self._state: StreamState = {}
        self._shape: torch.Size | None = None  # the leading shape of the codes pushed so far

    @torch.inference_mode()
    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(codebooks, n)`` or ``(B, codebooks, n)`` -> their ``n * hop`` samples (per batch item)."""
        codec = self.codec
        codec.check_codes(codes)
        if self._shape is not None and self._shape != codes.shape[:-1]:
            raise InputError(f"pushed codes of shape {list(codes.shape)} after codes of shape {list(self._shape)}")
        self._shape = codes.shape[:-1]
        if codes.shape[-1] == 0:
            return torch.zeros(*codes.shape[:-2], 0, device=codec.device)
        batched = codes if codes.dim() == 3 else codes.unsqueeze(0)
        audio = self._decode(batched.to(codec.device, torch.long))
        return audio if codes.dim() == 3 else audio.squeeze(0)

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Checked codes ``(B, codebooks, n)``, ``n >= 1``, on the codec's device -> ``(B, n * hop)`` float32."""
        codec = self.codec
        return codec.audio_decoder(codec.vector_quantizer(codes), self._state).float()
