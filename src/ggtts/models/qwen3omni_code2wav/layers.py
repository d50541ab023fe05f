"""Code2wav's convolutional layers: causal (transposed) convolutions, SnakeBeta, ConvNeXt, the decoder blocks.

Attribute names are transformers' (``Qwen3OmniMoeCode2Wav``), so ``state_dict()`` keys are the checkpoint's names
after ``code2wav.``. Every layer takes an optional ``state`` (streaming): each causal convolution keeps the inputs
its next call needs in place of its zero padding, each transposed convolution the overlap that spills past its
input's end, so a stream of pushes yields the samples of one-shot decoding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

StreamState = dict[nn.Module, torch.Tensor]  # per layer: past inputs, overlap spill, or keys and values
SNAKE_EPS = 1e-9  # upstream SnakeBeta's no_div_by_zero
CONVNEXT_KERNEL = 7  # depthwise convolution of each ConvNeXt block
CONVNEXT_LN_EPS = 1e-6  # its LayerNorm
CONVNEXT_EXPANSION = 4  # pointwise hidden width, times the block's width
DECODER_KERNEL = 7  # the decoder's input and output convolutions and each residual unit's first convolution
RESIDUAL_DILATIONS = (1, 3, 9)  # one residual unit per dilation, after each decoder block's upsampling


class CausalConvNet(nn.Module):
    """Stride-1 convolution padded with ``(kernel - 1) * dilation`` zeros on the left: output length = input."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, groups=groups)
        self.left_pad = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:  # (B, C, T)
        if state is None:
            return self.conv(F.pad(x, (self.left_pad, 0)))
        if x.shape[-1] == 0:
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        past = state.get(self)
        x = torch.cat([x.new_zeros(*x.shape[:-1], self.left_pad) if past is None else past, x], dim=-1)
        if self.left_pad:
            state[self] = x[..., x.shape[-1] - self.left_pad :]
        return self.conv(x)


class CausalTransConvNet(nn.Module):
    """Upsampling by ``stride`` with a transposed convolution whose first and last ``kernel - stride`` samples are
    dropped: ``T`` inputs -> ``T * stride - (kernel - stride)`` samples. With ``kernel == 2 * stride`` (the decoder
    blocks) each sample needs its frame and the next, and the last ``stride`` samples, which would need a frame
    not yet given, are not returned."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel, stride=stride)
        self.stride = stride
        self.trim = kernel - stride  # at each end

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        if state is None:
            y = self.conv(x)  # (B, C_out, (T - 1) * stride + kernel)
            return y[..., self.trim : y.shape[-1] - self.trim]
        if x.shape[-1] == 0:
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        first = self not in state
        c = self.conv
        n = x.shape[-1] * self.stride
        y = F.conv_transpose1d(x, c.weight, None, self.stride)  # (B, C_out, n + trim)
        if not first:
            y[..., : self.trim] += state[self]  # overlap-add the previous call's spill
        state[self] = y[..., n:]  # the spill: it needs the next frame's contribution too
        out = y[..., :n] if c.bias is None else y[..., :n] + c.bias[:, None]
        return out[..., self.trim :] if first else out  # upstream's left trim, once


class SnakeBeta(nn.Module):
    """``x + sin(x * e^alpha)^2 / (e^beta + eps)`` per channel: ``alpha`` and ``beta`` are stored as logarithms."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:  # (B, C, T)
        freq = torch.exp(self.alpha)[:, None]
        inv_mag = (torch.exp(self.beta) + SNAKE_EPS).reciprocal()[:, None]
        s = (x * freq).sin_().square_()
        return s.mul_(inv_mag).add_(x)


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

    def __init__(self, dim: int, ratio: int) -> None:
        super().__init__([CausalTransConvNet(dim, dim, ratio, ratio), ConvNeXtBlock(dim)])

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for layer in self:
            x = layer(x, state)
        return x


class DecoderResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConvNet(dim, dim, DECODER_KERNEL, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConvNet(dim, dim, 1)

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        return x + self.conv2(self.act2(self.conv1(self.act1(x), state)), state)


class DecoderBlock(nn.Module):
    """SnakeBeta, upsampling by ``rate`` (kernel ``2 * rate``, width halved), then a residual unit per dilation."""

    def __init__(self, c_in: int, c_out: int, rate: int) -> None:
        super().__init__()
        units = [DecoderResidualUnit(c_out, d) for d in RESIDUAL_DILATIONS]
        self.block = nn.ModuleList([SnakeBeta(c_in), CausalTransConvNet(c_in, c_out, 2 * rate, rate), *units])

    def forward(self, x: torch.Tensor, state: StreamState | None = None) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, state)
        return x
