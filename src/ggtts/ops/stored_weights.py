"""Linear and embedding layers that keep a GGUF file's weights as stored (F16, BF16, Q8_0, Q4_0, K-quants...).

:func:`use_stored_weights` swaps a module's ``nn.Linear`` and ``nn.Embedding`` layers for these where the file
stores their weight in a type ggml multiplies (:mod:`ggtts.ops.ggml_kernels`), before the strict loader fills
the rest. The weights stay in the memory-mapped file: loading costs the file's pages, not a float32 copy.
Where ggml's kernels are not installed, or the model runs on a GPU, nothing is swapped and the weights are widened
to float as before (:func:`stored_weights_plan` says which, and why).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.gguf.read import widen
from ggtts.ops.ggml_kernels import MatMul, multiplies, unavailable_reason
from ggtts.ops.layer_walk import weight_layers

__all__ = [
    "StoredEmbedding", "StoredLinear", "StoredWeightsPlan", "stored_weights_plan", "use_planned_weights",
    "use_stored_weights",
]  # fmt: skip


def _stored_2d(gguf: GGUFFile, name: str) -> tuple[np.ndarray, GGMLQuantizationType, int, int]:
    """A 2-D weight's stored bytes as ``(rows, bytes per row)``, its type, and its (rows, columns)."""
    info = gguf.info(name)
    n_out, n_in = info.shape
    raw = gguf.raw(name)
    return raw.view(np.uint8).reshape(n_out, -1), info.type, n_out, n_in


class StoredLinear(nn.Module):
    """``F.linear`` with the weight as the file stores it; the bias (if any) is an ordinary float parameter."""

    def __init__(
        self, raw: np.ndarray, qtype: GGMLQuantizationType, out_features: int, in_features: int, bias: bool
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.qtype = in_features, out_features, qtype
        self.matmul = MatMul(raw, qtype, out_features, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matmul(x)
        if self.bias is not None:
            y += self.bias
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, stored={self.qtype.name}"


class StoredEmbedding(nn.Module):
    """A token-embedding table as stored: looked-up rows are widened; :meth:`as_linear` multiplies by it
    (tied output projections)."""

    def __init__(
        self,
        raw: np.ndarray,
        qtype: GGMLQuantizationType,
        num_embeddings: int,
        dim: int,
        release: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.raw, self.qtype, self.num_embeddings, self.embedding_dim = raw, qtype, num_embeddings, dim
        self._linear: StoredLinear | None = None
        self._release = release  # drops the table's file pages once ggml holds a repacked copy
        self._lock = threading.Lock()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1).cpu().numpy()
        if flat.size and (flat.min() < 0 or flat.max() >= self.num_embeddings):
            raise IndexError(f"token id out of range for an embedding of {self.num_embeddings} rows")
        rows = torch.from_numpy(widen(self.raw[flat], self.qtype).reshape(flat.size, self.embedding_dim))
        return rows.reshape(*ids.shape, self.embedding_dim)

    def as_linear(self) -> StoredLinear:
        with self._lock:  # made once, on first use, whichever thread gets there first
            if self._linear is None:
                self._linear = StoredLinear(self.raw, self.qtype, self.num_embeddings, self.embedding_dim, bias=False)
                if self._linear.matmul.repacked and self._release is not None:
                    self._release()  # lookups fault back in only the rows they read
            return self._linear

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, stored={self.qtype.name}"


@dataclass(frozen=True)
class StoredWeightsPlan:
    """Whether a model's weights run as stored, and if not, the one-line reason."""

    stored: bool
    reason: str | None = None
    # off the CPU: weights the file stores as blocks (legacy, K-quants, IQ4) kept so on the device, widened per product
    # (:mod:`ggtts.ops.device_weights`)
    on_device: bool = False
    device: str = "cpu"  # where on_device keeps them


def stored_weights_plan(device: str | torch.device, requested: bool = True) -> StoredWeightsPlan:
    if not requested:
        return StoredWeightsPlan(False, "weights widened to float32 on request")
    if torch.device(device).type != "cpu":
        return StoredWeightsPlan(
            False, f"ggml's CPU kernels do not run on {device}: block weights (legacy types, K-quants, IQ4) are kept "
            "as stored there and widened one product at a time; other types are widened to float at load",
            on_device=True, device=str(device),
        )  # fmt: skip
    reason = unavailable_reason()
    return StoredWeightsPlan(reason is None, reason)


def use_stored_weights(
    module: nn.Module, gguf: GGUFFile, *, gguf_name: Callable[[str], str] = lambda name: name
) -> set[str]:
    """Swap each ``nn.Linear`` / ``nn.Embedding`` of ``module`` whose weight the file stores in a type ggml
    multiplies for a :class:`StoredLinear` / :class:`StoredEmbedding` over the file's bytes.

    ``gguf_name`` maps a module parameter name to the file's tensor name. Returns the file tensor names consumed,
    for the strict loader to ignore (biases stay parameters and are loaded by it).
    """
    consumed: set[str] = set()
    for parent, child_name, child, name in weight_layers(module, (nn.Linear, nn.Embedding), gguf_name):
        if name not in gguf or not multiplies(gguf.info(name).type) or gguf.byte_order != "<":
            continue
        info = gguf.info(name)
        if tuple(info.shape) != tuple(child.weight.shape):
            continue  # left to the strict loader, which names the mismatch
        raw, qtype, n_out, n_in = _stored_2d(gguf, name)
        if isinstance(child, nn.Linear):
            linear = StoredLinear(raw, qtype, n_out, n_in, bias=child.bias is not None)
            if linear.matmul.repacked:  # ggml holds an interleaved copy: the file's pages are not needed
                gguf.release(name)
            swapped: nn.Module = linear
        else:
            swapped = StoredEmbedding(raw, qtype, n_out, n_in, release=functools.partial(gguf.release, name))
        setattr(parent, child_name, swapped)
        consumed.add(name)
    return consumed


def use_planned_weights(
    plan: StoredWeightsPlan, module: nn.Module, gguf: GGUFFile, *, gguf_name: Callable[[str], str] = lambda name: name
) -> set[str]:
    """What ``plan`` says: the file's weights multiplied by ggml as stored (CPU), kept as stored on the device
    (:func:`~ggtts.ops.device_weights.use_device_weights`), or neither (nothing swapped: all widened at load).
    Returns the file tensor names consumed, for the strict loader to ignore."""
    if plan.stored:
        return use_stored_weights(module, gguf, gguf_name=gguf_name)
    if plan.on_device:
        from ggtts.ops.device_weights import use_device_weights

        return use_device_weights(module, gguf, gguf_name=gguf_name, device=plan.device)
    return set()
