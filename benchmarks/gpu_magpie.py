"""Magpie TTS on a GPU: ggtts's generation loop eager and with its steps as captured CUDA graphs, in one run.

    python benchmarks/gpu_magpie.py --skeletons DIR [--frames 200] [--json OUT.json]
    python benchmarks/gpu_magpie.py --small          # a tiny NeMo model: checks that the script runs (CPU too)

The model is bench_magpie.py's 357M shape (12-layer decoder of width 768, a 2-layer local transformer, 8 codebooks,
frame stacking 2) and its nano codec (864 channels, 1024 samples a frame at 22.05 kHz), rebuilt with random weights
from skeletons of bench_magpie's files (``gguf_skeleton.py save``: their headers and each tensor's mean and
deviation; a GPU machine has no NeMo to build them). Every row samples as NeMo's inference config does (temperature,
top-k 80, the attention prior), EOS held off so each writes exactly ``--frames`` frames, 40 text tokens, after a
warm-up on another text as a server's:

- ``ggtts eager``: the loop op by op (``step_graphs=False``): each code drawn on the host, a wait per code;
- ``ggtts graph``: each cached decoder step (guidance's two rows) one replayed CUDA graph over a fixed cache, the
  local transformer's frame (16 draws, on the GPU) another: one wait per frame; the codec's pushes over fixed
  tensors too, each a few replayed graphs (``models/nanocodec/static_stream.py``: pushes of 12, 4, 2, 1 frames);
- ``ggtts codec-eager``: the graph row with the codec's pushes eager, as before 2026-12-07 (what its graphs gain);
- ``ggtts compiled``: those two steps compiled by ``torch.compile`` (small kernels fused) before they are captured.

``--profile N``: torch's profiler over N frames of the last graphed row with guidance (host operations, kernels).

Reported: model frames per second (21.5 is real time; the loop alone, codes kept on the device), real-time factor
and time to first audio with the codec streaming on the same GPU (the pipeline's chunks: 1 frame, then 4, then 12),
peak GPU memory; and, greedy, the frames both ways agree on before they part (two arithmetic paths: a near-tie may
go either way).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_magpie import streamed_utterance
from gguf_skeleton import build as build_from_skeleton
from gpu_qwen2 import peak_mib, profile_table, reset_memory, sync

from ggtts.families.magpie.generate import GenerationParams, generate_codes
from ggtts.families.magpie.pipeline import STREAM_GRAPH_FRAMES
from ggtts.gguf import GGUFFile
from ggtts.models.magpie.model import MagpieTTS, load_magpie
from ggtts.models.nanocodec.model import NanoCodec

TEXT_TOKENS = 40
REAL_TIME_FPS = 22_050 / 1024
AGREE_STEPS = 48


def build(directory: Path, skeletons: Path | None) -> tuple[Path, Path]:
    """The model's and the codec's files in ``directory``: from skeletons, or (``--small``) a tiny NeMo model."""
    model, codec = directory / "magpie.gguf", directory / "codec.gguf"
    if skeletons is not None:
        build_from_skeleton(skeletons / "magpie-357m-f32.json", model)
        build_from_skeleton(skeletons / "codec.json", codec)
        return model, codec
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie

    nemo_codec = build_tiny_codec(directory / "codec.nemo", seed=0)
    convert_magpie([build_tiny_magpie(directory / "tiny.nemo", nemo_codec, seed=0)], model, "f32")
    convert_nanocodec([nemo_codec], codec, "f32")
    return model, codec


def params(model: MagpieTTS, frames: int, guidance: bool, greedy: bool = False) -> GenerationParams:
    d = model.cfg.inference
    return GenerationParams(
        temperature=0.0 if greedy else d.temperature, top_k=d.top_k, cfg_scale=d.cfg_scale if guidance else None,
        prior=True, prior_layers=d.prior_layers, alignment_layers=d.alignment_layers, max_frames=frames,
        min_frames=frames + 1, seed=0,
    )  # fmt: skip


def utterance(model: MagpieTTS, codec: NanoCodec, p: GenerationParams, ids: list[int]) -> dict[str, float]:
    """One utterance streamed through the codec as the pipeline chunks it (bench_magpie's, each push waited for):
    frames, model seconds (the codec's pushes after the first taken out), total seconds, first audio seconds."""
    sync(model.text_embedding.weight.device)
    n, model_s, total_s, first_s = streamed_utterance(
        model, codec, p, ids, p.max_frames, wait=lambda audio: float(audio[..., -1])
    )
    return {"frames": n, "model_s": model_s, "total_s": total_s, "first_s": first_s}


def run(model_path: Path, codec_path: Path, device: torch.device, how: str, guidance: bool, frames: int) -> Any:
    base = reset_memory(device)
    t0 = time.perf_counter()
    graphs, compiled = how in ("graph", "compiled", "codec-eager"), how == "compiled"
    model = load_magpie(GGUFFile(model_path), device, graph=False, step_graphs=graphs, compile_steps=compiled)
    if graphs and device.type != "cuda":  # ggml's graphs are the CPU's; here, the CUDA graphs' code run eagerly
        model.use_static_steps(capture=False, compile=compiled)
    codec = NanoCodec.from_gguf(GGUFFile(codec_path), str(device))
    if graphs and how != "codec-eager":  # as the pipeline does for a model whose steps are graphs
        codec.use_static_streams(STREAM_GRAPH_FRAMES, capture=device.type == "cuda")
    model.null_context_kv()
    load = time.perf_counter() - t0
    eos = model.cfg.text_eos_id
    ids = [*range(TEXT_TOKENS), eos]
    with torch.inference_mode():
        t = time.perf_counter()
        generate_codes(model, [5, 6, 7, eos], 0, params(model, 8, guidance))  # warm-up: kernels chosen, graphs made
        sync(device)
        warm = time.perf_counter() - t
        t = time.perf_counter()
        n = generate_codes(model, ids, 0, params(model, frames, guidance)).shape[1]
        sync(device)
        out = {"model_fps": n / (time.perf_counter() - t)}
        try:  # with the codec streaming, as the pipeline runs
            utterance(model, codec, params(model, 8, guidance), [5, 6, 7, eos])
            r = utterance(model, codec, params(model, frames, guidance), ids)
            out.update(streamed_fps=r["frames"] / r["model_s"], rtf=r["total_s"] / (r["frames"] / REAL_TIME_FPS),
                       first_audio_ms=r["first_s"] * 1e3)  # fmt: skip
        except Exception:
            traceback.print_exc()
    decoders = model.static_steps()
    out.update(peak_gpu_mib=peak_mib(device, base), load_s=load, warm_up_s=warm,
               captured=bool(decoders and decoders.captured),
               codec_captured=bool(codec.static and codec.static.captured))  # fmt: skip
    return model, out


def agreement(eager: MagpieTTS, graph: MagpieTTS, guidance: bool) -> dict[str, Any]:
    """Greedy codes both ways over AGREE_STEPS steps: how many frames agree before the first that differs."""
    ids = [*range(TEXT_TOKENS), eager.cfg.text_eos_id]
    frames = AGREE_STEPS * eager.cfg.frame_stacking
    a = generate_codes(eager, ids, 0, params(eager, frames, guidance, greedy=True)).cpu()
    b = generate_codes(graph, ids, 0, params(graph, frames, guidance, greedy=True)).cpu()
    differ = (a != b).any(dim=0).nonzero()
    return {"greedy_frames_agreeing": int(differ[0]) if len(differ) else frames, "greedy_frames": frames}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skeletons", type=Path, help="folder of magpie-357m-f32.json and codec.json")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--variants", default="eager,graph", help="of eager, graph, codec-eager, compiled")
    ap.add_argument("--guidance", default="on,off")
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    if not args.small and args.skeletons is None:
        ap.error("give --skeletons DIR, or --small")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gpu-magpie-"))
    t0 = time.perf_counter()
    model_path, codec_path = build(directory, None if args.small else args.skeletons)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; files built in {time.perf_counter() - t0:.0f} s")
    print(f"{args.frames} frames, {TEXT_TOKENS} text tokens, sampled, attention prior on")
    print(f"{'variant':32} {'frames/s':>9} {'x real time':>11} {'RTF':>7} {'first audio ms':>15} {'peak GPU MiB':>13}")
    rows: dict[str, dict[str, Any]] = {}
    profiled: MagpieTTS | None = None
    for guidance in (g == "on" for g in args.guidance.split(",")):
        models: dict[str, MagpieTTS] = {}
        for how in args.variants.split(","):
            label = f"ggtts {how}, guidance {'on' if guidance else 'off'}"
            try:
                model, r = run(model_path, codec_path, device, how, guidance, args.frames)
                models[how] = model
                if guidance and how != "eager":
                    profiled = model
                if how != "eager" and "eager" in models:
                    with torch.inference_mode():
                        r.update(agreement(models["eager"], model, guidance))
                rows[label] = r
                extra = f"  load {r['load_s']:.1f} s, warm-up {r['warm_up_s']:.1f} s, captured {r['captured']}"
                extra += f", codec captured {r['codec_captured']}"
                if "greedy_frames_agreeing" in r:
                    extra += f", greedy frames agreeing with eager {r['greedy_frames_agreeing']}/{r['greedy_frames']}"
                print(f"{label:32} {r['model_fps']:9.1f} {r['model_fps'] / REAL_TIME_FPS:11.1f} "
                      f"{r.get('rtf', float('nan')):7.3f} {r.get('first_audio_ms', float('nan')):15.1f} "
                      f"{r['peak_gpu_mib']:13.0f}{extra}", flush=True)  # fmt: skip
            except Exception:  # a failed variant is reported; the others still run
                traceback.print_exc()
        del models
    if args.profile and profiled is not None:
        ids, model = [*range(TEXT_TOKENS), profiled.cfg.text_eos_id], profiled
        with torch.inference_mode():
            print(profile_table(lambda: generate_codes(model, ids, 0, params(model, args.profile, True))))
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
