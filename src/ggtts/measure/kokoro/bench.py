"""Kokoro's ``ggtts bench``: speed and memory of ggtts side by side with the installed peers, on the same work.

The text is turned into phoneme chunks once, by ggtts's own frontend, and every engine synthesizes those
chunks in order with the same voicepack (see :mod:`ggtts.measure.kokoro.peers`): ggtts, ``onnx`` (kokoro-onnx on the
int8 ONNX file the default model is built from: with the default model only) and ``reference`` (hexgrad's KModel in
torch with the GGUF's weights). A peer that cannot run this comparison (another model's weights, packages not
installed) is left out, with a note saying why; one that runs and fails makes the exit status 1. Each engine runs in
its own process (:mod:`ggtts.measure.kokoro.bench_worker`), so peak memory is per engine, and is timed over
``--runs`` runs after one warm-up:

- RTF: seconds of computing per second of audio, for the whole text;
- time to first audio: until the first chunk's audio is ready (what a streaming client waits);
- throughput: seconds of audio per second over a batch of short texts synthesized one after the other;
- peak memory: the process's maximum resident set, loading included.

Timings are reported as the median with the spread (min-max) over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from ggtts.errors import GGTTSError
from ggtts.fsutil import atomic_output
from ggtts.measure.kokoro.bench_worker import RESULT_FILE, SPEC_FILE, Spec
from ggtts.measure.kokoro.peers import LABELS, PEERS, left_out
from ggtts.measure.sentences import BENCH_BATCH, BENCH_PARAGRAPH

WARMUP_RUNS = 1
WORKER_TIMEOUT_S = 3600
ERROR_TAIL_CHARS = 2000  # of a failed worker's output, shown with the error
NO_PEERS = ("", "none")


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


# ---- inputs ------------------------------------------------------------------------------------------------
DEFAULT_PEERS = "onnx,reference"  # those run where they can when --against is not given


def parse_peers(against: str | None) -> list[str]:
    """``--against`` ("onnx,reference", "none") -> the engines to run, ggtts first."""
    names = [] if against is None or against.strip().lower() in NO_PEERS else against.split(",")
    peers = ["ggtts"]
    for name in (n.strip() for n in names):
        if name not in PEERS or name == "ggtts":
            others = ", ".join(p for p in PEERS if p != "ggtts")
            raise GGTTSError(f"unknown peer '{name}' in --against; choose from {others}, or 'none'")
        if name not in peers:
            peers.append(name)
    return peers


def phoneme_chunks(text: str, language: str, max_phonemes: int, vocab: Iterable[str] = ()) -> list[str]:
    """The phoneme chunks ggtts itself would synthesize for ``text``, each within the model's limit."""
    try:
        from ggtts.text import text_to_phoneme_chunks
    except ImportError:
        raise GGTTSError("benchmarking needs ggtts's text frontend (ggtts.text), which is missing") from None
    known = set(vocab) or None
    chunks = [c.phonemes for c in text_to_phoneme_chunks(text, language, max_phonemes, vocab=known)]
    if not chunks:
        raise GGTTSError(f"the text {text[:40]!r} gave no phonemes")
    return chunks


# ---- running the workers -----------------------------------------------------------------------------------
def run_worker(spec: Spec) -> dict[str, Any]:
    """Time one engine in a fresh Python process; a failure becomes ``{"error": ...}``.

    The worker's files (the spec, its result, an engine's scratch files) are in one temporary folder, removed on
    the way out, an interruption included (Ctrl-C, and SIGTERM or SIGHUP through :func:`ggtts.measure.bench.run`):
    ``subprocess.run`` kills the worker on any exception first. A ``kill -9`` of this process cannot remove
    anything: the worker, which ends with its parent, removes the folder then."""
    with tempfile.TemporaryDirectory(prefix="ggtts-bench-") as tmp:
        result_path = Path(tmp) / RESULT_FILE
        spec.save(Path(tmp) / SPEC_FILE)
        cmd = [sys.executable, "-m", "ggtts.measure.kokoro.bench_worker", tmp, str(os.getpid())]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
        if proc.returncode != 0 or not result_path.exists():
            tail = (proc.stderr or proc.stdout or "").strip()[-ERROR_TAIL_CHARS:]
            last = tail.splitlines()[-1] if tail else f"exit status {proc.returncode}"
            return {"error": last, "output": tail}
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        return result


