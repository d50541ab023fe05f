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

import torch
from torch import nn

from ggtts.models.layers.bfloat16 import BFloat16Conv1d, to_bfloat16
from ggtts.models.layers.channels_last import ChannelsLastConv1d, channels_last_convolutions
from ggtts.ops.precision import bfloat16_supported

__all__ = ["BFloat16Conv1d", "bfloat16_layers", "bfloat16_supported", "use_bfloat16_convolutions"]

PARTS = ("resblocks", "noise_res", "noise_convs")  # the generator's parts that multiply in bfloat16


def use_bfloat16_convolutions(generator: nn.Module) -> int:
    """Make the convolutions of ``generator``'s resblocks and noise paths multiply in bfloat16 (in place;
    ``conv_post`` and the upsampling stay float32): channels-last drop-ins in bfloat16 where the generator runs
    channels-last, else :class:`BFloat16Conv1d`. Returns how many."""
    if getattr(generator, "channels_last", False):
        return sum(channels_last_convolutions(getattr(generator, part), torch.bfloat16) for part in PARTS)
    return sum(to_bfloat16(getattr(generator, part)) for part in PARTS)


def bfloat16_layers(module: nn.Module) -> list[nn.Module]:
    """The convolutions of ``module`` that multiply in bfloat16."""
    return [
        m
        for m in module.modules()
        if isinstance(m, BFloat16Conv1d) or (isinstance(m, ChannelsLastConv1d) and m.compute_dtype == torch.bfloat16)
    ]
