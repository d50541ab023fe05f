"""Kokoro's ``fast_start``: how much sooner the first audio comes, and what the approximate head costs.

Speed, on the benchmark paragraph (:data:`ggtts.measure.sentences.BENCH_PARAGRAPH`), streamed, median of
``--runs`` after a warm-up, for float32 and (where the CPU has it) bfloat16 with ``compile=True``, each exact and
with ``fast_start=True``: time to the first audio, the smallest margin between a part's arrival and when a
listener who starts at the first audio reaches it (positive: no gap anywhere), and the real-time factor.

Quality, on the 25 built-in sentences (each one a text, so each long one starts fast), float32: the head (the
part rendered on its own) against the same samples of the exact audio: log-mel distance (80 bands, dB, mean
absolute) and loudness difference, next to the log-mel distance of the exact audio with another noise seed (what
the vocoder's noise alone changes: the floor); then Whisper base's word error rate, exact and fast.

    python benchmarks/kokoro_fast_start.py [-m MODEL] [--threads 2] [--runs 3] [--no-wer]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch
from kokoro_precision import mel_distance, print_wer

import ggtts
from ggtts.audio import Audio
from ggtts.measure.bench import cpu_model
from ggtts.measure.sentences import BENCH_PARAGRAPH, EVAL_SENTENCES


def timed(model: ggtts.TTSModel, fast_start: bool, runs: int) -> tuple[float, float, float]:
    """Medians of: time to the first audio, the smallest margin (s) between a part's arrival and the moment a
    listener who started at the first audio reaches it (negative: a gap), real-time factor."""
    list(model.stream(BENCH_PARAGRAPH, fast_start=fast_start))
    firsts, margins, rtfs = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        arrivals, durations = [], []
        for audio in model.stream(BENCH_PARAGRAPH, fast_start=fast_start):
            arrivals.append(time.perf_counter() - start)
            durations.append(audio.duration)
        firsts.append(arrivals[0])
        due = arrivals[0] + np.cumsum([0.0, *durations[:-1]])  # when each part starts playing
        margins.append(float(np.min(due[1:] - np.array(arrivals[1:]))) if len(arrivals) > 1 else 0.0)
        rtfs.append((time.perf_counter() - start) / sum(durations))
    return statistics.median(firsts), statistics.median(margins), statistics.median(rtfs)


class FastStart:
    """``model`` speaking with ``fast_start=True`` (for the word error rate, which calls ``synthesize``)."""

    def __init__(self, model: ggtts.TTSModel) -> None:
        self.model = model
        self.sample_rate = model.sample_rate
        self.default_voice = model.default_voice

    def synthesize(self, text: str, **options: object) -> Audio:
        return self.model.synthesize(text, fast_start=True, **options)


def rms_db(samples: np.ndarray) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(samples.astype(np.float64) ** 2)) + 1e-12))


def head_quality(model: ggtts.TTSModel) -> None:
    rate = model.sample_rate
    distances, floors, loudness = [], [], []
    for text in EVAL_SENTENCES:
        exact = list(model.stream(text))
        parts = list(model.stream(text, fast_start=True))
        if len(parts) == len(exact):
            continue  # a first chunk too short to start fast: the exact audio
        head = parts[0].samples
        want = Audio.concatenate(exact).samples
        other_seed = model.synthesize(text, seed=1).samples
        n = len(head)
        distances.append(mel_distance(head, want[:n], rate))
        floors.append(mel_distance(other_seed[:n], want[:n], rate))
        loudness.append(rms_db(head) - rms_db(want[:n]))
    print(f"heads: {len(distances)} of {len(EVAL_SENTENCES)} sentences start fast")
    if distances:
        print(
            f"head vs exact: log-mel {statistics.median(distances):.2f} dB median "
            f"({min(distances):.2f}-{max(distances):.2f}); another noise seed {statistics.median(floors):.2f} dB; "
            f"loudness {statistics.median(loudness):+.2f} dB median ({min(loudness):+.2f} to {max(loudness):+.2f})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-wer", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ggtts.ops.precision import bfloat16_supported

    setups: dict[str, dict[str, object]] = {"float32": {}}
    if bfloat16_supported():
        setups["bfloat16+compile"] = {"precision": "bfloat16", "compile": True}
    print(f"Kokoro fast start, {cpu_model()}, {args.threads} threads, median of {args.runs} runs, bench paragraph")
    print(f"{'setup':28s} {'first audio':>12s} {'min margin':>12s} {'RTF':>7s}")
    exact: ggtts.TTSModel | None = None
    for name, options in setups.items():
        model = ggtts.load(args.model, **options)
        model.warm_up()
        for fast in (False, True):
            first, margin, rtf = timed(model, fast, args.runs)
            label = f"{name}{' fast_start' if fast else ''}"
            print(f"{label:28s} {first:11.3f}s {margin:+11.3f}s {rtf:7.3f}")
        exact = exact or model
    assert exact is not None
    head_quality(exact)
    if not args.no_wer:
        print_wer({"float32": exact, "float32 fast_start": FastStart(exact)}, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
