"""Counting the operations a step runs: what a GPU launches a kernel for, counted on any machine.

A decode step replayed as a CUDA graph (:mod:`ggtts.ops.step_graph`) costs about its kernel count: each kernel of a
one-row step is small, and a GPU spends a few microseconds on each however little it does. :class:`Operations`
counts, by name, the aten operations dispatched while it is active that make a tensor or write one; views, and
conversions that return their input, launch nothing and are not counted. The CPU and a GPU dispatch the same
operations for the same module code, except where torch fuses an operation on one device only (``rms_norm`` is
one kernel on CUDA and its written-out arithmetic on the CPU: counted here as one, as dispatched under
``torch.inference_mode``, as the generation loops run; with autograd on, its parts are counted). What an
operation does inside is not seen: attention counts as one, though a GPU's may launch a few (given a boolean mask,
1-2 more to make it additive: the static steps hand it an additive one); ``pad`` counts as one, though it is a fill
and a copy on a GPU as on the CPU. A count is a floor on the kernels, exact for the common one-kernel operations.
"""

from __future__ import annotations

import collections
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# the operations that multiply by a weight or gather one (a kernel each, reading weights)
PRODUCTS = (
    "linear",
    "matmul",
    "bmm",
    "mm",
    "addmm",
    "index_select",
    "embedding",
    "conv1d",
    "conv2d",
    "convolution",
    "conv_transpose1d",
    "conv_transpose2d",
)


class Operations(TorchDispatchMode):
    """``with Operations() as ops: ...``; then ``ops.counts`` (by operation name), :attr:`total`, and
    :attr:`traffic`: the bytes the counted operations read and write, each tensor argument (in lists and by keyword
    too) read once and each output written once (about what a GPU moves through its memory for them, where nothing
    stays in its caches: an estimate, which counts an expanded input at its full size)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.traffic = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, tuple | list) and out else out
        name = func.overloadpacket.__name__
        if isinstance(first, torch.Tensor):
            read = {k: v for k, v in (kwargs or {}).items() if k != "out"}  # (out=: written, counted as made)
            given = [t for t in tree_leaves((args, read)) if isinstance(t, torch.Tensor)]
            inputs = {a.untyped_storage().data_ptr() for a in given}
            if name.endswith("_") or first.untyped_storage().data_ptr() not in inputs:
                self.counts[name] += 1
                made = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
                self.traffic += sum(t.numel() * t.element_size() for t in (*given, *made))
        return out

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def products(self) -> int:
        return sum(self.counts[name] for name in PRODUCTS)
