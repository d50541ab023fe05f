"""Continuous batching of Magpie on the CPU: N streams at the real 357M shape (bench_magpie.py's random files, built
by NeMo and converted by ggtts), decoded one after another as a server with one model serves them (``parallel``
1), then together in a lane loop (``parallel=N``: :mod:`ggtts.families.magpie.lanes`), each stream asked from a thread
of its own as the server's requests ask.

    python benchmarks/bench_magpie_lanes.py [--streams 1,2,4] [--frames 86] [--kind q8_0] [--guidance on|off]
        [--codec] [--threads 2] [--dir DIR] [--shape 357m|357m-v2602]

Each stream: its own text (random token ids, 38-44 tokens), its own speaker and seed, sampled as the file says,
EOS held off so that it writes exactly ``--frames`` codec frames (86 = 4 s; 21.5 frames/s is real time). Printed per
N: all streams' frames per second, each stream's own (its frames over the time from its request to its last frame:
a stream queued behind others counts its wait), and when its first frame came; in the lanes, how many
streams wrote exactly the codes they write one by one. ``--codec``: each stream's codes also
go through its own nano-codec stream as the pipeline pushes them (the first frame alone, then 4, then 12 a push), on
the thread that decodes, as a server does; without it, the model's frames only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
from bench_magpie import REAL_TIME_FPS, SHAPES, build, check_shape

from ggtts.measure.bench import cpu_model

TEXT_TOKENS = 38  # the first stream's; each next one's two more


class Stream:
    """One stream's work for the lane loop (or alone): its decoding, when each frame came, and its codec stream."""

    def __init__(self, model: Any, codec: Any, params: Any, ids: list[int], speaker: int) -> None:
        from ggtts.families.magpie.generate import MagpieGenerator

        generator = MagpieGenerator(model, params)
        self.utterance, self.steps = generator.utterance(ids, speaker), generator.steps
        self.codec = None if codec is None else codec.stream()
        self.times: list[float] = []
        self.codes: list[torch.Tensor] = []
        self.frames = 0
        self.pending: list[torch.Tensor] = []
        self.pushed = 0

    def on_frame(self, codes: torch.Tensor) -> list[int]:
        from ggtts.families.magpie.pipeline import chunk_frames

        self.frames += codes.shape[1]
        self.times.append(time.perf_counter())
        self.codes.append(codes)
        if self.codec is not None:
            if not self.pushed:  # the pipeline's chunking: the very first frame at once, then chunk_frames()
                self.codec.push(codes[:, :1])
                self.pushed, codes = 1, codes[:, 1:]
            self.pending.append(codes)
            waiting = sum(c.shape[1] for c in self.pending)
            if waiting >= chunk_frames(self.pushed):
                self.on_end()
        return [codes.shape[1]]

    def on_end(self) -> list[int]:
        if self.codec is not None and self.pending:
            codes = torch.cat(self.pending, dim=1)
            if codes.shape[1]:
                self.codec.push(codes)
                self.pushed += codes.shape[1]
            self.pending = []
        return []


def run(model: Any, codec: Any, params: list[Any], texts: list[list[int]], parallel: int) -> list[dict[str, Any]]:
    """The streams, asked at once from threads of their own: ``parallel`` 1 one after another (a model's lock, as
    the server's worker takes them), else in a lane loop of ``parallel`` lanes."""
    from ggtts.families.magpie.lanes import MagpieLanes
    from ggtts.runtime.frames import decode_frames
    from ggtts.runtime.lanes import LaneLoop

    n = len(texts)
    loop = LaneLoop(MagpieLanes(), parallel, threads=torch.get_num_threads()) if parallel > 1 else None
    lock = threading.Lock()
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    start = time.perf_counter()

    def one(i: int) -> None:
        def make() -> Stream:
            return Stream(model, codec, params[i], texts[i], i % model.cfg.n_speakers)

        if loop is not None:
            box: list[Stream] = []

            def made() -> Stream:
                box.append(make())
                return box[0]

            for _ in loop.run(made):
                pass
            stream = box[0]
        else:
            with lock, torch.inference_mode():
                stream = make()
                for codes in decode_frames(stream.utterance, stream.steps):
                    stream.on_frame(codes)
                stream.on_end()
        end = stream.times[-1]
        out[i] = {"frames": stream.frames, "fps": stream.frames / (end - start), "first": stream.times[0] - start,
                  "end": end - start, "codes": torch.cat(stream.codes, dim=1)}  # fmt: skip

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if loop is not None:
        loop.close()
    return out


