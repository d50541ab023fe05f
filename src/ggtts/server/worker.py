"""Turns on a model: one thread per model (per copy of it, with ``--replicas``), requests served one at a time in
arrival order, a bounded queue. A model that decodes several streams together (OuteTTS's ``--parallel N``:
:mod:`ggtts.runtime.lanes`) gives N turns at once, each on a thread of its own that only waits for its stream's
audio (the model computes on its own loop's thread).

torch inference is CPU-bound and a model may keep state between the steps of one utterance, so each model has
a single worker thread and one request holds it from its first chunk to its last. The event loop only waits:
while a step runs it checks the request's deadline and whether the client is still there. A request that is
given up is cancelled (:mod:`ggtts.runtime.cancel`): the step running on the model's thread stops at its next
layer, so the model is free for the next request within moments, not after the chunk would have finished.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from ggtts.api import TTSModel
from ggtts.runtime.cancel import CancelToken, cancellable, make_cancellable
from ggtts.server.errors import ApiError

log = logging.getLogger("ggtts.server")

T = TypeVar("T")
POLL_S = 0.1  # how often a waiting request looks at its client and its deadline
RETRY_AFTER_MAX_S = 300
_EMA_WEIGHT = 0.2  # weight of the newest request in the running mean of seconds per input character
# Seconds of synthesis per input character before any request has finished here (Kokoro on two cores takes
# about 0.01-0.02); replaced by what this server measures as soon as requests complete.
INITIAL_SECONDS_PER_CHAR = 0.02


class RequestTimeout(ApiError):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            504,
            f"the request took longer than this server's limit of {timeout_s:g} s; send shorter text or retry later",
            code="timeout",
        )


class ClientGone(Exception):
    """The client disconnected; nobody is left to answer."""


def _torch_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


class ModelWorker:
    """A model, its thread, and the requests admitted to it (the one running and those waiting)."""

    def __init__(self, name: str, model: TTSModel, max_queue: int, threads: int | None = None) -> None:
        """``threads``: torch's threads on the model's thread (the servers' commands hand them over from the main
        thread: :func:`ggtts.runtime.threads.models_on_their_threads`); None leaves them as they are."""
        make_cancellable(model)  # its torch modules stop a given-up request within a layer's time
        self.name = name
        self.model = model
        self.max_queue = max_queue
        self.turns = getattr(model, "parallel_streams", 1)  # requests served at once
        self.executor = ThreadPoolExecutor(
            max_workers=self.turns, thread_name_prefix=f"ggtts-{name}", initializer=_torch_threads, initargs=(threads,)
        )
        self._turn = asyncio.Semaphore(self.turns)
        self._admitted = 0
        self._running: list[Ticket] = []
        self.seconds_per_char = INITIAL_SECONDS_PER_CHAR

    @property
    def busy(self) -> bool:
        return self._turn.locked()

    @property
    def waiting(self) -> int:
        return max(0, self._admitted - self.turns)

    @property
    def admitted(self) -> int:
        """Requests on this worker: the one running and those waiting."""
        return self._admitted

    def seconds_until_free(self) -> float:
        """When the running request should end (a place in the queue frees up then): its length times the
        measured seconds per character, less the time it has already run."""
        if len(self._running) < self.turns:
            return 0.0
        now = time.monotonic()
        return min(max(0.0, r.chars * self.seconds_per_char - (now - r.started)) for r in self._running)

    def admit(self, chars: int = 1) -> Ticket:
        """A place in this model's queue for ``chars`` characters of input, or 503 with Retry-After when the
        queue is full."""
        if self._admitted >= self.turns + self.max_queue:
            retry_after = min(RETRY_AFTER_MAX_S, max(1, math.ceil(self.seconds_until_free())))
            raise ApiError(
                503,
                f"model '{self.name}' is busy: {self.waiting} requests are already waiting; "
                f"retry in about {retry_after} s",
                code="queue_full",
                headers={"Retry-After": str(retry_after)},
            )
        self._admitted += 1
        return Ticket(self, chars)

    def _done(self, ticket: Ticket, duration_s: float | None) -> None:
        self._admitted -= 1
        if ticket.has_turn:
            if ticket in self._running:
                self._running.remove(ticket)
            self._turn.release()
        if duration_s is not None and ticket.finished:
            rate = duration_s / ticket.chars
            self.seconds_per_char += _EMA_WEIGHT * (rate - self.seconds_per_char)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class Ticket:
    """One request's place on a worker: wait for the turn, then run steps on the model's thread."""

    def __init__(self, worker: ModelWorker, chars: int = 1) -> None:
        self.worker = worker
        self.chars = max(1, chars)
        self.has_turn = False
        self.finished = False  # ran to its end (its duration then says how fast this model is)
        self._released = False
        self.started = 0.0

    async def take_turn(self, deadline: Deadline) -> None:
        acquire = asyncio.ensure_future(self.worker._turn.acquire())
        try:
            await deadline.wait(acquire)
        except BaseException:
            if acquire.done() and not acquire.cancelled():
                self.worker._turn.release()
            else:
                acquire.cancel()
            raise
        self.has_turn = True
        self.started = time.monotonic()
        self.worker._running.append(self)

    def release(self, cleanup: Callable[[], None] | None = None) -> None:
        """Give the place back; ``cleanup`` runs on the model's thread first, after any step still running."""
        if self._released:
            return
        self._released = True
        duration = time.monotonic() - self.started if self.has_turn else None
        if cleanup is None or not self.has_turn:
            self.worker._done(self, duration)
            return
        loop = asyncio.get_running_loop()
        future = self.worker.executor.submit(_logged(cleanup))
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self.worker._done, self, duration))


