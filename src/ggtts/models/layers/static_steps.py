"""One-position decode steps over fixed caches, each captured once as a CUDA graph and replayed: the step of every
Qwen decoder ggtts runs (Qwen2 for OuteTTS, Qwen3-Omni's talker).

A model that turns this on (``use_static_steps``) hands out caches of fixed capacity (a power of two from
:data:`MIN_STATIC_CAPACITY`, one storage per capacity) and runs each one-position step on one as a
:class:`StaticDecode`: the step's input is copied into a fixed tensor, its position is read from a tensor
(:class:`~ggtts.models.layers.transformer.StaticPosition`), and the whole cache is attended under a mask, so every
step has the same kernels, shapes and addresses (:class:`~ggtts.ops.step_graph.StepGraph`). The caches handed
out are views of the fixed storage; a prompt is prefilled into one the usual way. A new cache of a capacity ends the
one handed out before it (one generation at a time, as a model serves); using the old one is an error.

:class:`StaticLanes` is the same for several sequences at once (continuous batching on a GPU,
:mod:`ggtts.runtime.lanes`): a fixed cache of ``slots`` rows per capacity, each sequence's cache one row of it, and
one step runs every row, each at its own position (``StaticPosition.rows``); the rows of sequences not in the step
write nothing. So N streams cost one captured step, not N. A prompt at the start of a row can run as one graph too
(:meth:`StaticLanes.prefill`): over a scratch cache of one row, whose keys and values the graph then copies into the
row.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
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
# (a prompt's rows padded, the index of its last row (1,), a full-capacity cache at position 0) -> its outputs
PrefillBody = Callable[[torch.Tensor, torch.Tensor, KVCache], T]
MIN_PREFILL_ROWS = 16  # a prompt prefilled as a graph is padded to a power of two from this


def _cloned(out: Any) -> Any:
    """A graph's outputs are overwritten by its next replay: the caller gets copies."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    return tuple(_cloned(o) for o in out)


def _mask_dtype(example: torch.Tensor) -> torch.dtype | None:
    """The attention mask's dtype for a step whose input is shaped like ``example``: the queries' where it is an
    embedding; None (the rotary tables') where it is a token id."""
    return example.dtype if example.is_floating_point() else None


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
        self.mask_dtype = _mask_dtype(example)
        self.prefills: dict[int, _Prefill[T]] = {}  # by padded rows

    def _step(self) -> T:
        at = StaticPosition.at(self.index, self.positions, self.rope, self.mask_dtype)
        return self.body(self.input, at, self.cache)

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

    def prefill(self, x: torch.Tensor, cache: KVCache, body: PrefillBody[T], most: int) -> T | None:
        """A prompt ``x`` ``(1, T, ...)`` at the start of ``cache`` (empty) as one graph: its rows padded with zeros
        to ``T`` rounded up to a power of two (from :data:`MIN_PREFILL_ROWS`), ``body`` run over them (a causal
        stack: the padding changes none of the prompt's outputs, up to the rounding of products of another shape;
        the keys and values it writes past the prompt are masked from every later step, which writes its own
        there first). One graph per padded size, of the same ``body`` on every call: the first call makes (and
        on CUDA captures) every size up to ``most`` rows, so a server's warm-up captures them all. None (nothing
        done) where the padded rows are past ``most``, ``T`` is under 2 or the cache is not empty: the caller runs
        it its own way."""
        t = x.shape[1]
        rows = max(MIN_PREFILL_ROWS, 1 << (t - 1).bit_length())
        if cache.length or t < 2 or rows > min(most, self.cache.max_len):
            return None
        cache.check_fits(t)
        if not self.prefills:
            made, size = {}, MIN_PREFILL_ROWS
            while size <= min(most, self.cache.max_len):
                made[size] = _Prefill(self, body, size, x)
                made[size](x[:, :0])  # made and captured (it writes only what the prompt overwrites)
                size *= 2
            self.prefills = made  # all or none: a capture that failed is tried again by the next prompt
        out: T = _cloned(self.prefills[rows](x))
        cache.advance(t)
        return out


class _Prefill(Generic[T]):
    """A :class:`StaticDecode`'s prompt prefill of ``rows`` padded rows: its input tensors and graph."""

    def __init__(self, decode: StaticDecode[T], body: PrefillBody[T], rows: int, example: torch.Tensor) -> None:
        device = decode.cache.k.device
        self.decode, self.body = decode, body
        self.input = torch.zeros((1, rows, *example.shape[2:]), dtype=example.dtype, device=device)
        self.last = torch.zeros(1, dtype=torch.long, device=device)
        self.graph = StepGraph(self._step, device, decode.graph.capture)  # as the steps': captured on CUDA

    def _step(self) -> T:
        cache = self.decode.cache.rows(0, 1)  # the whole capacity from position 0 (its own view: the graph's)
        cache.length = 0
        return self.body(self.input, self.last, cache)

    def __call__(self, x: torch.Tensor) -> T:
        """The body over ``x`` padded with zeros (finite rows: a NaN left in the padding would reach the prompt's
        rows through attention's products, however masked)."""
        t = x.shape[1]
        self.input[:, :t].copy_(x)
        self.input[:, t:].zero_()
        self.last.fill_(max(t - 1, 0))
        return self.graph()


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


