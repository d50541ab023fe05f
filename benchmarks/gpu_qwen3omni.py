"""Qwen3-Omni's talker and code predictor on a GPU: ggtts's loop eager and with its steps as captured CUDA graphs,
against transformers' ``generate`` on the same weights, in one run.

    python benchmarks/gpu_qwen3omni.py [--frames 200] [--dir DIR] [--small] [--json OUT.json]

The model is bench_qwen3omni.py's random talker at ``Qwen3-Omni-30B-A3B``'s published shape (20 MoE layers of
width 1024, 128 experts with 6 picked and a shared expert; a 5-layer code predictor writing 15 more codebooks per
frame), converted to an F16 GGUF by ggtts's converter; on a GPU ggtts widens it to float32, and transformers runs
the model it was converted from in float32 (and bfloat16). Every row samples as ``generate`` samples (repetition
penalty, top-k, top-p), EOS held off so each writes exactly ``--frames`` frames of 16 codes, after one warm-up:

- ``transformers generate``: ``Qwen3OmniMoeTalkerForConditionalGeneration.generate`` as the full model calls it;
- ``ggtts eager``: ggtts's generation loop op by op (``step_graphs=False``): each code chosen on the host;
- ``ggtts graph``: the talker's step a replayed CUDA graph over a fixed cache, and the code predictor's whole frame
  (15 steps, each code chosen on the GPU) another: two host round trips per frame; the projections that read the
  same input fused (one product each: queries/keys/values, gate/up, the router with the shared expert's gate);
- ``ggtts unfused`` (asked for in ``--variants``): the graph row with each projection its own product (what the
  fusion alone gains: ~20 % fewer operations a frame by ``benchmarks/step_operations.py``; the norm, rotation,
  mask and pick changes of 2026-12-07 are in both rows);
- ``ggtts compiled`` (asked for in ``--variants``): those two compiled by ``torch.compile`` before the capture;
- ``ggtts lanes N`` (``lanes`` in ``--variants``, N from ``--streams``): N utterances (one prompt, N seeds) made
  together in the talker's static lanes (``parallel=N`` on a GPU: every lane's talker step one captured graph, every
  lane's code-predictor frame another), prompts run whole as they join; frames/s of all streams together, each
  stream's frames/s (12.5 is real time) and the slowest stream's first frame;
- ``decoder`` (in ``--variants``): code2wav's pushes at the published shape, an ordinary stream's (eager) against
  a static stream's (``use_static_streams``: each push size a captured graph): a stream's first push of one frame
  (the first audio's), then pushes of 4 and of 12 frames, each timed over several streams, with the samples'
  largest difference; and the GPU memory that 8 streams' fixed tensors and graphs take (``parallel=8``).

Reported: frames per second (12.5 is real time), the time to the first frame, peak GPU memory; for the graph row,
the largest relative difference of the talker's logits and hidden states from the eager step's over the same inputs
(teacher-forced, greedy), and whether the graphed code-predictor frame chose the host loop's codes. ``--small``
(transformers' tiny test checkpoint) only checks that the script runs, on the CPU too. ``--profile N``: torch's
profiler over the first frame alone (the prompt's prefill with it: what first audio waits for), then over N frames,
of the graph row (host operations, kernels).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_qwen3omni import TALKER_TEXT, _code2wav_model, _convert_talker, _talker_model
from gpu_qwen2 import peak_mib, profile_table, reset_memory, sync

from ggtts.families.qwen3omni.generate import (
    GraphedFrame,
    HFSampler,
    HostFrames,
    TalkerDecoder,
    TalkerSampling,
    generate_frames,
    talker_decoder,
)
from ggtts.families.qwen3omni.lanes import TalkerLanes
from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.gguf import GGUFFile
from ggtts.models.qwen3omni_talker.config import TalkerConfig
from ggtts.models.qwen3omni_talker.model import Talker

PREFILL, TEXT_ROWS = 40, 16
FRAME_RATE = 12.5


def build(directory: Path, small: bool) -> Any:
    """The transformers talker (on the CPU), its GGUF written to ``directory/talker-f16.gguf``."""
    if small:
        from ggtts.convert.hf_checkpoint import HFCheckpoint
        from ggtts.convert.qwen3omni_talker import write_talker
        from ggtts.measure.qwen3omni.upstream import build_tiny_checkpoint

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            upstream = build_tiny_checkpoint(directory / "checkpoint")
        ckpt = HFCheckpoint([directory / "checkpoint"], "tiny Qwen3-Omni")
        write_talker(directory / "talker-f16.gguf", ckpt.config, ckpt.tensors, "f16")
        return upstream.talker.eval()
    talker = _talker_model()
    _convert_talker(directory, talker, _code2wav_model(), ["f16"])
    return talker


def inputs(dim: int, device: torch.device) -> TalkerInputs:
    g = torch.Generator().manual_seed(2)
    rows = (torch.randn(1, n, dim, generator=g) * 0.5 for n in (PREFILL, TEXT_ROWS, 1))
    return TalkerInputs(*(r.to(device) for r in rows))


def transformers_generate(hf: Any, x: TalkerInputs, frames: int, dtype: torch.dtype) -> dict[str, Any]:
    device = x.prefill.device
    base = reset_memory(device)
    model = hf.to(device=device, dtype=dtype)
    vocab = model.config.text_config.vocab_size
    suppressed = list(range(vocab - 1024, vocab))  # EOS too: exactly `frames` frames

    def once(n: int) -> float:
        sync(device)
        t0 = time.perf_counter()
        model.generate(
            inputs_embeds=x.prefill.to(dtype), trailing_text_hidden=x.trailing.to(dtype), tts_pad_embed=x.pad.to(dtype),
            attention_mask=torch.ones(1, PREFILL, dtype=torch.long, device=device), max_new_tokens=n + 1,
            do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05, suppress_tokens=suppressed,
            output_hidden_states=True, return_dict_in_generate=True,
        )  # fmt: skip
        sync(device)
        return time.perf_counter() - t0

    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        once(4)  # warm-up
        first = once(1)
        total = once(frames)
    hf.to(device="cpu", dtype=torch.float32)
    return {"fps": frames / total, "first_frame_ms": first * 1e3, "peak_gpu_mib": peak_mib(device, base)}


def load(path: Path, device: torch.device, graphs: bool, compile: bool = False, fuse: bool = True) -> Talker:
    # ggml's graphs and stored weights (the CPU's) are not for torch.compile: a compiled row widens the file (as a GPU
    # does an F16 one)
    own = compile or not fuse  # static steps set up here rather than by the load
    talker = Talker.from_gguf(GGUFFile(path), device, step_graphs=graphs and not own, max_len=4096,
                              graph=not compile, stored_weights=not compile)  # fmt: skip
    if own and graphs:
        talker.use_static_steps(capture=device.type == "cuda", compile=compile, fuse=fuse)
    talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # EOS held off like the others: exactly `frames`
    talker.cp.cfg = talker.cfg
    return talker


def ggtts_loop(talker: Talker, x: TalkerInputs, frames: int, base: int) -> dict[str, Any]:
    device = x.prefill.device
    params = TalkerSampling(False, talker.cfg.sampling, talker.cfg.cp_sampling, max_frames=frames)

    def once(n: int) -> tuple[float, float]:
        sync(device)
        t0 = time.perf_counter()
        first = 0.0
        for i, _ in enumerate(generate_frames(talker, x, dataclasses.replace(params, max_frames=n))):
            if i == 0:
                first = time.perf_counter() - t0
        return first, time.perf_counter() - t0

    _, warm = once(4)  # warm-up: kernels chosen, graphs captured (compiled first where asked)
    first, total = once(frames)
    captured = bool(talker.static and talker.static.captured)
    return {"fps": frames / total, "first_frame_ms": first * 1e3, "peak_gpu_mib": peak_mib(device, base),
            "captured": captured, "warm_up_s": warm}  # fmt: skip


def decoder_pushes(path: Path, device: torch.device, streams: int = 5) -> list[str]:
    """code2wav's pushes (1 frame first, then 4, then 12), ordinary and static, each timed: one line a row."""
    from ggtts.families.qwen3omni.pipeline import DECODER_GRAPH_FRAMES
    from ggtts.models.qwen3omni_code2wav.model import Code2Wav

    code2wav = Code2Wav.from_gguf(GGUFFile(path), device)
    q = code2wav.cfg.num_quantizers
    codes = torch.randint(0, code2wav.cfg.codebook_size, (1, q, 17), generator=torch.Generator().manual_seed(3))
    codes = codes.to(device)
    pushes = ((0, 1), (1, 4), (5, 12))

    def run(make: Any) -> tuple[list[float], torch.Tensor]:
        times = [0.0] * len(pushes)
        out = torch.empty(0)
        for i in range(streams + 1):  # the first: warm-up (graphs captured)
            stream, parts = make(), []
            for j, (a, n) in enumerate(pushes):
                sync(device)
                t0 = time.perf_counter()
                parts.append(stream.push(codes[..., a : a + n]))
                sync(device)
                times[j] += (time.perf_counter() - t0) * 1e3 / streams if i else 0.0
            out = torch.cat(parts, dim=-1)
        return times, out

    with torch.inference_mode():
        plain, want = run(code2wav.stream)
        code2wav.use_static_streams(q, DECODER_GRAPH_FRAMES, capture=device.type == "cuda")
        static, got = run(code2wav.fresh_stream)
    diff = float((got.float() - want.float()).abs().max() / want.float().abs().max())
    names = ", ".join(f"{'first' if a == 0 else 'then'} {n}" for a, n in pushes)
    return [
        f"code2wav pushes ({names}), ms each, over {streams} streams:",
        f"  ordinary (eager)   {'  '.join(f'{t:7.2f}' for t in plain)}",
        f"  static (graphs)    {'  '.join(f'{t:7.2f}' for t in static)}   largest difference {diff:.1e}",
        decoder_lanes_memory(code2wav, device),
    ]


