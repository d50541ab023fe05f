"""Qwen2 speed and memory: ggtts, transformers and llama.cpp's ``llama-bench`` on the same GGUF files, on a random
0.5B-shaped Qwen2 (OuteTTS-0.2-500M's shape: 24 layers, 896 wide, 14 heads / 2 KV heads, 4864 FFN, 151936 tokens,
tied embeddings) converted by ggtts's OuteTTS converter to F16, Q8_0 and Q4_0.

    python benchmarks/bench_qwen2.py [--prompt 128] [--new 32] [--threads 1] [--small] [--dir DIR]
        [--llama-cpp ../shared/tools/llama.cpp] [--modules] [--float32]

Each variant runs in its own process so that its peak RSS is its own; "base" is the ggtts process's RSS before
the model loads (Python, torch, ggml), so peak - base is what the model costs. ggtts runs each step as one ggml
graph on the weights as stored; ``--modules`` adds ggtts running its torch modules op by op (ggml only for the
linear layers), ``--float32`` ggtts with every weight widened to float32 (as before quantized kernels).
llama-bench reports no load time; its memory is the peak RSS of its process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ggtts.measure.bench import cpu_model

FILE_TYPES = ("f16", "q8_0", "q4_0")
DEFAULT_LLAMA_CPP = Path(__file__).resolve().parents[2] / "shared" / "tools" / "llama.cpp"
WARMUP_TOKENS = 8  # transformers' warm-up prompt
RUNS = 3  # ggtts: the median of 3 timed runs; llama-bench: -r 3 (its mean)
N_MERGES = 200  # a few BPE merges: llama.cpp refuses a gpt2 vocabulary without any

SHAPE_0_5B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
}
SHAPE_SMALL = {
    **SHAPE_0_5B,
    "vocab_size": 4096,
    "num_hidden_layers": 2,
}  # a quick check that the script works


def byte_bpe_tokenizer(n_merges: int) -> dict[str, Any]:
    """A tokenizer.json: the 256 byte tokens and up to ``n_merges`` merges of two ASCII letters."""
    from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS, byte_to_unicode

    chars = list(byte_to_unicode().values())
    vocab = {c: i for i, c in enumerate(chars)}
    letters = [c for c in chars if c.isascii() and c.isalpha()]
    merges = [f"{a} {b}" for a in letters for b in letters][:n_merges]
    for m in merges:
        vocab[m.replace(" ", "")] = len(vocab)
    return {
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": PRE_TOKENIZERS["qwen2"]}},
        "added_tokens": [],
    }


def build(directory: Path, shape: dict[str, int], types: tuple[str, ...] = FILE_TYPES) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ggtts.convert.outetts_hf import convert_outetts_hf

    hf_dir = directory / "hf"
    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(hf_dir, safe_serialization=True)
    # bytes and a few merges; the rest of the vocabulary become [PAD] tokens
    (hf_dir / "tokenizer.json").write_text(json.dumps(byte_bpe_tokenizer(N_MERGES)))
    for out_type in types:
        convert_outetts_hf(hf_dir, directory / f"qwen2-{out_type}.gguf", out_type)


def peak_rss_mib() -> float:
    """This process's peak RSS since it started (VmHWM: unlike ru_maxrss, not inherited across exec from the
    parent that built the files)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_llama_bench(tools: Path, gguf: Path, n_prompt: int, n_new: int, threads: int) -> dict[str, float | str]:
    """llama-bench's prompt speed (an empty cache, as ours), then its decoding speed at a cache depth of n_prompt
    (``-d``: decoding after the prompt, as ours; its plain tg test decodes from an empty cache, which is faster)."""

    def bench(*flags: str) -> float:
        cmd = [str(tools / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-r", str(RUNS), "-o", "json", *flags]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return float(json.loads(out)[0]["avg_ts"])

    prefill = bench("-p", str(n_prompt), "-n", "0")
    decode = bench("-p", "0", "-n", str(n_new), "-d", str(n_prompt))
    return {
        "load_s": "-",
        "prefill_tok_s": round(prefill, 1),
        "decode_tok_s": round(decode, 2),
        "base_rss_mib": "-",
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
    }


def run(variant: str, directory: Path, n_prompt: int, n_new: int, threads: int, tools: Path) -> dict[str, float | str]:
    if variant.startswith("llama.cpp "):
        file_type = variant.split()[1]
        return {
            "variant": variant,
            **run_llama_bench(tools, directory / f"qwen2-{file_type}.gguf", n_prompt, n_new, threads),
        }
    import torch

    from ggtts.ops import ggml_kernels

    ggml_kernels.unavailable_reason()  # loads ggml: in the base RSS, as in every ggtts process that runs a model
    torch.set_num_threads(threads)
    base = rss_mib()
    prompt = torch.randint(0, 256, (1, n_prompt), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    if variant == "transformers":
        from transformers import Qwen2ForCausalLM

        hf = Qwen2ForCausalLM.from_pretrained(directory / "hf", torch_dtype=torch.float32).eval()
        load_s = time.perf_counter() - t0
        with torch.inference_mode():
            hf(prompt[:, :WARMUP_TOKENS])  # like llama-bench's warm-up run: weights touched, kernels chosen
            t1 = time.perf_counter()
            out = hf(prompt, use_cache=True, logits_to_keep=1)  # the last position's logits, as the others
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            t2 = time.perf_counter()
            for _ in range(n_new):
                out = hf(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            t3 = time.perf_counter()
        prefill_time, decode_time = t2 - t1, t3 - t2
    else:
        from ggtts.gguf import GGUFFile
        from ggtts.models.qwen2.model import Qwen2Model

        file_type, _, how = variant.removeprefix("ggtts ").partition(" ")
        model = Qwen2Model.from_gguf(
            GGUFFile(directory / f"qwen2-{file_type}.gguf"),
            max_len=n_prompt + n_new + 1,
            stored_weights=how != "float32",
            graph=not how,
        )
        load_s = time.perf_counter() - t0
        with torch.inference_mode():
            # like llama-bench's warm-up run, on the cache that is timed (ggml graphs are made per cache): weights
            # touched, the prompt's and the decoding step's graphs built; then the cache is emptied
            cache = model.new_cache(n_prompt + n_new + 1)
            model(prompt, cache, last_only=True)
            model(prompt[:, :1], cache, last_only=True)
            prefill_s, decode_s = [], []
            for _ in range(RUNS):  # the median of RUNS, as llama-bench averages its repetitions
                cache.length = 0
                t1 = time.perf_counter()
                token = model(prompt, cache, last_only=True)[:, -1:].argmax(-1)
                t2 = time.perf_counter()
                for _ in range(n_new):
                    token = model(token, cache, last_only=True)[:, -1:].argmax(-1)
                t3 = time.perf_counter()
                prefill_s.append(t2 - t1)
                decode_s.append(t3 - t2)
            prefill_time, decode_time = statistics.median(prefill_s), statistics.median(decode_s)
    peak_mib = peak_rss_mib()
    return {
        "variant": variant,
        "load_s": round(load_s, 2),
        "prefill_tok_s": round(n_prompt / prefill_time, 1),
        "decode_tok_s": round(n_new / decode_time, 2),
        "base_rss_mib": round(base),
        "peak_rss_mib": round(peak_mib),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP, help="folder with llama-bench")
    ap.add_argument("--float32", action="store_true", help="also ggtts with weights widened to float32")
    ap.add_argument("--modules", action="store_true", help="also ggtts running torch modules instead of ggml graphs")
    ap.add_argument(
        "--types",
        default=",".join(FILE_TYPES),
        help="which files qwen2-TYPE.gguf in --dir to run (e.g. add one made by llama-quantize, saved there as "
        "qwen2-llama_q4_k_m.gguf)",
    )
    ap.add_argument("--small", action="store_true", help="2 layers and 4096 tokens: only checks the script runs")
    ap.add_argument("--dir", type=Path, help="reuse (or keep) the generated checkpoint and GGUF files here")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run(args.run, args.dir, args.prompt, args.new, args.threads, args.llama_cpp)))
        return
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-qwen2-"))
    if not all((directory / f"qwen2-{t}.gguf").exists() for t in FILE_TYPES):
        build(directory, SHAPE_SMALL if args.small else SHAPE_0_5B)
    types = args.types.split(",")
    variants = ["transformers"]
    for t in types:
        variants += [f"ggtts {t}"] + ([f"ggtts {t} modules"] if args.modules else [])
        variants += [f"ggtts {t} float32"] if args.float32 else []
    has_llama = (args.llama_cpp / "llama-bench").exists()
    variants += [f"llama.cpp {t}" for t in types] if has_llama else []
    print(f"files in {directory}; prompt {args.prompt} tokens, {args.new} new tokens, {args.threads} threads")
    print(f"CPU: {cpu_model()}")
    if not has_llama:
        print(f"llama.cpp: no llama-bench in {args.llama_cpp} (--llama-cpp DIR): its rows are left out")
    print(
        f"{'variant':22} {'file MiB':>9} {'load s':>7} {'prefill tok/s':>14} {'decode tok/s':>13} "
        f"{'base RSS MiB':>13} {'peak RSS MiB':>13}"
    )
    for variant in variants:
        file_type = variant.split()[1] if " " in variant else None
        size = f"{(directory / f'qwen2-{file_type}.gguf').stat().st_size / 2**20:.0f}" if file_type else "-"
        cmd = [sys.executable, __file__, "--run", variant, "--dir", str(directory), "--llama-cpp", str(args.llama_cpp)]
        cmd += ["--prompt", str(args.prompt), "--new", str(args.new), "--threads", str(args.threads)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(
            f"{r['variant']:22} {size:>9} {r['load_s']:>7} {r['prefill_tok_s']:>14} {r['decode_tok_s']:>13} "
            f"{r['base_rss_mib']:>13} {r['peak_rss_mib']:>13}"
        )


if __name__ == "__main__":
    main()
