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

from torch import nn

from ggtts.models.layers.bfloat16 import BFloat16Conv1d, to_bfloat16
from ggtts.ops.precision import bfloat16_supported

__all__ = ["BFloat16Conv1d", "bfloat16_supported", "use_bfloat16_convolutions"]


def use_bfloat16_convolutions(generator: nn.Module) -> int:
    """Turn the plain ``nn.Conv1d`` layers of ``generator``'s resblocks and noise paths into
    :class:`BFloat16Conv1d` (in place; ``conv_post`` and the upsampling stay float32); returns how many."""
    return sum(to_bfloat16(getattr(generator, part)) for part in ("resblocks", "noise_res", "noise_convs"))
