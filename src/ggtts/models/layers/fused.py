"""Weights that multiply the same input, stored end to end so one product does the work of several.

A GPU decode step replayed as a CUDA graph costs about its kernel count (:mod:`ggtts.ops.step_graph`): a Qwen3
block's query, key and value projections are three matrix products over the same row, its SwiGLU gate and up two.
:func:`fuse_rows` lays such weights out in one tensor and makes each module's ``weight`` a view of its rows (no
second copy, the module and its name in a state dict unchanged), so a fused step runs one product and slices the
result. :func:`still_fused` tells whether the views still share that tensor (a ``.to()`` or an assigned state dict
gives each weight its own storage again; the step then runs the modules as they are).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ggtts.ops.stored_experts import Experts


def _plain(module: nn.Module) -> bool:
    """A float ``nn.Linear`` without bias, or a float :class:`Experts` stack: weights a product reads whole."""
    if type(module) is nn.Linear:
        return module.bias is None and module.weight.is_floating_point()
    return type(module) is Experts and module.weight.is_floating_point()


def weight_of(module: nn.Module) -> torch.Tensor:
    w = module.weight
    assert isinstance(w, torch.Tensor)
    return w


@torch.no_grad()
def fuse_rows(modules: Sequence[nn.Module], dim: int = 0) -> torch.Tensor | None:
    """The weights of ``modules`` (plain float layers, :func:`_plain`, of one dtype and device, equal but in ``dim``)
    concatenated along ``dim`` (0: a linear layer's output rows; 1: an expert stack's), each module's ``weight``
    replaced by a view of its part. None, and nothing changed, where any module is not such a layer."""
    if not modules or not all(_plain(m) for m in modules):
        return None
    weights = [weight_of(m) for m in modules]
    first = weights[0]
    if any(w.dtype != first.dtype or w.device != first.device or w.dim() != first.dim() for w in weights):
        return None
    if any(w.shape[:dim] + w.shape[dim + 1 :] != first.shape[:dim] + first.shape[dim + 1 :] for w in weights):
        return None
    fused = torch.cat(weights, dim=dim)
    start = 0
    for module, w in zip(modules, weights, strict=True):
        part = fused.narrow(dim, start, w.shape[dim])
        module.weight = nn.Parameter(part, requires_grad=w.requires_grad)
        start += w.shape[dim]
    return fused


def still_fused(fused: torch.Tensor | None, modules: Sequence[nn.Module], dim: int = 0) -> bool:
    """Whether each module's ``weight`` is still its part of ``fused`` (as :func:`fuse_rows` left it)."""
    if fused is None:
        return False
    start = 0
    step = fused.stride(dim) * fused.element_size()
    for module in modules:
        w = getattr(module, "weight", None)
        if not isinstance(w, torch.Tensor) or w.data_ptr() != fused.data_ptr() + start * step:
            return False
        if w.untyped_storage().data_ptr() != fused.untyped_storage().data_ptr():
            return False
        start += w.shape[dim]
    return start == fused.shape[dim]
