"""Continuous batching of Magpie: several utterances' frames made together, on the CPU.

A Magpie frame is a decoder step (the new stack's row, guidance's null row beside it), then the local transformer's
steps over the frame's codebooks, one after another. :class:`MagpieLanes` runs the decoder step of every lane as one
ggml graph (:meth:`~ggtts.models.magpie.step_graph.DecoderGraph.step_many`: the linear layers over all of their
rows, each weight read once; each lane's self-attention over its own cache and its cross-attention over its own
text, with its own attention prior), then the local transformer's frame of every lane together
(:func:`~ggtts.families.magpie.generate.local_codes_many`), each lane drawing its codes from its own logits with its
own generator and settings, in its own order, as it does alone. A lane that joins runs its first step (the text
encoder and the speaker context's prefill) alone, before the others' next frame; of several joining at once, one a
step, in the order they joined (the first starts speaking as soon as it would alone, and a speaking lane's frames
wait for one newcomer's first step at a time).
:class:`~ggtts.runtime.lanes.LaneLoop` runs these lanes for the server's requests as it runs the other families'.

The steps over fixed tensors that a GPU replays as graphs are one utterance's: on CUDA Magpie serves several
streams with ``--replicas``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ggtts.families.magpie.generate import Utterance, draw_many, feed_many


class MagpieWork(Protocol):
    """A Magpie utterance as a lane loop runs it: its decoding (built on the loop's thread) and its frame budget."""

    utterance: Utterance
    steps: int


@dataclass(eq=False)
class MagpieLane:
    """One utterance in :class:`MagpieLanes`."""

    utterance: Utterance
    steps: int  # the most decoder steps it runs
    drawn: int = 0
    primed: bool = False  # its first step (the prefill) has run: it draws at the next step
    done: bool = False  # its frame budget is spent, or it drew its last frame


class MagpieLanes:
    """The lanes of one Magpie model decoded together (see the module's notes); used from one thread."""

    def __init__(self) -> None:
        self.lanes: list[MagpieLane] = []

    def join(self, work: MagpieWork) -> MagpieLane:
        if work.utterance.static is not None:
            raise ValueError("Magpie's steps over fixed tensors are one utterance's: lanes run the cached steps")
        lane = MagpieLane(work.utterance, work.steps, done=work.steps < 1)
        if not lane.done:
            self.lanes.append(lane)
        return lane

    def remove(self, lane: MagpieLane) -> None:
        if lane in self.lanes:
            self.lanes.remove(lane)

    @torch.inference_mode()
    def step(self) -> list[tuple[MagpieLane, torch.Tensor | Exception | None]]:
        """One frame of every lane that has run its first step: the first step of the earliest lane that joined and
        has not (alone; the other newcomers' at the next steps, one a step, first come first served), then the local
        transformer's frame of all of them together, then the decoder step of those that go on, together. Returns
        each one's frame (codes (C, n); None for a lane that ended without one; the exception of a newcomer whose
        first step failed, alone); a lane that ended (``done``) has left."""
        made: list[tuple[MagpieLane, torch.Tensor | Exception | None]] = []
        waiting = [lane for lane in self.lanes if not lane.primed]
        if waiting:  # one newcomer's first step a step: the others' next frame waits for one, not for all of them
            try:
                waiting[0].utterance.prefill()
                waiting[0].primed = True
            except Exception as e:  # (its own: its text, its speaker) it fails alone
                self._end(waiting[0])
                made.append((waiting[0], e))
        lanes = [lane for lane in self.lanes if lane.primed]
        frames = draw_many([lane.utterance for lane in lanes], [lane.drawn for lane in lanes]) if lanes else []
        going: list[tuple[MagpieLane, torch.Tensor]] = []
        for lane, frame in zip(lanes, frames, strict=True):
            made.append((lane, frame))
            if frame is None:
                self._end(lane)
                continue
            lane.drawn += 1
            if lane.utterance.is_last(frame) or lane.drawn >= lane.steps:
                self._end(lane)
            else:
                going.append((lane, frame))
        if going:
            feed_many([lane.utterance for lane, _ in going], [frame for _, frame in going])
        return made

    def _end(self, lane: MagpieLane) -> None:
        lane.done = True
        self.remove(lane)
