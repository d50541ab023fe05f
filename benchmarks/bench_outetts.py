"""OuteTTS's real-time factor at the real shapes: the 0.5B Qwen2 writing codes, WavTokenizer-large turning them
into audio (random weights of both; the language model from bench_qwen2.py's files: F16, Q8_0 and Q4_0).

    python benchmarks/bench_outetts.py [--seconds 10] [--prompt 300] [--threads 2] [--cache f32|f16] [--dir DIR]

OuteTTS speaks 75 codes per second of audio, and its prompts (speaker reference plus text) run to a few hundred
tokens. For each file type this times, in one process: the prompt's prefill, then greedy decoding of 75 x seconds
tokens after it (the codes; the few text and time tokens between words are left out, so the language model's
share is a lower bound), then WavTokenizer-large decoding those seconds of codes. Real-time factor = time /
audio seconds; time to first audio = prefill + the first window of codes (streaming's default: 75 codes) + their
decoding.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from bench_qwen2 import FILE_TYPES, SHAPE_0_5B, build
from bench_wavtokenizer import LARGE_75

CODES_PER_SECOND = 75
FIRST_WINDOW = 75  # codes before the first audio when streaming (runtime.streaming's default chunk)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, help="bench_qwen2.py's files (built there when missing)")
    ap.add_argument("--cache", choices=("f32", "f16"), default="f32", help="KV cache type (llama.cpp's default: f16)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-outetts-"))
    if not all((directory / f"qwen2-{t}.gguf").exists() for t in FILE_TYPES):
        build(directory, SHAPE_0_5B)

    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen2.model import Qwen2Model
    from ggtts.models.wavtokenizer.model import WavTokenizerDecoder

    n_codes = round(args.seconds * CODES_PER_SECOND)
    vocoder = WavTokenizerDecoder(LARGE_75).eval()
    codes = torch.randint(0, LARGE_75.n_vocab, (1, n_codes), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        vocoder(codes[:, :FIRST_WINDOW])  # warm-up
        t0 = time.perf_counter()
        vocoder(codes[:, :FIRST_WINDOW])
        first_window_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        audio = vocoder(codes)
        vocoder_s = time.perf_counter() - t0
    seconds = audio.shape[-1] / LARGE_75.sample_rate
    prompt = torch.randint(0, 256, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    print(
        f"{seconds:.1f} s of audio ({n_codes} codes) after a {args.prompt}-token prompt, {args.threads} threads, "
        f"{args.cache} KV cache"
    )
    print(f"WavTokenizer-large: {vocoder_s:.2f} s (RTF {vocoder_s / seconds:.3f})")
    print(f"{'LM file':8} {'prefill s':>10} {'decode tok/s':>13} {'LM RTF':>7} {'total RTF':>10} {'first audio s':>14}")
    for file_type in FILE_TYPES:
        model = Qwen2Model.from_gguf(GGUFFile(directory / f"qwen2-{file_type}.gguf"), max_len=args.prompt + n_codes + 1)
        with torch.inference_mode():
            warm = model.new_cache(args.prompt + n_codes + 1)
            model(prompt[:, :8], warm)  # weights touched once, as a server's first request would have done
            cache_type = torch.float16 if args.cache == "f16" else torch.float32
            cache = model.new_cache(args.prompt + n_codes + 1, dtype=cache_type)
            t0 = time.perf_counter()
            token = model(prompt, cache, last_only=True)[:, -1:].argmax(-1)
            prefill_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            first_codes_s = float("nan")  # fewer codes than one streaming window: no first-window figure
            for i in range(n_codes):
                token = model(token, cache, last_only=True)[:, -1:].argmax(-1)
                if i + 1 == FIRST_WINDOW:
                    first_codes_s = time.perf_counter() - t1
            decode_s = time.perf_counter() - t1
        lm_rtf = (prefill_s + decode_s) / seconds
        first = prefill_s + first_codes_s + first_window_s
        print(
            f"{file_type:8} {prefill_s:>10.2f} {n_codes / decode_s:>13.1f} {lm_rtf:>7.3f} "
            f"{lm_rtf + vocoder_s / seconds:>10.3f} {first:>14.2f}"
        )


if __name__ == "__main__":
    main()
