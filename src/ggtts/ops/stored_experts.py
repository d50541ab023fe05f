"""Mixture-of-experts weight stacks ``(E, N, K)``, multiplied as a GGUF file stores them (llama.cpp's
``ffn_{gate,up,down}_exps``), or in float.

Each row of the input goes through the few experts its router picked: ``y[t, j] = W[ids[t, j]] @ x[t, j]``.
:class:`Experts` holds the stack as a float parameter and loops over the experts the batch hit (a decoding step hits
``k`` of them, whatever ``E`` is). :class:`StoredExperts` keeps the file's bytes and runs ggml's ``mul_mat_id`` (the
operation llama.cpp's MoE graphs use): one ggml call per projection, whatever ``k`` is, touching only the picked
experts' rows. :func:`use_stored_experts` swaps the one for the other where ggml multiplies the file's type.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.ops.ggml_kernels import (
    GRAPHS_PER_WEIGHT,
    KernelsUnavailable,
    cached,
    compute,
    kernels,
    multiplies,
    new_context,
    unavailable_reason,
)
from ggtts.ops.layer_walk import weight_layers

__all__ = ["Experts", "StoredExperts", "use_stored_experts"]

GRAPH_NODES = 4  # one mul_mat_id and its inputs


def check_expert_inputs(x: torch.Tensor, ids: torch.Tensor, n_in: int) -> None:
    if x.dim() != 3 or x.shape[-1] != n_in or ids.dim() != 2 or x.shape[0] != ids.shape[0]:
        raise ValueError(f"experts take x (T, S, {n_in}) and ids (T, k); got {list(x.shape)} and {list(ids.shape)}")
    if x.shape[1] not in (1, ids.shape[1]):
        raise ValueError(f"x has {x.shape[1]} slots per row; it needs 1 (shared by every pick) or k={ids.shape[1]}")


# A prompt of up to this many rows goes through every expert off the CPU: a GPU then does E/k times the picks' work
# (the talker's 40-row prompt: ~1 ms a layer on an H100, by arithmetic) instead of waiting on the host twice per
# expert hit (up to 128 experts, ~4 ms a projection); past it, the experts hit are looped over.
DENSE_ROWS = 64


def through_every_expert(
    x: torch.Tensor, ids: torch.Tensor, n_expert: int, n_out: int, weights: Callable[[int, int], torch.Tensor],
    band: int,
) -> torch.Tensor:  # fmt: skip
    """``x (T, S, n_in)``, ``ids (T, k)`` -> ``(T, k, n_out)`` as :meth:`Experts.forward`, with every row (every
    slot) through every expert and each row's picks kept: no host round trip, so nothing a GPU waits on.
    ``weights(a, b)`` gives experts ``a..b`` ``(b - a, n_out, n_in)``, taken ``band`` experts at a time."""
    t, k = ids.shape
    out = x.new_zeros(t, k, n_out)
    for a in range(0, n_expert, band):
        b = min(a + band, n_expert)
        w = weights(a, b).reshape((b - a) * n_out, -1)
        inside = (ids >= a) & (ids < b)  # (T, k): the picks in this band
        local = (ids - a).clamp(0, b - a - 1)
        if x.shape[1] == 1:  # every pick of a row reads the same input
            every = F.linear(x[:, 0], w).view(t, b - a, n_out)
            picked = every.gather(1, local[..., None].expand(t, k, n_out))
            out = torch.where(inside[..., None], picked, out)
            continue
        for j in range(k):  # a slot per pick: slot j's input through the band
            every = F.linear(x[:, j], w).view(t, b - a, n_out)
            picked = every.gather(1, local[:, j, None, None].expand(t, 1, n_out))[:, 0]
            out[:, j] = torch.where(inside[:, j, None], picked, out[:, j])
    return out


def gathers_rows(rows: int, k: int, n_expert: int) -> bool:
    """Whether ``rows`` rows' ``k`` picks each are gathered rather than every row sent through every expert: the
    gather reads the picked experts' weights, writes them and the product reads them again (three passes over
    ``rows * k`` experts), against one pass over all ``n_expert``. (Counted in bytes, not timed: Qwen3-Omni's
    talker, 6 of 128 experts, gathers up to 7 rows.)"""
    return 3 * rows * k < n_expert


def expert_products(
    x: torch.Tensor, ids: torch.Tensor, n_expert: int, n_out: int, weights: Callable[[int, int], torch.Tensor],
    gathered: Callable[[torch.Tensor], torch.Tensor], gather: bool, dense: bool | None, band: int,
) -> torch.Tensor:  # fmt: skip
    """``x (T, S, n_in)`` with ``S`` 1 or ``k``, ``ids (T, k)`` -> ``(T, k, n_out)``: row ``t``'s slot ``j``
    through expert ``ids[t, j]``, whose weights ``weights(a, b)`` gives (experts ``a..b``, ``(b - a, n_out, n_in)``)
    or, for rows' picks, ``gathered(ids.flatten())`` (``(T k, n_out, n_in)``). Where ``gather`` (no host round
    trip: a CUDA graph can hold it), one row's experts are gathered, and so are a few rows' while that moves fewer
    bytes than every expert's weights once (:func:`gathers_rows`: a GPU's lanes of a few streams); a short prompt
    goes through every expert where ``dense`` (None: off the CPU up to :data:`DENSE_ROWS` rows), ``band`` experts
    at a time; else a loop over the experts hit (a host round trip for each)."""
    t, k = ids.shape
    if t == 1 and gather:
        picked = gathered(ids[0])  # (k, n_out, n_in)
        return torch.matmul(picked, x[0].unsqueeze(-1)).squeeze(-1).unsqueeze(0)  # (1, k, n_out)
    if gather and dense is not False and gathers_rows(t, k, n_expert):  # (experts told to loop: they loop)
        picked = gathered(ids.flatten()).view(t, k, n_out, -1)  # (T, k, n_out, n_in)
        return torch.matmul(picked, x.expand(t, k, x.shape[-1]).unsqueeze(-1)).squeeze(-1)  # (T, k, n_out)
    if dense if dense is not None else x.device.type != "cpu" and t <= DENSE_ROWS:
        return through_every_expert(x, ids, n_expert, n_out, weights, band)
    out = x.new_zeros(t, k, n_out)
    for e in torch.unique(ids).tolist():  # the experts this batch hit: k of them for one token
        rows, slots = (ids == e).nonzero(as_tuple=True)
        picked = x[rows, slots if x.shape[1] > 1 else 0]
        out[rows, slots] = F.linear(picked, weights(e, e + 1)[0])
    return out


class Experts(nn.Module):
    """A stack of ``n_expert`` weights ``(n_out, n_in)`` as one float parameter ``weight (E, n_out, n_in)``."""

    def __init__(self, n_expert: int, n_out: int, n_in: int) -> None:
        super().__init__()
        self.n_expert, self.n_out, self.n_in = n_expert, n_out, n_in
        self.weight = nn.Parameter(torch.empty(n_expert, n_out, n_in))
        # one row's experts gathered (no host round trip: a CUDA graph can hold it): on by default off the CPU
        self.gather = False
        # a prompt's rows through every expert (no host round trip): by default off the CPU up to DENSE_ROWS rows
        self.dense: bool | None = None

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``x (T, S, n_in)`` with ``S`` 1 or ``k``, ``ids (T, k)`` -> ``(T, k, n_out)``: row ``t``'s slot ``j``
        through expert ``ids[t, j]``."""
        check_expert_inputs(x, ids, self.n_in)
        w = self.weight
        gather = self.gather or x.device.type != "cpu"
        return expert_products(x, ids, self.n_expert, self.n_out, lambda a, b: w[a:b],
                               lambda picked: w.index_select(0, picked), gather, self.dense, self.n_expert)  # fmt: skip

    def extra_repr(self) -> str:
        return f"n_expert={self.n_expert}, n_out={self.n_out}, n_in={self.n_in}"


