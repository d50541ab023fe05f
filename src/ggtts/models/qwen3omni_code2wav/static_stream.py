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
does it. ``streams`` at once per batch size, each over fixed tensors of its own (1 for a model that serves one
request at a time; a lane loop's lanes): a stream gives its lane back at its end (:meth:`StaticDecoderStream.close`,
or when it is gone); past ``streams`` a newer stream takes the lane taken longest ago, and a push to the older one is
an error (:mod:`ggtts.models.layers.fixed_state`, shared with the nano codec). A static stream can go on from an
ordinary one (:meth:`StaticDecoderStreams.continued`: Qwen3-TTS's decoder primed with a cloned voice's recording),
its state copied in at the first push; a static stream itself is neither forked nor saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from ggtts.models.layers.fixed_state import FixedLane, FixedState, FixedStreams
from ggtts.models.qwen3omni_code2wav.model import Code2WavStream

if TYPE_CHECKING:
    from ggtts.models.qwen3omni_code2wav.model import StreamingDecoder

__all__ = ["StaticDecoderStream", "StaticDecoderStreams"]


class StaticDecoderStreams(FixedStreams):
    """A speech decoder's fixed-tensor streams: up to ``streams`` lanes per batch size, made as streams need them
    (the push's position read from a tensor, the stream's first frame a graph of its own)."""

    def __init__(
        self, decoder: StreamingDecoder, codebooks: int, sizes: Sequence[int], capture: bool = True, streams: int = 1
    ) -> None:
        def make(batch: int) -> FixedLane:
            return FixedLane(decoder.run, codebooks, batch, self.sizes, decoder.device, capture, positioned=True)

        super().__init__(make, sizes, streams)
        self.decoder, self.codebooks, self.capture = decoder, codebooks, capture

    def continued(self, stream: Code2WavStream) -> StaticDecoderStream:
        """A static stream going on from where the ordinary ``stream`` is (a decoder primed with a cloned voice's
        recording): its state is copied into the fixed tensors at the first push; ``stream`` is left as it is."""
        if stream.model is not self.decoder:
            raise ValueError("a stream of another decoder")
        out = StaticDecoderStream(self)
        out.frames, out._shape = stream.frames, stream._shape
        out._start_state = {layer: t.clone() for layer, t in stream._state.items()}
        return out


class StaticDecoderStream(Code2WavStream):
    """A :class:`Code2WavStream` over a lane's fixed tensors, taken at the first push (its batch size is the
    codes')."""

    def __init__(self, streams: StaticDecoderStreams) -> None:
        super().__init__(streams.decoder)
        self.streams = streams
        self._lane: FixedLane | None = None
        self._start_state: dict[nn.Module, torch.Tensor] = {}  # where it goes on from (StaticDecoderStreams.continued)

    def close(self) -> None:
        if self._lane is not None:
            self._lane.release(self)

    def fork(self) -> Code2WavStream:
        raise RuntimeError("a static stream's state is its decoder's fixed tensors: fork an ordinary stream")

    def saved(self) -> dict[str, torch.Tensor]:
        raise RuntimeError("a static stream's state is its decoder's fixed tensors: save an ordinary stream's")

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        taking = self._lane is None
        self._lane = lane = self.streams.taken(self._lane, self, codes.shape[0], "decoder")
        if taking and self.frames:
            try:
                _load(lane.state, self._start_state)
            except ValueError:
                lane.release(self)  # (not half-loaded: the next push tries again, and fails again)
                self._lane = None
                raise
        return lane.push(codes, self.frames)


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
