"""Continuous batching of the talker families (Qwen3-Omni, Qwen3-TTS): several utterances' frames made together.

A frame is the talker's step (its first code), then the code predictor's 15 steps (the other codebooks, one after
another). :class:`TalkerLanes` steps every lane's talker input in one call (``TalkerStack.step_many``: on the CPU one
ggml graph, each weight read once for all the lanes' rows; a prompt that joins while others speak runs
:data:`~ggtts.runtime.lanes.PREFILL_CHUNK` rows a step, first come first served), draws each lane's first code with
its own sampler, then runs the code predictor for every lane that drew one in step with the others
(``CodePredictor.frame_many``: each of its 15 steps one graph for all of them), each lane choosing its codes with its
own sampler in its own order. So a lane draws from the same generator in the same order as it does alone.
:class:`~ggtts.runtime.lanes.LaneLoop` runs these lanes for the server's requests as it runs OuteTTS's.

On a GPU (the talker's static lanes, :meth:`TalkerStack.use_static_lanes`) the talker's step of every lane is one
captured graph over fixed caches of one row per lane, and so is the code predictor's frame of every lane that drew a
first code (:class:`~ggtts.families.qwen3omni.generate.LaneFrame`: its codes chosen on the GPU, each lane's from its
own generator); each lane's first code is still chosen on the host, all lanes' logits read in one copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ggtts.families.qwen3omni.generate import GraphedFrame, HostFrames, LaneFrame, TalkerDecoder
from ggtts.models.qwen3omni_talker.model import TalkerStack
from ggtts.runtime.lanes import PREFILL_CHUNK, prefill_takes


class FrameWork(Protocol):
    """A talker utterance as a lane loop runs it: its decoder (see
    :func:`~ggtts.families.qwen3omni.generate.talker_decoder`)."""

    decoder: TalkerDecoder


@dataclass(eq=False)
class TalkerLane:
    """One utterance in :class:`TalkerLanes`: its decoder and what its talker takes next."""

    decoder: TalkerDecoder
    pending: torch.Tensor | None  # input rows still to run (1, T, dim): the prompt, then each frame's next input
    drawn: int = 0
    fresh: bool = False  # its decoder holds the talker's outputs after all of its input: it draws at this step
    done: bool = False  # it drew codec EOS or its last allowed frame (which is never fed back)


class TalkerLanes:
    """The lanes of one talker decoded together (see the module's notes); used from one thread."""

    def __init__(self, talker: TalkerStack, prefill_chunk: int = PREFILL_CHUNK) -> None:
        if prefill_chunk < 1:
            raise ValueError("a prefill chunk is at least one row")
        self.talker, self.prefill_chunk = talker, prefill_chunk
        self.lanes: list[TalkerLane] = []

    def join(self, work: FrameWork) -> TalkerLane:
        return self.add(work.decoder)

    def add(self, decoder: TalkerDecoder) -> TalkerLane:
        """A new lane; its prompt runs with the next step. A budget below 1 gives a lane that is already done."""
        if not isinstance(decoder.rest, HostFrames | LaneFrame):
            raise ValueError("lanes choose the code predictor's codes on the host, or in the lanes' graphed frame "
                             "(one utterance's graphed frame is for it alone)")  # fmt: skip
        lane = TalkerLane(decoder, decoder.inputs.prefill, done=decoder.max_frames < 1)
        if lane.done:  # it never joins: its cache is free again
            self.talker.release_cache(decoder.cache)
        else:
            self.lanes.append(lane)
        return lane

    def remove(self, lane: TalkerLane) -> None:
        if lane in self.lanes:
            self.lanes.remove(lane)
        self.talker.release_cache(lane.decoder.cache)  # (a row of the static lanes' caches on a GPU: free again)

    @torch.inference_mode()
    def step(self) -> list[tuple[TalkerLane, list[int] | None]]:
        """One step of every lane: the talker over their inputs in one call, then a frame for each lane whose input
        is all in. Returns those lanes' frames (None for a lane that drew codec EOS); a lane that ended (``done``)
        has left."""
        feeding, inputs = [], []
        rows = [0 if lane.pending is None else lane.pending.shape[1] for lane in self.lanes]
        takes = prefill_takes(rows, [lane.drawn > 0 for lane in self.lanes], self.prefill_chunk)
        for lane, take in zip(self.lanes, takes, strict=True):
            if take:
                assert lane.pending is not None
                feeding.append(lane)
                inputs.append(lane.pending[:, :take])
        if feeding:
            outs = self.talker.step_many(inputs, [lane.decoder.cache for lane in feeding])
            for lane, x, (hidden, logits) in zip(feeding, inputs, outs, strict=True):
                rest = lane.pending[:, x.shape[1] :] if lane.pending is not None else None
                lane.pending = rest if rest is not None and rest.shape[1] else None
                if lane.pending is None:
                    lane.decoder.hidden, lane.decoder.logits = hidden, logits
                    lane.fresh = True
        made: list[tuple[TalkerLane, list[int] | None]] = []
        coding: list[tuple[TalkerLane, int]] = []
        fresh = [lane for lane in self.lanes if lane.fresh]
        _on_host([lane.decoder for lane in fresh])
        for lane in fresh:
            lane.fresh = False
            code = lane.decoder.first_code(lane.drawn)
            if code is None:  # codec EOS: the utterance is over
                self._end(lane)
                made.append((lane, None))
            else:
                coding.append((lane, code))
        for group, rests in _frames(self.talker, coding):
            for (lane, code), (codes, total) in zip(group, rests, strict=True):
                made.append((lane, lane.decoder.complete(lane.drawn, code, codes, total)))
                lane.drawn += 1
                if lane.drawn >= lane.decoder.max_frames:
                    self._end(lane)
                else:
                    lane.pending = lane.decoder.next_input
        return made

    def _end(self, lane: TalkerLane) -> None:
        lane.done = True
        self.remove(lane)


def _on_host(decoders: list[TalkerDecoder]) -> None:
    """The talker's logits of these decoders, off the CPU, read to the host in one copy (their first codes are
    chosen there): one wait for the GPU, not one per lane."""
    if len(decoders) > 1 and decoders[0].logits.device.type != "cpu":
        for decoder, row in zip(decoders, torch.stack([d.logits for d in decoders]).cpu(), strict=True):
            decoder.logits = row


def _frames(
    talker: TalkerStack, coding: list[tuple[TalkerLane, int]]
) -> list[tuple[list[tuple[TalkerLane, int]], list[tuple[list[int], torch.Tensor]]]]:
    """The code predictor's frames of the lanes that drew a first code, in groups: those choosing on the host in
    one :meth:`~ggtts.models.qwen3omni_talker.model.CodePredictor.frame_many`, those in the lanes' graphed frames
    one replay per graphed frame (per sampling settings). Each group's lanes with their codes and embedding sums."""
    host = [(lane, code) for lane, code in coding if isinstance(lane.decoder.rest, HostFrames)]
    graphed: dict[int, tuple[GraphedFrame, list[tuple[TalkerLane, int]]]] = {}
    for lane, code in coding:
        rest = lane.decoder.rest
        if isinstance(rest, LaneFrame):
            graphed.setdefault(id(rest.frames), (rest.frames, []))[1].append((lane, code))
    out = []
    if host:
        decoders = [lane.decoder for lane, _ in host]
        frames = [d.rest for d in decoders if isinstance(d.rest, HostFrames)]  # (add checked each)
        out.append((host, talker.cp.frame_many([d.hidden for d in decoders], [d.embedded for d in decoders],
                                               [f.choose for f in frames], [f.cache for f in frames])))  # fmt: skip
    for frames_of, group in graphed.values():
        for at in range(0, len(group), frames_of.rows):  # (at most its rows a replay: lanes never exceed them)
            part = group[at : at + frames_of.rows]
            rests = [lane.decoder.rest for lane, _ in part]
            out.append((part, frames_of.many([lane.decoder.hidden for lane, _ in part],
                                             [lane.decoder.embedded for lane, _ in part],
                                             [r.generator for r in rests if isinstance(r, LaneFrame)])))  # fmt: skip
    return out
