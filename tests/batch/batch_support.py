"""Running ``ggtts batch`` as a subprocess and reading what it leaves behind: shared by the batch tests."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from time_limit import scaled

GGTTS = Path(sys.executable).parent / "ggtts"
RUN_TIMEOUT_S = scaled(300)  # a hang-catcher for one run of the command (normal: seconds)


@dataclass(frozen=True)
class TinyModel:
    path: Path
    sample_rate: int


def batch_command(*args: str | os.PathLike[str]) -> list[str]:
    return [str(GGTTS), "batch", "--no-progress", *(str(a) for a in args)]


def run_batch_cli(*args: str | os.PathLike[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``ggtts batch ARGS`` to completion; stdout and stderr as text."""
    return subprocess.run(
        batch_command(*args), capture_output=True, text=True, cwd=cwd, timeout=RUN_TIMEOUT_S, check=False
    )


def manifest_lines(out_dir: Path) -> list[str]:
    path = out_dir / "manifest.jsonl"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def manifest_records(out_dir: Path) -> list[dict[str, Any]]:
    """Every record in the manifest, in order (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in manifest_lines(out_dir)]


def done_records(out_dir: Path) -> list[dict[str, Any]]:
    return [r for r in manifest_records(out_dir) if r["status"] == "done"]


def count_done_lines(out_dir: Path) -> int:
    """Done records so far, read while a job may be appending (a line being written is not counted)."""
    try:
        text = (out_dir / "manifest.jsonl").read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.split("\n")[:-1] if '"status": "done"' in line)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_recorded_file(out_dir: Path, record: dict[str, Any]) -> None:
    """The record's file is there, whole: the recorded size and sha256."""
    path = out_dir / record["output"]
    assert path.is_file(), f"{record['id']}: {path} is missing"
    assert path.stat().st_size == record["bytes"], f"{record['id']}: size differs from the manifest"
    assert sha256(path) == record["sha256"], f"{record['id']}: sha256 differs from the manifest"


def part_files(out_dir: Path) -> list[Path]:
    return sorted(out_dir.rglob("*.part"))


def mtimes(out_dir: Path, suffix: str = ".wav") -> dict[str, int]:
    return {p.relative_to(out_dir).as_posix(): p.stat().st_mtime_ns for p in out_dir.rglob(f"*{suffix}")}


def run_batch_cli_env(env: dict[str, str], *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``ggtts batch ARGS`` with ``env`` added to this process's environment."""
    return subprocess.run(
        batch_command(*args),
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
