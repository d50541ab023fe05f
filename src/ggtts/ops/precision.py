"""Whether bfloat16 arithmetic is native on a device (Kokoro's vocoder and Qwen3-Omni's code2wav offer it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_PRECISION", "PRECISIONS", "bfloat16_supported", "check_name", "check_precision", "dtype_of"]

PRECISIONS = ("float32", "bfloat16")  # what a model's precision= load option takes where it has one
DEFAULT_PRECISION = "float32"  # every model's own


def check_name(precision: str) -> str:
    """``precision``, or an InputError naming the ones there are."""
    from ggtts.errors import InputError

    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return precision


def dtype_of(precision: str) -> torch.dtype:
    """The torch dtype a ``precision`` name (checked: :func:`check_name`) multiplies in."""
    import torch  # here: the command line reads PRECISIONS without loading torch

    return torch.bfloat16 if check_name(precision) == "bfloat16" else torch.float32


def check_precision(precision: str, device: torch.device | str = "cpu") -> str:
    """A ``precision=`` load option checked before any work: a known one, and bfloat16 only where ``device``
    runs it natively (:func:`bfloat16_supported`)."""
    from ggtts.errors import InputError

    check_name(precision)
    if precision == "bfloat16" and not bfloat16_supported(device):
        raise InputError(f"this {device} has no native bfloat16 convolutions; use precision float32")
    return precision


def bfloat16_supported(device: torch.device | str = "cpu") -> bool:
    """Whether convolutions in bfloat16 are native here: a CPU with AVX-512 BF16 or AMX, a GPU that has bfloat16
    (elsewhere they are emulated: an AVX-512 CPU without BF16 runs them 2.6 times slower than float32)."""
    import torch  # here: the command line reads PRECISIONS without loading torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if device.type != "cpu":
        return False
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
