"""A batch job: which items still need doing (from the manifest), who does them (this process, local worker
processes, or Ray), and one writer that records each finished item in the manifest and the progress bar.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ggtts.batch.items import Item, check_id, check_unique
from ggtts.batch.manifest import DONE, MANIFEST_NAME, Manifest, job_lock, remove_stale_parts
from ggtts.batch.work import FORMATS, JobSettings, request_key, source_stamps
from ggtts.errors import GGTTSError, InputError
from ggtts.fsutil import check_writable
from ggtts.runtime.threads import threads_from_env


@dataclass
class BatchResult:
    """What a run did. ``records`` holds the latest record of every item of the input (those skipped too)."""

    total: int
    done: int = 0  # finished in this run
    failed: int = 0  # failed in this run
    skipped_done: int = 0  # already done by an earlier run
    skipped_failed: int = 0  # failed in an earlier run, not retried (``retry_failed=False``)
    changed_sources: int = 0  # of those to do, done or failed before for this request but from other files
    interrupted: bool = False
    audio_seconds: float = 0.0  # spoken in this run
    seconds: float = 0.0  # wall time of this run
    records: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every item of the input has its audio."""
        return all(r.get("status") == DONE for r in self.records.values()) and len(self.records) == self.total

    def failures(self) -> list[tuple[str, str]]:
        return [(i, str(r.get("error"))) for i, r in self.records.items() if r.get("status") != DONE]


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, message: Callable[[str], None]) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) sets ``stop``: the job finishes the items in progress and ends cleanly; a second
    Ctrl-C aborts at once (nothing half-written is left: every output is written atomically)."""

    def first(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        message("stopping after the items in progress (Ctrl-C again to abort); run the same command to resume")

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, first) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


PROGRESS_LINE_EVERY_S = 10.0  # where stderr is no terminal (a log file): a progress line at most this often


class _Progress:
    """Items, seconds of audio and the real-time factor (wall time over audio time) as items finish: a bar on a
    terminal; elsewhere (a log file) a line for the first item, then at most one every
    :data:`PROGRESS_LINE_EVERY_S`, and one for the last."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.start = time.perf_counter()
        self.audio, self.total, self.done = 0.0, total, 0
        terminal = sys.stderr.isatty()
        self.lines = enabled and total > 0 and not terminal  # no carriage-return bars in log files
        self.last_line = -math.inf
        self.bar = tqdm(total=total, unit="item", desc="speaking", disable=not (enabled and terminal), file=sys.stderr)

    def update(self, record: dict[str, Any]) -> None:
        self.audio += float(record.get("audio_seconds", 0.0))
        self.done += 1
        elapsed = time.perf_counter() - self.start
        rtf = f"{elapsed / self.audio:.2f}" if self.audio else "-"
        self.bar.set_postfix_str(f"audio {self.audio:.1f} s, RTF {rtf}", refresh=False)
        self.bar.update(1)
        now = time.monotonic()
        if self.lines and (now - self.last_line >= PROGRESS_LINE_EVERY_S or self.done == self.total):
            self.last_line = now
            print(f"ggtts: {self.done}/{self.total} items, {self.audio:.1f} s of audio, RTF {rtf}", file=sys.stderr)

    def write(self, message: str) -> None:
        self.bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def check_job(settings: JobSettings, local: bool = True, items: Sequence[Item] | None = None) -> None:
    """The job-wide voice, speed, options and load options checked from the metadata of each model they go to (no
    weights read), so a mistake there is one error before any work, not a failure recorded for every item.

    They go to the job's model where an item names none (``items`` None: one such item), and to each model an item
    names; the voice and speed only where the item gives none of its own. A model an item names that does not
    open fails its items alone. ``local``: the workers run on this machine, so the device asked for must be here
    too (Ray's workers may have GPUs that the driver does not)."""
    from ggtts.api import resolve_model_path
    from ggtts.families import Family, family_for
    from ggtts.families.base import refuse_untaken_load_options
    from ggtts.gguf import GGUFFile

    given = list(items) if items is not None else [Item(id="", text="")]
    opened: dict[str | None, tuple[GGUFFile, Family]] = {}
    names = sorted({item.model for item in given}, key=lambda m: (m is not None, m or ""))
    for name in names:
        try:
            gguf = GGUFFile(resolve_model_path(settings.model if name is None else name))
            opened[name] = gguf, family_for(gguf)
        except GGTTSError:
            if name is None:
                raise
    several = len({family.name for _, family in opened.values()}) > 1  # families: each takes its own load options
    device = None  # where the workers load, resolved where it matters (load options given, and they run here)
    if local and settings.load_options:
        from ggtts.runtime.device import AUTO, resolve_device

        device = resolve_device(settings.load_options.get("device", AUTO))
    for name, (gguf, family) in opened.items():
        mine = [item for item in given if item.model == name]
        try:
            if any(item.speed is None for item in mine):
                family.check_speed(settings.speed)
            family.check_options(settings.options)
            if any(item.voice is None for item in mine):
                family.check_voice(settings.voice, gguf)
            # (on a GPU the workers' loads check the device: asking it here would give this process a context)
            family.checked_load_options(settings.load_options, device if device == "cpu" else None, own_only=several)
        except InputError as e:
            if name is None:
                raise
            raise InputError(f"{name} (the model of item '{mine[0].id}'): {e}") from None
    if several and len(opened) == len(names):
        families = [family for _, family in opened.values()]
        refuse_untaken_load_options(settings.load_options, families, "no model of this job")
        lacking = sorted({f.name for f in families if "parallel" not in f.load_option_names()})
        if "parallel" in settings.load_options and lacking:  # a worker speaks `parallel` items at once, any model's
            raise InputError(f"--parallel applies to every item of a job, and {', '.join(lacking)} does not take it: "
                             "speak those items in a job of their own")  # fmt: skip


