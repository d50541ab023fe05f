"""The manifest: what counts as done (same request, file there with the recorded size and sha256), a last line cut
short by a kill, the folder lock and the removal of a killed job's temporary files."""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ggtts.batch.manifest import LOCK_NAME, MANIFEST_NAME, Manifest, job_lock, remove_stale_parts
from ggtts.errors import GGTTSError

AUDIO = b"RIFF" + bytes(range(256)) * 4
KEY = "k1"


def _done_record(item_id: str, output: str, data: bytes, key: str = KEY) -> dict[str, Any]:
    return {
        "id": item_id,
        "key": key,
        "status": "done",
        "output": output,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _failed_record(item_id: str, key: str = KEY) -> dict[str, Any]:
    return {"id": item_id, "key": key, "status": "failed", "error": "the text is empty"}


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """A folder with one item done: ``sub/a.wav`` and its record."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "a.wav").write_bytes(AUDIO)
    manifest = Manifest(out)
    manifest.append(_done_record("sub/a", "sub/a.wav", AUDIO))
    manifest.close()
    return out


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _replace_with_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE: list[Any] = [
    # (what is done to the folder, the key asked about, done?)
    pytest.param(lambda p: None, KEY, True, id="intact"),
    pytest.param(lambda p: None, "k2", False, id="different-request"),
    pytest.param(lambda p: p.unlink(), KEY, False, id="file-deleted"),
    pytest.param(lambda p: p.write_bytes(AUDIO[:-10]), KEY, False, id="file-truncated"),
    pytest.param(lambda p: p.write_bytes(AUDIO + b"\0"), KEY, False, id="file-grown"),
    pytest.param(_flip_last_byte, KEY, False, id="file-altered-same-size"),
    pytest.param(_replace_with_folder, KEY, False, id="file-now-a-folder"),
]


@pytest.mark.parametrize(("damage", "key", "done"), DAMAGE)
def test_is_done(out_dir: Path, damage: Callable[[Path], None], key: str, done: bool) -> None:
    output = out_dir / "sub" / "a.wav"
    damage(output)
    manifest = Manifest(out_dir)  # as a re-run reads it
    assert manifest.is_done("sub/a", key) is done
    assert manifest.has_failed("sub/a", key) is False
    assert manifest.is_done("other", key) is False


def test_same_size_alteration_is_caught_by_the_hash(out_dir: Path) -> None:
    """The check that matters for a corrupted file: same size, one byte different."""
    output = out_dir / "sub" / "a.wav"
    _flip_last_byte(output)
    assert output.stat().st_size == len(AUDIO)
    assert Manifest(out_dir).is_done("sub/a", KEY) is False


def test_last_record_is_the_state(out_dir: Path) -> None:
    manifest = Manifest(out_dir)
    manifest.append(_failed_record("sub/a"))  # a later run failed it (say, --retry with a new voice)
    manifest.close()
    again = Manifest(out_dir)
    assert again.is_done("sub/a", KEY) is False
    assert again.has_failed("sub/a", KEY) is True
    assert again.has_failed("sub/a", "k2") is False  # a different request is not the failed one
    assert len((out_dir / MANIFEST_NAME).read_text().splitlines()) == 2


def test_done_record_without_output_is_not_done(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path)
    record = _done_record("a", "a.wav", AUDIO)
    del record["output"]
    manifest.append(record)
    assert manifest.is_done("a", KEY) is False


def test_has_failed(tmp_path: Path) -> None:
    manifest = Manifest(tmp_path)
    manifest.append(_failed_record("a"))
    manifest.append(_done_record("b", "b.wav", AUDIO))
    (tmp_path / "b.wav").write_bytes(AUDIO)
    manifest.close()
    again = Manifest(tmp_path)
    assert again.has_failed("a", KEY) is True
    assert again.has_failed("a", "k2") is False
    assert again.has_failed("b", KEY) is False
    assert again.has_failed("missing", KEY) is False
    assert again.is_done("a", KEY) is False


def _cut_short(out_dir: Path, partial: bytes) -> bytes:
    """The manifest of ``out_dir`` with ``partial`` (a record cut short by a kill) after its last line."""
    path = out_dir / MANIFEST_NAME
    path.write_bytes(path.read_bytes() + partial)
    return path.read_bytes()


CUTS = [
    pytest.param(b'{"id": "b", "key": "k1", "status": "do', id="mid-record"),
    pytest.param(b'{"id": "b", "key": "k1", "status": "done", "output": "b.w', id="mid-string"),
    pytest.param(b"{", id="one-byte"),
    pytest.param(
        '{"id": "caf\u00e9'.encode(),
        id="after-a-non-ascii-character",
    ),
    pytest.param(
        '{"id": "caf\u00e9'.encode()[:-1],
        id="mid-character",
    ),
]


@pytest.mark.parametrize("partial", CUTS)
def test_last_line_cut_short(out_dir: Path, partial: bytes) -> None:
    before = _cut_short(out_dir, partial)
    manifest = Manifest(out_dir)
    assert list(manifest.records) == ["sub/a"]  # the cut line is ignored, the rest is read
    assert manifest.damaged_lines == 1
    assert manifest.is_done("sub/a", KEY)
    record = _failed_record("c")
    manifest.append(record)
    manifest.close()
    after = (out_dir / MANIFEST_NAME).read_bytes()
    assert after == before + b"\n" + json.dumps(record).encode() + b"\n"  # on a line of its own
    again = Manifest(out_dir)
    assert sorted(again.records) == ["c", "sub/a"]
    assert again.damaged_lines == 1


def test_whole_last_line_without_newline(out_dir: Path) -> None:
    """A record that was written whole but lost its newline is a record; the next one still gets its own line."""
    record_b = _failed_record("b")
    before = _cut_short(out_dir, json.dumps(record_b).encode())
    manifest = Manifest(out_dir)
    assert sorted(manifest.records) == ["b", "sub/a"]
    assert manifest.damaged_lines == 0
    manifest.append(_failed_record("c"))
    manifest.close()
    assert (out_dir / MANIFEST_NAME).read_bytes().startswith(before + b"\n{")
    assert sorted(Manifest(out_dir).records) == ["b", "c", "sub/a"]


def test_append_after_a_whole_manifest_adds_no_blank_line(out_dir: Path) -> None:
    manifest = Manifest(out_dir)
    manifest.append(_failed_record("b"))
    manifest.close()
    lines = (out_dir / MANIFEST_NAME).read_text().split("\n")
    assert lines[-1] == "" and all(lines[:-1]) and len(lines) == 3


def test_job_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    """flock belongs to an open file description: the second job_lock opens the lock file again, as a second
    process would, and must be refused while the first holds it."""
    out = tmp_path / "new" / "out"
    with job_lock(out):
        assert (out / LOCK_NAME).exists()
        with pytest.raises(GGTTSError, match=f"{out}: another ggtts batch job is writing to this folder"):  # noqa: SIM117
            with job_lock(out):
                pytest.fail("a second holder got the lock")
    with job_lock(out):  # released: the next job gets it
        pass


def test_job_lock_is_released_when_the_job_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), job_lock(tmp_path):
        raise RuntimeError("the job failed")
    with job_lock(tmp_path):
        pass


def test_a_record_is_for_the_files_it_was_made_from(tmp_path: Path) -> None:
    """A record keeps the stamps of the model (and voice) files it was made from: other files now, not done (nor
    failed: tried again); a record without them (made before they were kept) goes by its key alone."""
    (tmp_path / "a.wav").write_bytes(AUDIO)
    manifest = Manifest(tmp_path)
    made_from = {"model": [100, 1], "voice": [10, 2]}
    manifest.append(_done_record("a", "a.wav", AUDIO) | {"sources": made_from})
    manifest.append({"id": "f", "key": KEY, "status": "failed", "error": "x", "sources": {"model": [100, 1]}})
    manifest.append(_done_record("old", "a.wav", AUDIO))
    manifest.close()
    again = Manifest(tmp_path)
    assert again.is_done("a", KEY, made_from) and again.is_done("a", KEY)
    assert not again.is_done("a", KEY, {"model": [100, 1], "voice": [10, 3]})  # the voice made again
    assert not again.is_done("a", KEY, {"model": [100, 1]})  # the voice no longer a file
    assert again.has_failed("f", KEY, {"model": [100, 1]}) and not again.has_failed("f", KEY, {"model": [101, 1]})
    assert again.is_done("old", KEY, made_from)


def test_remove_stale_parts(tmp_path: Path) -> None:
    keep = ["0001.wav", "keep.part", MANIFEST_NAME, LOCK_NAME, "sub/0002.wav", "sub/.notes.txt"]
    stale = [".0001.wav.k2j3h4.part", ".0003.wav.abc.part", "sub/.0002.wav.x_1.part", "sub/deep/.a.flac.zz.part"]
    for name in keep + stale:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert remove_stale_parts(tmp_path) == len(stale)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == sorted(keep)
    assert remove_stale_parts(tmp_path) == 0


def test_fixture_folder_can_be_copied(out_dir: Path, tmp_path: Path) -> None:
    """Records name files relative to the folder: a moved job is still done."""
    moved = tmp_path / "moved"
    shutil.copytree(out_dir, moved)
    assert Manifest(moved).is_done("sub/a", KEY)


def test_a_manifest_that_cannot_be_read_is_one_error(out_dir: Path) -> None:
    (out_dir / MANIFEST_NAME).unlink()
    (out_dir / MANIFEST_NAME).mkdir()
    with pytest.raises(GGTTSError, match=r"manifest\.jsonl: cannot read the manifest \(Is a directory\)"):
        Manifest(out_dir)


def test_a_manifest_that_cannot_be_written_is_one_error(out_dir: Path) -> None:
    """A full disk, as the file-size limit makes one: the write fails (EFBIG) and the error names the manifest."""
    size = (out_dir / MANIFEST_NAME).stat().st_size
    manifest = Manifest(out_dir)
    manifest.append(_done_record("b", "b.wav", AUDIO))  # opened and written once, within any limit
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, hard))
        with pytest.raises(GGTTSError, match=r"manifest\.jsonl: cannot write the manifest \(File too large\)"):
            manifest.append({"id": "c", "status": "done", "padding": "x" * 8192})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert "c" not in manifest.records
    manifest.close()  # nothing left to write: no second error (the job's own error is the one the user sees)
    text = (out_dir / MANIFEST_NAME).read_text(encoding="utf-8")
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())  # no half line kept
    assert Manifest(out_dir).damaged_lines == 0 and "c" not in Manifest(out_dir).records
