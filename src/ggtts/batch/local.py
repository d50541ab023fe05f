"""Running items on this machine: in this process, or in ``workers`` processes, each with its own model and
``threads`` torch threads (spawned, not forked: torch's thread pools do not survive a fork).

A runner hands each finished item's record to ``on_record`` (the job's single manifest writer) and stops handing
out items once ``stop`` is set; the items it already started finish first.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ggtts.batch.items import Item
from ggtts.batch.manifest import FAILED
from ggtts.batch.work import ItemWorker, JobSettings
from ggtts.errors import GGTTSError

OnRecord = Callable[[dict[str, Any]], None]
MAX_ATTEMPTS = 3  # an item in flight when its worker died this many times is recorded as failed
MAX_BROKEN_POOLS = 3  # pools in a row that die before finishing a single item: the workers cannot run at all
IN_FLIGHT_PER_WORKER = 2  # queued per worker, so a worker never waits for the next item
POLL_S = 0.2  # how often the loop looks at ``stop`` while items run


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def run_here(
    items: Sequence[Item], settings: JobSettings, on_record: OnRecord, stop: threading.Event, *, threads: int | None
) -> None:
    """Items one after another in this process."""
    set_threads(threads)
    worker = ItemWorker(settings)
    for item in items:
        if stop.is_set():
            return
        on_record(worker.run(item))


# ---- worker processes ------------------------------------------------------------------------------------------
_WORKER: ItemWorker | None = None


def _init_worker(settings: dict[str, Any], threads: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    set_threads(threads)
    global _WORKER
    _WORKER = ItemWorker(JobSettings.from_dict(settings))


def _run_item(item: Item) -> dict[str, Any]:
    assert _WORKER is not None, "worker not initialised"
    return _WORKER.run(item)


def error_record(item: Item, settings: JobSettings, error: BaseException) -> dict[str, Any]:
    """The record of an item whose worker could not even return a result (an unpicklable one, say)."""
    message = f"internal error: {type(error).__name__}: {error}"
    return {"id": item.id, "key": settings.key(item), "status": FAILED, "error": message}


def crashed_record(item: Item, settings: JobSettings, attempts: int) -> dict[str, Any]:
    return {
        "id": item.id,
        "key": settings.key(item),
        "status": FAILED,
        "error": f"the worker process died while speaking this item ({attempts} times); out of memory?",
    }


def run_processes(
    items: Sequence[Item],
    settings: JobSettings,
    on_record: OnRecord,
    stop: threading.Event,
    *,
    workers: int,
    threads: int | None,
) -> None:
    """Items over ``workers`` processes. A worker that dies (killed, out of memory) is replaced; the items it held
    are handed out again, and one that was in flight through :data:`MAX_ATTEMPTS` deaths is recorded as failed."""
    queue = deque(items)
    attempts: Counter[str] = Counter()
    broken_in_a_row = 0
    context = multiprocessing.get_context("spawn")
    while queue and not stop.is_set():
        pool = ProcessPoolExecutor(workers, context, initializer=_init_worker, initargs=(settings.to_dict(), threads))
        in_flight: dict[Future[dict[str, Any]], Item] = {}
        finished = 0
        lost: list[Item] = []
        try:
            while (queue and not stop.is_set()) or in_flight:
                while queue and not stop.is_set() and len(in_flight) < IN_FLIGHT_PER_WORKER * workers:
                    item = queue.popleft()
                    in_flight[pool.submit(_run_item, item)] = item
                done, _ = wait(in_flight, timeout=POLL_S, return_when=FIRST_COMPLETED)
                if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                    done = set(wait(in_flight).done)  # a dead pool settles every future at once
                for future in done:
                    item = in_flight.pop(future)
                    error = future.exception()
                    if isinstance(error, BrokenProcessPool):
                        lost.append(item)
                        continue
                    finished += 1
                    on_record(future.result() if error is None else error_record(item, settings, error))
                if lost:
                    break
        except BaseException:  # Ctrl-C twice, or a failure here: stop the workers now, mid-item
            for child in multiprocessing.active_children():
                child.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        broken_in_a_row = 0 if finished or not lost else broken_in_a_row + 1
        if broken_in_a_row >= MAX_BROKEN_POOLS:
            raise GGTTSError(f"the worker processes died {broken_in_a_row} times without finishing an item")
        for item in reversed(lost):
            attempts[item.id] += 1
            if attempts[item.id] >= MAX_ATTEMPTS:
                on_record(crashed_record(item, settings, attempts[item.id]))
            else:
                queue.appendleft(item)
