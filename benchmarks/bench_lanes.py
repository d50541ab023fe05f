"""Continuous batching of a language model's steps: N streams of OuteTTS's Qwen2 at the 0.5B shape (bench_qwen2.py's
random files, converted by ggtts's OuteTTS converter), decoded one after another as a server with one model serves
them (``--parallel 1``), then together in a lane loop (``--parallel N``: :mod:`ggtts.runtime.lanes`), each stream asked
from a thread of its own as the server's requests ask.

    python benchmarks/bench_lanes.py [--streams 1,2,4,8] [--types q8_0,q4_0] [--prompt 300] [--new 150] [--threads 2]
        [--dir DIR] [--device cuda [--bfloat16] [--compile]] [--small]

Each stream: its own prompt (random ids), then ``--new`` tokens drawn as OuteTTS draws them (temperature 1, top-k 4,
its own seed), no stop token. Printed per file type and N: all streams' tokens per second, each stream's own tokens
per second (75 is OuteTTS's real time), when each stream's first token came (the prompt's prefill, and for streams
queued behind others, their wait), and in the lanes the longest wait between a stream's tokens (a prompt joining
runs 32 tokens a step beside the others' decoding).

On CUDA (``--device cuda``) one by one is what a model without ``parallel`` does there (each step one captured CUDA
graph over one fixed cache), and the lanes run all streams' steps as one captured graph over fixed caches of N rows
(:class:`~ggtts.models.layers.static_steps.StaticLanes`, what ``parallel=N`` loads on CUDA); ``--bfloat16`` runs the
model in bfloat16, ``--compile`` compiles both steps before they are captured. Each N also prints the largest
relative difference of the lanes' logits from one by one's, teacher-forced over the same tokens (what a capture gone
wrong would show). ``--small``: bench_qwen2.py's 2-layer shape, a dry run (on the CPU too).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from bench_qwen2 import SHAPE_0_5B, SHAPE_SMALL, build

from ggtts.gguf import GGUFFile
from ggtts.measure.bench import cpu_model
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.runtime.frames import TokenDecoder, decode_frames
from ggtts.runtime.lanes import LaneLoop, TokenLanes
from ggtts.runtime.sampling import Sampler, SamplingParams

REAL_TIME = 75  # OuteTTS's codes per second of audio
CHUNK = 40  # tokens per item handed to a stream's caller (OuteTTS's chunk_codes)
THREADS = 2  # torch's threads on the thread that computes (--threads)
ROOM = 150  # new tokens each stream's cache has room for (--new), warm-ups included: on CUDA the same fixed caches
R = TypeVar("R")


class Stream:
    """One stream's work for the lane loop: its tokens and when each came, handed to its caller CHUNK at a time (as
    OuteTTS hands over audio, a chunk per 40 codes)."""

    def __init__(self, lm: Qwen2Model, prompt: list[int], seed: int, new: int) -> None:
        device = lm.output_norm.weight.device
        sampler = Sampler(SamplingParams(temperature=1.0, top_k=4, seed=seed), device=device)
        self.decoder = TokenDecoder(lm, prompt, lm.new_cache(len(prompt) + max(new, ROOM)), sampler, device=device)
        self.max_new_tokens = new
        self.drawn: list[tuple[int, float]] = []

    def on_frame(self, token: int) -> list[tuple[int, float]]:
        self.drawn.append((token, time.perf_counter()))
        if len(self.drawn) % CHUNK:
            return []
        return self.drawn[-CHUNK:]

    def on_end(self) -> list[tuple[int, float]]:
        return self.drawn[len(self.drawn) // CHUNK * CHUNK :]


def on_a_thread(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` on a new thread of ``THREADS`` torch threads, as a server's model thread runs it (the main
    thread keeps one, so that its OpenMP team does not slow the measured thread's: docs/server.md)."""
    out: list[R] = []

    def run() -> None:
        torch.set_num_threads(THREADS)
        out.append(fn(*args))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


@contextlib.contextmanager
def without_lanes(lm: Qwen2Model) -> Iterator[None]:
    """Inside, the model steps each stream alone (on CUDA: its one-sequence captured step, not the lanes' rows)."""
    lanes, lm.lanes = lm.lanes, None
    try:
        yield
    finally:
        lm.lanes = lanes


def one_by_one(lm: Qwen2Model, prompts: Sequence[list[int]], new: int) -> tuple[list[list[int]], float, list[float]]:
    began, tokens, firsts = time.perf_counter(), [], []
    with torch.inference_mode(), without_lanes(lm):
        for i, prompt in enumerate(prompts):
            work = Stream(lm, prompt, i, new)
            drawn = []
            for token in decode_frames(work.decoder, new):
                if not drawn:
                    firsts.append(time.perf_counter() - began)
                drawn.append(token)
            tokens.append(drawn)
    return tokens, time.perf_counter() - began, firsts