def same(r: list[dict[str, Any]], alone: list[torch.Tensor]) -> str:
    """How many streams wrote the codes they write one by one (known once the most streams ran one by one)."""
    if not alone:
        return "-"
    return f"{sum(torch.equal(x['codes'], a) for x, a in zip(r, alone, strict=False))}/{len(r)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--frames", type=int, default=86)
    ap.add_argument("--kind", default="q8_0", choices=("f32", "q8_0"))
    ap.add_argument("--guidance", choices=("on", "off"), default="on")
    ap.add_argument("--codec", action="store_true", help="each stream's codes through its own codec stream too")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path, help="bench_magpie.py's files (built there when missing)")
    ap.add_argument("--shape", choices=SHAPES, default="357m")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="magpie-lanes-"))
    if not (directory / f"magpie-357m-{args.kind}.gguf").exists():
        print(f"building the {args.shape} files in {directory} (NeMo) ...", file=sys.stderr)
        build(directory, args.shape)
    check_shape(directory, args.shape)

    from ggtts.families.magpie.generate import GenerationParams
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import load_magpie
    from ggtts.models.nanocodec.model import NanoCodec

    model = load_magpie(GGUFFile(directory / f"magpie-357m-{args.kind}.gguf"))
    model.null_context_kv()
    codec = NanoCodec.from_gguf(GGUFFile(directory / "codec.gguf")) if args.codec else None
    d = model.cfg.inference
    streams = [int(s) for s in args.streams.split(",")]
    most = max(streams)
    texts = [
        [(7 * j + i) % TEXT_TOKENS for j in range(TEXT_TOKENS + 2 * i)] + [model.cfg.text_eos_id] for i in range(most)
    ]
    params = [
        GenerationParams(temperature=d.temperature, top_k=d.top_k, cfg_scale=d.cfg_scale if args.guidance == "on"
                         else None, max_frames=args.frames, min_frames=args.frames + 1, seed=i)
        for i in range(most)
    ]  # fmt: skip
    run(model, codec, params[:1], texts[:1], 1)  # warm-up: ggml's graphs of one utterance
    print(f"Magpie {args.shape} {args.kind}, guidance {args.guidance}, {args.frames} frames a stream"
          f"{', codec streamed' if args.codec else ''}; {args.threads} threads, {cpu_model()}; "
          f"{REAL_TIME_FPS:.1f} frames/s is real time")  # fmt: skip
    print("| streams | how | all frames/s | each stream's frames/s | first frame s | last done s | codes as alone |")
    print("|---|---|---|---|---|---|---|")
    alone: list[torch.Tensor] = []
    for n in sorted(streams, reverse=True):  # the most first: each stream's codes one by one, then compared
        for how, parallel in (("one by one", 1), ("lanes", n)):
            if how == "lanes" and n == 1:
                continue
            if how == "lanes":
                run(model, codec, params[:n], texts[:n], parallel)  # warm-up: the lanes' graphs of these texts
            r = run(model, codec, params[:n], texts[:n], parallel)
            if how == "one by one" and n == max(streams):
                alone = [x["codes"] for x in r]
            total = sum(x["frames"] for x in r) / max(x["end"] for x in r)
            each = [x["fps"] for x in r]
            first = [x["first"] for x in r]
            spread = f"{min(each):.1f}-{max(each):.1f} (median {statistics.median(each):.1f})"
            done = max(x["end"] for x in r)
            print(f"| {n} | {how} | {total:.1f} | {spread} | {min(first):.2f}-{max(first):.2f} | {done:.2f} "
                  f"| {same(r, alone)} |")  # fmt: skip


if __name__ == "__main__":
    main()
