"""Style-conditioned blocks shared by Kokoro's prosody predictor, decoder and vocoder.

Weight norm is folded into plain ``.weight`` tensors by the converter: the convolutions here are plain ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LEAKY_SLOPE = 0.2  # LeakyReLU of the acoustic residual blocks
INSTANCE_NORM_EPS = 1e-5
INV_SQRT2 = 2**-0.5  # keeps the residual sum's variance


class AdaIN1d(nn.Module):
    """Instance norm over time, scaled and shifted by the style: ``(1 + γ(s)) · IN(x) + β(s)``."""

    def __init__(self, style_dim: int, channels: int) -> None:
        super().__init__()
        self.norm = nn.InstanceNorm1d(channels, affine=True)  # holds the affine weight and bias only
        self.fc = nn.Linear(style_dim, 2 * channels)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        # x: (B, C, T), or (1, C, 1, T) channels-last; s: (B, style_dim). The style's scale and shift are folded
        # into the norm's affine parameters, so one batch-norm kernel over (1, B * C, T), which is instance norm,
        # does all the work (over one channels-last row, batch norm is instance norm as it is).
        gamma, beta = self.fc(s).chunk(2, dim=1)  # (B, C) each
        gain = 1 + gamma
        weight = (gain * self.norm.weight).reshape(-1)
        bias = (gain * self.norm.bias + beta).reshape(-1)
        if x.dim() == 4:
            if x.shape[0] != 1:
                raise ValueError("channels-last AdaIN takes one row at a time")
            return F.batch_norm(x, None, None, weight, bias, True, 0.0, INSTANCE_NORM_EPS)
        batch, channels, length = x.shape
        y = F.batch_norm(x.reshape(1, batch * channels, length), None, None, weight, bias, True, 0.0, INSTANCE_NORM_EPS)
        return y.reshape(batch, channels, length)


def snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Snake activation ``x + sin(αx)² / α`` with a per-channel α of shape (1, C, 1).

    ``x`` is overwritten (callers pass a temporary): two full-size buffers instead of four keep the vocoder's
    large activations out of the allocator and the page-fault path.
    """
    if x.dim() == 4:  # (B, C, 1, T) channels-last
        alpha = alpha.unsqueeze(-1)
    t = torch.mul(x, alpha).sin_().square_()
    return x.addcmul_(t, torch.reciprocal(alpha))


class AdainResBlk1d(nn.Module):
    """AdaIN residual block of the predictor and decoder, optionally upsampling time by 2."""

    def __init__(self, dim_in: int, dim_out: int, style_dim: int, upsample: bool = False) -> None:
        super().__init__()
        self.upsample = upsample
        self.conv1 = nn.Conv1d(dim_in, dim_out, 3, 1, 1)
        self.conv2 = nn.Conv1d(dim_out, dim_out, 3, 1, 1)
        self.norm1 = AdaIN1d(style_dim, dim_in)
        self.norm2 = AdaIN1d(style_dim, dim_out)
        self.conv1x1 = nn.Conv1d(dim_in, dim_out, 1, 1, 0, bias=False) if dim_in != dim_out else None
        # depthwise transposed convolution that doubles the frame rate
        self.pool = (
            nn.ConvTranspose1d(dim_in, dim_in, 3, stride=2, groups=dim_in, padding=1, output_padding=1)
            if upsample
            else None
        )

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        shortcut = F.interpolate(x, scale_factor=2.0, mode="nearest") if self.upsample else x
        if self.conv1x1 is not None:
            shortcut = self.conv1x1(shortcut)
        h = F.leaky_relu(self.norm1(x, s), LEAKY_SLOPE)
        if self.pool is not None:
            h = self.pool(h)
        h = F.leaky_relu(self.norm2(self.conv1(h), s), LEAKY_SLOPE)
        h = self.conv2(h)
        return (h + shortcut).mul_(INV_SQRT2)


def _same_padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


class AdaINResBlock1(nn.Module):
    """Vocoder residual block: residual pairs of (AdaIN, Snake, dilated conv, AdaIN, Snake, conv)."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...], style_dim: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, 1, dilation=d, padding=_same_padding(kernel_size, d))
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, 1, dilation=1, padding=_same_padding(kernel_size, 1))
            for _ in dilations
        )
        self.adain1 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilations)
        self.adain2 = nn.ModuleList(AdaIN1d(style_dim, channels) for _ in dilations)
        self.alpha1 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilations)
        self.alpha2 = nn.ParameterList(nn.Parameter(torch.ones(1, channels, 1)) for _ in dilations)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        for c1, c2, n1, n2, a1, a2 in zip(
            self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2, strict=True
        ):
            h = c1(snake(n1(x, s), a1))
            h = c2(snake(n2(h, s), a2))
            x = h.add_(x)
        return x
