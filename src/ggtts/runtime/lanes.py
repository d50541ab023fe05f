"""Continuous batching: several utterances of one model decoded together, one frame each per step, on one thread.

Each utterance is a *lane*: its own prompt, cache, sampler and budget (a :class:`~ggtts.runtime.frames.TokenDecoder`).
A step puts every lane's pending input (its prompt when it has just joined, else the token it drew last) through the
model in one call (``forward_many``: on the CPU one ggml graph whose linear layers read each weight once for all the
lanes' rows, :meth:`~ggtts.models.layers.ggml_stack.StackGraph.step_many`), then each lane draws from its own logits
with its own sampler. Lanes join and leave between steps, as llama.cpp's server does with its slots, so that N
streams cost less than N times one.

:class:`TokenLanes` is the step of a decoder-only language model (OuteTTS); a family whose frames are more than one
token steps its own lanes the same way (Qwen3-Omni's and Qwen3-TTS's talker and code predictor:
:mod:`ggtts.families.qwen3omni.lanes`). :class:`LaneLoop` runs such a step on a thread of its own for callers on other
threads (the server's requests): each caller hands it the work of one utterance and reads that utterance's audio as it
is made.
All of the model's computing happens on the loop's thread: OpenMP (torch's and ggml's thread pools) makes one team
of threads per calling thread, and once it manages more threads than there are cores it stops letting them spin
between parallel regions; a ggml step graph, which waits at a barrier after each of its several hundred operations,
then ran 35-50 % slower (measured on 2 cores; see docs/server.md).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import torch

from ggtts.audio import Audio
from ggtts.errors import GGTTSError
from ggtts.runtime.cancel import check_cancelled
from ggtts.runtime.frames import TokenDecoder
from ggtts.runtime.kv_cache import KVCache, KVCacheFullError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
# prompt tokens a lane runs per step: for OuteTTS's 0.5B Qwen2 at Q8_0 on 2 cores, about as long as five or six
# decoding steps (docs/benchmarks.md's prefill and decode rates)
PREFILL_CHUNK = 32
POLL_S = 0.05  # how often a caller waiting for its lane's output looks whether its request was given up
EXIT_WAIT_S = 30.0  # at the interpreter's exit, how long the loops' steps in progress may take to end, in all
EXIT_LOCK_WAIT_S = 1.0  # and how long telling a loop may wait for its lock (held while an utterance is built)
log = logging.getLogger("ggtts.lanes")
_RUNNING: weakref.WeakSet[LaneLoop[Any]] = weakref.WeakSet()  # the loops whose thread has started


@atexit.register
def _end_loops() -> None:
    """At the interpreter's exit, before it stops its daemon threads: every loop's utterances given up and its
    thread ended. A loop thread still stepping when the interpreter finalizes is stopped as it next takes the GIL,
    inside torch's C++ (freeing a tensor, say), whose frames cannot be unwound: the process aborted ("terminate
    called without an active exception") after its work was done."""
    loops = list(_RUNNING)
    deadline = time.monotonic() + EXIT_WAIT_S  # for all of them together: every loop is told first
    for loop in loops:
        loop.stop(EXIT_LOCK_WAIT_S)
    for loop in loops:
        loop.wait(deadline)


class ManyTokenModel(Protocol):
    """A decoder-only model that steps several sequences in one call (tokens ``(1, T_i)`` at each cache's length ->
    each one's logits ``(1, T_i or 1, V)``)."""

    def forward_many(
        self, tokens: Sequence[torch.Tensor], caches: Sequence[KVCache], *, last_only: bool = ...
    ) -> list[torch.Tensor]: ...

    def release_cache(self, cache: KVCache) -> None:
        """A lane has left: its cache is free for another (a row of the model's fixed caches on a GPU)."""


@dataclass(eq=False)
class Lane:
    """One utterance in a :class:`TokenLanes`: its decoder, its budget of new tokens, what it feeds next."""

    decoder: TokenDecoder
    max_new_tokens: int
    pending: list[int] = field(default_factory=list)  # input still to run: the prompt, then each token drawn
    drawn: int = 0
    fresh: bool = False  # its decoder holds the logits after all of its input: it draws at this step
    done: bool = False  # it drew a stop token or its last allowed one (which is never fed back)