def _capacity(max_len: int, most: int) -> int:
    return min(max(MIN_STATIC_CAPACITY, 1 << (max_len - 1).bit_length()), most)


def _row(out: Any, b: int) -> Any:
    """Row ``b`` of a batched step's outputs (a copy: the next replay overwrites them)."""
    if isinstance(out, torch.Tensor):
        return out[b : b + 1].clone()
    return tuple(_row(o, b) for o in out)


class _Slots(Generic[T]):
    """One capacity's fixed cache of ``slots`` rows, the step's input tensors, its graph, and which cache holds
    each row."""

    def __init__(self, lanes: StaticLanes[T], capacity: int) -> None:
        self.lanes = lanes
        self.cache = cache = lanes.make(capacity)
        device = cache.k.device
        n, example = lanes.slots, lanes.example
        self.input = torch.zeros((n, *example.shape[1:]), dtype=example.dtype, device=device)
        self.mask_dtype = _mask_dtype(example)
        self.index = torch.zeros(n, dtype=torch.long, device=device)
        self.write = torch.zeros(n, dtype=torch.bool, device=device)
        self.positions = torch.arange(capacity, device=device)
        step: Callable[[], T] = self._step
        if lanes.compile:
            step = CompiledOrEager(self._step, lanes.what, device, dynamic=False)
        self.graph = StepGraph(step, device, lanes.capture)
        self.held: list[weakref.ref[KVCache] | None] = [None] * n
        self.prefills: dict[int, _LanePrefill[T]] = {}  # by padded rows

    def _step(self) -> T:
        at = StaticPosition.rows(self.index, self.write, self.positions, self.lanes.rope, self.mask_dtype)
        return self.lanes.body(self.input, at, self.cache)

    def storage(self) -> int:
        return int(self.cache.k.untyped_storage().data_ptr())

    def slot_of(self, cache: KVCache) -> int | None:
        return next((b for b, ref in enumerate(self.held) if ref is not None and ref() is cache), None)

    def take(self, max_len: int) -> KVCache | None:
        """A free row as a cache of ``max_len`` positions; None when every row is held."""
        free = next((b for b, ref in enumerate(self.held) if ref is None or ref() is None), None)
        if free is None:
            return None
        view = self.cache.rows(free, free + 1)
        view.length, view.max_len = 0, max_len
        self.held[free] = weakref.ref(view)
        return view


