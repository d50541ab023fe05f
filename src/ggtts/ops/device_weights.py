"""Linear and embedding weights kept on a GPU as a GGUF file stores them (blocks of the legacy types, the K-quants,
IQ4: :mod:`ggtts.ops.block_decode`), widened to the activations' dtype one product at a time: a quantized file
costs about its size in GPU memory, not that of float32 (ggml's kernels, which multiply blocks as they are, run on
the CPU only). F16 and BF16 weights are still widened at load: they would cost only twice their size widened, and
widening them per product costs every step a pass over them (speed is what a GPU is for); a model loaded in
bfloat16 holds a BF16 file at its size anyway. The remaining i-quants, ternary and FP4 types are widened at load.

:func:`use_device_weights` swaps a module's ``nn.Linear`` and ``nn.Embedding`` layers whose file weight has such a
type for a :class:`DeviceStoredLinear` / :class:`DeviceStoredEmbedding` holding the stored blocks' fields as
integer tensors (so a model's ``.to(dtype=...)`` leaves them alone; ``.to(device)`` moves them). A product widens
the weight as gguf-py's ``dequantize`` does (the same float32 operations), then casts it to the activations' dtype:
the same numbers as a model widened at load, so the same outputs. A weight larger than :data:`CHUNK_ELEMENTS` (a
tied output over a large vocabulary) is widened a band of rows at a time, so the extra memory a product needs stays
small. Under a captured CUDA graph the widening is part of the graph.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.ops.block_decode import DECODED_TYPES, decode, grid, split
from ggtts.ops.layer_walk import weight_layers

__all__ = [
    "DEVICE_TYPES", "DeviceStoredEmbedding", "DeviceStoredExperts", "DeviceStoredLinear", "use_device_experts",
    "use_device_weights",
]  # fmt: skip

DEVICE_TYPES = DECODED_TYPES
CHUNK_ELEMENTS = 1 << 24  # widened per product at most (64 MiB in float32): a larger weight goes a band at a time


def _on(array: np.ndarray, device: str | torch.device) -> torch.Tensor:
    """A copy of ``array`` on ``device`` (the file's pages are not kept): one copy, made on the host."""
    return torch.from_numpy(np.array(array, order="C")).to(device)


class DeviceStoredWeight(nn.Module):
    """A 2-D weight ``(rows, cols)`` as stored: its blocks' fields (:func:`ggtts.ops.block_decode.split`: float16
    scales as their bits, packed integers as bytes), each a buffer named as the field, ``(rows, blocks, ...)``.
    Called on ``x``, it gives ``x @ W.T`` (an output projection tied to an embedding table)."""

    grid: torch.Tensor | None

    def __init__(
        self, raw: np.ndarray, qtype: GGMLQuantizationType, rows: int, cols: int, device: str | torch.device = "cpu"
    ) -> None:
        super().__init__()
        if qtype not in DEVICE_TYPES:
            raise ValueError(
                f"{qtype.name} weights are not kept on a device (only {', '.join(t.name for t in DEVICE_TYPES)})"
            )
        self.qtype, self.rows, self.cols = qtype, rows, cols
        fields = split(raw, qtype, rows, cols)
        self.fields = tuple(fields)
        for name, array in fields.items():
            self.register_buffer(name, _on(array, device), persistent=False)
        table = grid(qtype)
        self.register_buffer("grid", None if table is None else table.to(device), persistent=False)

    def stored_bytes(self) -> int:
        """The bytes the blocks hold on the device (the file's, exactly; the IQ4 grid's 16 aside)."""
        return sum(t.numel() * t.element_size() for t in self._fields().values())

    def _fields(self, rows: slice | torch.Tensor = slice(None)) -> dict[str, torch.Tensor]:
        def pick(t: torch.Tensor) -> torch.Tensor:
            return t[rows] if isinstance(rows, slice) else t.index_select(0, rows)

        return {name: pick(getattr(self, name)) for name in self.fields}

    def widened(self, dtype: torch.dtype, start: int = 0, end: int | None = None) -> torch.Tensor:
        """Rows ``start:end`` of the weight in ``dtype`` (through float32, as a load would widen them)."""
        return decode(self.qtype, self._fields(slice(start, end)), self.cols, self.grid).to(dtype)

    def lookup(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The rows ``ids`` (1-D) in ``dtype``."""
        return decode(self.qtype, self._fields(ids), self.cols, self.grid).to(dtype)

    def bands(self) -> list[tuple[int, int]]:
        """Row ranges of at most :data:`CHUNK_ELEMENTS` elements each."""
        step = max(1, CHUNK_ELEMENTS // self.cols)
        return [(a, min(a + step, self.rows)) for a in range(0, self.rows, step)]

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``F.linear(x, W, bias)`` with ``W`` widened to ``x``'s dtype, a band of rows at a time if large."""
        if self.rows * self.cols <= CHUNK_ELEMENTS:
            return F.linear(x, self.widened(x.dtype), bias)
        y = torch.cat([F.linear(x, self.widened(x.dtype, a, b)) for a, b in self.bands()], dim=-1)
        return y if bias is None else y + bias

    def extra_repr(self) -> str:
        return f"{self.rows}, {self.cols}, stored={self.qtype.name}"


class DeviceStoredLinear(nn.Module):
    """``nn.Linear`` with its weight as stored (:class:`DeviceStoredWeight`); the bias a float parameter."""

    def __init__(
        self, raw: np.ndarray, qtype: GGMLQuantizationType, out_features: int, in_features: int, bias: bool,
        device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.stored = DeviceStoredWeight(raw, qtype, out_features, in_features, device)
        self.bias = nn.Parameter(torch.zeros(out_features, device=device)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stored(x, None if self.bias is None else self.bias.to(x.dtype))


class DeviceStoredEmbedding(nn.Module):
    """``nn.Embedding`` as stored: the rows looked up are widened to the model's float dtype (that of ``like``, an
    empty buffer a model's ``.to(dtype=...)`` converts); :meth:`as_linear` multiplies by the table (tied output
    projections)."""

    like: torch.Tensor

    def __init__(
        self, raw: np.ndarray, qtype: GGMLQuantizationType, num_embeddings: int, dim: int,
        device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, dim
        self.stored = DeviceStoredWeight(raw, qtype, num_embeddings, dim, device)
        self.register_buffer("like", torch.zeros(0, device=device), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.stored.lookup(ids.reshape(-1), self.like.dtype)
        return rows.reshape(*ids.shape, self.embedding_dim)

    def as_linear(self) -> DeviceStoredWeight:
        """The table as an output projection: ``as_linear()(h)`` is ``h @ table.T``."""
        return self.stored

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class DeviceStoredExperts(nn.Module):
    """An expert stack ``(E, n_out, n_in)`` as stored (``Experts``' products, each picked expert's weight widened
    when used): a decoding step widens only the ``k`` experts its router picked."""

    def __init__(
        self, raw: np.ndarray, qtype: GGMLQuantizationType, n_expert: int, n_out: int, n_in: int,
        device: str | torch.device = "cpu",
    ) -> None:  # fmt: skip
        super().__init__()
        self.n_expert, self.n_out, self.n_in = n_expert, n_out, n_in
        self.stored = DeviceStoredWeight(raw, qtype, n_expert * n_out, n_in, device)
        self.dense: bool | None = None  # as Experts.dense: a short prompt through every expert, a band at a time

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """As :meth:`ggtts.ops.stored_experts.Experts.forward`: ``x (T, S, n_in)``, ``ids (T, k)`` -> ``(T, k,
        n_out)``."""
        from ggtts.ops.stored_experts import check_expert_inputs, expert_products

        check_expert_inputs(x, ids, self.n_in)
        n, n_in = self.n_out, self.n_in

        def weights(a: int, b: int) -> torch.Tensor:  # experts a..b widened
            return self.stored.widened(x.dtype, a * n, b * n).view(b - a, n, n_in)

        def gathered(picked: torch.Tensor) -> torch.Tensor:  # the rows' picked experts widened
            rows = (picked[:, None] * n + torch.arange(n, device=picked.device)).reshape(-1)
            return self.stored.lookup(rows, x.dtype).view(-1, n, n_in)

        band = max(1, CHUNK_ELEMENTS // (n * n_in))  # experts widened at a time through every expert
        return expert_products(x, ids, self.n_expert, n, weights, gathered, True, self.dense, band)

    def extra_repr(self) -> str:
        return f"n_expert={self.n_expert}, n_out={self.n_out}, n_in={self.n_in}, stored={self.stored.qtype.name}"


def use_device_experts(
    module: nn.Module, gguf: GGUFFile, *, gguf_name: Callable[[str], str] = lambda name: name,
    device: str | torch.device = "cpu",
) -> set[str]:  # fmt: skip
    """Swap each ``Experts`` stack of ``module`` whose file weight has a type of :data:`DEVICE_TYPES` for a
    :class:`DeviceStoredExperts` on ``device``. Returns the file tensor names consumed."""
    from ggtts.ops.stored_experts import Experts

    consumed: set[str] = set()
    for parent, child_name, child, name in weight_layers(module, Experts, gguf_name):
        if _keeps(gguf, name, tuple(child.weight.shape)):
            n_expert, n_out, n_in = child.n_expert, child.n_out, child.n_in
            stack = DeviceStoredExperts(gguf.raw(name), gguf.info(name).type, n_expert, n_out, n_in, device)
            _swap(parent, child_name, stack, gguf, name, consumed)
    return consumed


def _keeps(gguf: GGUFFile, name: str, shape: tuple[int, ...]) -> bool:
    """Whether the file's ``name`` is kept as stored on a device: a type of :data:`DEVICE_TYPES` in whole blocks,
    little-endian, of the module's shape (else the strict loader widens it, or names the mismatch)."""
    if name not in gguf or gguf.byte_order != "<":
        return False
    info = gguf.info(name)
    if info.type not in DEVICE_TYPES or tuple(info.shape) != shape:
        return False
    return info.shape[-1] % GGML_QUANT_SIZES[info.type][0] == 0


def use_device_weights(
    module: nn.Module, gguf: GGUFFile, *, gguf_name: Callable[[str], str] = lambda name: name,
    device: str | torch.device = "cpu",
) -> set[str]:  # fmt: skip
    """Swap each ``nn.Linear`` / ``nn.Embedding`` of ``module`` whose weight the file stores as a type of
    :data:`DEVICE_TYPES` for a :class:`DeviceStoredLinear` / :class:`DeviceStoredEmbedding` over a copy of the
    stored bytes on ``device`` (a model's ``.to(device)`` moves them too). ``gguf_name`` maps a module parameter
    name to the file's tensor name. Returns the file tensor names consumed, for the strict loader to ignore (biases stay
    parameters and are loaded by it)."""
    consumed: set[str] = set()
    for parent, child_name, child, name in weight_layers(module, (nn.Linear, nn.Embedding), gguf_name):
        if not _keeps(gguf, name, tuple(child.weight.shape)):
            continue
        info = gguf.info(name)
        n_out, n_in = info.shape
        raw = gguf.raw(name)
        if isinstance(child, nn.Linear):
            swapped: nn.Module = DeviceStoredLinear(raw, info.type, n_out, n_in, child.bias is not None, device)
        else:
            swapped = DeviceStoredEmbedding(raw, info.type, n_out, n_in, device)
        _swap(parent, child_name, swapped, gguf, name, consumed)
    return consumed


def _swap(parent: nn.Module, attribute: str, layer: nn.Module, gguf: GGUFFile, name: str, consumed: set[str]) -> None:
    """``layer`` in place of ``parent.attribute``; the file's pages of ``name`` let go (the layer holds a copy)."""
    setattr(parent, attribute, layer)
    gguf.release(name)
    consumed.add(name)
