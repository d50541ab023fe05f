"""A streaming decoder's state in fixed tensors, so that a push of a fixed number of frames has the same kernels,
shapes and addresses every time and can be captured once as a CUDA graph (the nano codec's and the talker
families' speech decoders' static streams).

A streaming layer keeps its state with ``state[layer] = new`` and reads it with ``state.get(layer)``; over a
:class:`FixedState` the assignment copies into the layer's tensor instead, so the layers' own streaming code runs
unchanged. A push of ``n`` frames is made of pushes of a few fixed sizes (:func:`pieces`), the state carrying across
them as across pushes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ggtts.models.layers.channels_last import zeros_before

__all__ = ["FixedState", "pieces"]


class FixedState(dict[nn.Module, torch.Tensor]):
    """A stream's state in fixed tensors: a layer's ``state[layer] = t`` copies ``t`` into the layer's tensor
    (the same shape every push), and ``state.get(layer)`` reads it."""

    @classmethod
    def zeros_like(cls, learnt: dict[nn.Module, torch.Tensor]) -> FixedState:
        """Zeros shaped and laid out as each layer's state after a push (``learnt``, an eager push's state)."""
        state = cls()
        for layer, t in learnt.items():
            dict.__setitem__(state, layer, zeros_before(t, t.shape[-1]))
        return state

    def __setitem__(self, layer: nn.Module, value: torch.Tensor) -> None:
        self[layer].copy_(value)

    def zero_(self) -> None:
        """Every tensor zeroed (at a stream's start: a few launches for them all, not one each)."""
        torch._foreach_zero_(list(self.values()))


def pieces(sizes: Sequence[int], n: int) -> list[int]:
    """``n`` frames as pushes of ``sizes`` (1 among them), largest first."""
    out = []
    for size in sorted(set(sizes), reverse=True):
        while n >= size:
            out.append(size)
            n -= size
    return out