def decoder_lanes_memory(code2wav: Any, device: torch.device, lanes: int = 8) -> str:
    """GPU memory that ``lanes`` streams' fixed tensors and captured pushes take (``parallel=8``: what the warm-up
    makes, 5 graphs a stream, each with its own memory pool)."""
    from ggtts.families.qwen3omni.pipeline import DECODER_GRAPH_FRAMES

    q = code2wav.cfg.num_quantizers
    code2wav.static = None
    if device.type != "cuda":
        return f"  {lanes} streams' fixed lanes: GPU memory not measured on the CPU"
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(device)
    with torch.inference_mode():
        code2wav.use_static_streams(q, DECODER_GRAPH_FRAMES, capture=True, streams=lanes)
        code2wav.static.prepare(1)
    torch.cuda.synchronize(device)
    mib = (torch.cuda.memory_reserved(device) - before) / 2**20
    return f"  {lanes} streams' fixed lanes made and captured (parallel={lanes}'s warm-up): {mib:.0f} MiB reserved"


def ggtts_lanes(talker: Talker, x: TalkerInputs, frames: int, streams: int, base: int) -> dict[str, Any]:
    """``streams`` utterances at once in the talker's static lanes (set up for that many by the caller)."""
    device = x.prefill.device
    params = TalkerSampling(False, talker.cfg.sampling, talker.cfg.cp_sampling, max_frames=frames)
    lanes = TalkerLanes(talker, prefill_chunk=1 << 20)  # prompts whole as they join

    def once(n: int) -> tuple[float, float]:
        sync(device)
        t0 = time.perf_counter()
        for seed in range(streams):
            lanes.add(talker_decoder(talker, x, dataclasses.replace(params, max_frames=n, seed=seed)))
        firsts: dict[int, float] = {}
        while lanes.lanes:
            for lane, _ in lanes.step():
                firsts.setdefault(id(lane), time.perf_counter() - t0)
        sync(device)
        return max(firsts.values()), time.perf_counter() - t0

    _, warm = once(4)  # warm-up: the lanes' graphs captured
    first, total = once(frames)
    captured = bool(talker.lanes and talker.lanes.captured)
    return {"fps": streams * frames / total, "per_stream_fps": frames / total, "first_frame_ms": first * 1e3,
            "peak_gpu_mib": peak_mib(device, base), "captured": captured, "warm_up_s": warm}  # fmt: skip


