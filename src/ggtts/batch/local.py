"""Running items on this machine: in this process, or in ``workers`` processes, each with its own model and
``threads`` torch threads (spawned, not forked: torch's thread pools do not survive a fork). Each worker holds
one item at a time, so when a worker dies the item it held is known: that one alone is handed out again (and
recorded failed after :data:`MAX_ATTEMPTS` deaths), and a replacement worker starts. A model loaded with
``parallel=N`` (``--parallel N``: its utterances decode together, :mod:`ggtts.runtime.lanes`) is given N items at
once, each on a thread of the worker's own; when such a worker dies, each of the items it held is tried again alone
(which of them killed it is not known), so an item that kills its worker fails alone here too.

Each worker sends its records back over a pipe of its own, synchronously: a worker that dies can break only its
own channel. (One ``multiprocessing.Queue`` shared by all workers is written by a background thread under a lock
shared across processes: a worker killed while that thread held the lock left it held for ever, and every other
worker's records stuck behind it.)

A worker exits on its own once its parent is gone, whatever ended the parent (``kill -9`` included): an orphan
would hold a model's memory and a share of the CPU on a machine whose owner believes the job is over
(:func:`ggtts.runtime.lifetime.exit_with`).

A runner hands each finished item's record to ``on_record`` (the job's single manifest writer) and stops handing
out items once ``stop`` is set; the items it already started finish first.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from typing import Any

from ggtts.batch.items import Item
from ggtts.batch.work import ItemWorker, JobSettings, failed_record
from ggtts.errors import GGTTSError
from ggtts.runtime.lifetime import exit_with

OnRecord = Callable[[dict[str, Any]], None]
MAX_ATTEMPTS = 3  # an item whose worker died this many times while speaking it is recorded as failed
MAX_STARTUP_DEATHS = 3  # workers that die before they are ready: they cannot run here at all
POLL_S = 0.2  # how often the loops look at ``stop`` and at their workers while items run
EXIT_WAIT_S = 5.0  # how long a finished worker gets to exit before it is terminated


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def run_here(
    items: Sequence[Item], settings: JobSettings, on_record: OnRecord, stop: threading.Event, *, threads: int | None
) -> None:
    """Items one after another in this process (``settings.streams`` at a time, each on a thread of its own)."""
    set_threads(threads)
    worker = ItemWorker(settings)
    if settings.streams == 1:
        for item in items:
            if stop.is_set():
                return
            on_record(worker.run(item))
        return
    todo = deque(items)
    with ThreadPoolExecutor(settings.streams, "ggtts-item", initializer=set_threads, initargs=(threads,)) as pool:
        running: set[Future[dict[str, Any]]] = set()
        while running or (todo and not stop.is_set()):
            while todo and len(running) < settings.streams and not stop.is_set():
                running.add(pool.submit(worker.run, todo.popleft()))
            done, running = futures_wait(running, POLL_S, FIRST_COMPLETED)
            for future in done:
                on_record(future.result())  # (run catches every Exception: a record either way)


# ---- worker processes ------------------------------------------------------------------------------------------
def _worker_main(
    settings: dict[str, Any], threads: int | None, tasks: Any, results: Connection, parent: int
) -> None:  # pragma: no cover - runs in the worker process
    exit_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    set_threads(threads)
    job = JobSettings.from_dict(settings)
    worker = ItemWorker(job)
    results.send(None)  # ready; send() returns once the message is in the pipe
    if job.streams == 1:
        while (item := tasks.get()) is not None:
            results.send(worker.run(item))
        return
    sending = threading.Lock()

    def run(item: Item) -> None:
        try:
            record = worker.run(item)
            with sending:
                results.send(record)
        except BaseException:  # as the one-item loop would die of it: the parent sees the death and hands out again
            os._exit(1)

    # the parent gives at most ``streams`` items at a time: each starts at once
    with ThreadPoolExecutor(job.streams, "ggtts-item", initializer=set_threads, initargs=(threads,)) as pool:
        while (item := tasks.get()) is not None:
            pool.submit(run, item)


@dataclass
class _Worker:
    process: SpawnProcess
    tasks: Any  # its own queue: it is given one item at a time (``streams`` with a parallel model)
    results: Connection  # the reading end of its own pipe
    items: list[Item] = field(default_factory=list)  # the items it holds
    ready: bool = False
    gone: bool = False  # its pipe is closed: it has sent all it ever will


def room(held: Sequence[Item], head: Item, suspects: set[str], capacity: int) -> int:
    """Items a worker holding ``held`` may be given now, ``head`` next in line: none beside a suspect (an item of a
    worker that died holding several, tried again alone), a suspect only to a worker holding none, else up to
    ``capacity``. (Ray's dispatch shares it: :mod:`ggtts.batch.ray_run`.)"""
    if any(i.id in suspects for i in held):
        return 0
    if head.id in suspects:
        return 0 if held else 1
    return capacity - len(held)


def crash_message(attempts: int) -> str:
    return f"the worker process died while speaking this item ({attempts} times); out of memory?"


class _Pool:
    """``count`` worker processes, each given one item at a time (``settings.streams`` with a parallel model);
    dead ones are replaced."""

    def __init__(self, count: int, settings: JobSettings, threads: int | None) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.settings, self.threads = settings, threads
        self.capacity = settings.streams
        self.serials = itertools.count()
        self.workers: dict[int, _Worker] = {}
        for _ in range(count):
            self.start()

    def start(self) -> None:
        serial = next(self.serials)
        tasks = self.context.Queue()
        receive, send = self.context.Pipe(duplex=False)
        args = (self.settings.to_dict(), self.threads, tasks, send, os.getpid())
        process = self.context.Process(target=_worker_main, args=args, daemon=True, name=f"ggtts-batch-{serial}")
        process.start()
        send.close()  # the worker holds the only writing end: the pipe reads EOF once it is gone
        self.workers[serial] = _Worker(process, tasks, receive)

    def give(self, worker: _Worker, item: Item) -> None:
        worker.items.append(item)
        worker.tasks.put(item)

    def idle(self) -> list[_Worker]:
        """Ready workers with room for an item: a worker gets its first item only once it said it is ready, so one
        that dies holding an item died speaking it, and one that dies before is a start-up failure."""
        return [w for w in self.workers.values() if w.ready and len(w.items) < self.capacity and not w.gone]

    def busy(self) -> bool:
        return any(w.items for w in self.workers.values())

    def collect(self, timeout: float) -> list[dict[str, Any]]:
        """Records that arrived (waiting up to ``timeout`` for the first); marks workers ready or free, and gone
        where their pipe closed."""
        by_pipe = {w.results: w for w in self.workers.values() if not w.gone}
        records: list[dict[str, Any]] = []
        for ready in wait(list(by_pipe), timeout):
            worker = by_pipe[ready]  # type: ignore[index]  # wait() gives back the connections it was given
            pipe = worker.results
            while not worker.gone and pipe.poll():
                try:
                    record = pipe.recv()
                except (EOFError, OSError):  # the worker exited or died; a message cut short is lost with it
                    worker.gone = True
                    break
                if record is None:
                    worker.ready = True
                else:
                    worker.items = [i for i in worker.items if i.id != record["id"]]
                    records.append(record)
        return records

    def reap(self) -> tuple[list[dict[str, Any]], list[_Worker]]:
        """Workers that died, removed from the pool, and the records they sent before dying."""
        dead = [s for s, w in self.workers.items() if not w.process.is_alive()]
        records = self.collect(0) if dead else []  # a dead process has written all it ever will
        for serial in dead:
            self.workers[serial].results.close()
        return records, [self.workers.pop(s) for s in dead]

    def close(self, now: bool = False) -> None:
        for w in self.workers.values():
            if now:
                w.process.terminate()
            else:
                with contextlib.suppress(ValueError, OSError):
                    w.tasks.put(None)
        for w in self.workers.values():
            w.process.join(0 if now else EXIT_WAIT_S)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join()
            w.results.close()


def run_processes(
    items: Sequence[Item],
    settings: JobSettings,
    on_record: OnRecord,
    stop: threading.Event,
    *,
    workers: int,
    threads: int | None,
) -> None:
    """Items over ``workers`` processes. A worker that dies (killed, out of memory) is replaced, and the one item
    it held is handed out again; an item held through :data:`MAX_ATTEMPTS` deaths is recorded as failed. (A worker
    of a parallel model holds several: when it dies, each of them is handed out again to a worker of its own, with
    nothing beside it, and counts only deaths it meets alone.)"""
    todo = deque(items)
    attempts: Counter[str] = Counter()
    suspects: set[str] = set()  # items of a worker that died holding several: each tried again alone
    startup_deaths = 0
    pool = _Pool(workers, settings, threads)

    try:
        while (todo and not stop.is_set()) or pool.busy():
            for worker in pool.idle():
                while todo and not stop.is_set() and room(worker.items, todo[0], suspects, pool.capacity) > 0:
                    pool.give(worker, todo.popleft())
            for record in pool.collect(POLL_S):
                on_record(record)
            last_records, dead = pool.reap()
            for record in last_records:
                on_record(record)
            for worker in dead:
                startup_deaths = startup_deaths if worker.ready else startup_deaths + 1
                if startup_deaths >= MAX_STARTUP_DEATHS:
                    raise GGTTSError(
                        f"{startup_deaths} worker processes died before they were ready (a script that calls "
                        'run_batch with workers needs it under `if __name__ == "__main__":`: each worker imports '
                        "the script that starts it)"
                    )
                held = worker.items
                for item in reversed(held):  # (each back at the head of the queue, in their order)
                    if len(held) > 1:  # which of them killed it is not known: each goes again alone, uncounted
                        suspects.add(item.id)
                        todo.appendleft(item)
                        continue
                    attempts[item.id] += 1
                    if attempts[item.id] >= MAX_ATTEMPTS:
                        on_record(failed_record(item.id, settings.key(item), crash_message(attempts[item.id])))
                    else:
                        todo.appendleft(item)
                if todo and not stop.is_set():
                    pool.start()
    except BaseException:  # Ctrl-C twice, or a failure here: stop the workers now, mid-item
        pool.close(now=True)
        raise
    pool.close()
