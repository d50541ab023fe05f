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
time): a newer stream takes the fixed tensors, and a push to an older one is an error (:mod:`ggtts.models.layers.
fixed_state`, shared with the talker families' speech decoders).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ggtts.models.layers.fixed_state import FixedLane, FixedStreams
from ggtts.models.nanocodec.model import NanoCodec, NanoCodecStream

__all__ = ["StaticStream", "StaticStreams"]


class StaticStreams(FixedStreams):
    """A codec's fixed-tensor streams: a lane per batch size, made on first use."""

    def __init__(self, codec: NanoCodec, sizes: Sequence[int], capture: bool = True) -> None:
        def run(codes: torch.Tensor, _start: torch.Tensor, state: dict[nn.Module, torch.Tensor]) -> torch.Tensor:
            return codec.audio_decoder(codec.vector_quantizer(codes), state).float()

        def make(batch: int) -> FixedLane:
            return FixedLane(run, codec.cfg.num_codebooks, batch, self.sizes, codec.device, capture)

        super().__init__(make, sizes)
        self.codec, self.capture = codec, capture


class StaticStream(NanoCodecStream):
    """:class:`~ggtts.models.nanocodec.model.NanoCodecStream` over a lane's fixed tensors. The lane is taken at the
    first push (its batch size is the codes')."""

    def __init__(self, streams: StaticStreams) -> None:
        super().__init__(streams.codec)
        self.streams = streams
        self._lane: FixedLane | None = None

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        self._lane = self.streams.taken(self._lane, self, codes.shape[0], "codec")
        return self._lane.push(codes, 0)