def forced_difference(eager: Talker, graph: Talker, x: TalkerInputs, frames: int) -> dict[str, Any]:
    """Greedy, both talkers stepping on the eager run's inputs: the largest relative difference of the talker's
    logits and hidden states, and the frames whose graphed code-predictor codes equal the host loop's."""
    cfg = eager.cfg
    first = HFSampler(cfg.sampling, True, torch.Generator())
    rest = HFSampler(cfg.cp_sampling, True, torch.Generator())
    worst, same = 0.0, 0
    with torch.inference_mode():
        a = TalkerDecoder(eager, x, frames, first, HostFrames(eager.cp, rest))
        b = TalkerDecoder(graph, x, frames, first, HostFrames(graph.cp, rest))
        graphed = GraphedFrame(graph.cp, cfg.cp_sampling, greedy=True, seed=0)
        a.prefill()
        b.prefill()
        for step in range(frames):
            for ours, theirs in ((b.logits, a.logits), (b.hidden, a.hidden)):
                worst = max(worst, float((ours.float() - theirs).abs().max() / theirs.abs().max()))
            frame = a.draw(step)
            assert frame is not None
            codes, _ = graphed(a.hidden, eager.embed_codes(frame[0]))
            same += int(codes == frame[1:])
            b.next_input = a.next_input
            a.feed(frame)
            b.feed(frame)
    return {"max_rel_diff": worst, "cp_frames_equal": same, "forced_frames": frames}


