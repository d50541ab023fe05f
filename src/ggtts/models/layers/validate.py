"""What a GGUF file claims, checked when it is loaded: metadata within plausible ranges, small tensors finite.

A file can be well formed and still corrupt: a sample rate of 2**32 - 1, a head count of 0, a NaN in a voicepack
or a norm. Such a file is refused at load with one sentence naming the file and the field, instead of failing
deep inside synthesis (or, for a sample rate, only when the audio is written). The ranges are wide: they reject
what no model can mean, not what no model has yet used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ggtts.errors import GGUFError
from ggtts.gguf.parse import shown

if TYPE_CHECKING:  # a config's checks import no torch: `ggtts speak` reads one before torch is imported
    import torch

# Tensors up to this many elements (norms, biases, embeddings of positions, voicepacks) are checked for inf and
# NaN at load; the large weight matrices are not scanned, so loading stays fast.
FINITE_CHECK_MAX_ELEMENTS = 1 << 20

Number = TypeVar("Number", int, float)


def _shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


@dataclass(frozen=True)
class Bounds:
    """An inclusive range a metadata value must lie in, and what to call it in an error."""

    low: float
    high: float
    what: str  # "a sample rate"
    unit: str = ""  # " Hz"

    def check(self, path: Path | str, key: str, value: Number) -> Number:
        """``value`` (of metadata ``key``), or a GGUFError naming both; NaN is never within bounds."""
        if not self.low <= value <= self.high:
            raise GGUFError(f"{path}: metadata '{key}' is {_shown(value)}; {self.rule()}")
        return value

    def check_each(self, path: Path | str, key: str, values: tuple[int, ...]) -> tuple[int, ...]:
        """Every item of a list of integers (of metadata ``key``) within bounds."""
        for value in values:
            if not self.low <= value <= self.high:
                raise GGUFError(f"{path}: metadata '{key}' holds {_shown(value)}; {self.rule()}")
        return values

    def rule(self) -> str:
        return f"{self.what} must be between {_shown(self.low)} and {_shown(self.high)}{self.unit}"


# Shared by every architecture; architecture-specific ranges live in its config module.
SAMPLE_RATE = Bounds(8_000, 384_000, "a sample rate", " Hz")
LAYER_COUNT = Bounds(1, 1024, "a layer count")
HEAD_COUNT = Bounds(1, 1024, "a head count")
SIZE = Bounds(1, 1 << 24, "a width, vocabulary or feature size")  # 16M: no TTS model comes near
CONTEXT_LENGTH = Bounds(1, 1 << 20, "a context length", " tokens")  # rotary tables are allocated this long
HOP_LENGTH = Bounds(1, 1 << 16, "a hop length", " samples")
NORM_EPSILON = Bounds(0.0, 1.0, "a normalization epsilon")


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds no inf or NaN. A float32 or float64 tensor on the CPU is read in place by numpy: 4-5x
    quicker than torch's elementwise test on the hundreds of small tensors a load checks (it makes a tensor of
    booleans first; 0.08-0.19 s of Kokoro's load on a 2-core CPU, against 0.02 s)."""
    import torch  # imported already: ``tensor`` is one

    if tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64):
        return bool(np.isfinite(tensor.detach().numpy()).all())
    return bool(tensor.isfinite().all())


def check_finite(path: Path | str, name: str, tensor: torch.Tensor, *, label: str | None = None) -> None:
    """GGUFError when ``tensor`` (the file's tensor ``name``) holds inf or NaN; ``label`` names it for people
    (default: ``tensor 'name'``)."""
    if not all_finite(tensor):
        raise GGUFError(f"{path}: {label or f'tensor {shown(name)!r}'} holds non-finite values (inf or NaN)")


def check_finite_if_small(path: Path | str, name: str, tensor: torch.Tensor) -> None:
    """:func:`check_finite` for a tensor of at most FINITE_CHECK_MAX_ELEMENTS elements; larger ones pass unread."""
    if tensor.numel() <= FINITE_CHECK_MAX_ELEMENTS:
        check_finite(path, name, tensor)


def non_finite_parameter(module: torch.nn.Module) -> str | None:
    """The name of the first parameter or buffer of ``module`` holding inf or NaN, else None.

    Scans every weight (about a tenth of a second for Kokoro), so it is called only once something has gone
    wrong: to tell a damaged file from a bug.
    """
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_floating_point() and not all_finite(tensor):
            return name
    return None


def damaged_weights_error(module: torch.nn.Module, source: Path | str | None) -> GGUFError | None:
    """A GGUFError naming ``source`` and the damaged weight if ``module`` holds non-finite values, else None."""
    name = non_finite_parameter(module)
    if name is None:
        return None
    where = f"{source}: " if source is not None else ""
    return GGUFError(f"{where}weight '{name}' holds non-finite values (inf or NaN): the model file is damaged")