class TokenLanes:
    """The lanes of one model decoded together (see the module's notes); used from one thread. While a lane is
    speaking, prompts run at most ``prefill_chunk`` tokens a step between them, first come first served: a lane
    joining with a long prompt holds the others' next tokens back by a chunk's time, not by its whole prompt's
    (llama.cpp's server splits its batches likewise), and of several joining at once the first starts speaking
    first. With none speaking, the first prompt runs whole (:func:`prefill_takes`)."""

    def __init__(
        self, model: ManyTokenModel, device: str | torch.device = "cpu", prefill_chunk: int = PREFILL_CHUNK
    ) -> None:
        if prefill_chunk < 1:
            raise ValueError("a prefill chunk is at least one token")
        self.model, self.device, self.prefill_chunk = model, device, prefill_chunk
        self.lanes: list[Lane] = []

    def add(self, decoder: TokenDecoder, max_new_tokens: int) -> Lane:
        """A new lane; its prompt runs with the next step. A budget below 1 gives a lane that is already done."""
        lane = Lane(decoder, max_new_tokens, pending=list(decoder.prompt), done=max_new_tokens < 1)
        if lane.done:  # it never joins: its cache is free again
            self.model.release_cache(decoder.cache)
            return lane
        try:
            decoder.cache.check_fits(decoder.cache.length + len(decoder.prompt) + max_new_tokens - 1)
        except KVCacheFullError:
            self.model.release_cache(decoder.cache)
            raise
        self.lanes.append(lane)
        return lane

    def join(self, work: TokenWork[Any]) -> Lane:
        return self.add(work.decoder, work.max_new_tokens)

    def remove(self, lane: Lane) -> None:
        if lane in self.lanes:
            self.lanes.remove(lane)
        self.model.release_cache(lane.decoder.cache)  # (nothing where it holds no row)

    @torch.inference_mode()
    def step(self) -> list[tuple[Lane, int]]:
        """One step of every lane: their inputs (a prompt's next chunk, or the last token drawn) through the model in
        one call, then the draw of each lane whose input is all in. Returns those lanes' new tokens; a lane that
        ended (``done``) has left."""
        feeding, inputs = [], []
        takes = prefill_takes([len(lane.pending) for lane in self.lanes], [lane.drawn > 0 for lane in self.lanes],
                              self.prefill_chunk)  # fmt: skip
        for lane, take in zip(self.lanes, takes, strict=True):
            if take:
                feeding.append(lane)
                inputs.append(lane.pending[:take])
        if feeding:
            tokens = [torch.tensor([chunk], dtype=torch.long, device=self.device) for chunk in inputs]
            logits = self.model.forward_many(tokens, [lane.decoder.cache for lane in feeding], last_only=True)
            for lane, chunk, lane_logits in zip(feeding, inputs, logits, strict=True):
                lane.pending = lane.pending[len(chunk) :]
                if not lane.pending:
                    lane.decoder.logits = lane_logits[0, -1]
                    lane.fresh = True
        drawn = []
        for lane in [lane for lane in self.lanes if lane.fresh]:
            lane.fresh = False
            token = lane.decoder.draw(lane.drawn)
            lane.drawn += 1
            drawn.append((lane, token))
            if lane.decoder.is_last(token) or lane.drawn >= lane.max_new_tokens:
                lane.done = True
                self.remove(lane)
            else:
                lane.pending = [token]
        return drawn


def prefill_takes(rows: Sequence[int], speaking: Sequence[bool], chunk: int) -> list[int]:
    """The rows of its pending input each lane (in the order they joined) runs this step. A speaking lane runs its
    one; prompts share a budget, first come first served: ``chunk`` rows while some lane is speaking (its next frame
    waits for the step), else the whole of the first prompt, as it runs alone: the same arithmetic, so a request
    served alone by a model with lanes says what it says without them, and the first of several joining at once
    starts speaking as soon as alone (the others then run beside it, in chunks)."""
    waiting = [n for n, s in zip(rows, speaking, strict=True) if not s and n]
    budget = chunk if any(speaking) else (waiting[0] if waiting else 0)
    takes = []
    for n, s in zip(rows, speaking, strict=True):
        take = n if s else min(budget, n)
        if not s:
            budget -= take
        takes.append(take)
    return takes


class LaneWork(Protocol[T_co]):
    """One utterance as a :class:`LaneLoop` runs it (built on the loop's thread): what each new frame and the end
    give its caller (and what its lanes' ``join`` reads: :class:`TokenWork` for :class:`TokenLanes`). A work with a
    ``close()`` has it called when it leaves the loop, however it leaves (done, given up, failed)."""

    def on_frame(self, frame: Any) -> Sequence[T_co]: ...

    def on_end(self) -> Sequence[T_co]: ...