class _IdGraph:
    """``out (n_out, k, T) = mul_mat_id(W, x (n_in, S, T), ids (k, T))`` as a ggml graph (pointers set per call)."""

    def __init__(self, weight: Any, n_in: int, slots: int, k: int, rows: int) -> None:
        lib = kernels()
        ctx = new_context(self, 4 * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(GRAPH_NODES, False))
        self.x = lib.ggml_new_tensor_3d(ctx, lib.GGML_TYPE_F32, n_in, slots, rows).contents
        self.ids = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_I32, k, rows).contents
        out_ptr = lib.ggml_mul_mat_id(ctx, weight, ctypes.pointer(self.x), ctypes.pointer(self.ids))
        self.out = out_ptr.contents
        self.graph = lib.ggml_new_graph_custom(ctx, GRAPH_NODES, False)
        lib.ggml_build_forward_expand(self.graph, out_ptr)
        self._plans: dict[int, Any] = {}

    def run(self, x_ptr: int, ids_ptr: int, out_ptr: int, n_threads: int) -> None:
        self.x.data, self.ids.data, self.out.data = x_ptr, ids_ptr, out_ptr
        compute(self.graph, self._plans, n_threads)


class StoredExperts(nn.Module):
    """The same stack as a file stores it (``raw``: the tensor's bytes, typically a read-only view of the
    memory-mapped file), multiplied by ggml's ``mul_mat_id``: only the picked experts' rows are read."""

    def __init__(self, raw: np.ndarray, qtype: GGMLQuantizationType, n_expert: int, n_out: int, n_in: int) -> None:
        super().__init__()
        if not multiplies(qtype):
            raise KernelsUnavailable(unavailable_reason() or f"ggml does not multiply {qtype.name} weights")
        if not raw.flags.c_contiguous:
            raise ValueError("stored weights must be contiguous bytes")
        lib = kernels()
        self.n_expert, self.n_out, self.n_in, self.qtype = n_expert, n_out, n_in, qtype
        self._raw = raw  # ggml points at these bytes: keep them referenced
        self._tensor = lib.ggml_new_tensor_3d(
            new_context(self, lib.ggml_tensor_overhead()), int(qtype), n_in, n_out, n_expert
        )
        if lib.ggml_nbytes(self._tensor) != raw.nbytes:
            raise ValueError(f"{raw.nbytes} stored bytes for {n_expert} x {n_out} x {n_in} {qtype.name} experts")
        self._tensor.contents.data = raw.ctypes.data
        self._graphs: OrderedDict[tuple[int, int, int], _IdGraph] = OrderedDict()
        self._lock = threading.Lock()  # a graph's pointers are set then used: one call at a time

    @property
    def tensor(self) -> Any:
        """The stack as a ggml tensor (for graphs that use it: :mod:`ggtts.models.layers.ggml_stack`)."""
        return self._tensor

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """As :meth:`Experts.forward`."""
        check_expert_inputs(x, ids, self.n_in)
        if x.device.type != "cpu":
            raise ValueError(f"ggml's CPU kernels got a tensor on {x.device}")
        t, k = ids.shape
        slots = x.shape[1]
        x32 = x.to(torch.float32).contiguous()  # (T, S, n_in)
        ids32 = ids.to(torch.int32).contiguous()  # (T, k)
        out = torch.empty(t, k, self.n_out, dtype=torch.float32)
        if t:
            with self._lock:
                graph = cached(
                    self._graphs,
                    (t, slots, k),
                    lambda: _IdGraph(self._tensor, self.n_in, slots, k, t),
                    GRAPHS_PER_WEIGHT,
                )
                graph.run(x32.data_ptr(), ids32.data_ptr(), out.data_ptr(), torch.get_num_threads())
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"n_expert={self.n_expert}, n_out={self.n_out}, n_in={self.n_in}, stored={self.qtype.name}"


def use_stored_experts(
    module: nn.Module, gguf: GGUFFile, *, gguf_name: Callable[[str], str] = lambda name: name
) -> set[str]:
    """Swap each :class:`Experts` of ``module`` whose stack the file stores in a type ggml multiplies for a
    :class:`StoredExperts` over the file's bytes. Returns the file tensor names consumed (for the strict loader to
    ignore). A stack of the wrong shape is left to the strict loader, which names the mismatch."""
    consumed: set[str] = set()
    for parent, child_name, child, name in weight_layers(module, Experts, gguf_name):
        if name not in gguf or gguf.byte_order != "<":
            continue
        info = gguf.info(name)
        if not multiplies(info.type) or tuple(info.shape) != tuple(child.weight.shape):
            continue
        raw = gguf.raw(name).view(np.uint8).reshape(-1)
        setattr(parent, child_name, StoredExperts(raw, info.type, child.n_expert, child.n_out, child.n_in))
        consumed.add(name)
    return consumed
