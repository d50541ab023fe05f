"""Kokoro in float32 and with bfloat16 vocoder convolutions (``precision="bfloat16"``), side by side: speed,
what it does to the spectrum, and whether Whisper still hears the same words.

For each precision, on the benchmark paragraph (:data:`ggtts.measure.sentences.BENCH_PARAGRAPH`), the median of
``--runs`` timed runs after a warm-up: real-time factor of ``synthesize`` and time to the first streamed chunk.
Then the log-mel distance (80 bands, dB, mean absolute over the frames) between the two outputs with the same
seed, next to the distance between two float32 outputs with different seeds (the vocoder's noise alone: what
"inaudible" is measured against), and the word error rate of each over the 25 built-in sentences with Whisper
base.

``--compile`` adds the same two precisions with ``compile=True`` (compiled before timing).

    python benchmarks/kokoro_precision.py [-m MODEL] [--threads 2] [--runs 3] [--no-wer] [--compile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch

import ggtts
from ggtts.measure.bench import cpu_model
from ggtts.measure.sentences import BENCH_PARAGRAPH, EVAL_SENTENCES

PRECISIONS = ("float32", "bfloat16")
MEL_BANDS = 80
N_FFT, HOP = 1024, 256


def mel_filters(rate: int) -> np.ndarray:
    """(MEL_BANDS, N_FFT // 2 + 1) triangular filters evenly spaced on the mel scale (HTK's formula)."""

    def to_mel(hz: np.ndarray) -> np.ndarray:
        return 2595 * np.log10(1 + hz / 700)

    edges = 700 * (10 ** (np.linspace(0, to_mel(np.array(rate / 2)), MEL_BANDS + 2) / 2595) - 1)
    bins = np.linspace(0, rate / 2, N_FFT // 2 + 1)
    low, mid, high = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0, np.minimum((bins - low) / (mid - low), (high - bins) / (high - mid)))


def log_mel(samples: np.ndarray, rate: int) -> np.ndarray:
    window = torch.hann_window(N_FFT)
    spec = torch.stft(torch.from_numpy(samples).float(), N_FFT, HOP, window=window, return_complex=True)
    power = spec.abs().numpy() ** 2
    return 10 * np.log10(np.maximum(mel_filters(rate) @ power, 1e-10))


def mel_distance(a: np.ndarray, b: np.ndarray, rate: int) -> float:
    n = min(len(a), len(b))
    return float(np.abs(log_mel(a[:n], rate) - log_mel(b[:n], rate)).mean())


def timed(model: ggtts.TTSModel, runs: int) -> tuple[float, float, np.ndarray]:
    """Median real-time factor, median time to the first chunk, and the audio (seed 0)."""
    model.synthesize(BENCH_PARAGRAPH)
    rtfs, firsts = [], []
    audio = None
    for _ in range(runs):
        start = time.perf_counter()
        audio = model.synthesize(BENCH_PARAGRAPH)
        rtfs.append((time.perf_counter() - start) / audio.duration)
        start = time.perf_counter()
        next(iter(model.stream(BENCH_PARAGRAPH)))
        firsts.append(time.perf_counter() - start)
    assert audio is not None
    return statistics.median(rtfs), statistics.median(firsts), audio.samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-wer", action="store_true")
    parser.add_argument("--compile", action="store_true", help="also each precision with compile=True")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from ggtts.models.kokoro.precision import bfloat16_supported

    if not bfloat16_supported():
        print("this CPU has no native bfloat16 (AVX-512 BF16 or AMX): nothing to compare", file=sys.stderr)
        return 1
    models = {p: ggtts.load(args.model, precision=p) for p in PRECISIONS}
    if args.compile:
        for p in PRECISIONS:
            models[f"{p}+compile"] = compiled = ggtts.load(args.model, precision=p, compile=True)
            compiled.warm_up()  # compiles
    rate = models["float32"].sample_rate
    rows = {p: timed(m, args.runs) for p, m in models.items()}
    noise_floor = mel_distance(rows["float32"][2], models["float32"].synthesize(BENCH_PARAGRAPH, seed=1).samples, rate)
    print(f"Kokoro precision, {cpu_model()}, {args.threads} threads, median of {args.runs} runs")
    print(f"{'precision':16s} {'RTF':>7s} {'first audio':>12s} {'log-mel vs float32':>19s}")
    for p, (rtf, first, samples) in rows.items():
        distance = mel_distance(samples, rows["float32"][2], rate)
        print(f"{p:16s} {rtf:7.3f} {first:11.3f}s {distance:16.3f} dB")
    speedup = rows["float32"][0] / rows["bfloat16"][0]
    print(f"(float32 with another noise seed: {noise_floor:.3f} dB; speed-up {speedup:.2f}x)")
    if not args.no_wer:
        print_wer(models, args.threads)
    return 0


def print_wer(models: dict[str, Any], threads: int) -> None:
    """Whisper base's word error rate over the built-in sentences, a line per model."""
    from ggtts.measure.eval import evaluate
    from ggtts.measure.whisper import load_transcriber

    whisper = load_transcriber("base", threads=threads)
    for name, model in models.items():
        report = evaluate(model, EVAL_SENTENCES, whisper, progress=False)
        print(f"{name:16s} WER {report.overall.wer:.2%} over {len(EVAL_SENTENCES)} sentences (Whisper base)")


if __name__ == "__main__":
    sys.exit(main())