def _logged(fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except Exception:
            log.exception("cleaning up after a request failed")

    return run


class Deadline:
    """A request's time limit, and how to tell whether its client has left (polled while waiting).

    The limit bounds the server's own work: only the time spent in :meth:`wait` (for a turn on the model, for a
    step of synthesis) counts. A streamed response that waits for its client to take the bytes already sent
    (a client that plays the audio as it arrives reads at the speed of speech) is bounded by the connection's
    send timeout instead (:mod:`ggtts.server.connections`).
    """

    def __init__(self, timeout_s: float, is_disconnected: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.timeout_s = timeout_s
        self.spent = 0.0  # seconds spent waiting in :meth:`wait` so far
        self.is_disconnected = is_disconnected

    async def wait(self, future: asyncio.Future[T]) -> T:
        began = time.monotonic()
        try:
            while True:
                remaining = self.timeout_s - self.spent - (time.monotonic() - began)
                if remaining <= 0:
                    raise RequestTimeout(self.timeout_s)
                done, _ = await asyncio.wait({future}, timeout=min(remaining, POLL_S))
                if done:
                    return future.result()
                if self.is_disconnected is not None and await self.is_disconnected():
                    raise ClientGone
        except BaseException:
            # given up (a timeout, the client gone, or this task cancelled: the response's own watch for a
            # disconnect cancels it): the work's result or failure is taken when it comes, and dropped
            _abandon(future)
            raise
        finally:
            self.spent += time.monotonic() - began


def _abandon(future: asyncio.Future[Any]) -> None:
    """Nobody will read ``future``'s result: take its exception when it comes (it is cancelled work)."""
    future.add_done_callback(lambda f: f.cancelled() or f.exception())


class Steps(Generic[T]):
    """An iterator run one ``next`` at a time on the worker's thread, holding the ticket's turn; closing it
    cancels the step that may be running."""

    def __init__(self, ticket: Ticket, iterator_factory: Callable[[], Iterator[T]], deadline: Deadline) -> None:
        self.ticket = ticket
        self.deadline = deadline
        self._factory = iterator_factory
        self._iterator: Iterator[T] | None = None
        self.token = CancelToken()
        self.closed = False
        # a step, and the cleanup that closes the iterator, one at a time: a model of several turns runs them on
        # different threads of its pool, and a generator cannot be closed while another thread runs it
        self._busy = threading.Lock()

    def _step(self) -> T | None:
        with self._busy, cancellable(self.token):
            if self._iterator is None:
                self._iterator = self._factory()
            item = next(self._iterator, None)
        if item is None:
            self.ticket.finished = True
        return item

    async def next(self) -> T | None:
        """The next item, or None at the end."""
        future: Future[T | None] = self.ticket.worker.executor.submit(self._step)
        return await self.deadline.wait(asyncio.wrap_future(future))

    def close(self, extra_cleanup: Callable[[], None] | None = None) -> None:
        """Stop: the iterator is closed on the model's thread, then the turn passes on. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.token.cancel("the request was given up")

        def cleanup() -> None:
            with self._busy:  # after the step still running, which the cancelled token ends within moments
                close = getattr(self._iterator, "close", None)
                if close is not None:
                    close()
            if extra_cleanup is not None:
                extra_cleanup()

        self.ticket.release(cleanup)