class TokenWork(LaneWork[T_co], Protocol[T_co]):
    """A :class:`TokenLanes` utterance: its token loop and budget."""

    decoder: TokenDecoder
    max_new_tokens: int


class LaneState(Protocol):
    done: bool


class Lanes(Protocol):
    """What a :class:`LaneLoop` steps: lanes that join (one per utterance's work) and leave, and a step of all of
    them giving each lane that drew its frame (``None`` for a lane that ended without one; an exception for a lane
    that failed alone and has left: its caller hears it, the others go on)."""

    @property
    def lanes(self) -> Sequence[Any]: ...

    def join(self, work: Any) -> LaneState: ...

    def remove(self, lane: Any) -> None: ...

    def step(self) -> Sequence[tuple[Any, Any]]: ...


_END = object()


class _Job(Generic[T]):
    def __init__(self, make: Callable[[], LaneWork[T]]) -> None:
        self.make = make
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()  # items, then _END, or an exception
        self.given_up = False
        self.work: LaneWork[T] | None = None
        self.lane: LaneState | None = None


class LaneLoop(Generic[T]):
    """A thread that decodes up to ``max_lanes`` utterances together (``lanes``: :class:`TokenLanes` of a model, or
    a family's own); callers on any thread hand it an utterance with :meth:`run` and read its outputs as they come.
    More callers than lanes wait for a lane to free. ``threads``: torch's threads on the loop's thread (default:
    those of the thread that first calls :meth:`run`, e.g. a server's model thread)."""

    def __init__(self, lanes: Lanes, max_lanes: int, threads: int | None = None) -> None:
        if max_lanes < 1:
            raise ValueError("a lane loop needs at least one lane")
        self.lanes = lanes
        self.max_lanes, self.threads = max_lanes, threads
        self._cond = threading.Condition()
        self._waiting: list[_Job[T]] = []
        self._jobs: list[_Job[T]] = []  # those with a lane
        self._thread: threading.Thread | None = None
        self._closed = False
        self.steps = 0  # steps run
        self.most_lanes = 0  # the most lanes one step has run

    def run(self, make: Callable[[], LaneWork[T]]) -> _Outputs[T]:
        """The outputs of one utterance (``make`` builds its work on the loop's thread), as the loop makes them. It
        joins the loop now, not at the first output asked for (utterances asked together decode together). A
        request given up while waiting (:func:`~ggtts.runtime.cancel.check_cancelled`), or the iterator closed or
        dropped, read or not, takes the utterance out of the loop at its next step."""
        job: _Job[T] = _Job(make)
        with self._cond:
            if self._closed:
                raise GGTTSError("the model is closed: its lanes take no more requests (load it again)")
            self._waiting.append(job)
            if self._thread is None:
                if self.threads is None:
                    self.threads = torch.get_num_threads()
                self._thread = threading.Thread(target=self._loop, name="ggtts-lanes", daemon=True)
                self._thread.start()
                _RUNNING.add(self)
            self._cond.notify()
        return _Outputs(self, job)

    def _give_up(self, job: _Job[T]) -> None:
        with self._cond:
            job.given_up = True  # (after its end, nothing)
            self._cond.notify()

    def _outputs(self, job: _Job[T]) -> Generator[T, None, None]:
        try:
            while True:
                try:
                    item = job.out.get(timeout=POLL_S)
                except queue.Empty:
                    check_cancelled()
                    thread = self._thread
                    if thread is not None and not thread.is_alive() and job.out.empty():
                        raise RuntimeError("the lane loop's thread has stopped") from None
                    continue
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self._give_up(job)

    def close(self, wait: bool = True) -> None:
        """No more utterances; the loop's thread ends once those it has are done (its OpenMP team with it).
        ``wait``: until it has."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def stop(self, lock_timeout: float | None = None) -> None:
        """No more utterances, and those it has given up (then :meth:`wait` for its thread). Where its lock is not
        had within ``lock_timeout`` seconds (its thread building an utterance), the flags are set without it: the
        thread sees them when it next looks."""
        locked = self._cond.acquire(timeout=-1 if lock_timeout is None else lock_timeout)
        try:
            self._closed = True
            for job in (*self._jobs, *self._waiting):
                job.given_up = True
            if locked:
                self._cond.notify()
        finally:
            if locked:
                self._cond.release()

    def wait(self, deadline: float | None = None) -> None:
        """Until its thread has ended, or until ``deadline`` (``time.monotonic()``)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        while True:
            with self._cond:
                while not self._ready():
                    if self._closed:
                        return
                    self._cond.wait()
                self._admit()
            self._step()

    def _ready(self) -> bool:
        return bool(self._jobs) or any(not j.given_up for j in self._waiting)

    def _admit(self) -> None:
        """(Holding the lock.) Lanes given up leave; waiting utterances take the free lanes, in arrival order."""
        for job in [j for j in self._jobs if j.given_up]:
            self._drop(job)
        self._waiting = [j for j in self._waiting if not j.given_up]
        while self._waiting and len(self._jobs) < self.max_lanes:
            job = self._waiting.pop(0)
            try:
                with torch.inference_mode():
                    job.work = work = job.make()
                job.lane = self.lanes.join(work)
                self._jobs.append(job)
                if job.lane.done:  # nothing to decode
                    self._finish(job)
            except Exception as e:  # its own mistake (text, voice, options): its caller hears of it, alone
                job.out.put(e)
                self._drop(job)  # (a job left without a lane would keep the loop stepping nothing)

    def _drop(self, job: _Job[T]) -> None:
        if job.lane is not None:
            self.lanes.remove(job.lane)
        if job in self._jobs:
            self._jobs.remove(job)
        close = getattr(job.work, "close", None)  # what its work holds of the model's is free again, ended or not
        if close is not None:
            close()

    def _finish(self, job: _Job[T]) -> None:
        """Its last outputs (made without the lock where the caller does not hold it: callers joining need not
        wait for them), then it leaves, then its caller hears the end (and so finds the loop without it)."""
        assert job.work is not None
        for item in job.work.on_end():
            job.out.put(item)
        with self._cond:
            self._drop(job)
        job.out.put(_END)

    def _step(self) -> None:
        jobs = {id(j.lane): j for j in self._jobs}
        if not self.lanes.lanes:
            return
        n = len(self.lanes.lanes)
        try:
            drawn = self.lanes.step()
        except Exception as e:  # the shared step failed: every lane in it fails with it
            log.exception("a step of %d lanes failed", n)
            with self._cond:
                for job in list(self._jobs):
                    job.out.put(e)
                    self._drop(job)
            return
        self.steps += 1
        self.most_lanes = max(self.most_lanes, n)
        for lane, frame in drawn:
            job = jobs[id(lane)]
            assert job.work is not None
            if isinstance(frame, BaseException):  # that lane's own failure: it has left, the others went on
                with self._cond:
                    self._drop(job)
                    job.out.put(frame)
                continue
            try:
                with torch.inference_mode():
                    for item in job.work.on_frame(frame) if frame is not None else ():
                        job.out.put(item)
                    if lane.done:
                        self._finish(job)
            except Exception as e:
                job.out.put(e)
                with self._cond:
                    self._drop(job)


