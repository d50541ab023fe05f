"""``ggtts batch`` end to end: the real command (a subprocess of this venv's entry point) on a tiny random Kokoro.

One text job is spoken once per module (``text_job``); the tests that change it work on a copy, so each run here
speaks only what its test is about.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from batch_support import (
    GGTTS,
    RUN_TIMEOUT_S,
    TinyModel,
    batch_command,
    check_recorded_file,
    count_done_lines,
    done_records,
    manifest_lines,
    manifest_records,
    mtimes,
    part_files,
    run_batch_cli,
)

from ggtts.batch.manifest import job_lock
from time_limit import wait_for

# Characters that ffmpeg's metadata format escapes ('=', ';', '#', '\') appear in the chapter titles.
TEXT_LINES = [
    "Hello there.",
    "Second line = two; here.",
    "Number #3 comes next.",
    "A back\\slash is four.",
    "Five is here.",
    "Six, and done.",
]
IDS = [f"{n:04d}" for n in range(1, len(TEXT_LINES) + 1)]


@dataclass(frozen=True)
class Job:
    root: Path  # the working folder of the command
    input: Path
    out: Path
    stderr: str
    returncode: int
    pid: int  # of the ``ggtts`` process

    def copy(self, to: Path) -> Job:
        """The job's folder copied (modification times kept): a test may change it without touching others."""
        shutil.copytree(self.root, to)
        return Job(to, to / self.input.name, to / self.out.name, self.stderr, self.returncode, self.pid)