def _shape(path: Path) -> tuple[int, int]:
    talker = TalkerConfig.from_gguf(GGUFFile(path)).talker
    return talker.dim, talker.n_layers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", default="transformers,eager,graph", help="which rows to run")
    ap.add_argument("--profile", type=int, default=0, help="torch's profiler over this many frames of the graph row")
    ap.add_argument("--streams", default="2,4,8", help="the lanes rows' numbers of streams")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gpu-qwen3omni-"))
    want = set(args.variants.split(","))
    t0 = time.perf_counter()
    path = directory / "talker-f16.gguf"
    full = (TALKER_TEXT["hidden_size"], TALKER_TEXT["num_hidden_layers"])
    if path.exists() and (full == _shape(path)) == args.small:  # another run's file, of the other size: not this one
        path.unlink()
    # the transformers model: for its rows, or to write the file (a step before in the same --dir wrote it)
    hf = build(directory, args.small) if "transformers" in want or not path.exists() else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; built and converted in {time.perf_counter() - t0:.0f} s")
    print(f"talker + code predictor, {args.frames} frames of 16 codes, sampled, prefill {PREFILL} rows")
    x = inputs(TalkerConfig.from_gguf(GGUFFile(path)).talker.dim, device)
    rows: dict[str, dict[str, Any]] = {}

    def report(label: str, r: dict[str, Any]) -> None:
        rows[label] = r
        ref = rows.get("transformers generate float32", {}).get("fps", float("nan"))
        extra = ""
        if "max_rel_diff" in r:
            extra = (f"  vs eager: logits/hidden {r['max_rel_diff']:.1e}, graphed code-predictor frames equal "
                     f"{r['cp_frames_equal']}/{r['forced_frames']}")  # fmt: skip
        if "per_stream_fps" in r:
            one = rows.get("ggtts graph float32", {}).get("fps", float("nan"))
            extra += f"  each stream {r['per_stream_fps']:.1f} frames/s, {r['fps'] / one:.2f}x one by one (graph)"
        if "captured" in r:
            extra += f"  captured {r['captured']}, load {r['load_s']:.1f} s, warm-up {r['warm_up_s']:.1f} s"
        print(f"{label:30} {r['fps']:9.1f} {r['fps'] / FRAME_RATE:11.2f} {r['fps'] / ref:19.2f} "
              f"{r['first_frame_ms']:15.1f} {r['peak_gpu_mib']:13.0f}{extra}", flush=True)  # fmt: skip

    print(f"{'variant':30} {'frames/s':>9} {'x real time':>11} {'x transformers f32':>19} {'first frame ms':>15} "
          f"{'peak GPU MiB':>13}", flush=True)  # fmt: skip
    dtypes = (torch.float32, torch.bfloat16) if "transformers" in want else ()
    if dtypes:
        try:
            report("transformers generate float32", transformers_generate(hf, x, args.frames, dtypes[0]))
        except Exception:  # a failed variant is reported; the others still run
            traceback.print_exc()
    eager = None
    for how in ("eager", "graph", "unfused", "compiled"):
        if how not in want:
            continue
        try:
            base = reset_memory(device)
            t = time.perf_counter()
            talker = load(path, device, graphs=how != "eager", compile=how == "compiled", fuse=how != "unfused")
            loaded = time.perf_counter() - t
            with torch.inference_mode():
                r = {**ggtts_loop(talker, x, args.frames, base), "load_s": loaded}
            if how == "eager":
                eager = talker
            elif eager is not None:
                r.update(forced_difference(eager, talker, x, min(args.frames, 48)))
            report(f"ggtts {how} float32", r)
            if how in ("graph", "compiled") and args.profile:
                for n in (1, args.profile):  # the first frame alone (the prompt's prefill and one frame), then n
                    params = TalkerSampling(False, talker.cfg.sampling, talker.cfg.cp_sampling, max_frames=n)
                    run = functools.partial(list, generate_frames(talker, x, params))
                    print(f"# profile of {how}: {n} frame{'s' if n > 1 else ''} from the prompt")
                    with torch.inference_mode():
                        print(profile_table(run))
            del talker
        except Exception:
            traceback.print_exc()
    del eager
    if "decoder" in want:
        try:
            for line in decoder_pushes(path, device):
                print(line, flush=True)
        except Exception:
            traceback.print_exc()
    for n in [int(v) for v in args.streams.split(",")] if "lanes" in want else ():
        try:
            base = reset_memory(device)
            t = time.perf_counter()
            talker = load(path, device, graphs=True)
            talker.use_static_lanes(n, capture=device.type == "cuda")
            loaded = time.perf_counter() - t
            with torch.inference_mode():
                report(f"ggtts lanes {n} float32", {**ggtts_lanes(talker, x, args.frames, n, base), "load_s": loaded})
            del talker
        except Exception:
            traceback.print_exc()
    for dtype in dtypes[1:]:  # last: the rows above do not wait on it
        try:
            report(f"transformers generate {str(dtype).removeprefix('torch.')}",
                   transformers_generate(hf, x, args.frames, dtype))  # fmt: skip
        except Exception:
            traceback.print_exc()
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
