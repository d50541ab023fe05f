"""Weights that multiply the same input, stored end to end so one product does the work of several.

A GPU decode step replayed as a CUDA graph costs about its kernel count (:mod:`ggtts.ops.step_graph`): a Qwen
block's query, key and value projections are three matrix products over the same row, its SwiGLU gate and up two.
:func:`fuse_rows` lays such weights (and their biases) out in one tensor each and makes each module's ``weight``
(and ``bias``) a view of its part: no second copy, the modules and their names in a state dict unchanged; a fused
step runs one product and slices the result (the fused modules are not called, nor their hooks).

:func:`still_fused` tells whether the views still are the modules' weights. Run eagerly, it checks their storage:
a state dict loaded in place reaches the fused tensors; a ``.to()``, ``copy.deepcopy`` or a state dict assigned
gives the weights storage of their own, and the step then runs the modules as they are (the block drops its stale
fused tensors). Traced by ``torch.compile`` it checks that each module still holds the parameter :func:`fuse_rows`
gave it (storage cannot be read in a trace); weights changed after a step was compiled or captured as a CUDA graph
are not seen by that step, fused or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.ops.stored_experts import Experts


@dataclass(frozen=True, eq=False)
class Fused:
    """The fused weights (and biases, for linear layers that have them) of several layers, and the parameters
    (views of them) each layer was given."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    parts: tuple[nn.Parameter, ...]  # each layer's weight, then each layer's bias where there are biases

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Every fused linear layer's output, end to end along the last dimension."""
        return F.linear(x, self.weight, self.bias)


def _weight(module: nn.Module) -> torch.Tensor:
    w = module.weight
    assert isinstance(w, torch.Tensor)
    return w


def _bias(module: nn.Module) -> torch.Tensor | None:
    b = getattr(module, "bias", None)
    return b if isinstance(b, torch.Tensor) else None


def _plain(module: nn.Module) -> bool:
    """A float ``nn.Linear`` or a float :class:`Experts` stack: weights a product reads whole."""
    return type(module) in (nn.Linear, Experts) and _weight(module).is_floating_point()


@torch.no_grad()
def _concatenate(
    modules: Sequence[nn.Module], parts: Sequence[torch.Tensor], dim: int, name: str
) -> tuple[torch.Tensor, list[nn.Parameter]]:
    """``parts`` (``name`` of each module) end to end along ``dim``, each module's ``name`` now a view of its part."""
    fused = torch.cat(list(parts), dim=dim)
    views, start = [], 0
    for module, part in zip(modules, parts, strict=True):
        view = nn.Parameter(fused.narrow(dim, start, part.shape[dim]), requires_grad=part.requires_grad)
        setattr(module, name, view)
        views.append(view)
        start += part.shape[dim]
    return fused, views


def fuse_rows(modules: Sequence[nn.Module], dim: int = 0) -> Fused | None:
    """The weights of ``modules`` (plain float layers of one dtype and device, equal in every dimension but
    ``dim``; biases on all or none) concatenated along ``dim`` (0: a linear layer's output rows; 1: an expert
    stack's), and their biases end to end; each module's ``weight`` and ``bias`` replaced by views of their parts.
    None, and nothing changed, where any module is not such a layer."""
    if not modules or not all(_plain(m) for m in modules):
        return None
    weights = [_weight(m) for m in modules]
    biases = [_bias(m) for m in modules]
    first = weights[0]
    if any(w.dtype != first.dtype or w.device != first.device or w.dim() != first.dim() for w in weights):
        return None
    if any(w.shape[:dim] + w.shape[dim + 1 :] != first.shape[:dim] + first.shape[dim + 1 :] for w in weights):
        return None
    has_bias = [b is not None for b in biases]
    if any(has_bias) and (dim != 0 or not all(has_bias)):
        return None
    if any(b is not None and (b.dtype != first.dtype or b.device != first.device) for b in biases):
        return None
    bias, bias_views = None, list[nn.Parameter]()
    if all(has_bias):
        bias, bias_views = _concatenate(modules, [b for b in biases if b is not None], 0, "bias")
    weight, weight_views = _concatenate(modules, weights, dim, "weight")
    return Fused(weight, bias, (*weight_views, *bias_views))


def _views(fused: torch.Tensor, parts: Sequence[torch.Tensor | None], dim: int) -> bool:
    start = 0
    step = fused.stride(dim) * fused.element_size()
    for part in parts:
        if part is None or part.data_ptr() != fused.data_ptr() + start * step:
            return False
        if part.untyped_storage().data_ptr() != fused.untyped_storage().data_ptr():
            return False
        start += part.shape[dim]
    return start == fused.shape[dim]


def still_fused(fused: Fused | None, modules: Sequence[nn.Module], dim: int = 0) -> bool:
    """Whether each module's ``weight`` (and ``bias``) still is its part of ``fused``, as :func:`fuse_rows` left it
    (see the module's notes for what is checked where)."""
    if fused is None:
        return False
    held = [getattr(m, "weight", None) for m in modules]
    biases = [_bias(m) for m in modules]
    if fused.bias is not None:
        held += biases
    elif any(b is not None for b in biases):
        return False
    if torch.compiler.is_compiling():  # identity: what a trace can check (and guard on)
        return len(held) == len(fused.parts) and all(h is p for h, p in zip(held, fused.parts, strict=True))
    weights = held[: len(modules)]
    if not _views(fused.weight, [w if isinstance(w, torch.Tensor) else None for w in weights], dim):
        return False
    return fused.bias is None or _views(fused.bias, biases, 0)


def fuse(owner: nn.Module, name: str, modules: Sequence[nn.Module], dim: int = 0) -> bool:
    """``owner.name``: ``modules``' weights fused (:func:`fuse_rows`) unless it already holds them (see
    :func:`current`, which reads it). Whether they are fused now."""
    if not still_fused(getattr(owner, name), modules, dim):
        setattr(owner, name, fuse_rows(modules, dim))
    return getattr(owner, name) is not None


def current(owner: nn.Module, name: str, modules: Sequence[nn.Module], dim: int = 0) -> Fused | None:
    """``owner``'s fused weights ``name`` of ``modules`` where they still are theirs (:func:`still_fused`); else
    None, and, run eagerly, ``owner.name`` is dropped (stale fused tensors are not kept alive; fuse again to use
    them)."""
    fused = getattr(owner, name)
    if still_fused(fused, modules, dim):
        assert isinstance(fused, Fused)
        return fused
    if fused is not None and not torch.compiler.is_compiling():
        setattr(owner, name, None)
    return None


def swiglu(x: torch.Tensor, gate_up: Fused | None, gate: nn.Module, up: nn.Module) -> torch.Tensor:
    """``silu(gate(x)) * up(x)``: one product where ``gate_up`` (from :func:`current`) holds both layers."""
    if gate_up is not None:
        g, u = gate_up(x).split((_weight(gate).shape[0], _weight(up).shape[0]), dim=-1)
        return F.silu(g) * u
    return F.silu(gate(x)) * up(x)
