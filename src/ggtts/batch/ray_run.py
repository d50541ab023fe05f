"""Running items on a Ray cluster: one actor per worker, each holding its loaded model, writing each item's file
straight into the output folder (which must be shared storage, at the same path on every node), and returning
the item's record to the driver, the manifest's only writer.

Fault tolerance is Ray's: actors restart when their process dies (``max_restarts=-1``) and Ray retries the calls
they held (``max_task_retries``). An item whose worker died while speaking it is spoken again, and its file,
written atomically, is there once; an item that kills its worker :data:`MAX_ATTEMPTS` times is recorded failed.

With a parallel model (``--parallel N``: ``settings.streams``) an actor speaks N items at once, each call on a thread
of its own (a threaded actor, ``max_concurrency=N``), the model's lanes decoding them together. Which of the items an
actor held killed it is then not known, so those calls are not retried by Ray: each of them comes back to the driver
and goes again alone, to an actor with nothing else in flight, where Ray retries it as above (and an item that kills
its worker fails alone), as the local workers do (:func:`ggtts.batch.local.run_processes`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ggtts.batch.items import Item
from ggtts.batch.local import MAX_ATTEMPTS, POLL_S, crash_message, room, set_threads
from ggtts.batch.work import ItemWorker, JobSettings, error_message, failed_record
from ggtts.errors import GGTTSError

INSTALL_HINT = "--ray needs Ray, which is not installed: pip install 'ggtts[ray]' (or pip install ray)"
IN_FLIGHT_PER_WORKER = 2  # calls queued per actor, so an actor never waits for its next item (streams + 1 with a
# parallel model: its N at once, and the next)
CONNECT_TIMEOUT_S = 10.0  # a cluster address whose port does not answer within this is unreachable
DEFAULT_THREADS = 1  # torch threads per actor: one actor per CPU gives the most items per second


class BatchActor:
    """A Ray actor: one model, loaded on first use and kept, for many items."""

    def __init__(self, settings: dict[str, Any], threads: int) -> None:
        self.threads = threads
        set_threads(threads)
        self.worker = ItemWorker(JobSettings.from_dict(settings))

    def run(self, item: Item) -> dict[str, Any]:
        set_threads(self.threads)  # a threaded actor's calls run on threads of its own, each with its own setting
        return self.worker.run(item)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise GGTTSError(INSTALL_HINT) from None
    return ray


def check_reachable(address: str) -> None:
    """A GGTTSError where ``address`` names a cluster (``HOST:PORT``, ``ray://HOST:PORT``) whose port does not
    answer: ``ray.init`` would retry for minutes, deaf to Ctrl-C. Ray's own names (``auto``, ``local``, none) pass."""
    where = address.removeprefix("ray://")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise GGTTSError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


def run_on_ray(
    items: Sequence[Item],
    settings: JobSettings,
    on_record: Callable[[dict[str, Any]], None],
    stop: threading.Event,
    *,
    address: str,
    workers: int,
    threads: int | None,
) -> None:
    """Items over ``workers`` actors (0: as many as the cluster's CPUs hold at ``threads`` each) on the cluster at
    ``address`` (``""``: Ray's default, a running cluster or else a new local one; ``"local"``: a new local one)."""
    ray = _import_ray()
    threads = threads or DEFAULT_THREADS
    started_here = not ray.is_initialized()
    if started_here:
        check_reachable(address)
        try:
            ray.init(address=address or None, logging_level=logging.WARNING, include_dashboard=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            where = f"at {address}" if address else "(no address given, none running here)"
            raise GGTTSError(f"cannot start or reach the Ray cluster {where}: {e}") from None
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = workers or max(1, cpus // threads)
        actor_class = ray.remote(BatchActor).options(
            num_cpus=threads, max_restarts=-1, max_task_retries=MAX_ATTEMPTS - 1, max_concurrency=settings.streams
        )
        actors = [actor_class.remote(settings.to_dict(), threads) for _ in range(count)]
        _dispatch(ray, actors, items, settings, on_record, stop)
        for actor in actors:
            ray.kill(actor)
    finally:
        if started_here:
            ray.shutdown()


def _dispatch(
    ray: Any,
    actors: list[Any],
    items: Sequence[Item],
    settings: JobSettings,
    on_record: Callable[[dict[str, Any]], None],
    stop: threading.Event,
) -> None:
    """Keep every actor :data:`IN_FLIGHT_PER_WORKER` items deep (``streams + 1`` with a parallel model); record
    results as they come. A parallel actor's calls are not retried by Ray: when it dies, each item it held goes
    again alone (``suspects``), on an actor with nothing else in flight, with Ray's retries."""
    streams = settings.streams
    depth = IN_FLIGHT_PER_WORKER if streams == 1 else streams + 1
    queue = deque(items)
    suspects: set[str] = set()
    in_flight: dict[Any, tuple[Item, int, bool]] = {}  # object ref -> (item, actor index, retried by Ray)

    def held(index: int) -> list[Item]:
        return [item for item, i, _ in in_flight.values() if i == index]

    while (queue and not stop.is_set()) or in_flight:
        while queue and not stop.is_set():
            open_ = [i for i in range(len(actors)) if room(held(i), queue[0], suspects, depth) > 0]
            if not open_:
                break
            index = min(open_, key=lambda i: len(held(i)))
            item = queue.popleft()
            retried = streams == 1 or item.id in suspects  # alone on its actor: a death is its own
            call = actors[index].run.options(max_task_retries=MAX_ATTEMPTS - 1 if retried else 0)
            in_flight[call.remote(item)] = (item, index, retried)
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
        for ref in ready:
            item, _, retried = in_flight.pop(ref)
            try:
                record = ray.get(ref)
            except ray.exceptions.RayActorError:
                if not retried:  # its actor died holding several: tried again alone, uncounted
                    suspects.add(item.id)
                    queue.appendleft(item)
                    continue
                record = failed_record(item.id, settings.key(item), crash_message(MAX_ATTEMPTS))  # its own deaths
            except ray.exceptions.RayError as e:
                record = failed_record(item.id, settings.key(item), error_message(e))
            on_record(record)
