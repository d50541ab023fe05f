"""``ggtts batch``: the command-line face of :mod:`ggtts.batch.job`."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from ggtts.errors import GGTTSError

SHOWN_FAILURES = 5  # failed items listed at the end; the manifest has them all
EXIT_FAILED_ITEMS = 1
EXIT_INTERRUPTED = 130


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ggtts.batch.items import SPLITS
    from ggtts.batch.work import FORMATS

    p.add_argument(
        "input",
        help="a text file, a folder of .txt files, or a .jsonl file (id, text, voice, speed, ...; or a .json array)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the audio files and manifest.jsonl")
    p.add_argument("--format", default="wav", choices=FORMATS, help="audio format of each item (default wav)")
    p.add_argument("--float", action="store_true", help="32-bit float WAV instead of 16-bit PCM")
    p.add_argument("--split", default="auto", choices=SPLITS, help="a text file's items: lines, paragraphs, or auto")
    p.add_argument("--retry-failed", action="store_true", help="speak again the items an earlier run failed")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default 1; with --ray, all CPUs)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: cores / workers)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run on a Ray cluster (its address, 'auto', or 'local' for a new one here); --out must be shared",
    )
    p.add_argument("--join", default=None, metavar="OUT", help="also write all items as one file, with chapters")
    p.add_argument("--pause", type=float, default=None, help="seconds of silence between joined items (default 0.5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from ggtts.audio import check_output_suffix
    from ggtts.batch.items import read_items
    from ggtts.batch.job import check_job, run_batch, stop_on_signals
    from ggtts.batch.join import DEFAULT_PAUSE_S, check_join_target, check_pause, join_outputs
    from ggtts.batch.manifest import MANIFEST_NAME
    from ggtts.batch.work import JobSettings
    from ggtts.flags import LOAD, PER_CALL, PROG, given
    from ggtts.fsutil import check_writable
    from ggtts.runtime.lifetime import signals_interrupt

    out_dir = Path(args.out)  # everything here is checked before any work
    if args.float and args.format != "wav":
        raise GGTTSError("--float applies to WAV only; leave it out or use --format wav")
    join = Path(args.join) if args.join is not None else None
    if join is None and args.pause is not None:
        raise GGTTSError("--pause is the silence between items in --join's file; give --join OUT, or leave it out")
    pause = args.pause if args.pause is not None else DEFAULT_PAUSE_S
    if join is not None:
        check_output_suffix(join)
        check_pause(pause)
        check_writable(join, new_folders=join.parent.resolve() == out_dir.resolve())  # the job makes --out
    check_writable(out_dir / MANIFEST_NAME, new_folders=True)  # the job makes its folder
    items = read_items(args.input, args.split)
    options = given(args, PER_CALL)  # no --progress here: the batch has its own bar
    settings = JobSettings(
        out_dir=out_dir,
        model=args.model,
        voice=args.voice,
        speed=args.speed,
        options=options,
        format=args.format,
        float_wav=args.float,
        load_options={**given(args, LOAD), **_companions(options)},
    )
    check_job(settings, local=args.ray is None, items=items)  # (run_batch checks too: here before any handler)
    if join is not None:
        check_join_target(join, items, settings)
    stop = threading.Event()
    workers = args.workers if args.workers is not None else (0 if args.ray is not None else 1)

    def say(message: str) -> None:
        print(f"{PROG}: {message}", file=sys.stderr)

    with stop_on_signals(stop, say):
        result = run_batch(
            items,
            settings,
            workers=workers,
            threads=args.threads,
            ray=args.ray,
            retry_failed=args.retry_failed,
            stop=stop,
            progress=not args.no_progress,
        )
    rtf = f", RTF {result.seconds / result.audio_seconds:.2f}" if result.audio_seconds else ""
    if result.changed_sources:
        say(f"spoken again as their model or voice file has changed since: {result.changed_sources} items")
    say(
        f"{result.done} done, {result.failed} failed this run; {result.skipped_done} done before"
        + (f", {result.skipped_failed} failed before (--retry-failed to try again)" if result.skipped_failed else "")
        + f"; {result.audio_seconds:.1f} s of audio in {result.seconds:.1f} s{rtf}; manifest: {out_dir / MANIFEST_NAME}"
    )
    if result.interrupted:
        say(f"stopped with {result.total - len(result.records)} items to go; run the same command to resume")
        return EXIT_INTERRUPTED
    failures = result.failures()
    for item_id, error in failures[:SHOWN_FAILURES]:
        say(f"failed: {item_id}: {error}")
    if failures:
        more = f" ({len(failures) - SHOWN_FAILURES} more in the manifest)" if len(failures) > SHOWN_FAILURES else ""
        say(f"{len(failures)} items have no audio{more}")
        if join is not None:
            say(f"not joined: {join} needs every item")
        return EXIT_FAILED_ITEMS
    if join is not None:
        with signals_interrupt():  # SIGTERM too ends the join as Ctrl-C does: its temporary files removed, 130
            chapters = join_outputs(items, result.records, out_dir, join, pause)
        say(f"joined {len(chapters)} items into {join} (chapters beside it)")
    return 0


def _companions(options: dict[str, Any]) -> dict[str, Any]:
    """The options naming a model's companion files (``--vocoder``, ``--codec``, ``--talker``): chosen at load, so
    they go to the loader too (as ``ggtts speak`` does)."""
    from ggtts.families import families

    names = {c.option for f in families() for c in f.companions}
    return {k: v for k, v in options.items() if k in names and v is not None}
