"""1-D convolutions run over a channels-last layout: the vocoders' HiFi-GAN stages (Piper's), where the channels are
few and the signal long.

A prepared stage's activations are 4-D ``(B, C, 1, T)`` tensors stored time-major (``torch.channels_last``), and each
convolution is the 2-D one over that layout, its weight kept as a 4-D channels-last copy ``(A, B, 1, k)`` in the
compute dtype. oneDNN runs these faster than the 1-D convolutions over ``(B, C, T)`` (Piper's decoder, 32-128
channels at up to 22,050 samples a second: 1.4x in float32, measured); the maths is the same (float32), or the
products are bfloat16 ones where asked (the activations between layers stay float32). The layers are their ``nn``
classes' drop-ins (same parameters, same state-dict names); the copies are made again whenever the weights change,
kept as plain attributes so neither the state dict nor ``.float()`` sees them (a layer computing in its weights' own
dtype follows ``.double()``). Where the copy is in the weights' own dtype, the weight becomes a view of it (one copy
of the weights in memory, the parameter then stored time-major: a state dict saved with safetensors needs
``.contiguous()`` first). A 3-D input runs the plain 1-D convolution (in the compute dtype), so an unprepared caller
still works. The layers compute on detached copies: they are for inference, not training.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers import fft_conv
from ggtts.models.layers.bfloat16 import weight_version

__all__ = [
    "ChannelsLastConv1d",
    "ChannelsLastConvTranspose1d",
    "channels_last",
    "channels_last_convolutions",
    "fft_convolutions",
    "laid_out",
    "narrow_convolution",
    "pad_left",
    "zeros_before",
]


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """``(B, C, T)`` -> ``(B, C, 1, T)`` stored time-major."""
    return x.unsqueeze(2).contiguous(memory_format=torch.channels_last)


def laid_out(t: torch.Tensor) -> torch.Tensor:
    """A 4-D tensor stored channels-last (as a prepared stage's activations are); any other as it is."""
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t


def zeros_before(x: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` steps of zeros shaped and laid out as ``x``'s: a causal convolution's padding, or its first past."""
    return laid_out(x.new_zeros(*x.shape[:-1], n))


def pad_left(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x`` after ``n`` zero steps, in x's layout (``F.pad`` would not keep channels-last; one copy either way)."""
    if not n:
        return x
    if x.dim() == 3:
        return F.pad(x, (n, 0))
    return torch.cat([zeros_before(x, n), x], dim=-1)


def narrow_convolution(x: torch.Tensor, layer: nn.Conv1d) -> torch.Tensor:
    """``layer``, a convolution to a few channels (a vocoder's last layer: Piper's 32 to 1, Kokoro's 128 to 22),
    over ``x`` ``(B, C, 1, T)`` stored time-major: ``(B, C_out, T_out)``. One matrix product of the time-major rows
    with every tap at once, then each tap's column shifted into place and summed: the 1-D convolution over a
    ``(B, C, T)`` copy costs three times as much here (the copy itself most of it; oneDNN runs one output channel
    slowly). The same sums in another order. Stride 1, no dilation, one group, zero padding only."""
    if layer.stride != (1,) or layer.dilation != (1,) or layer.groups != 1 or layer.padding_mode != "zeros":
        raise ValueError(f"a narrow convolution has stride 1, no dilation, one group and zero padding, not {layer}")
    (padding,) = cast(tuple[int], layer.padding)
    weight, bias = layer.weight, layer.bias
    batch, channels, _, steps = x.shape
    c_out, _, k = weight.shape
    rows = x.permute(0, 2, 3, 1).reshape(batch, steps, channels)  # a view of the time-major storage
    taps = rows @ weight.permute(1, 2, 0).reshape(channels, k * c_out)  # (B, T, k * C_out): tap j, channel o
    taps = F.pad(taps, (0, 0, padding, padding)).view(batch, steps + 2 * padding, k, c_out)
    out_steps = steps + 2 * padding - k + 1
    y = taps[:, :out_steps, 0].clone() if bias is None else taps[:, :out_steps, 0] + bias
    for j in range(1, k):
        y += taps[:, j : j + out_steps, j]
    return y.transpose(1, 2)


class _Copies:
    weight: torch.Tensor
    bias: torch.Tensor | None
    compute_dtype: torch.dtype | None = None  # None: the weight's own (a model turned to float64 computes in it)

    def _copies(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight as a 4-D channels-last copy and the bias, in the compute dtype."""
        if torch.compiler.is_compiling():  # the copies made before compiling (no graph break on the check)
            return cast(tuple[torch.Tensor, torch.Tensor | None], self.__dict__["_layout_cache"][1])
        weight, bias = self.weight, self.bias
        dtype = self.compute_dtype or weight.dtype
        version = weight_version
        key = (dtype, version(weight), weight.data_ptr(), None if bias is None else (version(bias), bias.data_ptr()))
        cached = self.__dict__.get("_layout_cache")
        if cached is None or cached[0] != key:
            with torch.inference_mode(weight.is_inference()):  # a normal parameter gets normal copies
                w = weight.detach().to(dtype).unsqueeze(2).contiguous(memory_format=torch.channels_last)
            if w.dtype == weight.dtype:  # one copy in memory: the parameter views the 4-D one
                weight.data = w.squeeze(2)
                key = (dtype, version(weight), weight.data_ptr(), key[3])
            copies = (w, None if bias is None else bias.detach().to(dtype))
            # the tensors copied are held, so that a weight replaced later cannot take their memory's address
            held = (weight.detach(), None if bias is None else bias.detach())
            self.__dict__["_layout_cache"] = cached = (key, copies, held)
        return cast(tuple[torch.Tensor, torch.Tensor | None], cached[1])


class ChannelsLastConv1d(_Copies, nn.Conv1d):
    """An ``nn.Conv1d`` (zero padding) over ``(B, C, 1, T)`` channels-last inputs; returns the input's dtype.
    ``fft_length`` (set by :func:`fft_convolutions`): a long enough float32 input of one row runs through the DFT
    (:mod:`ggtts.models.layers.fft_conv`) over blocks of that many steps."""

    fft_length: int | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self._copies()
        (stride,), (dilation,) = self.stride, self.dilation
        (padding,) = cast(tuple[int], self.padding)
        if self.fft_length is not None and self._through_fft(x, w):
            y = fft_conv.convolve(x[0, :, 0].T, self._spectrum(), b, padding, dilation)  # (T, C) time-major in, out
            return y.T[None, :, None]  # (1, C_out, 1, T) stored time-major
        if x.dim() == 3:
            y = F.conv1d(x.to(w.dtype), w[:, :, 0], b, stride, padding, dilation, self.groups)
        elif w.shape[-1] == 1 and stride == 1 and padding == 0 and self.groups == 1:
            # pointwise: one matrix product over the time-major rows (oneDNN's 1x1 convolution is slower here)
            y = F.linear(x.to(w.dtype).permute(0, 2, 3, 1), w[:, :, 0, 0], b).permute(0, 3, 1, 2)
        else:
            y = F.conv2d(x.to(w.dtype), w, b, (1, stride), (0, padding), (1, dilation), self.groups)
        return y.to(x.dtype)

    def _through_fft(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """Whether this input goes through the DFT: one float32 row, stored time-major, long enough, with float32
        weights on the CPU, outside a compiled graph (and the layer one the DFT computes: stride 1, one group).
        Compiling is asked first: a compiled graph then holds no guard on the input's length (which would compile
        it again at each threshold the length crosses)."""
        if torch.compiler.is_compiling():
            return False
        assert self.fft_length is not None
        valid = self.fft_length - (self.kernel_size[0] - 1)  # output steps per block (of each subsequence)
        return (
            self.stride == (1,)
            and self.groups == 1
            and x.dim() == 4
            and x.shape[0] == 1
            and x.shape[2] == 1
            and x.dtype == torch.float32
            and w.dtype == torch.float32
            and x.device.type == "cpu"
            and x.shape[-1] >= fft_conv.MIN_BLOCKS * valid
            and x.is_contiguous(memory_format=torch.channels_last)
        )

    def _spectrum(self) -> fft_conv.Spectrum:
        """The kernel's spectrum, made on first use and again whenever the weight changes."""
        weight = self.weight
        key = (weight_version(weight), weight.data_ptr(), self.fft_length)
        cached = self.__dict__.get("_fft_cache")
        if cached is None or cached[0] != key:
            assert self.fft_length is not None
            with torch.inference_mode(weight.is_inference()):  # the weight held, as _copies holds it
                cached = (key, fft_conv.spectrum(weight.float(), self.fft_length), weight.detach())
            self.__dict__["_fft_cache"] = cached
        return cast(fft_conv.Spectrum, cached[1])


class ChannelsLastConvTranspose1d(_Copies, nn.ConvTranspose1d):
    """An ``nn.ConvTranspose1d`` (zero padding) over ``(B, C, 1, T)`` channels-last inputs; returns the input's
    dtype."""

    def forward(self, x: torch.Tensor, output_size: list[int] | None = None, *, bias: bool = True) -> torch.Tensor:
        """``bias=False``: without the bias (a streaming caller adds it after its overlap-add)."""
        if output_size is not None:
            raise NotImplementedError("an output size is not taken here: the layer's output_padding holds")
        w, b = self._copies()
        b = b if bias else None
        (stride,), (dilation,), (extra,) = self.stride, self.dilation, self.output_padding
        (padding,) = cast(tuple[int], self.padding)
        if x.dim() == 3:
            y = F.conv_transpose1d(x.to(w.dtype), w[:, :, 0], b, stride, padding, extra, self.groups, dilation)
        else:
            y = F.conv_transpose2d(
                x.to(w.dtype), w, b, (1, stride), (0, padding), (0, extra), self.groups, (1, dilation)
            )
        return y.to(x.dtype)


def channels_last_convolutions(
    module: nn.Module, dtype: torch.dtype | None = None, keep: tuple[nn.Module, ...] = ()
) -> int:
    """Turn the zero-padded ``nn.Conv1d`` and ``nn.ConvTranspose1d`` layers in ``module`` (or their bfloat16 or
    channels-last drop-ins) into channels-last drop-ins computing in ``dtype`` (None: their weights' own; those
    under a module of ``keep`` always in their weights' own), in place, making the copies now; returns how many."""
    kept = {id(layer) for m in keep for layer in m.modules()}
    count = 0
    for layer in module.modules():
        if not isinstance(layer, nn.Conv1d | nn.ConvTranspose1d) or layer.padding_mode != "zeros":
            continue
        layer.__class__ = ChannelsLastConv1d if isinstance(layer, nn.Conv1d) else ChannelsLastConvTranspose1d
        layer.__dict__.pop("_bf16_cache", None)  # a bfloat16 drop-in's copies
        prepared = cast(_Copies, layer)
        prepared.compute_dtype = None if id(layer) in kept else dtype
        prepared._copies()
        count += 1
    return count


def fft_convolutions(module: nn.Module, min_kernel: int = 7) -> int:
    """Let the channels-last convolutions of ``module`` with stride 1, one group and a kernel of at least
    ``min_kernel`` run long float32 inputs through the DFT, where their spectrum fits
    :data:`~ggtts.models.layers.fft_conv.SPECTRUM_BUDGET` (:mod:`ggtts.models.layers.fft_conv`; a dilated kernel over
    its interleaved subsequences). Returns how many."""
    count = 0
    for layer in module.modules():
        if not isinstance(layer, ChannelsLastConv1d) or layer.stride[0] != 1 or layer.groups != 1:
            continue
        (kernel,) = layer.kernel_size
        if kernel < min_kernel:
            continue
        layer.fft_length = fft_conv.block_length(kernel - 1, layer.in_channels, layer.out_channels)
        count += layer.fft_length is not None
    return count
