"""Magpie TTS at the real 357M shape (random weights), ggtts against NeMo in one run: frames per second of the
model (encoder, decoder, local transformer, sampling), real-time factor with the nano codec, time to first audio,
peak memory.

    python benchmarks/bench_magpie.py [--frames 86] [--threads 2] [--dir DIR] [--peers ggtts-f32,ggtts-q8_0,nemo]

The model and codec are built by NeMo at the released shapes (``REAL_357M``: d_model 768, 6 encoder and 12 decoder
layers, a 2-layer local transformer of width 768, 2 stacked frames of 8 codebooks, 217 context frames; the nano
codec: 8 FSQ groups, 864 channels upsampled 8 x 8 x 4 x 2 x 2 = 1024 samples per frame at 22.05 kHz), saved as
``.nemo``, and converted by ggtts to f32 and q8_0 GGUF files. Each peer runs in its own process (its peak memory is
its own) on the same 41 text tokens with guidance on, then off: EOS is held off so every peer writes exactly
``--frames`` codec frames (86 = 4.0 s of audio; 21.5 frames/s is real time).

- ggtts is warmed up first as ``ggtts serve`` warms a model (a few frames of another text), then streams as its
  pipeline does (the very first frame at once, then 4 frames, then 12 a chunk; ``ggtts-q8_0-chunks4``: 4 frames a
  chunk throughout, as ``chunk_frames=4`` does and as the pipeline did before), twice: first audio is when the
  first chunk's samples exist, for a text length it has not seen ("first audio": ggml builds its graphs for the
  new input length) and for the same text once more ("again");
- NeMo runs ``infer_batch`` with the local transformer as ``do_tts`` does, then its codec; it gives no audio before
  the end, and it is not warmed up. ``nemo``: the decoder uncached, as ``do_tts`` and the released config run it;
  ``nemo-cached``: with its KV cache (``use_kv_cache_for_inference``, as its batch inference runner sets it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ggtts.measure.bench import cpu_model

TEXT_TOKENS = 40  # plus EOS: a sentence of about ten words
PEERS = ("ggtts-f32", "ggtts-q8_0", "nemo", "nemo-cached")
REAL_TIME_FPS = 22_050 / 1024


def build(directory: Path) -> None:
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import REAL_357M, build_tiny_magpie

    directory.mkdir(parents=True, exist_ok=True)
    codec = build_tiny_codec(
        directory / "codec.nemo", num_groups=8, samples_per_frame=1024, decoder_channels=864,
        up_sample_rates=[8, 8, 4, 2, 2],
    )  # fmt: skip
    model = build_tiny_magpie(directory / "magpie-357m.nemo", codec, shape=REAL_357M)
    for t in ("f32", "q8_0"):
        convert_magpie([model], directory / f"magpie-357m-{t}.gguf", t)
    convert_nanocodec([codec], directory / "codec.gguf", "f32")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ggtts(directory: Path, kind: str, frames: int, guidance: bool, chunk: int | None = None) -> dict[str, float]:
    from ggtts.families.magpie.generate import GenerationParams, MagpieGenerator
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import load_magpie
    from ggtts.models.nanocodec.model import NanoCodec

    t0 = time.perf_counter()
    model = load_magpie(GGUFFile(directory / f"magpie-357m-{kind}.gguf"))
    codec = NanoCodec.from_gguf(GGUFFile(directory / "codec.gguf"))
    model.null_context_kv()  # as the pipeline does at load: guidance's null row over the context, once per model
    load = time.perf_counter() - t0
    warm = GenerationParams(max_frames=4, min_frames=5, cfg_scale=model.cfg.inference.cfg_scale if guidance else None)
    for codes in MagpieGenerator(model, warm).frames([1, 2, 3, model.cfg.text_eos_id], 1):  # as a server's warm-up
        codec.stream().push(codes)
    ids = [*range(TEXT_TOKENS), model.cfg.text_eos_id]
    d = model.cfg.inference
    params = GenerationParams(
        temperature=d.temperature, top_k=d.top_k, cfg_scale=d.cfg_scale if guidance else None, prior=True,
        max_frames=frames, min_frames=frames + 1, seed=0,
    )  # fmt: skip
    measured = [_utterance(model, codec, params, ids, frames, chunk) for _ in range(2)]  # a new length, then again
    n, model_time, total, first = measured[0]
    return {"frames": n, "model_fps": n / model_time, "rtf": total / (n / REAL_TIME_FPS), "first_audio": first,
            "first_again": measured[1][3], "load": load, "peak_mib": peak_mib()}  # fmt: skip


def _utterance(
    model: Any, codec: Any, params: Any, ids: list[int], frames: int, chunk: int | None
) -> tuple[int, float, float, float]:
    """(frames, model seconds, total seconds, first-audio seconds) of one streamed utterance, chunked as the pipeline
    chunks it (``chunk``: as ``chunk_frames=chunk`` does)."""
    from ggtts.families.magpie.generate import MagpieGenerator
    from ggtts.families.magpie.pipeline import chunk_frames

    stream = codec.stream()
    start = time.perf_counter()
    first = model_time = 0.0
    n = pushed = 0
    pending = []
    for codes in MagpieGenerator(model, params).frames(ids, 0):
        pending.append(codes)
        n += codes.shape[1]
        if not first:  # the pipeline's chunking: the very first frame at once, then chunk_frames()
            stream.push(pending[0][:, :1])
            first = time.perf_counter() - start
            pending, pushed = [pending[0][:, 1:]], 1
        waiting = sum(c.shape[1] for c in pending)
        if waiting >= (chunk or chunk_frames(pushed)) or n == frames:
            t = time.perf_counter()
            stream.push(torch.cat(pending, dim=1))
            model_time -= time.perf_counter() - t  # the codec's share, counted apart
            pending, pushed = [], pushed + waiting
    total = time.perf_counter() - start
    return n, model_time + total, total, first


def run_nemo(directory: Path, frames: int, guidance: bool, cached: bool) -> dict[str, float]:
    import warnings

    warnings.filterwarnings("ignore")
    from nemo.collections.tts.models import MagpieTTSModel

    t0 = time.perf_counter()
    model = MagpieTTSModel.restore_from(str(directory / "magpie-357m.nemo"), map_location="cpu").eval()
    load = time.perf_counter() - t0
    p = model.inference_parameters
    p.max_decoder_steps, p.min_generated_frames = frames, frames + 1
    model.use_kv_cache_for_inference = cached
    text = torch.tensor([[*range(TEXT_TOKENS), model.eos_id]])
    batch = {"text": text, "text_lens": torch.tensor([text.shape[1]]), "speaker_indices": 0}
    start = time.perf_counter()
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet  # infer_batch prints every 20 steps
        try:
            out = model.infer_batch(batch, use_cfg=guidance, use_local_transformer_for_inference=True)
        finally:
            sys.stdout = stdout
    total = time.perf_counter() - start
    n = int(out.predicted_codes_lens[0])
    model_time = out.rtf_metrics["tts_generation_time"]
    return {"frames": n, "model_fps": n / model_time, "rtf": total / (n / REAL_TIME_FPS), "first_audio": total,
            "load": load, "peak_mib": peak_mib()}  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    guidance = args.guidance == "on"
    if args.worker in ("nemo", "nemo-cached"):
        result = run_nemo(args.dir, args.frames, guidance, cached=args.worker == "nemo-cached")
    else:
        kind, _, chunk = args.worker.removeprefix("ggtts-").partition("-chunks")  # ggtts-q8_0-chunks4: fixed
        result = run_ggtts(args.dir, kind, args.frames, guidance, int(chunk) if chunk else None)
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=86)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--guidance", choices=("on", "off", "both"), default="both")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-magpie-"))
    if not (directory / "codec.gguf").exists():
        print(f"building the 357M-shape model and codec in {directory} ...", file=sys.stderr)
        build(directory)
    print(f"CPU: {cpu_model()}; {args.threads} threads; {args.frames} frames ({args.frames / REAL_TIME_FPS:.1f} s)")
    print(f"{'peer':<12}{'guidance':>9}{'frames/s':>10}{'RTF':>8}{'first audio':>13}{'again':>8}{'load s':>8}"
          f"{'peak MiB':>10}")  # fmt: skip
    guidances = ("on", "off") if args.guidance == "both" else (args.guidance,)
    for guidance in guidances:
        for peer in args.peers.split(","):
            cmd = [sys.executable, __file__, "--worker", peer, "--dir", str(directory), "--frames", str(args.frames),
                   "--threads", str(args.threads), "--guidance", guidance]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{peer:<12}{guidance:>9}  failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            again = f"{r['first_again']:.2f}s" if "first_again" in r else "-"
            print(f"{peer:<12}{guidance:>9}{r['model_fps']:>10.2f}{r['rtf']:>8.2f}{r['first_audio']:>12.2f}s"
                  f"{again:>8}{r['load']:>8.1f}{r['peak_mib']:>10.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
