"""The job's manifest: ``manifest.jsonl`` in the output folder, one JSON line per finished item (appended and
synced to disk as each item finishes; the last line for an id is its state).

An item counts as done only when its last record says ``done`` for the same request (the text, voice, speed,
model, options and format: the ``key``) and its file is there with the recorded size and sha256. So a re-run
skips exactly the items whose audio is on disk, redoes an item whose text changed or whose file was deleted or
damaged, and never trusts a file name alone. A line cut short by a kill is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ggtts.errors import GGTTSError
from ggtts.fsutil import file_sha256

MANIFEST_NAME = "manifest.jsonl"
LOCK_NAME = ".ggtts-batch.lock"
DONE = "done"
FAILED = "failed"


class Manifest:
    """The records of one output folder, read at start and appended to as items finish (by one process only)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.path = out_dir / MANIFEST_NAME
        self.records: dict[str, dict[str, Any]] = {}
        self.damaged_lines = 0
        self._fd: int | None = None  # opened at the first record
        if self.path.exists():
            self._read()

    def _read(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise GGTTSError(f"{self.path}: cannot read the manifest ({e.strerror})") from None
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                self.damaged_lines += 1  # a line cut short by a kill: that item is simply not done
                continue
            if isinstance(record, dict) and isinstance(record.get("id"), str):
                self.records[record["id"]] = record

    def is_done(self, item_id: str, key: str, sources: dict[str, Any] | None = None) -> bool:
        """Whether the item's audio for this exact request is on disk, as the manifest recorded it; with
        ``sources``, made from those files as they are now (a record made before sources were kept has none)."""
        record = self.records.get(item_id)
        if not record or record.get("status") != DONE or not self._same(record, key, sources):
            return False
        output = self.out_dir / str(record.get("output", ""))
        try:
            if not output.is_file() or output.stat().st_size != record.get("bytes"):
                return False
            return file_sha256(output) == record.get("sha256")
        except OSError:
            return False

    def has_failed(self, item_id: str, key: str, sources: dict[str, Any] | None = None) -> bool:
        """Whether the item failed for this exact request (with ``sources``: its files as they are now)."""
        record = self.records.get(item_id) or {}
        return record.get("status") == FAILED and self._same(record, key, sources)

    @staticmethod
    def _same(record: dict[str, Any], key: str, sources: dict[str, Any] | None) -> bool:
        if record.get("key") != key:
            return False
        return sources is None or "sources" not in record or record["sources"] == sources

    def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` as one line, written unbuffered and synced: after a kill, what was appended is there. A
        line that cannot be written whole (a full disk) is taken back, so the manifest never holds half of one."""
        if self._fd is None:
            self._fd = self._open()
        data = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        try:
            size = os.fstat(self._fd).st_size
        except OSError as e:
            raise GGTTSError(f"{self.path}: cannot write the manifest ({e.strerror or e})") from None
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            os.fsync(self._fd)
        except OSError as e:  # a full disk, say: the job cannot go on without its record
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise GGTTSError(f"{self.path}: cannot write the manifest ({e.strerror or e})") from None
        self.records[record["id"]] = record

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as e:
            raise GGTTSError(f"{self.path}: cannot write the manifest ({e.strerror})") from None
        try:
            if not self._ends_a_line():  # a last line cut short by a kill must not run into the next record
                os.write(fd, b"\n")
        except OSError as e:
            os.close(fd)
            raise GGTTSError(f"{self.path}: cannot write the manifest ({e.strerror})") from None
        return fd

    def _ends_a_line(self) -> bool:
        """Whether the file is empty or ends with a newline (read as bytes: a cut may split a character)."""
        with open(self.path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return True
            f.seek(size - 1)
            return f.read(1) == b"\n"

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # nothing is buffered: every line was written and synced by append
            self._fd = None


@contextlib.contextmanager
def job_lock(out_dir: Path) -> Iterator[None]:
    """Hold the output folder for this job; a second job on the same folder is refused instead of interleaving
    its records and files with ours."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK_NAME, "a+") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GGTTSError(f"{out_dir}: another ggtts batch job is writing to this folder") from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def remove_stale_parts(out_dir: Path) -> int:
    """Remove the temporary files a killed job left behind (``.NAME.xxxx.part``, see :mod:`ggtts.fsutil`);
    only while holding the folder's lock, so never another job's."""
    from ggtts.fsutil import PART_SUFFIX

    removed = 0
    for part in out_dir.rglob(f".*{PART_SUFFIX}"):
        with contextlib.suppress(OSError):
            part.unlink()
            removed += 1
    return removed
