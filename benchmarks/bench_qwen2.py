"""Decode speed and peak memory of ggtts's Qwen2 (F16 and Q8_0 GGUF) vs transformers, on a random 0.5B-shaped
Qwen2 (OuteTTS-0.2-500M's shape: 24 layers, 896 wide, 14 heads / 2 KV heads, 4864 FFN, 151936 tokens, tied).

    python benchmarks/bench_qwen2.py [--prompt 512] [--new 64] [--threads 2] [--small]

Each variant runs in its own process so that peak RSS is its own. ggtts dequantizes GGUF weights to float32 at
load time, so the file type changes load size, not compute; the figures show what that costs.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def build(directory: Path, shape: dict[str, int]) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ggtts.convert.outetts_hf import convert_outetts_hf
    from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS, byte_to_unicode

    hf_dir = directory / "hf"
    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, max_position_embeddings=4096, rope_theta=1e6, tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(hf_dir, safe_serialization=True)
    vocab = {c: i for i, c in enumerate(byte_to_unicode().values())}  # bytes only; the rest become [PAD] tokens
    tok = {
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": PRE_TOKENIZERS["qwen2"]}},
        "added_tokens": [],
    }
    (hf_dir / "tokenizer.json").write_text(json.dumps(tok))
    for out_type in ("f16", "q8_0"):
        convert_outetts_hf(hf_dir, directory / f"qwen2-{out_type}.gguf", out_type)


def run(variant: str, directory: Path, n_prompt: int, n_new: int, threads: int) -> dict[str, float | str]:
    import torch

    torch.set_num_threads(threads)
    prompt = torch.randint(0, 256, (1, n_prompt), generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    if variant == "transformers":
        from transformers import Qwen2ForCausalLM

        hf = Qwen2ForCausalLM.from_pretrained(directory / "hf", torch_dtype=torch.float32).eval()
        load_s = time.perf_counter() - t0
        with torch.inference_mode():
            t1 = time.perf_counter()
            out = hf(prompt, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            t2 = time.perf_counter()
            for _ in range(n_new):
                out = hf(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            t3 = time.perf_counter()
    else:
        from ggtts.gguf import GGUFFile
        from ggtts.models.qwen2.model import Qwen2Model

        model = Qwen2Model.from_gguf(GGUFFile(directory / f"qwen2-{variant}.gguf"), max_len=n_prompt + n_new + 1)
        load_s = time.perf_counter() - t0
        cache = model.new_cache(n_prompt + n_new + 1)
        with torch.inference_mode():
            t1 = time.perf_counter()
            token = model(prompt, cache, last_only=True)[:, -1:].argmax(-1)
            t2 = time.perf_counter()
            for _ in range(n_new):
                token = model(token, cache, last_only=True)[:, -1:].argmax(-1)
            t3 = time.perf_counter()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "variant": variant,
        "load_s": round(load_s, 2),
        "prefill_tok_s": round(n_prompt / (t2 - t1), 1),
        "decode_tok_s": round(n_new / (t3 - t2), 2),
        "peak_rss_mib": round(peak_mib),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small", action="store_true", help="2 layers and 4096 tokens: only checks the script runs")
    ap.add_argument("--dir", type=Path, help="reuse (or keep) the generated checkpoint and GGUF files here")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run(args.run, args.dir, args.prompt, args.new, args.threads)))
        return
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-qwen2-"))
    if not (directory / "qwen2-q8_0.gguf").exists():
        build(directory, SHAPE_SMALL if args.small else SHAPE_0_5B)
    print(f"files in {directory}; prompt {args.prompt} tokens, {args.new} new tokens, {args.threads} threads")
    print(f"{'variant':14} {'load s':>7} {'prefill tok/s':>14} {'decode tok/s':>13} {'peak RSS MiB':>13}")
    for variant in ("transformers", "f16", "q8_0"):
        cmd = [sys.executable, __file__, "--run", variant, "--dir", str(directory)]
        cmd += ["--prompt", str(args.prompt), "--new", str(args.new), "--threads", str(args.threads)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(
            f"{r['variant']:14} {r['load_s']:>7} {r['prefill_tok_s']:>14} {r['decode_tok_s']:>13} "
            f"{r['peak_rss_mib']:>13}"
        )


if __name__ == "__main__":
    main()