@torch.inference_mode()
def forced_difference(lm: Qwen2Model, prompts: Sequence[list[int]], tokens: Sequence[list[int]]) -> float:
    """The largest relative difference of each stream's logits stepped together (``forward_many``) from stepped
    alone, over the same tokens (each stream's first 32 drawn one by one)."""
    device = lm.output_norm.weight.device

    def ids(row: list[int]) -> torch.Tensor:
        return torch.tensor([row], device=device)

    n = min(32, *(len(t) for t in tokens))
    caches = [lm.new_cache(len(p) + ROOM) for p in prompts]
    together = [[o[0, -1]] for o in lm.forward_many([ids(p) for p in prompts], caches, last_only=True)]
    for step in range(n - 1):
        outs = lm.forward_many([ids([t[step]]) for t in tokens], caches, last_only=True)
        for mine, out in zip(together, outs, strict=True):
            mine.append(out[0, -1])
    for cache in caches:
        lm.release_cache(cache)
    worst = 0.0
    with without_lanes(lm):
        for prompt, drawn, mine in zip(prompts, tokens, together, strict=True):
            cache = lm.new_cache(len(prompt) + ROOM)
            alone = [lm(ids(prompt), cache, last_only=True)[0, -1]]
            alone += [lm(ids([t]), cache, last_only=True)[0, -1] for t in drawn[: n - 1]]
            for a, b in zip(mine, alone, strict=True):
                worst = max(worst, float((a.float() - b.float()).norm() / b.float().norm()))
    return worst


def together(
    lm: Qwen2Model, prompts: Sequence[list[int]], new: int, quiet: bool = False
) -> tuple[list[list[int]], float, list[float]]:
    device = lm.output_norm.weight.device
    loop: LaneLoop[tuple[int, float]] = LaneLoop(TokenLanes(lm, device), len(prompts), threads=THREADS)
    results: list[list[tuple[int, float]]] = [[] for _ in prompts]
    began = time.perf_counter()

    def ask(i: int) -> None:
        results[i] = list(loop.run(lambda: Stream(lm, prompts[i], i, new)))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    loop.close()  # its thread ends, and its OpenMP team with it
    gaps = [b[1] - a[1] for r in results for a, b in itertools.pairwise(r)]
    if not quiet:
        print(f"  (lanes of {len(prompts)}: longest wait between a stream's tokens {max(gaps, default=0):.3f} s, "
              f"median {statistics.median(gaps) if gaps else 0:.3f} s)")  # fmt: skip
    return [[t for t, _ in r] for r in results], elapsed, [r[0][1] - began for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--types", default="q8_0,q4_0")
    ap.add_argument("--prompt", type=int, default=300)
    ap.add_argument("--new", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, help="bench_qwen2.py's files (built there when missing)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bfloat16", action="store_true", help="on CUDA: the model in bfloat16")
    ap.add_argument("--compile", action="store_true", help="on CUDA: the steps compiled before they are captured")
    ap.add_argument("--small", action="store_true", help="a 2-layer model: a dry run")
    ap.add_argument("--static", action="store_true", help="on the CPU, CUDA's code path run eagerly (a dry run)")
    args = ap.parse_args()
    global THREADS, ROOM
    THREADS, ROOM = args.threads, args.new
    torch.set_num_threads(1)  # the main thread only waits (as a server's does)
    types = args.types.split(",")
    streams = [int(x) for x in args.streams.split(",")]
    device = torch.device(args.device)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-lanes-"))
    if not all((directory / f"qwen2-{t}.gguf").exists() for t in types):
        build(directory, SHAPE_SMALL if args.small else SHAPE_0_5B, tuple(types))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_model()}, {args.threads} threads"
    dtype = torch.bfloat16 if args.bfloat16 else torch.float32
    print(f"# {where}; prompts of {args.prompt} tokens, {args.new} new tokens each; {str(dtype)[6:]} activations"
          f"{', compiled' if args.compile else ''}")  # fmt: skip
    print("| file | streams | how | all streams tok/s | each stream tok/s | first token, s (median, last) | x |")
    print("|---|---|---|---|---|---|---|")
    for file_type in types:
        path = GGUFFile(directory / f"qwen2-{file_type}.gguf")
        lm = Qwen2Model.from_gguf(path, device, graph=not args.static, max_len=args.prompt + args.new + 1,
                                  dtype=dtype, compile_steps=args.compile)  # fmt: skip
        if args.static and device.type != "cuda":
            lm.use_static_steps(capture=False)
        if device.type == "cuda" or args.static:  # what parallel=N loads there: all streams' steps one captured graph
            lm.use_static_lanes(max(streams), compile=args.compile)
        g = torch.Generator().manual_seed(0)
        for n in streams:
            prompts = [torch.randint(0, 256, (args.prompt,), generator=g).tolist() for _ in range(n)]
            on_a_thread(one_by_one, lm, prompts[:1], 4)  # warm-up: weights touched, graphs built
            together(lm, prompts[:n], 4, quiet=True)
            alone_tokens, alone_s, alone_first = on_a_thread(one_by_one, lm, prompts, args.new)
            lane_tokens, lane_s, lane_first = together(lm, prompts, args.new)
            same = sum(a == b for a, b in zip(alone_tokens, lane_tokens, strict=True))
            forced = forced_difference(lm, prompts, alone_tokens)
            print(f"  ({same} of {n} streams drew the same tokens both ways: a prompt run in chunks, or rows "
                  "stepped together on a GPU, is other arithmetic, and rounding (Q8_0/Q4_0's activations, bfloat16) "
                  "makes its last-bit differences larger; teacher-forced, the lanes' logits are "
                  f"{forced:.1e} (relative) from one by one's)")  # fmt: skip
            total = n * args.new
            for how, seconds, firsts in (("one by one", alone_s, alone_first), ("lanes", lane_s, lane_first)):
                each = args.new / (seconds if how == "lanes" else seconds / n)
                speedup = alone_s / seconds
                print(f"| {file_type} | {n} | {how} | {total / seconds:.1f} | {each:.1f} | "
                      f"{statistics.median(firsts):.2f}, {max(firsts):.2f} | {speedup:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
