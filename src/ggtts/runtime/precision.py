"""Whether bfloat16 arithmetic is native on a device (Kokoro's vocoder and Qwen3-Omni's code2wav offer it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["PRECISIONS", "bfloat16_supported"]

PRECISIONS = ("float32", "bfloat16")  # what a model's precision= load option takes where it has one


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
