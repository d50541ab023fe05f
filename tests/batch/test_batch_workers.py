"""Local worker processes (``ggtts batch --workers 2``, :func:`ggtts.batch.local.run_processes`): a worker that
dies mid-item is replaced and its item handed out again, so every item still ends with exactly one ``done`` record
and one file; an item that kills every worker that tries it fails alone. The deaths are injected by
``fault_injection/sitecustomize.py`` in the worker processes (a worker killed from outside would usually be
between items, since each holds one at a time)."""

from __future__ import annotations

import os
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from batch_support import TinyModel, check_recorded_file, manifest_records, part_files, run_batch_cli_env

from time_limit import time_limit

ITEMS = 10
WORKERS = 2
FAULTS = {"PYTHONPATH": str(Path(__file__).parent / "fault_injection")}  # see fault_injection/sitecustomize.py
JOB_LIMIT_S = 300  # a watchdog, not a timing: the job takes two pool starts (spawn, torch, model, G2P)


def _pid(record: dict[str, Any]) -> int:
    host, _, pid = record["worker"].rpartition(":")
    assert host == socket.gethostname(), record
    return int(pid)


def test_a_worker_that_dies_mid_item_is_replaced(tiny_model: TinyModel, tmp_path: Path) -> None:
    """A worker dies while speaking an item (once): the item is spoken again by another worker, every item ends
    with exactly one done record and one whole file, and nothing is left half-written."""
    out, marker = tmp_path / "out", tmp_path / "died.pid"
    lines = [f"Item {n} is here." for n in range(ITEMS)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**FAULTS, "GGTTS_TEST_DIE_ON_ITEM": "0003", "GGTTS_TEST_DIE_ONCE": str(marker)}
    with time_limit(JOB_LIMIT_S, "the two-worker batch job"):
        run = run_batch_cli_env(
            env, tmp_path / "in.txt", "--out", out, "-m", tiny_model.path, "--workers", str(WORKERS), "--threads", "1"
        )
    assert run.returncode == 0, run.stderr
    assert marker.exists(), "the fault was not injected: no worker died"
    died = int(marker.read_text())

    records = manifest_records(out)
    assert Counter(r["id"] for r in records) == Counter(f"{n:04d}" for n in range(1, ITEMS + 1))
    assert {r["status"] for r in records} == {"done"}
    for record in records:
        check_recorded_file(out, record)
        assert _pid(record) != os.getpid()
    assert sorted(p.name for p in out.glob("*.wav")) == sorted(f"{n:04d}.wav" for n in range(1, ITEMS + 1))
    assert part_files(out) == []
    third = next(r for r in records if r["id"] == "0003")
    assert _pid(third) != died  # spoken again, by another process


def test_an_item_that_kills_its_worker_fails_alone(tiny_model: TinyModel, tmp_path: Path) -> None:
    """An item whose worker dies every time is recorded failed after MAX_ATTEMPTS deaths; the items that other
    workers (and the replacements) speak meanwhile are not blamed, and the job goes on."""
    from ggtts.batch.local import MAX_ATTEMPTS

    out = tmp_path / "out"
    lines = [f"Line {n} is fine." for n in range(6)]
    lines.insert(1, "This line kills its worker.")  # item 0002
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**FAULTS, "GGTTS_TEST_DIE_ON_ITEM": "0002"}
    with time_limit(JOB_LIMIT_S, "the two-worker batch job"):
        run = run_batch_cli_env(
            env, tmp_path / "in.txt", "--out", out, "-m", tiny_model.path, "--workers", "2", "--threads", "1"
        )
    assert run.returncode == 1, run.stderr
    records = manifest_records(out)
    assert Counter(r["id"] for r in records) == Counter(f"{n:04d}" for n in range(1, len(lines) + 1))
    failed = [r for r in records if r["status"] != "done"]
    assert [r["id"] for r in failed] == ["0002"]
    assert f"died while speaking this item ({MAX_ATTEMPTS} times)" in failed[0]["error"]
    for record in records:
        if record["status"] == "done":
            check_recorded_file(out, record)
    assert not (out / "0002.wav").exists() and part_files(out) == []
    assert "failed: 0002: the worker process died" in run.stderr


def test_a_worker_that_dies_between_items_blocks_no_other(tiny_model: TinyModel, tmp_path: Path) -> None:
    """A worker dies right after sending an item's record: that record counts, no item is spoken twice, a
    replacement takes over, and the other worker's records still arrive (each worker has its own channel: with
    one queue shared by all, a worker killed while writing to it held its lock for ever and the job hung)."""
    out = tmp_path / "out"
    lines = [f"Item {n} is here." for n in range(ITEMS)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**FAULTS, "GGTTS_TEST_DIE_AFTER_ITEM": "0002"}
    with time_limit(JOB_LIMIT_S, "the two-worker batch job"):
        run = run_batch_cli_env(
            env, tmp_path / "in.txt", "--out", out, "-m", tiny_model.path, "--workers", str(WORKERS), "--threads", "1"
        )
    assert run.returncode == 0, run.stderr
    records = manifest_records(out)
    assert Counter(r["id"] for r in records) == Counter(f"{n:04d}" for n in range(1, ITEMS + 1))
    assert {r["status"] for r in records} == {"done"}
    died = _pid(next(r for r in records if r["id"] == "0002"))
    # the process that sent 0002's record spoke nothing after it: it died then (had its record been lost, 0002
    # would have been spoken again by a worker that went on speaking)
    later = [r["id"] for r in records if int(r["id"]) > 2 and _pid(r) == died]
    assert later == [], f"the worker that spoke 0002 also spoke {later}: it did not die, or 0002 was spoken twice"
    for record in records:
        check_recorded_file(out, record)