def summarize(result: dict[str, Any], batch_items: int) -> dict[str, Any]:
    """One worker's raw runs -> medians and spreads."""
    if "error" in result:
        return result
    runs = result["runs"]
    return {
        "label": LABELS[result["peer"]],
        "version": result["version"],
        "threads": result["threads"],
        "load_s": result["load_s"],
        "audio_s": statistics.median(r["audio_s"] for r in runs),
        "rtf": asdict(Spread.of([r["total_s"] / r["audio_s"] for r in runs])),
        "ttfa_s": asdict(Spread.of([r["ttfa_s"] for r in runs])),
        "total_s": asdict(Spread.of([r["total_s"] for r in runs])),
        "throughput_x_realtime": asdict(Spread.of([r["batch_audio_s"] / r["batch_s"] for r in runs])),
        "batch_texts_per_s": statistics.median(batch_items / r["batch_s"] for r in runs),
        "peak_rss_mib": result["peak_rss_mib"],
        "runs": runs,
    }


def ratios(peers: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """ggtts's figure divided by each peer's: below 1 is better for RTF, first audio and memory."""
    ours = peers.get("ggtts", {})
    if "error" in ours or not ours:
        return {}
    out = {}
    for name, theirs in peers.items():
        if name == "ggtts" or "error" in theirs:
            continue
        out[name] = {
            "rtf": ours["rtf"]["median"] / theirs["rtf"]["median"],
            "ttfa": ours["ttfa_s"]["median"] / theirs["ttfa_s"]["median"],
            "peak_rss": ours["peak_rss_mib"] / theirs["peak_rss_mib"],
            "throughput": ours["throughput_x_realtime"]["median"] / theirs["throughput_x_realtime"]["median"],
        }
    return out


def benchmark(
    model_path: Path,
    text: str,
    peers: Iterable[str],
    runs: int,
    *,
    batch: Sequence[str] = BENCH_BATCH,
    warmup: int = WARMUP_RUNS,
    progress: bool = True,
) -> dict[str, Any]:
    from ggtts.families import family_for
    from ggtts.gguf import GGUFFile
    from ggtts.models.kokoro.config import KokoroConfig

    if runs < 1:
        raise GGTTSError(f"--runs must be at least 1, got {runs}")
    gguf = GGUFFile(model_path)
    config = KokoroConfig.from_gguf(gguf)
    voices = family_for(gguf).voices(gguf)
    voice = voices[0]
    start = time.perf_counter()
    chunks = phoneme_chunks(text, config.language, config.max_phonemes, config.vocab)
    frontend_s = time.perf_counter() - start
    batch_chunks = [phoneme_chunks(t, config.language, config.max_phonemes, config.vocab) for t in batch]
    left = {p: why for p in peers if p != "ggtts" and (why := left_out(p, model_path)) is not None}
    for peer, why in left.items():
        if progress:
            print(f"ggtts bench: {LABELS[peer]} left out: {why}", file=sys.stderr, flush=True)
    results: dict[str, dict[str, Any]] = {}
    for peer in (p for p in peers if p not in left):
        if progress:
            print(f"ggtts bench: timing {LABELS[peer]} ...", file=sys.stderr, flush=True)
        spec = Spec(peer, str(model_path), voice, config.sample_rate, chunks, batch_chunks, runs, warmup)
        results[peer] = summarize(run_worker(spec), len(batch))
        if progress and "error" in results[peer]:
            print(f"ggtts bench: {peer} failed: {results[peer]['error']}", file=sys.stderr, flush=True)
    return {
        "model": str(model_path),
        "text": text,
        "words": len(text.split()),
        "phonemes": sum(len(c) for c in chunks),
        "chunks": len(chunks),
        "voice": voice,
        "runs": runs,
        "warmup": warmup,
        "batch": list(batch),
        "frontend_s": frontend_s,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "peers": results,
        "left_out": left,
        "ratios": ratios(results),
    }


# ---- output ------------------------------------------------------------------------------------------------
def _spread(s: dict[str, float], fmt: str) -> str:
    return f"{s['median']:{fmt}} [{s['min']:{fmt}}-{s['max']:{fmt}}]"


def print_table(report: dict[str, Any], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    audio = next((p["audio_s"] for p in report["peers"].values() if "audio_s" in p), 0.0)
    print(
        f"text: {report['words']} words, {report['phonemes']} phonemes in {report['chunks']} chunk(s), "
        f"{audio:.1f} s of audio; voice {report['voice']}; median [min-max] of {report['runs']} run(s) "
        f"after {report['warmup']} warm-up; {report['machine']['cpus']} CPUs",
        file=out,
    )
    header = f"{'engine':<34}{'RTF':>22}{'first audio s':>22}{'throughput xRT':>16}{'peak MiB':>10}{'load s':>8}"
    print(header, file=out)
    for name, p in report["peers"].items():
        if "error" in p:
            print(f"{LABELS[name]:<34}  failed: {p['error']}", file=out)
            continue
        print(
            f"{p['label']:<34}{_spread(p['rtf'], '.3f'):>22}{_spread(p['ttfa_s'], '.2f'):>22}"
            f"{p['throughput_x_realtime']['median']:>16.2f}{p['peak_rss_mib']:>10.0f}{p['load_s']:>8.1f}",
            file=out,
        )
    for name, why in report.get("left_out", {}).items():
        print(f"{LABELS[name]:<34}  left out: {why}", file=out)
    for name, r in report["ratios"].items():
        print(
            f"ggtts / {name}: RTF {r['rtf']:.2f}x, first audio {r['ttfa']:.2f}x, "
            f"peak memory {r['peak_rss']:.2f}x "
            f"(below 1: ggtts better); throughput {r['throughput']:.2f}x (above 1: ggtts better)",
            file=out,
        )
    print(f"(text to phonemes, done once for all engines: {report['frontend_s']:.2f} s)", file=out)


def plot(report: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {n: p for n, p in report["peers"].items() if "error" not in p}
    if not ok:
        raise GGTTSError("no engine finished, nothing to plot")
    names = list(ok)
    panels = (
        ("RTF (lower is better)", "rtf"),
        ("time to first audio, s", "ttfa_s"),
        ("throughput, x real time", "throughput_x_realtime"),
    )
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.5))
    for ax, (title, key) in zip(axes, panels, strict=False):
        med = [ok[n][key]["median"] for n in names]
        err = [
            [m - ok[n][key]["min"] for n, m in zip(names, med, strict=True)],
            [ok[n][key]["max"] - m for n, m in zip(names, med, strict=True)],
        ]
        ax.bar(names, med, yerr=err, capsize=4, color="C0")
        ax.set_title(title)
    axes[-1].bar(names, [ok[n]["peak_rss_mib"] for n in names], color="C1")
    axes[-1].set_title("peak memory, MiB")
    fig.suptitle(f"{report['words']} words, voice {report['voice']}, {report['runs']} runs")
    fig.tight_layout()
    path = Path(path)
    image_format = path.suffix.lower().removeprefix(".") or matplotlib.rcParams["savefig.format"]
    with atomic_output(path) as part:  # written as ``path`` says: the part file's own suffix is .part
        fig.savefig(part, format=image_format)
    plt.close(fig)
    return path


def run(args: argparse.Namespace, model_path: Path) -> int:
    """``ggtts bench`` on a Kokoro file (:mod:`ggtts.measure.bench` finds it through the record)."""
    peers = parse_peers(args.against if args.against is not None else DEFAULT_PEERS)
    if args.against is not None:  # peers named are asked for: one that cannot run is an error, before any timing
        for peer in peers[1:]:
            why = left_out(peer, model_path)
            if why is not None:
                raise GGTTSError(f"--against {peer}: {LABELS[peer]} cannot run here: {why}")
    report = benchmark(model_path, args.text or BENCH_PARAGRAPH, peers, args.runs)
    if args.json:
        json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        print_table(report)
    if args.plot:
        print(f"ggtts bench: wrote {plot(report, args.plot)}", file=sys.stderr)
    failed = [n for n, p in report["peers"].items() if "error" in p]
    return 1 if failed else 0  # a comparison asked for and not made is a failure, whichever engine failed
