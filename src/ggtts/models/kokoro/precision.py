"""bfloat16 convolutions for Kokoro's vocoder, where the CPU multiplies bfloat16 natively (AVX-512 BF16, AMX).

The generator's resblocks and noise paths are most of Kokoro's time (their convolutions alone about two thirds).
:func:`use_bfloat16_convolutions` makes those convolutions read bfloat16 inputs and weights and give float32
back; everything else stays float32, above all ``conv_post``, whose outputs go through ``exp`` and ``sin`` (in
bfloat16 it alone costs more than the rest together: log-mel 1.1 dB against 0.1 dB). It is a choice: the output is
no longer float32 arithmetic, so parity with upstream holds in float32 only, and :mod:`benchmarks.kokoro_precision`
measures what bfloat16 changes (speed, spectra, Whisper's word errors).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

PRECISIONS = ("float32", "bfloat16")


class BFloat16Conv1d(nn.Conv1d):
    """An ``nn.Conv1d`` (same parameters, same state-dict names) that convolves in bfloat16 and returns float32.

    Its bfloat16 weight and bias are copies made by :func:`use_bfloat16_convolutions` (not saved with the state).
    """

    weight_bf16: torch.Tensor
    bias_bf16: torch.Tensor | None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv1d(
            x.to(torch.bfloat16),
            self.weight_bf16,
            self.bias_bf16,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )
        return y.to(x.dtype)


def bfloat16_supported(device: torch.device | str = "cpu") -> bool:
    """Whether convolutions in bfloat16 are native here (a CPU without it emulates them, several times slower)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def use_bfloat16_convolutions(generator: nn.Module) -> int:
    """Turn the plain ``nn.Conv1d`` layers of ``generator``'s resblocks and noise paths into
    :class:`BFloat16Conv1d` (in place; ``conv_post`` and the upsampling stay float32); returns how many."""
    count = 0
    for part in ("resblocks", "noise_res", "noise_convs"):
        for module in getattr(generator, part).modules():
            if type(module) is nn.Conv1d:
                module.__class__ = BFloat16Conv1d
                module.register_buffer("weight_bf16", module.weight.detach().to(torch.bfloat16), persistent=False)
                bias = None if module.bias is None else module.bias.detach().to(torch.bfloat16)
                module.register_buffer("bias_bf16", bias, persistent=False)
                count += 1
    return count
