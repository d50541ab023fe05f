"""A streaming decoder's state in fixed tensors, so that a push of a fixed number of frames has the same kernels,
shapes and addresses every time and can be captured once as a CUDA graph (the nano codec's and the talker
families' speech decoders' static streams).

A streaming layer keeps its state with ``state[layer] = new`` and reads it with ``state.get(layer)``; over a
:class:`FixedState` the assignment copies into the layer's tensor instead, so the layers' own streaming code runs
unchanged. A push of ``n`` frames is made of pushes of a few fixed sizes (:func:`pieces`), the state carrying across
them as across pushes. :class:`FixedStreams` keeps :class:`FixedLane` s per batch size, each with its state, its
fixed inputs and a graph per push size, captured when its first stream starts (a server's warm-up). ``streams`` at
once per batch size (1 for a model that serves one request at a time; a lane loop's lanes for one that decodes
several together): a new stream takes a free lane (never taken, given back at its stream's end, or its stream gone),
else a new one while there are fewer than ``streams``, else the one taken longest ago, whose stream then ends: a push
to it is an error.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ggtts.models.layers.channels_last import zeros_before
from ggtts.ops.step_graph import StepGraph

__all__ = ["FIRST", "FixedLane", "FixedState", "FixedStreams", "pieces"]

# a decoder's push: (codes (B, codebooks, n), the push's first frame in the stream (a () tensor), the state) -> audio
Run = Callable[[torch.Tensor, torch.Tensor, dict[nn.Module, torch.Tensor]], torch.Tensor]
FIRST = 0  # the key of a stream's first frame's graph (its other keys: the push sizes)


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


class _Unread(FixedState):
    """The fixed tensors as a stream's first push sees them: no state yet (each layer's first-push rule applies),
    every new state still copied into place."""

    def __contains__(self, layer: object) -> bool:
        return False

    def get(self, layer: nn.Module, default: torch.Tensor | None = None) -> torch.Tensor | None:  # type: ignore[override]
        return default


def pieces(sizes: Sequence[int], n: int) -> list[int]:
    """``n`` frames as pushes of ``sizes`` (1 among them), largest first."""
    out = []
    for size in sorted(set(sizes), reverse=True):
        while n >= size:
            out.append(size)
            n -= size
    return out


class FixedLane:
    """A batch size's fixed state, codes and graphs (one per push size) of a decoder's pushes ``run``. With
    ``positioned``, the push's first frame in the stream is read from a tensor (:attr:`start`) and a stream's first
    frame has a graph of its own (key :data:`FIRST`), which reads no state."""

    def __init__(
        self, run: Run, codebooks: int, batch: int, sizes: Sequence[int], device: torch.device, capture: bool,
        positioned: bool = False,
    ) -> None:  # fmt: skip
        self.sizes, self.positioned = tuple(sizes), positioned
        self.start = torch.zeros((), dtype=torch.long, device=device)
        learnt: dict[nn.Module, torch.Tensor] = {}  # the shapes and layouts a stream's state takes: one eager push
        with torch.inference_mode():
            run(torch.zeros(batch, codebooks, 1, dtype=torch.long, device=device), self.start, learnt)
        self.state = FixedState.zeros_like(learnt)
        self.codes = {n: torch.zeros(batch, codebooks, n, dtype=torch.long, device=device) for n in sizes}
        self.graphs = {n: StepGraph(self._step(run, n, self.state), device, capture) for n in sizes}
        if positioned:
            unread = _Unread()
            dict.update(unread, self.state)
            self.graphs[FIRST] = StepGraph(self._step(run, 1, unread), device, capture)
        self.ready = False
        self._owner: weakref.ref[object] | None = None  # the stream whose frames it holds (a stream gone frees it)
        self.begun = 0  # when that stream took it (FixedStreams' count)

    def _step(self, run: Run, n: int, state: FixedState) -> Callable[[], torch.Tensor]:
        codes = self.codes[n]

        def step() -> torch.Tensor:
            return run(codes, self.start, state)

        return step

    @property
    def owner(self) -> object | None:
        return None if self._owner is None else self._owner()

    def begin(self, owner: object, begun: int = 0) -> None:
        """Make ``owner`` the stream whose frames the fixed tensors hold, from zeros (every graph captured first:
        the capture's runs change the state, which is then zeroed)."""
        self.capture()
        with torch.inference_mode():
            self.state.zero_()
        self._owner, self.begun = weakref.ref(owner), begun

    def capture(self) -> None:
        """Every graph captured (on CUDA; run once elsewhere), where not yet."""
        if not self.ready:
            with torch.inference_mode():
                for graph in self.graphs.values():
                    graph()
            self.ready = True

    def release(self, owner: object) -> None:
        """``owner``'s stream has ended: the lane is free for another (nothing where another holds it)."""
        if self.owner is owner:
            self._owner = None

    def push(self, codes: torch.Tensor, frames: int) -> torch.Tensor:
        """The audio of ``codes`` ``(B, codebooks, n)`` (checked, ``n >= 1``) after the stream's ``frames`` frames:
        the graphs of the fixed sizes, largest first (a stream's first frame through its own where positioned)."""
        n, at, parts = codes.shape[-1], 0, []
        first = self.positioned and frames == 0
        for key in ([FIRST] if first else []) + pieces(self.sizes, n - first):
            size = max(key, 1)
            self.codes[size].copy_(codes[..., at : at + size])
            if self.positioned:
                self.start.fill_(frames + at)
            parts.append(self.graphs[key]().clone())  # the graph's output is overwritten by its next replay
            at += size
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


class FixedStreams:
    """A decoder's fixed-tensor streams: up to ``streams`` :class:`FixedLane` s per batch size, made by ``make(batch)``
    as streams need them; ``sizes``: the push sizes (1 among them)."""

    def __init__(self, make: Callable[[int], FixedLane], sizes: Sequence[int], streams: int = 1) -> None:
        if not sizes or min(sizes) != 1:
            raise ValueError(f"the push sizes must include 1 (any push is made of them), not {list(sizes)}")
        if streams < 1:
            raise ValueError("fixed-tensor streams need at least one lane")
        self.make, self.streams = make, streams
        self.sizes = tuple(sorted(set(sizes), reverse=True))
        self.lanes: dict[int, list[FixedLane]] = {}
        self._begun = itertools.count(1)

    def lane(self, batch: int) -> FixedLane:
        """A lane of ``batch`` rows for a new stream: a free one, else a new one while there are fewer than
        ``streams``, else the one taken longest ago (its stream ends)."""
        pool = self.lanes.setdefault(batch, [])
        free = [lane for lane in pool if lane.owner is None]
        if free:
            return free[0]
        if len(pool) < self.streams:
            pool.append(self.make(batch))
            return pool[-1]
        return min(pool, key=lambda lane: lane.begun)

    def taken(self, lane: FixedLane | None, owner: object, batch: int, what: str) -> FixedLane:
        """``owner``'s lane: one of the batch size's, taken at its first push (``lane`` None), else ``lane`` while
        ``owner`` holds it (a newer stream took it: an error naming ``what``)."""
        if lane is None:
            lane = self.lane(batch)
            lane.begin(owner, next(self._begun))
        elif lane.owner is not owner:
            raise RuntimeError(
                f"this {what} stream was replaced by a newer one of the same {what} ({self.streams} at a time)"
            )
        return lane

    def prepare(self, batch: int = 1) -> None:
        """Every lane of ``batch`` rows made and its graphs captured now (a server's warm-up), not when streams first
        need them."""
        pool = self.lanes.setdefault(batch, [])
        while len(pool) < self.streams:
            pool.append(self.make(batch))
        for lane in pool:
            lane.capture()

    def pieces(self, n: int) -> list[int]:
        """``n`` frames as the fixed sizes, largest first."""
        return pieces(self.sizes, n)

    @property
    def captured(self) -> bool:
        return any(g.captured for pool in self.lanes.values() for lane in pool for g in lane.graphs.values())