class _LanePrefill(Generic[T]):
    """A prompt's prefill of ``rows`` padded rows into one row (``slot``, read from a tensor) of a :class:`_Slots`'
    fixed cache: the body over a scratch cache of one row and ``rows`` positions, then its keys and values copied
    into the slot's first ``rows`` positions; its input tensors and graph."""

    def __init__(self, bucket: _Slots[T], body: PrefillBody[T], rows: int, example: torch.Tensor) -> None:
        store = bucket.cache
        device = store.k.device
        self.bucket, self.body, self.rows = bucket, body, rows
        n_layers, _, heads, _, dim = store.k.shape
        self.scratch = KVCache(n_layers, heads, dim, rows, dtype=store.k.dtype, device=device)
        self.input = torch.zeros((1, rows, *example.shape[2:]), dtype=example.dtype, device=device)
        self.last = torch.zeros(1, dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        self.graph = StepGraph(self._step, device, bucket.lanes.capture)

    def _step(self) -> T:
        scratch = self.scratch.rows(0, 1)  # its own view, from position 0 (the graph's)
        scratch.length = 0
        out = self.body(self.input, self.last, scratch)
        store = self.bucket.cache
        store.k[:, :, :, : self.rows].index_copy_(1, self.slot, self.scratch.k)
        store.v[:, :, :, : self.rows].index_copy_(1, self.slot, self.scratch.v)
        return out

    def __call__(self, x: torch.Tensor, slot: int) -> T:
        t = x.shape[1]
        self.input[:, :t].copy_(x)
        self.input[:, t:].zero_()  # (finite padding: see _Prefill)
        self.last.fill_(max(t - 1, 0))
        self.slot.fill_(slot)
        return self.graph()


class StaticLanes(Generic[T]):
    """One-position steps of ``body`` for up to ``slots`` sequences at once, each its own cache (one row of a fixed
    cache of ``slots`` rows; ``make(capacity)`` makes one such cache per capacity, a power of two from
    :data:`MIN_STATIC_CAPACITY` up to ``max_len``). The step's input rows are shaped like ``example`` (a token id
    ``(1, 1)``, an embedding ``(1, 1, dim)``); ``body(input (slots, ...), StaticPosition.rows(...), cache)`` runs all
    rows, as a captured CUDA graph with ``capture`` on CUDA (eagerly elsewhere: the CPU tests run the code the graph
    holds). A cache is held until :meth:`release` (or until it is garbage); steps from several threads take turns."""

    def __init__(
        self, make: Callable[[int], KVCache], body: Body[T], rope: RotaryEmbedding, example: torch.Tensor,
        slots: int, max_len: int, what: str, capture: bool = True, compile: bool = False,
    ) -> None:  # fmt: skip
        if slots < 1:
            raise ValueError("static lanes need at least one slot")
        self.make, self.body, self.rope, self.example = make, body, rope, example
        self.slots, self.max_len, self.what = slots, max_len, what
        self.capture, self.compile = capture, compile
        self.buckets: dict[int, _Slots[T]] = {}
        self._lock = threading.Lock()

    @property
    def captured(self) -> bool:
        return any(b.graph.captured for b in self.buckets.values())

    def new_cache(self, max_len: int) -> KVCache | None:
        """A free row of the fixed cache of the capacity ``max_len`` needs, as a cache; None past the model's
        positions or when all ``slots`` rows of that capacity are held."""
        if not 0 < max_len <= self.max_len:
            return None
        capacity = _capacity(max_len, self.max_len)
        with self._lock:
            if capacity not in self.buckets:
                self.buckets[capacity] = _Slots(self, capacity)
            return self.buckets[capacity].take(max_len)

    def release(self, cache: KVCache) -> None:
        """``cache``'s row is free for another sequence (nothing when it holds none)."""
        with self._lock:
            for bucket in list(self.buckets.values()):
                slot = bucket.slot_of(cache)
                if slot is not None:
                    bucket.held[slot] = None

    def holds(self, cache: KVCache) -> bool:
        """Whether ``cache`` is a row of these lanes; an error for one whose row was released."""
        return self._find(cache) is not None

    def _find(self, cache: KVCache) -> tuple[_Slots[T], int] | None:
        storage = cache.k.untyped_storage().data_ptr()
        for bucket in list(self.buckets.values()):  # (another thread may add a capacity)
            if bucket.storage() == storage:
                slot = bucket.slot_of(cache)
                if slot is None:
                    raise RuntimeError("this KV cache's row was given back to the model's lanes: it is no longer held")
                return bucket, slot
        return None

    def prefill(self, x: torch.Tensor, cache: KVCache, body: PrefillBody[T], most: int) -> T | None:
        """A prompt ``x`` ``(1, T, ...)`` at the start of ``cache`` (an empty row of these lanes) as one graph, as
        :meth:`StaticDecode.prefill` runs one (padded to a power of two from :data:`MIN_PREFILL_ROWS`, ``body`` the
        same on every call, every size up to ``most`` rows made at a capacity's first prompt), over a scratch cache
        whose keys and values the graph copies into the row (the padding's are masked from every later step, which
        writes its own first). None (nothing done) where the padded rows are past ``most`` or the capacity, ``T``
        is under 2, the cache is not empty or not a row of these lanes: the caller runs it its own way."""
        t = x.shape[1]
        rows = max(MIN_PREFILL_ROWS, 1 << (t - 1).bit_length())
        if cache.length or t < 2 or rows > most:
            return None
        with self._lock:
            found = self._find(cache)
            if found is None or rows > found[0].cache.max_len:
                return None
            bucket, slot = found
            cache.check_fits(t)
            if not bucket.prefills:
                made, size = {}, MIN_PREFILL_ROWS
                while size <= min(most, bucket.cache.max_len):
                    made[size] = _LanePrefill(bucket, body, size, x)
                    made[size](x[:, :0], slot)  # made and captured (it writes only this empty row's positions)
                    size *= 2
                bucket.prefills = made  # all or none, as StaticDecode's
            out: T = _cloned(bucket.prefills[rows](x, slot))
        cache.advance(t)
        return out

    def step(self, xs: Sequence[torch.Tensor], caches: Sequence[KVCache]) -> list[T]:
        """Each sequence's one-position input ``xs[i]`` (``(1, 1, ...)``) at ``caches[i].length``, all rows of a
        capacity in one step -> each one's outputs (batch of one); commits each position."""
        if len(xs) != len(caches):
            raise ValueError(f"{len(xs)} inputs for {len(caches)} caches")
        with self._lock:
            groups: dict[int, tuple[_Slots[T], list[tuple[int, int]]]] = {}
            for i, cache in enumerate(caches):
                found = self._find(cache)
                if found is None:
                    raise ValueError("a cache that is not a row of these lanes")
                cache.check_fits(cache.length + 1)
                groups.setdefault(id(found[0]), (found[0], []))[1].append((i, found[1]))
            outs: list[Any] = [None] * len(caches)
            for bucket, members in groups.values():
                if len({slot for _, slot in members}) != len(members):
                    raise ValueError("two inputs for one cache in one step")
                index, write = [0] * self.slots, [False] * self.slots
                for i, slot in members:
                    bucket.input[slot].copy_(xs[i][0])
                    index[slot], write[slot] = caches[i].length, True
                bucket.index.copy_(torch.tensor(index))
                bucket.write.copy_(torch.tensor(write))
                out = bucket.graph()
                for i, slot in members:
                    outs[i] = _row(out, slot)
                    caches[i].advance(1)
            return outs
