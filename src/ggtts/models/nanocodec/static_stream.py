"""The nano codec's streaming decoder over fixed tensors, a push of a few fixed sizes captured once as a CUDA graph
and replayed (:class:`~ggtts.ops.step_graph.StepGraph`): one launch where a push of eager kernels costs the GPU
about a thousand (every convolution, activation and join of the decoder's stages, for one frame as for twelve).

The stream's state (each causal convolution's last inputs, each transposed convolution's spill past its end) lives
in fixed tensors, zeros when a stream starts: the values a fresh :class:`~ggtts.models.nanocodec.model.NanoCodecStream`
stands in for them (its zero padding, its absent spill), so a stream gives the same samples. Each layer keeps its
new state by copying it into its tensor (:class:`~ggtts.models.layers.fixed_state.FixedState`), so the layers' own
streaming code runs unchanged.
A push of ``n`` frames goes through the graphs of the fixed sizes, largest first (12 + 1 for 13 with sizes 12, 4
and 1): the state carries across the pieces as across pushes, so the samples are those of one push of ``n`` up to
the float rounding of convolutions over other lengths. Off CUDA (or with ``capture=False``) the very same code runs
eagerly: what the CPU tests run.

The graphs are captured when the first stream of a batch size starts (before any of its frames, the state then
zeroed again); a server's warm-up does it. One stream at a time per batch size (a model serves one request at a
time): a newer stream takes the fixed tensors, and a push to an older one is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from ggtts.models.layers.fixed_state import FixedState, pieces
from ggtts.models.nanocodec.model import NanoCodec, NanoCodecStream
from ggtts.ops.step_graph import StepGraph

__all__ = ["StaticStream", "StaticStreams"]


class _Lane:
    """A batch size's fixed state, codes and graphs (one per push size)."""

    def __init__(self, codec: NanoCodec, batch: int, sizes: Sequence[int], capture: bool) -> None:
        cfg, device = codec.cfg, codec.device
        learnt: dict[nn.Module, torch.Tensor] = {}  # the shapes and layouts a stream's state takes: one eager push
        codes = torch.zeros(batch, cfg.num_codebooks, 1, dtype=torch.long, device=device)
        with torch.inference_mode():
            codec.audio_decoder(codec.vector_quantizer(codes), learnt)
        self.state = FixedState.zeros_like(learnt)
        self.codes = {n: torch.zeros(batch, cfg.num_codebooks, n, dtype=torch.long, device=device) for n in sizes}
        self.graphs = {n: StepGraph(self._step(codec, n), device, capture) for n in sizes}
        self.ready = False
        self.owner: object | None = None

    def _step(self, codec: NanoCodec, n: int) -> Callable[[], torch.Tensor]:
        codes, state = self.codes[n], self.state

        def step() -> torch.Tensor:
            return codec.audio_decoder(codec.vector_quantizer(codes), state).float()

        return step

    def begin(self, owner: object) -> None:
        """Make ``owner`` the stream whose frames the fixed tensors hold, from zeros (every graph captured first:
        the capture's runs change the state, which is then zeroed)."""
        if not self.ready:
            with torch.inference_mode():
                for graph in self.graphs.values():
                    graph()
            self.ready = True
        with torch.inference_mode():
            self.state.zero_()
        self.owner = owner


class StaticStreams:
    """A codec's fixed-tensor streams: a :class:`_Lane` per batch size, made on first use."""

    def __init__(self, codec: NanoCodec, sizes: Sequence[int], capture: bool = True) -> None:
        if not sizes or min(sizes) != 1:
            raise ValueError(f"the push sizes must include 1 (any push is made of them), not {list(sizes)}")
        self.codec, self.capture = codec, capture
        self.sizes = tuple(sorted(set(sizes), reverse=True))
        self.lanes: dict[int, _Lane] = {}

    def lane(self, batch: int) -> _Lane:
        if batch not in self.lanes:
            self.lanes[batch] = _Lane(self.codec, batch, self.sizes, self.capture)
        return self.lanes[batch]

    def pieces(self, n: int) -> list[int]:
        """``n`` frames as the fixed sizes, largest first."""
        return pieces(self.sizes, n)

    @property
    def captured(self) -> bool:
        return any(g.captured for lane in self.lanes.values() for g in lane.graphs.values())


class StaticStream(NanoCodecStream):
    """:class:`~ggtts.models.nanocodec.model.NanoCodecStream` over a lane's fixed tensors. The lane is taken at the
    first push (its batch size is the codes')."""

    def __init__(self, streams: StaticStreams) -> None:
        super().__init__(streams.codec)
        self.streams = streams
        self._lane: _Lane | None = None

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        if self._lane is None:
            self._lane = self.streams.lane(codes.shape[0])
            self._lane.begin(self)
        elif self._lane.owner is not self:
            raise RuntimeError("this codec stream was replaced by a newer one of the same codec (one at a time)")
        lane, start, parts = self._lane, 0, []
        for n in self.streams.pieces(codes.shape[-1]):
            lane.codes[n].copy_(codes[..., start : start + n])
            parts.append(lane.graphs[n]().clone())  # the graph's output is overwritten by its next replay
            start += n
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