def _start(root: Path, source: str, model: TinyModel, *more: str) -> subprocess.Popen[str]:
    """The command with its progress report on: standard error is a pipe here, so lines, not a bar."""
    return subprocess.Popen(
        [str(GGTTS), "batch", source, "--out", "out", "-m", str(model.path), *more],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def text_job(tmp_path_factory: pytest.TempPathFactory, tiny_model: TinyModel) -> Job:
    """Six lines of a text file spoken into ``out/`` by two worker processes:
    ``ggtts batch in.txt --out out -m tiny.gguf --workers 2 --threads 1``, its progress report on and its standard
    error a pipe, as a log file is (the re-runs use one, in-process, with ``--no-progress``)."""
    root = tmp_path_factory.mktemp("text-job")
    source = root / "in.txt"
    source.write_text("\n".join(TEXT_LINES) + "\n", encoding="utf-8")
    process = _start(root, source.name, tiny_model, "--workers", "2", "--threads", "1")
    _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    return Job(root, source, root / "out", stderr, process.returncode, process.pid)


def _rerun(job: Job, model: TinyModel, *more: str) -> subprocess.CompletedProcess[str]:
    return run_batch_cli(job.input.name, "--out", job.out.name, "-m", model.path, *more, cwd=job.root)


def _one_done_record_each(out: Path, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Every id has exactly one ``done`` record in the whole manifest, its file whole; nothing else is done."""
    done = done_records(out)
    counts = Counter(r["id"] for r in done)
    assert sorted(counts) == sorted(ids)
    assert [i for i, n in counts.items() if n != 1] == []
    for record in done:
        check_recorded_file(out, record)
    return {r["id"]: r for r in done}


# ---- a text file, then re-runs ---------------------------------------------------------------------------------
def test_text_file_job_writes_every_item(text_job: Job, tiny_model: TinyModel) -> None:
    assert text_job.returncode == 0, text_job.stderr
    assert "6 done, 0 failed this run; 0 done before" in text_job.stderr
    records = manifest_records(text_job.out)
    assert sorted(r["id"] for r in records) == IDS  # one record per item (two workers: in any order)
    assert {r["status"] for r in records} == {"done"}
    assert len({r["key"] for r in records}) == len(IDS)
    for record in records:
        check_recorded_file(text_job.out, record)
        info = sf.info(text_job.out / record["output"])
        assert record["output"] == f"{record['id']}.wav"
        assert (info.samplerate, info.channels, info.subtype) == (tiny_model.sample_rate, 1, "PCM_16")
        assert info.frames > 0
        assert record["sample_rate"] == tiny_model.sample_rate
        assert record["audio_seconds"] == pytest.approx(info.frames / info.samplerate, abs=0.001)
        samples, _ = sf.read(text_job.out / record["output"], dtype="float32")
        assert np.isfinite(samples).all() and np.abs(samples).max() > 0
    files = sorted(p.relative_to(text_job.out).as_posix() for p in text_job.out.rglob("*") if p.is_file())
    assert files == [".ggtts-batch.lock", *(f"{i}.wav" for i in IDS), "manifest.jsonl"]


def test_two_worker_processes_share_the_items(text_job: Job) -> None:
    """``--workers 2``: the items were spoken in two worker processes, not in the command's own."""
    assert text_job.returncode == 0, text_job.stderr
    pids = {int(r["worker"].rpartition(":")[2]) for r in manifest_records(text_job.out)}
    assert len(pids) == 2, pids
    assert text_job.pid not in pids and os.getpid() not in pids


def test_rerun_does_nothing(text_job: Job, tiny_model: TinyModel, tmp_path: Path) -> None:
    job = text_job.copy(tmp_path / "job")
    stale = job.out / ".0003.wav.k2j3h4.part"  # a killed run's temporary file
    stale.write_bytes(b"half a file")
    before, manifest = mtimes(job.out), (job.out / "manifest.jsonl").read_bytes()
    result = _rerun(job, tiny_model)
    assert result.returncode == 0, result.stderr
    assert "0 done, 0 failed this run; 6 done before" in result.stderr
    assert mtimes(job.out) == before  # nothing rewritten
    assert (job.out / "manifest.jsonl").read_bytes() == manifest  # nothing recorded
    assert not stale.exists()


def _flip_a_sample_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x55  # the last sample: the file is still a valid WAV of the same size
    path.write_bytes(bytes(data))


def test_changed_deleted_and_corrupted_items_are_redone(text_job: Job, tiny_model: TinyModel, tmp_path: Path) -> None:
    job = text_job.copy(tmp_path / "job")
    old = {r["id"]: r for r in manifest_records(job.out)}
    lines = list(TEXT_LINES)
    lines[1] = "The second line, changed."
    job.input.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (job.out / "0004.wav").unlink()
    corrupted = job.out / "0005.wav"
    size = corrupted.stat().st_size
    _flip_a_sample_byte(corrupted)
    assert corrupted.stat().st_size == size
    untouched = {k: v for k, v in mtimes(job.out).items() if k in ("0001.wav", "0003.wav", "0006.wav")}
    manifest = (job.out / "manifest.jsonl").read_bytes()

    result = _rerun(job, tiny_model)
    assert result.returncode == 0, result.stderr
    assert "3 done, 0 failed this run; 3 done before" in result.stderr
    assert (job.out / "manifest.jsonl").read_bytes().startswith(manifest)  # appended to, never rewritten
    new = manifest_records(job.out)[len(IDS) :]
    assert sorted(r["id"] for r in new) == ["0002", "0004", "0005"]
    assert {r["status"] for r in new} == {"done"}
    by_id = {r["id"]: r for r in new}
    assert by_id["0002"]["key"] != old["0002"]["key"]  # a new request
    assert by_id["0004"]["key"] == old["0004"]["key"] and by_id["0005"]["key"] == old["0005"]["key"]
    for record in new:
        check_recorded_file(job.out, record)
    assert {k: v for k, v in mtimes(job.out).items() if k in untouched} == untouched


# ---- --join ----------------------------------------------------------------------------------------------------
def _parse_ffmetadata(text: str) -> list[dict[str, str]]:
    """The [CHAPTER] sections of an ffmetadata file, keys and values unescaped (a backslash takes the next
    character as it is: '=', ';', '#', '\\' or a newline)."""
    header, _, body = text.partition("\n")
    assert header == ";FFMETADATA1"
    sections: list[dict[str, str]] = []
    key, value, in_value, i = "", "", False, 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            if in_value:
                value += body[i + 1]
            else:
                key += body[i + 1]
            i += 2
            continue
        i += 1
        if ch == "\n":
            if in_value:
                sections[-1][key] = value
            elif key == "[CHAPTER]":
                sections.append({})
            else:
                assert key == "", f"a line that is neither a section nor KEY=VALUE: {key!r}"
            key, value, in_value = "", "", False
        elif ch == "=" and not in_value:
            in_value = True
        elif in_value:
            value += ch
        else:
            key += ch
    assert (key, in_value) == ("", False), "the last line has no newline"
    return sections


def test_join_writes_the_items_in_order_with_pauses(text_job: Job, tiny_model: TinyModel, tmp_path: Path) -> None:
    job = text_job.copy(tmp_path / "job")
    result = _rerun(job, tiny_model, "--join", "book.wav", "--pause", "0.25")
    assert result.returncode == 0, result.stderr
    assert "joined 6 items into book.wav" in result.stderr
    rate = tiny_model.sample_rate
    pause = round(0.25 * rate)
    items = [sf.read(job.out / f"{i}.wav", dtype="int16")[0] for i in IDS]
    book, book_rate = sf.read(job.root / "book.wav", dtype="int16")
    assert book_rate == rate
    assert len(book) == sum(len(s) for s in items) + pause * (len(items) - 1)

    doc = json.loads((job.root / "book.chapters.json").read_text(encoding="utf-8"))
    assert doc["audio"] == "book.wav"
    chapters = doc["chapters"]
    assert [(c["id"], c["title"]) for c in chapters] == list(zip(IDS, TEXT_LINES, strict=True))
    position = 0
    for n, (chapter, samples) in enumerate(zip(chapters, items, strict=True)):
        if n:
            assert not book[position : position + pause].any()  # the pause is silence
            position += pause
        assert chapter["start"] == pytest.approx(position / rate, abs=1e-9)
        assert chapter["end"] == pytest.approx((position + len(samples)) / rate, abs=1e-9)
        segment = book[position : position + len(samples)].astype(np.int32)
        assert np.abs(segment - samples.astype(np.int32)).max() <= 1  # the item itself, in its place
        position += len(samples)
    assert position == len(book)

    text = (job.root / "book.ffmetadata").read_text(encoding="utf-8")
    assert "title=Second line \\= two\\; here." in text and "title=Number \\#3 comes next." in text
    assert "title=A back\\\\slash is four." in text
    sections = _parse_ffmetadata(text)
    assert [s["title"] for s in sections] == TEXT_LINES
    for section, chapter in zip(sections, chapters, strict=True):
        assert section["TIMEBASE"] == "1/1000"
        assert int(section["START"]) == round(chapter["start"] * 1000)
        assert int(section["END"]) == round(chapter["end"] * 1000)
    assert all(int(a["END"]) <= int(b["START"]) for a, b in itertools.pairwise(sections))


def test_a_model_converted_again_is_spoken_again(tiny_model: TinyModel, tmp_path: Path) -> None:
    """The model file changed under the same path (written again: a new modification time): its items are spoken
    again; unchanged, they are skipped."""
    model = tmp_path / "m.gguf"
    shutil.copy2(tiny_model.path, model)
    (tmp_path / "in.txt").write_text("One.\nTwo.\n", encoding="utf-8")
    first = run_batch_cli("in.txt", "--out", "out", "-m", model, cwd=tmp_path)
    assert first.returncode == 0 and "2 done, 0 failed this run" in first.stderr, first.stderr
    same = run_batch_cli("in.txt", "--out", "out", "-m", model, cwd=tmp_path)
    assert "0 done, 0 failed this run; 2 done before" in same.stderr, same.stderr
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    again = run_batch_cli("in.txt", "--out", "out", "-m", model, cwd=tmp_path)
    assert again.returncode == 0 and "2 done, 0 failed this run; 0 done before" in again.stderr, again.stderr
    assert "spoken again as their model or voice file has changed since: 2 items" in again.stderr
    retried = run_batch_cli("in.txt", "--out", "out", "-m", model, "--retry-failed", cwd=tmp_path)
    assert "0 done" in retried.stderr and "spoken again" not in retried.stderr, retried.stderr


def test_an_item_gives_its_own_family_options(tiny_model: TinyModel, tmp_path: Path) -> None:
    """JSONL's "options": the item's model's family options, over the job's; one its family does not take fails
    that item alone."""
    items = [
        {"id": "plain", "text": "Hello there."},
        {"id": "seeded", "text": "Hello there.", "options": {"seed": 7}},
        {"id": "job-seed", "text": "Hello there.", "options": {"seed": 3}},
        {"id": "bad", "text": "Hello.", "options": {"nope": 1}},
    ]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    result = run_batch_cli("in.jsonl", "--out", "out", "-m", tiny_model.path, "--seed", "3", cwd=tmp_path)
    assert result.returncode == 1 and "3 done, 1 failed this run" in result.stderr, result.stderr
    records = {r["id"]: r for r in manifest_records(tmp_path / "out")}
    assert "unknown option 'nope'" in records["bad"]["error"]
    assert records["seeded"]["sha256"] != records["plain"]["sha256"] == records["job-seed"]["sha256"]


def test_a_join_inside_the_new_out_folder(tiny_model: TinyModel, tmp_path: Path) -> None:
    """--join into --out on a first run: the job makes that folder, so the join's check does not refuse it."""
    (tmp_path / "in.txt").write_text("One.\nTwo.\n", encoding="utf-8")
    result = run_batch_cli("in.txt", "--out", "out", "-m", tiny_model.path, "--join", "out/book.wav", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sf.info(str(tmp_path / "out" / "book.wav")).frames > 0


def test_a_join_naming_an_items_own_file_is_refused(text_job: Job, tiny_model: TinyModel, tmp_path: Path) -> None:
    job = text_job.copy(tmp_path / "job")
    before = (job.out / "0001.wav").read_bytes()
    result = _rerun(job, tiny_model, "--join", "out/0001.wav")
    assert result.returncode == 1 and "--join out/0001.wav is item '0001''s own file" in result.stderr
    assert (job.out / "0001.wav").read_bytes() == before


def test_a_join_killed_outright_leaves_nothing_after_the_next(
    text_job: Job, tiny_model: TinyModel, tmp_path: Path
) -> None:
    """kill -9 during a join leaves its temporary files beside the join (outside --out); the next join removes
    them, and only them."""
    job = text_job.copy(tmp_path / "job")
    left = [".book.wav.x1y2.part", ".book.chapters.json.ab.part", ".book.ffmetadata.c_d.part"]
    other = [".other.wav.x1y2.part", "book.wav.notes"]
    for name in left + other:
        (job.root / name).write_bytes(b"x")
    result = _rerun(job, tiny_model, "--join", "book.wav")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in job.root.iterdir() if p.name.startswith(".") or p.name.endswith(".notes")) == sorted(
        other
    )


def test_sigterm_interrupts_as_ctrl_c_does() -> None:
    """What the join runs inside (batch/cli.py): SIGTERM raises KeyboardInterrupt there, as Ctrl-C does (which
    atomic_output answers by removing its temporary file, and the command by exit 130), instead of the default
    action ending the process at once; the handler before it is put back."""
    from ggtts.runtime.lifetime import signals_interrupt

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a command starts (the suite's may differ)
    try:
        with pytest.raises(KeyboardInterrupt), signals_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # (never reached: the handler raises at once)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_full_disk_is_one_error(tiny_model: TinyModel, tmp_path: Path) -> None:
    """Files limited to 2 KB, as a disk that fills: each item's audio fails (recorded), then the manifest's own
    write fails. One line naming the manifest, exit 1; no internal error, no half line left in the manifest."""
    import resource

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    (tmp_path / "in.txt").write_text("".join(f"Line {n}.\n" for n in range(40)), encoding="utf-8")
    command = batch_command("in.txt", "--out", "out", "-m", tiny_model.path)
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=RUN_TIMEOUT_S,
                            preexec_fn=full_disk, check=False)  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert "cannot write the manifest (File too large)" in lines[-1] and "internal error" not in result.stderr, lines
    records = manifest_records(tmp_path / "out")  # every line whole JSON
    assert records and all(r["status"] == "failed" for r in records)


# ---- items that fail -------------------------------------------------------------------------------------------
JSONL_ITEMS = [
    {"id": "good1", "text": "Hello."},
    {"id": "empty", "text": "   "},
    {"id": "good2", "text": "Bye now.", "voice": "v_two"},
    {"id": "nobody", "text": "Hi.", "voice": "nobody"},
    {"id": "good3", "text": "Third.", "speed": 1.5},
]


def test_failed_items_are_recorded_and_the_job_goes_on(tiny_model: TinyModel, tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in JSONL_ITEMS), encoding="utf-8")

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return run_batch_cli(source.name, "--out", "out", "-m", tiny_model.path, *more, cwd=tmp_path)

    first = run("--join", "book.wav")
    out = tmp_path / "out"
    assert first.returncode == 1, first.stderr
    assert "3 done, 2 failed this run" in first.stderr
    records = {r["id"]: r for r in manifest_records(out)}
    assert sorted(records) == sorted(item["id"] for item in JSONL_ITEMS)
    assert {i for i, r in records.items() if r["status"] == "done"} == {"good1", "good2", "good3"}
    assert records["empty"]["status"] == "failed" and "empty" in records["empty"]["error"]
    assert records["nobody"]["status"] == "failed" and "unknown voice 'nobody'" in records["nobody"]["error"]
    for item_id in ("good1", "good2", "good3"):
        check_recorded_file(out, records[item_id])
    assert not (out / "empty.wav").exists() and not (out / "nobody.wav").exists()
    assert "not joined: book.wav needs every item" in first.stderr
    assert not list(tmp_path.glob("book*"))

    manifest, before = (out / "manifest.jsonl").read_bytes(), mtimes(out)
    again = run()
    assert again.returncode == 1, again.stderr
    assert "0 done, 0 failed this run; 3 done before, 2 failed before (--retry-failed" in again.stderr
    assert (out / "manifest.jsonl").read_bytes() == manifest

    retry = run("--retry-failed")
    assert retry.returncode == 1, retry.stderr
    assert "0 done, 2 failed this run; 3 done before" in retry.stderr
    assert (out / "manifest.jsonl").read_bytes().startswith(manifest)
    new = manifest_records(out)[len(JSONL_ITEMS) :]
    assert sorted((r["id"], r["status"]) for r in new) == [("empty", "failed"), ("nobody", "failed")]
    assert mtimes(out) == before


# ---- job-wide mistakes: one line, no work ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["-v", "nobody"], "unknown voice 'nobody'", id="unknown-voice"),
        pytest.param(["-m", "missing.gguf"], "missing.gguf", id="missing-model"),
        pytest.param(["-m", "in.txt"], "not a GGUF file", id="model-not-gguf"),
        pytest.param(["--float", "--format", "flac"], "--float applies to WAV only", id="float-flac"),
        pytest.param(["--join", "book.xyz"], "unsupported audio format '.xyz'", id="join-format"),
        pytest.param(["--join", "book.wav", "--pause", "-1"], "the pause must be 0 to 60 seconds", id="pause-negative"),
        pytest.param(["--join", "book.wav", "--pause", "nan"], "the pause must be 0 to 60 seconds", id="pause-nan"),
        pytest.param(["--pause", "0.2"], "--pause is the silence between items in --join's file", id="pause-no-join"),
        pytest.param(["--workers", "0"], "workers must be a whole number of at least 1, got 0", id="no-workers"),
        pytest.param(["--threads", "0"], "threads must be a whole number of at least 1, got 0", id="no-threads"),
        pytest.param(["--input", "bad.jsonl"], "bad.jsonl:2: not a JSON object", id="bad-input-line"),
        pytest.param(["--parallel", "2"], "kokoro has no load option 'parallel'", id="load-option-of-another-family"),
        pytest.param(["--device", "cuda:99"], "device cuda:99 asked for", id="device-not-here"),
        pytest.param(["--lang", "fr"], "unknown language code 'fr' for kokoro", id="lang-of-another-family"),
    ],
)
def test_job_wide_errors(tiny_model: TinyModel, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "in.txt").write_text("One.\nTwo.\n", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": oops}\n', encoding="utf-8")
    source = "in.txt"
    if args[0] == "--input":
        source, args = args[1], []
    model = [] if "-m" in args else ["-m", str(tiny_model.path)]
    result = run_batch_cli(source, "--out", "out", *model, *args, cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ggtts: "), result.stderr
    assert message in lines[0]
    assert not (tmp_path / "out" / "manifest.jsonl").exists()
    assert not list(tmp_path.rglob("*.wav"))


def test_a_second_job_on_the_same_folder_is_refused(text_job: Job, tiny_model: TinyModel, tmp_path: Path) -> None:
    job = text_job.copy(tmp_path / "job")
    manifest = (job.out / "manifest.jsonl").read_bytes()
    (job.out / "0001.wav").unlink()  # work to do, were the folder free
    with job_lock(job.out):  # another job holds the folder (a separate open file description of the lock)
        result = _rerun(job, tiny_model)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"ggtts: error: {job.out.name}: another ggtts batch job is writing to this folder"
    ]
    assert (job.out / "manifest.jsonl").read_bytes() == manifest
    assert not (job.out / "0001.wav").exists()


# ---- interrupted jobs ------------------------------------------------------------------------------------------
FAULTS = str(Path(__file__).parent / "fault_injection")  # see fault_injection/sitecustomize.py
RESUME_ITEMS = 12


def _start_paused(
    root: Path, model: TinyModel, item_id: str, stderr: Path, *more: str
) -> tuple[subprocess.Popen[str], Path]:
    """The job, which pauses when it starts speaking ``item_id`` (the item in progress) until released."""
    pause = root / f"pause-{item_id}"
    pause.mkdir()
    env = {**os.environ, "PYTHONPATH": FAULTS, "GGTTS_TEST_PAUSE_ON_ITEM": item_id, "GGTTS_TEST_PAUSE_DIR": str(pause)}
    with stderr.open("w", encoding="utf-8") as err:
        process = subprocess.Popen(
            batch_command("in.txt", "--out", "out", "-m", model.path, *more),
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
    wait_for(lambda: (pause / "reached").exists(), f"item {item_id} started", process=process)
    return process, pause


def _end(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=RUN_TIMEOUT_S)


def test_resume_after_a_kill_and_after_ctrl_c(tiny_model: TinyModel, tmp_path: Path) -> None:
    """One job, three runs: SIGKILL while item 4 is in progress; the same command, Ctrl-C (SIGINT) while item 8 is
    in progress, which is finished and is the last; the same command to the end. The job is held at those items
    (fault_injection's pause), so the points are counts of items, not moments. Every item ends with exactly one
    done record in the whole manifest and one whole file; nothing is spoken twice."""
    lines = [f"Line {n}, said once." for n in range(RESUME_ITEMS)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    total = len(lines)
    ids = [f"{n:04d}" for n in range(1, total + 1)]
    out = tmp_path / "out"

    # run 1: killed while speaking item 4, items 1-3 done
    process, _ = _start_paused(tmp_path, tiny_model, ids[3], tmp_path / "run1.err")
    try:
        assert count_done_lines(out) == 3
        process.send_signal(signal.SIGKILL)
    finally:
        _end(process)
    assert process.returncode == -signal.SIGKILL, (tmp_path / "run1.err").read_text()
    first = done_records(out)
    assert [r["id"] for r in first] == ids[:3]
    assert part_files(out) == []

    # run 2: resumes (run 1's items are skipped, not spoken again); Ctrl-C while item 8 is in progress
    err = tmp_path / "run2.err"
    process, pause = _start_paused(tmp_path, tiny_model, ids[7], err)
    try:
        at_signal = count_done_lines(out)
        assert at_signal == 7
        process.send_signal(signal.SIGINT)
        wait_for(lambda: "stopping after the items in progress" in err.read_text(), "the stop was announced")
        (pause / "release").touch()
        process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        _end(process)
    stderr = err.read_text()
    assert process.returncode == 130, stderr
    text = (out / "manifest.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n")  # the last line is whole
    done = done_records(out)  # every line parses
    assert [r["id"] for r in done] == ids[:8], "not stopped right after the item in progress"
    assert all(r in done for r in first)
    assert f"{len(done) - len(first)} done, 0 failed this run; {len(first)} done before" in stderr
    assert f"stopped with {total - len(done)} items to go" in stderr
    for record in done:
        check_recorded_file(out, record)
    assert sorted(p.name for p in out.glob("*.wav")) == sorted(r["output"] for r in done)
    assert part_files(out) == []

    # run 3: the rest
    last = run_batch_cli("in.txt", "--out", "out", "-m", tiny_model.path, cwd=tmp_path)
    assert last.returncode == 0, last.stderr
    assert f"{total - len(done)} done, 0 failed this run; {len(done)} done before" in last.stderr
    final = _one_done_record_each(out, ids)
    assert all(final[r["id"]] == r for r in done)  # the records of runs 1 and 2 stand
    assert sorted(p.name for p in out.glob("*.wav")) == [f"{i}.wav" for i in ids]
    assert part_files(out) == []
    assert len(manifest_lines(out)) == len(manifest_records(out))


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux's /proc)."""
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which its new parent has yet to reap, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_workers_end_when_their_parent_is_killed(tiny_model: TinyModel, tmp_path: Path) -> None:
    """``kill -9`` of ``ggtts batch --workers 2`` while one worker is held inside item 3: both worker processes
    end on their own (nothing else would end them: the held one waits for its release, the other for its next
    item on a queue whose pipe it holds open itself)."""
    (tmp_path / "in.txt").write_text("\n".join(f"Line {n}." for n in range(RESUME_ITEMS)) + "\n", encoding="utf-8")
    process, _ = _start_paused(tmp_path, tiny_model, "0003", tmp_path / "err", "--workers", "2", "--threads", "1")
    workers: list[int] = []
    try:
        spawned = [p for p in _children(process.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        workers = [p for p in _children(process.pid) if _alive(p)]  # the workers and multiprocessing's tracker
        assert len(spawned) == 2, (spawned, workers)
        process.send_signal(signal.SIGKILL)
        _end(process)
        wait_for(lambda: not any(map(_alive, workers)), "the workers' exit after their parent's", limit_s=60)
    finally:
        _end(process)
        for pid in filter(_alive, workers):  # a failed run leaves no orphan behind either
            os.kill(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


# Ray's node agents: once the raylet is gone they try to report its death to the GCS, gone too, for the 60 s of
# Ray's fixed timeout before they exit; they hold no model. Everything else must end with the driver.
RAY_NODE_AGENTS = (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")


def test_a_ray_job_ends_with_its_driver(tiny_model: TinyModel, tmp_path: Path) -> None:
    """``kill -9`` of ``ggtts batch --ray local`` while its actor is held inside item 3: the local cluster it
    started ends too (its GCS, raylet, workers and the actor holding the model), as Ray ties them to the driver."""
    pytest.importorskip("ray")
    (tmp_path / "in.txt").write_text("\n".join(f"Line {n}." for n in range(RESUME_ITEMS)) + "\n", encoding="utf-8")
    process, _ = _start_paused(tmp_path, tiny_model, "0003", tmp_path / "err", "--ray", "local", "--workers", "1")
    cluster: list[int] = []
    try:
        cluster = [p for p in _descendants(process.pid) if _alive(p)]
        names = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in cluster}
        held = [p for p in cluster if not names[p].startswith(RAY_NODE_AGENTS)]
        assert len(held) >= 3, names  # at least the GCS, the raylet and the actor's worker
        process.send_signal(signal.SIGKILL)
        _end(process)
        wait_for(lambda: not any(map(_alive, held)), "the Ray cluster's exit after its driver's", limit_s=60)
    finally:
        _end(process)
        for pid in filter(_alive, cluster):  # the node agents, and all of it after a failure
            os.kill(pid, signal.SIGKILL)


def test_progress_lines_where_stderr_is_a_log_file(text_job: Job) -> None:
    """No terminal, no bar: a line for the first item and one for the last, so a log shows the job moving (the text
    job's own run, whose standard error is a pipe)."""
    assert text_job.returncode == 0, text_job.stderr
    lines = [line for line in text_job.stderr.splitlines() if " items, " in line]
    assert lines[0].startswith("ggtts: 1/6 items, ") and lines[-1].startswith("ggtts: 6/6 items, ")
    assert "\r" not in text_job.stderr  # no bar
