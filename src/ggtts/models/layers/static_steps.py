"""One-position decode steps over fixed caches, each captured once as a CUDA graph and replayed: the step of every
Qwen decoder ggtts runs (Qwen2 for OuteTTS, Qwen3-Omni's talker).

A model that turns this on (``use_static_steps``) hands out caches of fixed capacity (a power of two from
:data:`MIN_STATIC_CAPACITY`, one storage per capacity) and runs each one-position step on one as a
:class:`StaticDecode`: the step's input is copied into a fixed tensor, its position is read from a tensor
(:class:`~ggtts.models.layers.transformer.StaticPosition`), and the whole cache is attended under a mask, so every
step has the same kernels, shapes and addresses (:class:`~ggtts.ops.step_graph.StepGraph`). The caches handed
out are views of the fixed storage; a prompt is prefilled into one the usual way. A new cache of a capacity ends the
one handed out before it (one generation at a time, as a model serves); using the old one is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.transformer import RotaryEmbedding, StaticPosition
from ggtts.ops.compile import CompiledOrEager
from ggtts.ops.step_graph import StepGraph

T = TypeVar("T")
MIN_STATIC_CAPACITY = 256

# (the step's input, its position, the cache) -> its outputs
Body = Callable[[torch.Tensor, StaticPosition, KVCache], T]


def _cloned(out: Any) -> Any:
    """A graph's outputs are overwritten by its next replay: the caller gets copies."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    return tuple(_cloned(o) for o in out)


class StaticDecode(Generic[T]):
    """One-position steps of ``body`` over one fixed ``cache``, reading their input from a tensor shaped like
    ``example`` (a token id ``(1, 1)``, an embedding ``(1, 1, dim)``)."""

    def __init__(
        self, body: Body[T], cache: KVCache, rope: RotaryEmbedding, example: torch.Tensor, what: str,
        capture: bool = True, compile: bool = False,
    ) -> None:  # fmt: skip
        device = cache.k.device
        self.body, self.cache, self.rope = body, cache, rope
        self.input = torch.zeros_like(example, device=device)
        self.index = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.arange(cache.max_len, device=device)
        step: Callable[[], T] = self._step
        if compile:
            step = CompiledOrEager(self._step, what, device, dynamic=False)
        self.graph = StepGraph(step, device, capture)
        self.current: KVCache | None = None

    def _step(self) -> T:
        return self.body(self.input, StaticPosition.at(self.index, self.positions, self.rope), self.cache)

    def new_cache(self, max_len: int) -> KVCache:
        """A cache of ``max_len`` positions in this one's storage (ending the one handed out before)."""
        view = self.cache.rows(0, 1)
        view.length, view.max_len = 0, max_len
        self.current = view
        return view

    def owns(self, cache: KVCache) -> bool:
        """Whether ``cache`` lives in this one's storage; an error if it is one handed out before the current."""
        if cache.k.untyped_storage().data_ptr() != self.cache.k.untyped_storage().data_ptr():
            return False
        if cache is not self.current:
            raise RuntimeError("this KV cache was replaced by a newer one of the same model (one generation at a time)")
        return True

    def step(self, x: torch.Tensor, cache: KVCache) -> T:
        """The outputs of one position's input ``x`` at ``cache.length``; commits the position."""
        cache.check_fits(cache.length + 1)
        self.input.copy_(x)
        self.index.fill_(cache.length)
        out: T = _cloned(self.graph())
        cache.advance(1)
        return out


class StaticCaches(Generic[T]):
    """A model's :class:`StaticDecode` per cache capacity, made on first use by ``make(capacity)``."""

    def __init__(self, make: Callable[[int], StaticDecode[T]], max_len: int) -> None:
        self.make, self.max_len = make, max_len
        self.decoders: dict[int, StaticDecode[T]] = {}

    def new_cache(self, max_len: int) -> KVCache | None:
        """A view of the fixed cache of the capacity ``max_len`` needs; None past the model's positions."""
        if not 0 < max_len <= self.max_len:
            return None
        capacity = min(max(MIN_STATIC_CAPACITY, 1 << (max_len - 1).bit_length()), self.max_len)
        if capacity not in self.decoders:
            self.decoders[capacity] = self.make(capacity)
        return self.decoders[capacity].new_cache(max_len)

    def owner(self, cache: KVCache) -> StaticDecode[T] | None:
        return next((d for d in self.decoders.values() if d.owns(cache)), None)

    @property
    def captured(self) -> bool:
        return any(d.graph.captured for d in self.decoders.values())
