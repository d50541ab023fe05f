"""The Qwen2 language model of OuteTTS on a GPU: ggtts's decode step eager and as a captured CUDA graph, against
transformers on the same weights, in one run.

    python benchmarks/gpu_qwen2.py [--prompt 300] [--new 500] [--dir DIR] [--small] [--json OUT.json]

The model is bench_qwen2.py's random 0.5B-shaped Qwen2 (OuteTTS-0.2-500M's shape), converted to an F32 GGUF by
ggtts's OuteTTS converter; transformers loads the checkpoint it was converted from. Each row decodes ``--new``
tokens greedily after a ``--prompt``-token prefill (after one warm-up run of the same length):

- ``transformers generate``: ``Qwen2ForCausalLM.generate`` (greedy, EOS off), float32 and bfloat16;
- ``ggtts eager``: ggtts's Qwen2 step op by op (``step_graphs=False``);
- ``ggtts graph``: the same step captured once as a CUDA graph and replayed (:class:`StaticDecode`), its
  projections that read one input fused (one product for queries/keys/values, one for gate and up);
- ``ggtts unfused`` (asked for in ``--variants``): the graph row with each projection its own product;
- ``ggtts compiled``: that step compiled by ``torch.compile`` (its small kernels fused), then captured;
- ``ggtts graph + sampling``: the generation loop OuteTTS runs (``generate_tokens``), drawing each token with
  OuteTTS's default sampler (temperature 1, top-k 4) on the GPU: one host round trip per token, for the stream;
- ``ggtts graph q8_0`` (and the other ``--quantized`` types): the same file quantized, its blocks kept as stored on
  the GPU and widened one product at a time (``ops/device_weights.py``), float32 activations; ``weights MiB`` is
  what the model holds on the device. Types the converter does not write (``q4_k``, ``q6_k``, ``iq4_xs``...: any
  of ``ops/block_decode.py``) are quantized from the f32 file by ggml's quantizer where ggml-python is installed,
  else written as random blocks of the type (``random blocks`` in the row: the same bytes and operations, so the
  same speed, but its logits are not the model's); matrices whose rows are not whole super-blocks (at the 0.5B
  shape, all but ``ffn_down``) take llama.cpp's fallback type (Q5_0 for Q4_K, Q8_0 for Q6_K...), as its files do.

Reported: decode tokens/s, the time from the start of the prefill to the first new token, peak GPU memory, and
for the graph rows the largest relative difference of their logits from the eager step's over the same tokens
(teacher-forced). ``--small`` (2 layers, 4096 tokens) only checks that the script runs, on the CPU too.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_qwen2 import SHAPE_0_5B, SHAPE_SMALL, build
from gpu_blocks import random_blocks

from ggtts.gguf import GGUFFile
from ggtts.gguf.write import OutType
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.runtime.frames import generate_tokens
from ggtts.runtime.sampling import Sampler, SamplingParams

# the type llama.cpp's quantizer writes where a matrix's rows are not whole super-blocks (Qwen2-0.5B's 896-wide
# inputs: all but ffn_down), as in llama-quant.cpp
FALLBACK = {"Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "IQ4_XS": "IQ4_NL", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def requantized(source: Path, out: Path, qtype_name: str) -> bool:
    """``source``'s matrices as ``qtype_name`` (or llama.cpp's fallback type where their rows are not whole
    blocks of it), the rest as it is; True where ggml or gguf quantized them all, False where some are random
    blocks of the type (no ggml-python here for a type gguf cannot quantize)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf import quants as gguf_quants

    from ggtts.gguf.write import ModelWriter
    from ggtts.ops import ggml_kernels

    gguf, real = GGUFFile(source), True
    w = ModelWriter(out, "qwen2")
    for key, value in gguf.metadata.items():
        if key.startswith("qwen2."):
            w.add(key, value)
    for name in gguf.names():
        values = np.ascontiguousarray(gguf.tensor(name).numpy(), np.float32)
        qtype = GGMLQuantizationType[qtype_name.upper()]
        if values.ndim == 2 and values.shape[1] % GGML_QUANT_SIZES[qtype][0]:
            qtype = GGMLQuantizationType[FALLBACK.get(qtype.name, "F32")]
        if values.ndim != 2 or qtype == GGMLQuantizationType.F32 or values.shape[1] % GGML_QUANT_SIZES[qtype][0]:
            w.add_tensor(name, values)
            continue
        rows, cols = values.shape
        block, size = GGML_QUANT_SIZES[qtype]
        if "quantize_blocks" in vars(gguf_quants._type_traits[qtype]):
            raw = gguf_quants.quantize(values, qtype)
        elif ggml_kernels.unavailable_reason() is None:
            raw = np.empty((rows, cols // block * size), np.uint8)
            src = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            ggml_kernels.kernels().ggml_quantize_chunk(
                int(qtype), src, raw.ctypes.data_as(ctypes.c_void_p), 0, rows, cols, None
            )
        else:
            real = False
            raw = random_blocks(qtype, rows, cols, seed=len(name))
        w.meta.add_tensor(name, raw, raw_dtype=qtype)  # the blocks as they are
    w.write(progress=False)
    return real


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_memory(device: torch.device) -> int:
    """Peak statistics reset; the bytes allocated now (what a variant's peak is counted from)."""
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def profile_table(run: Callable[[], object], rows: int = 14) -> str:
    """Where ``run``'s time goes: torch's profiler, the operations by their own host time, then (on CUDA) the
    kernels by their device time, and how much of the wall time the device was busy."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    t = time.perf_counter()
    with profile(activities=activities) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    wall = time.perf_counter() - t
    events = prof.key_averages()
    parts = [events.table(sort_by="self_cpu_time_total", row_limit=rows)]
    if cuda:
        parts.append(events.table(sort_by="self_device_time_total", row_limit=rows))
        busy = sum(e.self_device_time_total for e in events) / 1e6
        parts.append(f"device busy {busy * 1e3:.1f} ms of {wall * 1e3:.1f} ms wall (profiled)")
    return "\n".join(parts)


def peak_mib(device: torch.device, base: int) -> float:
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20 if device.type == "cuda" else float("nan")


def transformers_generate(directory: Path, prompt: torch.Tensor, n_new: int, dtype: torch.dtype) -> dict[str, Any]:
    from transformers import Qwen2ForCausalLM

    device = prompt.device
    base = reset_memory(device)
    hf = Qwen2ForCausalLM.from_pretrained(directory / "hf", dtype=dtype).to(device).eval()
    kwargs = dict(do_sample=False, eos_token_id=None, pad_token_id=0)

    def once(n: int) -> float:
        sync(device)
        t0 = time.perf_counter()
        hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, **kwargs)
        sync(device)
        return time.perf_counter() - t0

    with torch.inference_mode():
        once(n_new)  # warm-up
        first = once(1)
        total = once(n_new)
    return {"decode_tok_s": (n_new - 1) / max(total - first, 1e-9), "first_token_ms": first * 1e3,
            "peak_gpu_mib": peak_mib(device, base)}  # fmt: skip


def ggtts_greedy(
    path: Path, prompt: torch.Tensor, n_new: int, dtype: torch.dtype, graphs: bool, compiled: bool = False,
    fuse: bool = True,
) -> dict[str, Any]:  # fmt: skip
    device = prompt.device
    base = reset_memory(device)
    model = Qwen2Model.from_gguf(
        GGUFFile(path), device, dtype=dtype, max_len=4096, step_graphs=graphs and fuse, compile_steps=compiled
    )
    if graphs and not fuse:
        model.use_static_steps(capture=device.type == "cuda", compile=compiled, fuse=False)
    n = prompt.shape[1] + n_new + 1

    def once() -> tuple[float, float, list[torch.Tensor]]:
        logits_seen: list[torch.Tensor] = []
        cache = model.new_cache(n)
        sync(device)
        t0 = time.perf_counter()
        logits = model(prompt, cache, last_only=True)
        token = logits[:, -1:].argmax(-1)
        sync(device)
        t1 = time.perf_counter()
        for _ in range(n_new):
            logits = model(token, cache, last_only=True)
            logits_seen.append(logits[0, -1])
            token = logits[:, -1:].argmax(-1)
        sync(device)
        return t1 - t0, time.perf_counter() - t1, logits_seen

    with torch.inference_mode():
        once()  # warm-up: kernels chosen, the graph captured
        first, total, seen = once()
    held = [t for n, t in [*model.named_parameters(), *model.named_buffers()] if not n.startswith("rope.")]
    out = {"decode_tok_s": n_new / total, "first_token_ms": first * 1e3, "peak_gpu_mib": peak_mib(device, base),
           "captured": bool(model.static and model.static.captured),
           "weights_mib": sum(t.numel() * t.element_size() for t in held) / 2**20}  # fmt: skip
    return {**out, "_logits": torch.stack(seen).float().cpu(), "_model": model}


def forced_difference(eager: Qwen2Model, graph: Qwen2Model, prompt: torch.Tensor, tokens: torch.Tensor) -> float:
    """Both models fed the same tokens (the eager run's greedy ones): the largest relative logit difference."""
    worst = 0.0
    with torch.inference_mode():
        caches = [m.new_cache(prompt.shape[1] + len(tokens) + 1) for m in (eager, graph)]
        outs = [m(prompt, c, last_only=True) for m, c in zip((eager, graph), caches, strict=True)]
        for t in tokens.tolist():
            step = torch.tensor([[t]], device=prompt.device)
            outs = [m(step, c, last_only=True) for m, c in zip((eager, graph), caches, strict=True)]
            a, b = (o[0, -1].float() for o in outs)
            worst = max(worst, float((a - b).abs().max() / b.abs().max()))
    return worst


def sampled_loop(model: Qwen2Model, prompt: torch.Tensor, n_new: int) -> dict[str, Any]:
    """OuteTTS's generation loop with its default sampler, on the model's device."""
    device = prompt.device
    ids = prompt[0].tolist()

    def once() -> tuple[float, float]:
        sampler = Sampler(SamplingParams(temperature=1.0, top_k=4, seed=0), device=device)
        tokens = generate_tokens(model, ids, model.new_cache(len(ids) + n_new), sampler, max_new_tokens=n_new,
                                 device=device)  # fmt: skip
        sync(device)
        t0 = time.perf_counter()
        next(tokens)
        t1 = time.perf_counter()
        count = sum(1 for _ in tokens)
        sync(device)
        return t1 - t0, count / (time.perf_counter() - t1)

    once()
    first, rate = once()
    return {"decode_tok_s": rate, "first_token_ms": first * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--new", type=int, default=500)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", default="transformers,eager,graph,compiled,sampling", help="which rows to run")
    ap.add_argument("--quantized", default="q8_0,q4_0", help="files of these types too: their graph rows, float32")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gpu-qwen2-"))
    t0 = time.perf_counter()
    quantized = [t for t in args.quantized.split(",") if t]
    converted = [t for t in quantized if t in {o.value for o in OutType}]
    if not all((directory / f"qwen2-{t}.gguf").exists() for t in ("f32", *converted)):
        build(directory, SHAPE_SMALL if args.small else SHAPE_0_5B, types=("f32", *converted))
    labels = {t: t for t in quantized}
    for t in quantized:
        if t not in converted and not requantized(directory / "qwen2-f32.gguf", directory / f"qwen2-{t}.gguf", t):
            labels[t] = f"{t}, random blocks"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; files built in {time.perf_counter() - t0:.0f} s")
    print(f"prompt {args.prompt} tokens, {args.new} new tokens, greedy unless said")
    prompt = torch.randint(0, 256, (1, args.prompt), generator=torch.Generator().manual_seed(0)).to(device)
    path = directory / "qwen2-f32.gguf"
    rows: dict[str, dict[str, Any]] = {}
    want = set(args.variants.split(","))
    for dtype in (torch.float32, torch.bfloat16):
        tag = str(dtype).removeprefix("torch.")
        try:
            if "transformers" in want:
                rows[f"transformers generate {tag}"] = transformers_generate(directory, prompt, args.new, dtype)
            eager = ggtts_greedy(path, prompt, args.new, dtype, graphs=False)
            tokens = eager["_logits"].argmax(-1)
            if "eager" in want:
                rows[f"ggtts eager {tag}"] = eager
            for how in ("graph", "unfused", "compiled"):
                if how not in want:
                    continue
                graph = ggtts_greedy(path, prompt, args.new, dtype, graphs=True, compiled=how == "compiled",
                                     fuse=how != "unfused")  # fmt: skip
                graph["max_rel_logit_diff"] = forced_difference(eager["_model"], graph["_model"], prompt, tokens[:64])
                graph["greedy_tokens_equal"] = int((graph["_logits"].argmax(-1) == tokens).cumprod(0).sum())
                rows[f"ggtts {how} {tag}"] = graph
                if "sampling" in want:
                    rows[f"ggtts {how} + sampling {tag}"] = sampled_loop(graph["_model"], prompt, args.new)
                del graph
            del eager
        except Exception:  # a failed variant is reported; the others still run
            traceback.print_exc()
    for qtype in quantized:  # kept as stored on the GPU, widened per product (ops/device_weights.py)
        for how in ("graph", "compiled"):
            if how in want:
                try:
                    q = ggtts_greedy(directory / f"qwen2-{qtype}.gguf", prompt, args.new, torch.float32, graphs=True,
                                     compiled=how == "compiled")  # fmt: skip
                    rows[f"ggtts {how} {labels[qtype]} (float32)"] = q
                    del q
                except Exception:
                    traceback.print_exc()
    ref = rows.get("transformers generate float32", {}).get("decode_tok_s", float("nan"))
    print(f"{'variant':46} {'decode tok/s':>12} {'x transformers f32':>19} {'first token ms':>15} {'peak GPU MiB':>13}")
    for label, r in rows.items():
        extra = ""
        if "max_rel_logit_diff" in r:
            extra = f"  logits vs eager {r['max_rel_logit_diff']:.1e}, greedy equal for {r['greedy_tokens_equal']}"
            extra += f" tokens, captured {r['captured']}"
        mem = r.get("peak_gpu_mib", float("nan"))
        if "weights_mib" in r:
            extra += f"  weights {r['weights_mib']:.0f} MiB"
        print(f"{label:46} {r['decode_tok_s']:12.1f} {r['decode_tok_s'] / ref:19.2f} {r['first_token_ms']:15.1f} "
              f"{mem:13.0f}{extra}")  # fmt: skip
    if args.json:
        clean = {k: {a: b for a, b in r.items() if not a.startswith("_")} for k, r in rows.items()}
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": clean}, indent=1))


if __name__ == "__main__":
    main()
