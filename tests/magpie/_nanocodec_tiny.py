"""What the nano codec tests share: the tiny codec's files, and random codes for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class TinyCodec:
    nemo: Path  # NeMo's archive (measure/magpie/upstream.py's build_tiny_codec)
    gguf: Path  # our f32 conversion of it


def random_codes(
    codebooks: int, frames: int, *, batch: int | None = None, seed: int = 0, size: int = 2016
) -> torch.Tensor:
    """Codes ``(codebooks, frames)``, or ``(batch, codebooks, frames)``, uniform over the whole codebook."""
    gen = torch.Generator().manual_seed(seed)
    shape = (codebooks, frames) if batch is None else (batch, codebooks, frames)
    return torch.randint(0, size, shape, generator=gen)
