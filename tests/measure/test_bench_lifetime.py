"""``ggtts bench`` ended from outside while its worker process is inside its work: the worker ends too, and the
temporary folders (the run's, an engine's scratch files) are gone, whatever ended the benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from time_limit import scaled, wait_for

PAUSE_HOOK = str(Path(__file__).parent / "bench_pause")  # see bench_pause/sitecustomize.py
END_LIMIT_S = 60  # a hang, not a timing: the worker polls for its parent twice a second
# ``ggtts bench`` with the real frontend's place taken by one chunk per text (the tiny model's vocabulary is letters)
DRIVER = """
import sys
from ggtts.measure.kokoro import bench
bench.phoneme_chunks = lambda text, language, max_phonemes, vocab=(): ["hi."]
from ggtts.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which its new parent has yet to reap, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _default_signals() -> None:  # pragma: no cover - runs in the child before exec
    """The benchmark starts as from a terminal, whatever this test run ignores (a background job ignores SIGINT)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.parametrize(
    "stop",
    [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL],
    ids=["SIGTERM", "SIGINT", "SIGHUP", "SIGKILL"],
)
def test_the_worker_and_the_temporary_folders_end_with_bench(
    stop: signal.Signals, tiny_gguf: Path, tmp_path: Path
) -> None:
    """SIGTERM (a kill, a timeout), SIGINT (Ctrl-C) and SIGHUP (a closed terminal) end the benchmark as an interruption:
    it stops its worker and removes its folders. After SIGKILL nothing in the benchmark runs: the worker notices its
    parent is gone, removes the run's folder and ends."""
    pause, temp = tmp_path / "pause", tmp_path / "tmp"
    pause.mkdir()
    temp.mkdir()
    paths = [PAUSE_HOOK, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "GGTTS_TEST_BENCH_PAUSE_DIR": str(pause),
        "TMPDIR": str(temp),
    }
    command = [sys.executable, "-c", DRIVER, "bench", "-m", str(tiny_gguf), "--against", "none", "--text", "Hi."]
    worker = None
    with (tmp_path / "err").open("w", encoding="utf-8") as err:
        process = subprocess.Popen(
            [*command, "--runs", "1"], env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_default_signals
        )
    try:
        wait_for(lambda: (pause / "reached").exists(), "the worker's start", process=process)
        worker = int((pause / "reached").read_text())
        assert any(p.name.startswith("ggtts-bench-") for p in temp.iterdir())  # the run's folder (the engine's in it)
        process.send_signal(stop)
        process.wait(timeout=scaled(END_LIMIT_S))
        wait_for(lambda: not _alive(worker), "the worker's exit after its parent's", limit_s=END_LIMIT_S)
        wait_for(lambda: not any(temp.iterdir()), "the temporary folders' removal", limit_s=END_LIMIT_S)
        if stop != signal.SIGKILL:
            assert process.returncode == 130
            assert (tmp_path / "err").read_text().splitlines()[-1] == "ggtts: error: interrupted"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if worker is not None and _alive(worker):  # a failed run leaves no orphan behind either
            os.kill(worker, signal.SIGKILL)
