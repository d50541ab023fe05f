"""bfloat16 convolutions for Kokoro's vocoder, where the CPU multiplies bfloat16 natively (AVX-512 BF16, AMX).

The generator's resblocks and noise paths are most of Kokoro's time (their convolutions alone about two thirds).
:func:`use_bfloat16_convolutions` makes those convolutions read bfloat16 inputs and weights and give float32
back; everything else stays float32, above all ``conv_post``, whose outputs go through ``exp`` and ``sin`` (in
bfloat16 it alone costs more than the rest together: log-mel 1.1 dB against 0.1 dB). It is a choice: the output is
no longer float32 arithmetic, so parity with upstream holds in float32 only, and ``benchmarks/kokoro_precision.py``
measures what bfloat16 changes (speed, spectra, Whisper's word errors). The bfloat16 copies of the weights cost
half as much memory again as the converted layers' float32 weights.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.ops.precision import bfloat16_supported

__all__ = ["BFloat16Conv1d", "bfloat16_supported", "use_bfloat16_convolutions"]


class BFloat16Conv1d(nn.Conv1d):
    """An ``nn.Conv1d`` (same parameters, same state-dict names) that convolves in bfloat16 and returns the
    input's dtype.

    The bfloat16 weight and bias are copies of the float32 ones, made again whenever those change (new values,
    another device): plain attributes, so neither the state dict nor ``.float()`` sees them.
    """

    def _bfloat16(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight, bias = self.weight, self.bias
        key = (weight._version, weight.data_ptr(), None if bias is None else (bias._version, bias.data_ptr()))
        cached = self.__dict__.get("_bf16_cache")
        if cached is None or cached[0] != key:
            copies = (weight.detach().to(torch.bfloat16), None if bias is None else bias.detach().to(torch.bfloat16))
            self.__dict__["_bf16_cache"] = cached = (key, copies)
        return cached[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # the copies made before compiling (no graph break on the check)
            weight, bias = self.__dict__["_bf16_cache"][1]
        else:
            weight, bias = self._bfloat16()
        y = F.conv1d(
            x.to(torch.bfloat16),
            weight,
            bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )
        return y.to(x.dtype)


def use_bfloat16_convolutions(generator: nn.Module) -> int:
    """Turn the plain ``nn.Conv1d`` layers of ``generator``'s resblocks and noise paths into
    :class:`BFloat16Conv1d` (in place; ``conv_post`` and the upsampling stay float32); returns how many."""
    count = 0
    for part in ("resblocks", "noise_res", "noise_convs"):
        for module in getattr(generator, part).modules():
            if type(module) is nn.Conv1d and module.padding_mode == "zeros":  # forward pads as conv1d does
                module.__class__ = BFloat16Conv1d
                cast(BFloat16Conv1d, module)._bfloat16()  # the copies, made now
                count += 1
    return count
