"""One engine's timings, in a process of its own so that its peak memory is its own.

Run as ``python -m ggtts.measure.kokoro.bench_worker FOLDER PARENT_PID`` by :mod:`ggtts.measure.kokoro.bench`.
``FOLDER`` is the run's, made and removed by the parent: it holds ``spec.json`` (the engine, the GGUF file, the
voice, the phoneme chunks of the text and of each batch item, the number of warm-up and measured runs), gets
``result.json`` (the seconds of every run and the peak resident memory), and the files an engine needs while it
runs (the ONNX peer's model copy) go in it too, so that nothing outlives the run. The worker ends with its parent
(``PARENT_PID``), however the parent ends: after a ``kill -9`` of the parent it removes the folder itself. Ctrl-C
is the parent's to handle (it stops the worker).
"""

from __future__ import annotations

import json
import resource
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.measure.kokoro.peers import ENGINES, Synthesize, version
from ggtts.runtime.lifetime import exit_with

KIB_PER_MIB = 1024  # Linux reports ru_maxrss in KiB
SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class Spec:
    peer: str
    model: str  # GGUF path
    voice: str
    sample_rate: int
    chunks: list[str]  # phoneme chunks of the benchmark text, in order
    batch: list[list[str]]  # phoneme chunks of each text of the throughput batch
    runs: int
    warmup: int

    @classmethod
    def load(cls, path: str | Path) -> Spec:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), ensure_ascii=False), encoding="utf-8")


@dataclass(frozen=True)
class Run:
    ttfa_s: float  # start to the first chunk's audio
    total_s: float  # start to the last chunk's audio
    audio_s: float
    batch_s: float  # the whole batch, one text after the other
    batch_audio_s: float


def time_text(synthesize: Synthesize, chunks: list[str], sample_rate: int) -> tuple[float, float, float]:
    """-> (time to first audio, total time, seconds of audio) for the chunks, synthesized in order.

    The time to first audio is when the engine hands over its first piece of audio (streaming)."""
    samples = 0
    ttfa = None
    start = time.perf_counter()
    for index, chunk in enumerate(chunks):
        for piece in synthesize(chunk, index == 0):
            samples += len(piece)
            if ttfa is None:
                ttfa = time.perf_counter() - start
    total = time.perf_counter() - start
    return (total if ttfa is None else ttfa), total, samples / sample_rate


def measure(spec: Spec, scratch: Path | None = None) -> dict[str, Any]:
    """``spec``'s runs; an engine that needs files while it runs puts them in ``scratch``."""
    start = time.perf_counter()
    with ENGINES[spec.peer](spec.model, spec.voice, scratch=scratch) as synthesize:
        load_s = time.perf_counter() - start
        for _ in range(spec.warmup):
            time_text(synthesize, spec.chunks, spec.sample_rate)
        runs = []
        for _ in range(spec.runs):
            ttfa, total, audio = time_text(synthesize, spec.chunks, spec.sample_rate)
            batch_start = time.perf_counter()
            batch_audio = sum(time_text(synthesize, item, spec.sample_rate)[2] for item in spec.batch)
            batch_s = time.perf_counter() - batch_start
            runs.append(Run(ttfa, total, audio, batch_s, batch_audio))
    return {
        "peer": spec.peer,
        "version": version(spec.peer),
        "load_s": load_s,
        "threads": torch.get_num_threads(),
        "runs": [asdict(r) for r in runs],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / KIB_PER_MIB,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m ggtts.measure.kokoro.bench_worker FOLDER PARENT_PID", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    exit_with(int(argv[1]), lambda: shutil.rmtree(folder, ignore_errors=True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent decides
    result = measure(Spec.load(folder / SPEC_FILE), scratch=folder)
    (folder / RESULT_FILE).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    from ggtts.errors import GGTTSError

    try:
        sys.exit(main(sys.argv[1:]))
    except GGTTSError as e:
        print(f"ggtts bench: error: {e}", file=sys.stderr)
        sys.exit(1)