def run_batch(
    items: Sequence[Item],
    settings: JobSettings,
    *,
    workers: int = 1,
    threads: int | None = None,
    ray: str | None = None,
    retry_failed: bool = False,
    stop: threading.Event | None = None,
    progress: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> BatchResult:
    """Speak ``items`` into ``settings.out_dir``, skipping those the manifest shows done (and, unless
    ``retry_failed``, those it shows failed for the same request). The job-wide settings are checked first
    (:func:`check_job`): a mistake there is one InputError before any work.

    ``workers`` > 1 runs that many local processes, each with ``threads`` torch threads (default: this machine's
    cores shared out). ``ray`` runs on Ray instead (``""``: ``ray.init()``'s own choice of cluster, else its
    address; ``"local"`` starts one here), with ``workers`` actors (0: as many as the cluster's CPUs allow).
    Setting ``stop`` (a signal handler may) ends the run after the items in progress. ``on_record`` sees each
    record after it is in the manifest.
    """
    if settings.format not in FORMATS:
        raise InputError(f"unsupported audio format '{settings.format}'; use one of {', '.join(FORMATS)}")
    if not _whole(workers) or workers < 0 or (workers == 0 and ray is None):
        raise InputError(f"workers must be a whole number of at least 1, got {workers!r}")
    if threads is not None and (not _whole(threads) or threads < 1):
        raise InputError(f"threads must be a whole number of at least 1, got {threads!r}")
    items = check_items(items)
    check_job(settings, local=ray is None, items=items)  # before the folder is made, before any work
    if ray is None:
        check_writable(settings.out_dir / MANIFEST_NAME, new_folders=True)  # the job makes its folder
    stop = stop or threading.Event()
    started = time.perf_counter()
    with job_lock(settings.out_dir):
        remove_stale_parts(settings.out_dir)
        manifest = Manifest(settings.out_dir)
        try:
            result = _run(items, settings, manifest, workers, threads, ray, retry_failed, stop, progress, on_record)
        finally:
            manifest.close()
            remove_stale_parts(settings.out_dir)  # a worker killed mid-write leaves its temporary file
    result.seconds = time.perf_counter() - started
    return result


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_items(items: Iterable[Item]) -> list[Item]:
    """``items`` as a list, each an :class:`Item` whose id can name a file under the output folder (not ``..``,
    not a path of its own) and no two ids one file; an InputError naming the first that is not. ``read_items``
    makes items that pass; items made in Python are checked here, before any work."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InputError(f"items must be a list of ggtts.batch.Item, got {type(items).__name__}")
    given = list(items)
    for i, item in enumerate(given):
        if not isinstance(item, Item):
            raise InputError(f"items[{i}] is a {type(item).__name__}, not a ggtts.batch.Item")
        if not isinstance(item.id, str) or check_id(item.id, item.where or f"items[{i}]") != item.id:
            raise InputError(f"{item.where or f'items[{i}]'}: id {item.id!r} is not a file name of NFC text")
    check_unique(given)
    return given


def _run(
    items: Sequence[Item],
    settings: JobSettings,
    manifest: Manifest,
    workers: int,
    threads: int | None,
    ray: str | None,
    retry_failed: bool,
    stop: threading.Event,
    progress: bool,
    on_record: Callable[[dict[str, Any]], None] | None,
) -> BatchResult:
    result = BatchResult(total=len(items))
    todo: list[Item] = []
    stamped: dict[tuple[Any, Any], dict[str, list[int]]] = {}  # each model and voice's files, stamped once a run
    sources_of: dict[str, dict[str, list[int]]] = {}
    for item in items:
        request = settings.request(item)
        which = (request["model"], request["voice"])
        if which not in stamped:
            stamped[which] = source_stamps(*which)
        key, sources = request_key(request), stamped[which]
        if manifest.is_done(item.id, key, sources):
            result.skipped_done += 1
        elif manifest.has_failed(item.id, key, sources) and not retry_failed:
            result.skipped_failed += 1
        else:
            todo.append(item)
            sources_of[item.id] = sources
            before = manifest.records.get(item.id) or {}
            result.changed_sources += before.get("key") == key and before.get("sources") not in (None, sources)
            continue
        result.records[item.id] = manifest.records[item.id]
    wanted = {item.id for item in todo}
    bar = _Progress(len(todo), progress)

    def record(rec: dict[str, Any]) -> None:
        if rec["id"] not in wanted:  # a runner can only report items it was given, and each once
            raise RuntimeError(f"unexpected record for item {rec['id']!r}")
        wanted.discard(rec["id"])
        if sources_of[rec["id"]]:  # stamped here, where the next run compares (a Ray worker's node may differ)
            rec = {**rec, "sources": sources_of[rec["id"]]}
        manifest.append(rec)
        result.records[rec["id"]] = rec
        if rec["status"] == DONE:
            result.done += 1
            result.audio_seconds += rec["audio_seconds"]
        else:
            result.failed += 1
            bar.write(f"{rec['id']}: failed: {rec['error']}")
        bar.update(rec)
        if on_record is not None:
            on_record(rec)

    try:
        if todo:
            _runner(workers, threads, ray)(todo, settings, record, stop)
    finally:
        bar.close()
    result.interrupted = bool(wanted)
    return result


Runner = Callable[[Sequence[Item], JobSettings, Callable[[dict[str, Any]], None], threading.Event], None]


def _runner(workers: int, threads: int | None, ray: str | None) -> Runner:
    threads = threads or threads_from_env()  # $GGTTS_THREADS: each worker's, as --threads is
    if ray is not None:
        from ggtts.batch.ray_run import run_on_ray

        return functools.partial(run_on_ray, address=ray, workers=workers, threads=threads)
    from ggtts.batch.local import run_here, run_processes

    if workers == 1:
        return functools.partial(run_here, threads=threads)
    per_worker = threads or max(1, (os.cpu_count() or 1) // workers)
    return functools.partial(run_processes, workers=workers, threads=per_worker)