class _Outputs(Iterator[T]):
    """An utterance's outputs from a :class:`LaneLoop`: read as they come; closing it, or dropping it (even unread),
    takes the utterance out of the loop."""

    def __init__(self, loop: LaneLoop[T], job: _Job[T]) -> None:
        self._loop, self._job = loop, job
        self._items = loop._outputs(job)

    def __next__(self) -> T:
        return next(self._items)

    def close(self) -> None:
        self._items.close()
        self._loop._give_up(self._job)  # (when it was never read, the generator's own cleanup never ran)

    def __del__(self) -> None:
        if not self._job.given_up:
            self.close()


def speeches_in_lanes(
    lanes: LaneLoop[Audio], n: int, make: Callable[[int, float], LaneWork[Audio]], offset: float = 0.0
) -> Generator[Audio, None, float]:
    """``n`` chunks' speech spoken in ``lanes`` beside other requests', one after another: ``make(i, offset)``
    builds chunk ``i``'s work (on the loop's thread) starting ``offset`` seconds in. The first joins the loop now, as it
    is asked for (requests asked together decode together); each next one when the one before has ended. The
    generator returns the offset after the last."""
    first = lanes.run(lambda: make(0, offset)) if n else iter(())
    return _spoken(lanes, n, make, offset, first)


def _spoken(
    lanes: LaneLoop[Audio], n: int, make: Callable[[int, float], LaneWork[Audio]], offset: float, first: Iterator[Audio]
) -> Generator[Audio, None, float]:
    outputs = first
    for i in range(n):
        if i:
            outputs = lanes.run(lambda i=i, at=offset: make(i, at))  # type: ignore[misc]
        for audio in outputs:
            offset = audio.offset + audio.duration
            yield audio
    return offset
