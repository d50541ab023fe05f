"""The talker families' speech decoders (Qwen3-Omni's code2wav, Qwen3-TTS's 12 Hz decoder) streaming over fixed
tensors: a push of a few fixed sizes captured once as a CUDA graph and replayed (:class:`~ggtts.ops.step_graph.
StepGraph`), where an eager push launches some 550-650 kernels (`benchmarks/step_operations.py --decoders`).

The stream's state lives in fixed tensors (:class:`~ggtts.models.layers.fixed_state.FixedState`): each causal
convolution's last inputs, each transposed convolution's spill, and each attention layer's keys and values of the
last ``sliding_window - 1`` positions. A fresh :class:`~ggtts.models.qwen3omni_code2wav.model.Code2WavStream` keeps
fewer keys at first; here the positions before the stream's start are masked instead, the push's position read from
a tensor, so every push of a size has the same shapes. A stream's first frame goes through a graph of its own,
which reads no state (zeros in its place, what a fresh stream stands in for it; the transposed convolutions then
trim their first samples, once, as a fresh stream's first push does) and writes every layer's: whatever an older
stream left in the tensors is never read. Every other frame goes through the graphs of the fixed sizes, largest
first. The samples are those of a :class:`Code2WavStream` pushed the same frames, up to the float rounding of
products and attention over other lengths. Off CUDA (or with ``capture=False``) the very same code runs eagerly:
what the CPU tests run.

The graphs are captured when the first stream of a batch size starts (before any of its frames): a server's warm-up
does it. One stream at a time per batch size (a model serves one request at a time): a newer stream takes the fixed
tensors, and a push to an older one is an error. A static stream can go on from an ordinary one
(:meth:`StaticDecoderStreams.continued`: Qwen3-TTS's decoder primed with a cloned voice's recording), its state
copied in at the first push; a static stream itself is neither forked nor saved.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from ggtts.models.layers.fixed_state import FixedState, pieces
from ggtts.models.qwen3omni_code2wav.model import Code2WavStream
from ggtts.ops.step_graph import StepGraph

if TYPE_CHECKING:
    from ggtts.models.qwen3omni_code2wav.model import StreamingDecoder

__all__ = ["StaticDecoderStream", "StaticDecoderStreams"]
FIRST = 0  # the key of the stream's first frame's graph (its other keys: the push sizes)


class _FirstPush(FixedState):
    """The fixed tensors as a stream's first push sees them: no state yet (each layer's first-push rule applies),
    every new state still copied into place."""

    def __contains__(self, layer: object) -> bool:
        return False

    def get(self, layer: nn.Module, default: torch.Tensor | None = None) -> torch.Tensor | None:  # type: ignore[override]
        return default


class _Lane:
    """A batch size's fixed state, codes, position and graphs (the first frame's, then one per push size)."""

    def __init__(self, decoder: StreamingDecoder, codebooks: int, batch: int, sizes: Sequence[int], capture: bool):
        device = decoder.device
        self.start = torch.zeros((), dtype=torch.long, device=device)  # the push's first frame in the stream
        learnt: dict[nn.Module, torch.Tensor] = {}  # the shapes and layouts of a stream's state: one eager push
        with torch.inference_mode():
            decoder.run(torch.zeros(batch, codebooks, 1, dtype=torch.long, device=device), self.start, learnt)
        self.state = FixedState.zeros_like(learnt)
        first = _FirstPush()
        dict.update(first, self.state)
        self.codes = {n: torch.zeros(batch, codebooks, n, dtype=torch.long, device=device) for n in sizes}
        self.graphs = {n: StepGraph(self._step(decoder, n, self.state), device, capture) for n in sizes}
        self.graphs[FIRST] = StepGraph(self._step(decoder, 1, first), device, capture)
        self.ready = False
        self.owner: object | None = None

    def _step(self, decoder: StreamingDecoder, n: int, state: FixedState) -> Callable[[], torch.Tensor]:
        codes = self.codes[n]

        def step() -> torch.Tensor:
            return decoder.run(codes, self.start, state)

        return step

    def begin(self, owner: object) -> None:
        """Make ``owner`` the stream whose frames the fixed tensors hold (every graph captured first; what their
        runs leave in the state, the stream's first frame does not read)."""
        if not self.ready:
            with torch.inference_mode():
                for graph in self.graphs.values():
                    graph()
            self.ready = True
        self.owner = owner


class StaticDecoderStreams:
    """A speech decoder's fixed-tensor streams: a :class:`_Lane` per batch size, made on first use."""

    def __init__(self, decoder: StreamingDecoder, codebooks: int, sizes: Sequence[int], capture: bool = True) -> None:
        if not sizes or min(sizes) != 1:
            raise ValueError(f"the push sizes must include 1 (any push is made of them), not {list(sizes)}")
        self.decoder, self.codebooks, self.capture = decoder, codebooks, capture
        self.sizes = tuple(sorted(set(sizes), reverse=True))
        self.lanes: dict[int, _Lane] = {}

    def continued(self, stream: Code2WavStream) -> StaticDecoderStream:
        """A static stream going on from where the ordinary ``stream`` is (a decoder primed with a cloned voice's
        recording): its state is copied into the fixed tensors at the first push; ``stream`` is left as it is."""
        if stream.model is not self.decoder:
            raise ValueError("a stream of another decoder")
        out = StaticDecoderStream(self)
        out.frames, out._shape = stream.frames, stream._shape
        out._start_state = {layer: t.clone() for layer, t in stream._state.items()}
        return out

    def lane(self, batch: int) -> _Lane:
        if batch not in self.lanes:
            self.lanes[batch] = _Lane(self.decoder, self.codebooks, batch, self.sizes, self.capture)
        return self.lanes[batch]

    @property
    def captured(self) -> bool:
        return any(g.captured for lane in self.lanes.values() for g in lane.graphs.values())


class StaticDecoderStream(Code2WavStream):
    """A :class:`Code2WavStream` over a lane's fixed tensors, taken at the first push (its batch size is the
    codes')."""

    def __init__(self, streams: StaticDecoderStreams) -> None:
        super().__init__(streams.decoder)
        self.streams = streams
        self._lane: _Lane | None = None
        self._start_state: dict[nn.Module, torch.Tensor] = {}  # where it goes on from (StaticDecoderStreams.continued)

    def fork(self) -> Code2WavStream:
        raise RuntimeError("a static stream's state is its decoder's fixed tensors: fork an ordinary stream")

    def saved(self) -> dict[str, torch.Tensor]:
        raise RuntimeError("a static stream's state is its decoder's fixed tensors: save an ordinary stream's")

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        if self._lane is None:
            self._lane = self.streams.lane(codes.shape[0])
            self._lane.begin(self)
            if self.frames:
                try:
                    _load(self._lane.state, self._start_state)
                except ValueError:
                    self._lane = None  # (not half-loaded: the next push tries again, and fails again)
                    raise
        elif self._lane.owner is not self:
            raise RuntimeError("this decoder stream was replaced by a newer one of the same decoder (one at a time)")
        lane, at, parts, n = self._lane, 0, [], codes.shape[-1]
        sizes = ([FIRST] if self.frames == 0 else []) + pieces(self.streams.sizes, n - (self.frames == 0))
        for key in sizes:
            size = max(key, 1)
            lane.codes[size].copy_(codes[..., at : at + size])
            lane.start.fill_(self.frames + at)
            parts.append(lane.graphs[key]().clone())  # the graph's output is overwritten by its next replay
            at += size
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _load(state: FixedState, start: dict[nn.Module, torch.Tensor]) -> None:
    """An ordinary stream's state into the fixed tensors: each layer's as it is, an attention layer's keys and values
    of fewer positions than the fixed ones (a stream not yet past its window) at their end, zeros before them (the
    positions before the stream's start, which the mask hides)."""
    for layer, fixed in state.items():
        value = start.get(layer)
        if value is None:
            raise ValueError("the stream to go on from lacks a layer's state")
        if value.shape == fixed.shape:
            fixed.copy_(value)
        elif value.dim() == 5 and value.shape[:3] == fixed.shape[:3] and value.shape[3] < fixed.shape[3]:
            fixed.zero_()
            fixed[:, :, :, fixed.shape[3] - value.shape[3] :].copy_(value)
        else:
            raise ValueError(f"a layer's state of shape {list(value.shape)} where {list(fixed.shape)} is kept")
