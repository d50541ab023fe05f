"""Files ggtts writes run in llama.cpp, and greedy decoding there starts as it does in ggtts.

A random Qwen2 (transformers) with a small byte-level BPE vocabulary and no unused ids (so every token prints
and llama.cpp's ``llama-simple`` output can be compared as text), converted by ggtts's OuteTTS converter to F16,
Q8_0 and Q4_0; then ``llama-simple`` (greedy) and ggtts (greedy, weights as stored) continue the same prompts.

    python benchmarks/llama_interop.py [--llama-cpp ../shared/tools/llama.cpp] [--new 24] [--dir DIR]

Prints, per file type, for how many of 40 prompts the first generated token agrees, how many characters the two
continuations share, and how many are identical. Exits 1 when fewer than 90 % of first tokens agree, 2 when
llama.cpp's tools are not there. Not a test: llama.cpp is not something ggtts installs (see
../shared/tools/llama.cpp/README.md for where the prebuilt tools come from).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_qwen2 import byte_bpe_tokenizer  # this folder: the same byte-level vocabulary

DEFAULT_LLAMA_CPP = Path(__file__).resolve().parents[2] / "shared" / "tools" / "llama.cpp"
FILE_TYPES = ("f16", "q8_0", "q4_0")
N_PROMPTS = 40
# llama-simple keeps its KV cache in F16 and has no flag to change it; ggtts is given an F16 cache too. On a random
# model the two continuations may still part at a near-tie; the first generated token (its first character) must
# agree for nearly every prompt (two different models would agree by chance on about 1 in 50)
MIN_FIRST_AGREEMENT = 0.9
EOS = "<|endoftext|>"
N_MERGES = 26 * 26  # every pair of lower-case letters (after the upper-case pairs): no unused ids
SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def build(directory: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ggtts.convert.outetts_hf import convert_outetts_hf

    hf_dir = directory / "hf"
    tokenizer = byte_bpe_tokenizer(N_MERGES)
    # An end-of-text token of its own: without one llama.cpp takes id 11 (',' in a byte-level vocabulary) as the
    # end of generation and stops where ggtts goes on.
    eos = len(tokenizer["model"]["vocab"])
    tokenizer["added_tokens"] = [{"id": eos, "content": EOS, "special": True}]
    torch.manual_seed(0)
    cfg = Qwen2Config(
        **SHAPE,
        vocab_size=eos + 1,
        eos_token_id=eos,
        max_position_embeddings=512,
        rope_theta=1e6,
        tie_word_embeddings=True,
        initializer_range=0.2,  # sharp logits, so greedy choices are rarely near-ties
    )
    Qwen2ForCausalLM(cfg).save_pretrained(hf_dir, safe_serialization=True)
    (hf_dir / "tokenizer.json").write_text(json.dumps(tokenizer))
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    for t in FILE_TYPES:
        convert_outetts_hf(hf_dir, directory / f"tiny-{t}.gguf", t)


def ggtts_text(path: Path, prompt: str, n_new: int) -> str:
    import torch

    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen2.model import Qwen2Model
    from ggtts.models.qwen2.tokenizer import BPETokenizer
    from ggtts.runtime.frames import generate_tokens
    from ggtts.runtime.sampling import Sampler, SamplingParams

    gguf = GGUFFile(path)
    model = Qwen2Model.from_gguf(gguf, max_len=256)
    tokenizer = BPETokenizer.from_gguf(gguf)
    ids = tokenizer.encode(prompt)
    with torch.inference_mode():
        sampler = Sampler(SamplingParams(temperature=0.0))
        cache = model.new_cache(256, dtype=torch.float16)  # as llama-simple keeps its KV cache
        eos = gguf.get_int("tokenizer.ggml.eos_token_id")
        new = list(generate_tokens(model, ids, cache, sampler, max_new_tokens=n_new, stop_tokens={eos}))
    if new and new[-1] == eos:  # llama-simple stops there too, without printing it
        new.pop()
    return prompt + tokenizer.decode(new)


def llama_text(tools: Path, path: Path, prompt: str, n_new: int) -> str:
    cmd = [str(tools / "llama-simple"), "-m", str(path), "-n", str(n_new), prompt]
    out = subprocess.run(cmd, check=True, capture_output=True, timeout=300).stdout
    return out.decode("utf-8", errors="replace").rstrip("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP, help="folder with llama-simple")
    ap.add_argument("--new", type=int, default=24, help="greedy tokens per prompt")
    ap.add_argument("--dir", type=Path, help="keep the generated files here")
    args = ap.parse_args()
    if not (args.llama_cpp / "llama-simple").exists():
        print(f"no llama-simple in {args.llama_cpp}: give --llama-cpp DIR", file=sys.stderr)
        return 2
    directory = args.dir or Path(tempfile.mkdtemp(prefix="llama-interop-"))
    if not all((directory / f"tiny-{t}.gguf").exists() for t in FILE_TYPES):
        build(directory)
    import random

    rng = random.Random(0)
    prompts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(12)).strip() for _ in range(N_PROMPTS)]
    failed = False
    print(f"{'type':5} {'first char agrees':>18} {'median chars agreeing':>22} {'identical continuations':>24}")
    for t in FILE_TYPES:
        path = directory / f"tiny-{t}.gguf"
        agreed, first_agrees, identical = [], 0, 0
        for prompt in prompts:
            ours = ggtts_text(path, prompt, args.new)[len(prompt) :]
            theirs = llama_text(args.llama_cpp, path, prompt, args.new)[len(prompt) :]
            common = min(len(ours), len(theirs))
            agreed.append(next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), common))
            first_agrees += ours[:1] == theirs[:1]  # the same first character, or both ended at once
            identical += ours == theirs
        first = first_agrees / len(prompts)
        failed |= first < MIN_FIRST_AGREEMENT
        median = sorted(agreed)[len(agreed) // 2]
        print(f"{t:5} {first:>17.0%} {median:>22} {identical:>18} of {len(prompts)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
