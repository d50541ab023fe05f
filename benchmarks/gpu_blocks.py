"""The block types a GPU keeps as stored (``ops/device_weights.py``), each on the GPU: its widening checked against
gguf-py's ``dequantize`` eager and compiled by ``torch.compile``, and what one product through the stored weight
costs against the same product through the weight widened at load, in one run.

    python benchmarks/gpu_blocks.py [--rows 896 --cols 4864] [--types q8_0,q4_k,...] [--no-compile] [--json OUT]

The weight is random blocks of each type (random integers, small finite scales): the bytes and operations of a
real file's, so the same speed. Reported per type: bits a weight; whether the widened weight is gguf-py's to the bit
(eager; compiled, with the largest relative difference where not: a GPU's compiled kernel may fuse a multiply and an
add into one rounding); the time of ``x @ W.T`` for one row ``x`` through the stored weight (eager, compiled) and
through the widened float32 weight, and the memory bandwidth the stored eager product implies for the bytes its
operations move (``ggtts.measure.operations``' traffic, counted on the same call). The default shape is Qwen2-0.5B's
``ffn_down`` (896 x 4864). ``--rows 64 --cols 512`` on the CPU checks that the script runs.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from ggtts.measure.operations import Operations
from ggtts.ops.block_decode import LAYOUTS
from ggtts.ops.device_weights import DEVICE_TYPES, DeviceStoredWeight


def random_blocks(qtype: GGMLQuantizationType, rows: int, cols: int, seed: int = 0, scale: float = 2e-3) -> np.ndarray:
    """``(rows, bytes)`` of random ``qtype`` blocks: random integers, every float16 field ``scale``."""
    block, size = GGML_QUANT_SIZES[qtype]
    raw = np.random.default_rng(seed).integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    start = 0
    for field in LAYOUTS[qtype]:
        if field.kind == "f16":
            raw[:, :, start : start + 2] = np.array([scale], np.float16).view(np.uint8)
        start += field.size
    return raw.reshape(rows, -1)


def timed(run: Callable[[], object], device: torch.device, reps: int) -> float:
    """Seconds a call, the median of ``reps`` after three warm-up calls."""
    for _ in range(3):
        run()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def measure(
    qtype: GGMLQuantizationType, rows: int, cols: int, x: torch.Tensor, reps: int, compile: bool
) -> dict[str, float | bool]:
    """One type's row of the table (see the module's docstring)."""
    device = x.device
    raw = random_blocks(qtype, rows, cols)
    want = torch.from_numpy(np.ascontiguousarray(gguf_quants.dequantize(raw, qtype), dtype=np.float32))
    stored = DeviceStoredWeight(raw, qtype, rows, cols, device)
    wide = want.to(device)
    with Operations() as ops:
        stored(x)
    block, size = GGML_QUANT_SIZES[qtype]
    r: dict[str, float | bool] = {
        "bits": 8 * size / block, "eager_equal": torch.equal(stored.widened(torch.float32).cpu(), want),
        "stored_ms": timed(lambda: stored(x), device, reps) * 1e3,
        "widened_ms": timed(lambda: F.linear(x, wide), device, reps) * 1e3, "traffic": ops.traffic,
    }  # fmt: skip
    r["stored_gb_s"] = ops.traffic / (r["stored_ms"] / 1e3) / 1e9
    if compile:
        torch._dynamo.reset()  # each type's own compiled code (the lambdas below share theirs across types)
        got = torch.compile(lambda: stored.widened(torch.float32), dynamic=False)().cpu()
        r["compiled_equal"], r["compiled_rel"] = torch.equal(got, want), relative(got, want)
        r["compiled_ms"] = timed(torch.compile(lambda: stored(x), dynamic=False), device, reps) * 1e3
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=896)
    ap.add_argument("--cols", type=int, default=4864)
    ap.add_argument("--types", default=",".join(t.name.lower() for t in DEVICE_TYPES))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; weight {args.rows} x {args.cols}, one row x, float32")
    print(f"{'type':7} {'bits':>5} {'eager=gguf':>10} {'compiled=gguf':>14} {'stored ms':>10} {'compiled ms':>12} "
          f"{'widened ms':>11} {'stored GB/s':>12}")  # fmt: skip
    x = torch.randn(1, args.cols, generator=torch.Generator().manual_seed(0)).to(device)
    rows: dict[str, dict[str, object]] = {}
    with torch.inference_mode():
        for qtype in (GGMLQuantizationType[t.strip().upper()] for t in args.types.split(",") if t.strip()):
            r = measure(qtype, args.rows, args.cols, x, args.reps, not args.no_compile)
            compiled = (
                "-" if "compiled_equal" not in r else "yes" if r["compiled_equal"] else f"{r['compiled_rel']:.1e}"
            )
            print(f"{qtype.name:7} {r['bits']:5.2f} {'yes' if r['eager_equal'] else 'NO':>10} {compiled:>14} "
                  f"{r['stored_ms']:10.3f} {r.get('compiled_ms', float('nan')):12.3f} {r['widened_ms']:11.3f} "
                  f"{r['stored_gb_s']:12.0f}", flush=True)  # fmt: skip
            rows[qtype.name] = r
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
