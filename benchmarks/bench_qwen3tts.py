"""Qwen3-TTS at the published 0.6B shape (random weights): ggtts (q8_0, q4_0) against qwen-tts (transformers,
float32) and llama.cpp's ``llama-tts`` (the same q8_0 / q4_0 files), in one run, on ``--threads`` threads.

    python benchmarks/bench_qwen3tts.py [--frames 48] [--threads 2] [--types q8_0,q4_0] [--llama-tts PATH] [--dir DIR]
    python benchmarks/bench_qwen3tts.py --streams 1,2,4 [--frames 48] [--types q8_0,q4_0] [--dir DIR]

Shape (the 0.6B Base config as third-party loaders quote it; the real file is not reachable here): a talker of 28
layers 1024 wide (16 query / 8 key-value heads of 128, feed-forward 3072, M-RoPE 24/20/20), text embeddings
151936 x 2048 through the text projection, a codec vocabulary of 3072; a code predictor of 5 such layers writing
15 more codebooks of 2048; the 12 Hz decoder of 8 layers 512 wide (16 heads, feed-forward 1024, latent 1024,
decoder width 1536, upsampling 2 x 2 x 8 x 5 x 4 x 3 = 1920 samples a frame: 12.5 frames/s is real time); the
ECAPA speaker encoder (a Base model: llama.cpp 11434 loads no other kind of mmproj). qwen-tts builds the model
(seeded, transformers' initialisation), ggtts converts it. Every peer speaks the same sentence, sampled as
``generate`` samples, ``--frames`` frames (random weights rarely draw EOS; the frames each wrote are printed).

The tokenizer's encoder has Mimi's default shape (transformers' ``MimiConfig``: what Qwen's 12 Hz encoder is
built from); after the table, an in-context cloned voice is timed (``voice create --text`` on a 10 s recording, then
speaking with it).

Reported per peer: frames, seconds generating them (talker + code predictor), frames/s, seconds decoding, the
real-time factor of the whole (wall / audio seconds: below 1 is faster than real time) and, for ggtts, the time to
its first audio when it streams. llama-tts reports its own split (``timings:`` line). Where the CPU has native
bfloat16, ggtts runs again with ``precision="bfloat16"`` (the speech decoder's convolutions; rows ``... bf16``).

``--streams N,...``: continuous batching instead (``parallel``, :mod:`ggtts.families.qwen3omni.lanes`): N utterances
of ``--frames`` frames each (the same sentence, a seed each, EOS held off), the talker and code predictor alone,
made one after another and then together in lanes; all streams' frames per second both ways. The files in ``--dir``
are reused when there (built and converted otherwise).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from ggtts.measure.bench import cpu_model

TEXT = "The quick brown fox jumps over the lazy dog, and then it rests in the warm afternoon sun."
SECONDS_PER_FRAME = 0.08
ROPE = {"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True}
PREDICTOR = dict(
    vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, num_code_groups=16, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
    max_position_embeddings=65536, pad_token_id=0,
)  # fmt: skip
ENCODER = {"frame_rate": 12.5, "sampling_rate": 24000}  # Mimi's defaults (transformers' MimiConfig) otherwise
REFERENCE_SECONDS = 10.0  # the cloned voice's recording
DECODER = {
    "codebook_size": 2048, "codebook_dim": 512, "hidden_size": 512, "latent_dim": 1024, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 1024, "num_hidden_layers": 8, "num_quantizers": 16,
    "sliding_window": 72, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "decoder_dim": 1536,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
}  # fmt: skip


def build(directory: Path) -> Any:
    """The 0.6B-shaped Base checkpoint (qwen-tts's classes, seeded), saved as published; returns the model."""
    from safetensors.torch import save_file

    from ggtts.measure.qwen3omni.upstream import build_tokenizer
    from ggtts.measure.qwen3tts.upstream import (
        GENERATION,
        LLAMA_CPP,
        SPECIAL,
        _qwen_rope,
        build_decoder,
        build_encoder,
        import_qwen_tts,
        published_encoder_tensors,
        tiny_config,
    )

    qt = import_qwen_tts()
    directory.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(directory / "tokenizer.json", special=SPECIAL)
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}), encoding="utf-8")
    config = tiny_config(ids, "base", shape=LLAMA_CPP)
    talker = config["talker_config"]
    talker.update(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, text_hidden_size=2048, text_vocab_size=151936,
                  rope_scaling=ROPE, code_predictor_config=PREDICTOR)  # fmt: skip
    config["speaker_encoder_config"] = dict(
        mel_dim=128, enc_dim=1024, enc_channels=[512, 512, 512, 512, 1536], enc_kernel_sizes=[5, 3, 3, 3, 1],
        enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=128, enc_res2net_scale=8, enc_se_channels=128,
    )  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (directory / "generation_config.json").write_text(json.dumps(GENERATION), encoding="utf-8")
    torch.manual_seed(0)
    with _qwen_rope():
        model = qt.models.Qwen3TTSForConditionalGeneration(qt.config.Qwen3TTSConfig(**config)).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))
    decoder = build_decoder(0, DECODER)
    (directory / "speech_tokenizer").mkdir(exist_ok=True)
    tokenizer_config = {"model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": DECODER,
                        "encoder_config": ENCODER, "encoder_valid_num_quantizers": 16,
                        "encode_downsample_rate": 1920}  # fmt: skip
    (directory / "speech_tokenizer" / "config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    tensors = {f"decoder.{k}": v.contiguous() for k, v in decoder.state_dict().items()}
    tensors |= published_encoder_tensors(build_encoder(0, ENCODER))
    save_file(tensors, str(directory / "speech_tokenizer" / "model.safetensors"))
    return model, decoder


def upstream_run(model: Any, decoder: Any, directory: Path, frames: int) -> dict[str, Any]:
    from tokenizers import Tokenizer

    from ggtts.families.qwen3tts.prompt import ROLE

    hf = Tokenizer.from_file(str(directory / "tokenizer.json"))
    ids = torch.tensor([hf.encode(f"{ROLE}{TEXT}<|im_end|>\n{ROLE}").ids])
    start = time.perf_counter()
    with torch.no_grad():
        codes, _ = model.generate(input_ids=[ids], languages=["english"], speakers=[None], non_streaming_mode=True,
                                  max_new_tokens=frames + 1, do_sample=True)  # fmt: skip
    generated = time.perf_counter() - start
    with torch.no_grad():
        decoder(codes[0].T.unsqueeze(0))
    return {
        "frames": int(codes[0].shape[0]),
        "generate_s": generated,
        "decode_s": time.perf_counter() - start - generated,
    }


def ggtts_run(path: Path, frames: int, precision: str = "float32") -> dict[str, Any]:
    import ggtts

    model: Any = ggtts.load(path, precision=precision)
    list(model.stream("Warm up.", max_frames=2))
    start = time.perf_counter()
    first = None
    samples = 0
    for chunk in model.stream(TEXT, language="english", max_frames=frames, seed=1):
        first = first if first is not None else time.perf_counter() - start
        samples += len(chunk.samples)
    total = time.perf_counter() - start
    # the talker and code predictor alone
    from ggtts.families.qwen3omni.generate import generate_frames
    from ggtts.families.qwen3omni.pipeline import talker_sampling
    from ggtts.families.qwen3tts import Qwen3TTSOptions
    from ggtts.models.qwen3tts.config import MIN_FRAMES

    inputs = model._inputs(TEXT, "english", None, None)
    cfg = model.talker.cfg
    params = talker_sampling(cfg.sampling, cfg.cp_sampling, Qwen3TTSOptions(max_frames=frames, seed=1))
    start = time.perf_counter()
    made = list(generate_frames(model.talker, inputs, params, min_frames=MIN_FRAMES))
    generated = time.perf_counter() - start
    codes = torch.tensor(made, dtype=torch.long).T.unsqueeze(0)
    start = time.perf_counter()
    model.decoder(codes)
    decoded = time.perf_counter() - start
    scale = (samples // 1920) / max(len(made), 1)  # the timed runs' frames to the streamed run's
    return {"frames": samples // 1920, "generate_s": generated * scale, "decode_s": decoded * scale,
            "first_s": first, "total_s": total}  # fmt: skip


def clone_run(path: Path, frames: int, precision: str) -> dict[str, Any]:
    """An in-context voice: ``voice create --text`` on a 10 s recording (the speaker and speech encoders, and the
    decoder primed with the recording's frames, its state stored), then the sentence spoken with it twice."""
    import soundfile

    import ggtts
    from ggtts.families.qwen3tts.voices import create_voice
    from ggtts.measure.qwen3tts.upstream import voice_like

    ref = path.with_name("reference.wav")
    soundfile.write(ref, voice_like(REFERENCE_SECONDS, 3), 24_000)
    start = time.perf_counter()
    create_voice(path, ref, path.with_name("cloned.gguf"), text="Some words, said slowly, for ten seconds.")
    created = time.perf_counter() - start
    model: Any = ggtts.load(path, precision=precision)
    out: dict[str, Any] = {"create_s": created}
    for turn in ("first", "again"):
        start, first, samples = time.perf_counter(), None, 0
        for chunk in model.stream(TEXT, voice="cloned", language="english", max_frames=frames, seed=1):
            first = first if first is not None else time.perf_counter() - start
            samples += len(chunk.samples)
        out[turn] = (first, (time.perf_counter() - start) / max(samples / 24_000, 1e-9))
    return out


def llama_run(llama_tts: Path, path: Path, frames: int, threads: int) -> dict[str, Any]:
    mmproj = path.with_name(f"mmproj-{path.name}")
    cmd = [str(llama_tts), "-m", str(path), "-mm", str(mmproj), "-p", TEXT, "-n", str(frames), "-t", str(threads),
           "--tts-lang", "en", "-o", str(path.with_suffix(".llama.wav"))]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        return {"error": run.stderr[-300:]}
    made = re.search(r"generated (\d+) frames", run.stderr)
    times = re.search(
        r"prompt eval ([\d.]+)s \+ generation ([\d.]+)s \+ vocoder ([\d.]+)s = total ([\d.]+)s", run.stderr
    )
    if not made or not times:
        return {"error": "no timings in llama-tts's output"}
    p, g, v, t = (float(x) for x in times.groups())
    return {"frames": int(made[1]), "generate_s": p + g, "decode_s": v, "total_s": t}


def row(name: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{name:<16} failed: {r['error']}"
    total = r.get("total_s", r["generate_s"] + r["decode_s"])
    audio = r["frames"] * SECONDS_PER_FRAME
    first = f"{r['first_s']:.2f}" if r.get("first_s") is not None else "-"
    return (f"{name:<16} {r['frames']:>6} {r['generate_s']:>9.2f} {r['frames'] / r['generate_s']:>8.2f} "
            f"{r['decode_s']:>8.2f} {total / audio:>7.2f} {first:>7}")  # fmt: skip


def lanes_run(path: Path, frames: int, streams: list[int]) -> list[str]:
    """All streams' frames/s, one by one and in lanes (talker and code predictor only)."""
    import dataclasses

    import ggtts
    from ggtts.families.qwen3omni.generate import decoded_frames, talker_decoder
    from ggtts.families.qwen3omni.lanes import TalkerLanes
    from ggtts.families.qwen3omni.pipeline import talker_sampling
    from ggtts.families.qwen3tts import Qwen3TTSOptions
    from ggtts.models.qwen3tts.config import MIN_FRAMES

    model: Any = ggtts.load(path)
    talker = model.talker
    talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # no end: every stream writes all its frames
    inputs = model._inputs(TEXT, "english", None, None)
    cfg = talker.cfg

    def decoder(seed: int, n: int = frames) -> Any:
        params = talker_sampling(cfg.sampling, cfg.cp_sampling, Qwen3TTSOptions(max_frames=n, seed=seed))
        return talker_decoder(talker, inputs, params, min_frames=MIN_FRAMES)

    def together(decoders: list[Any]) -> float:
        lanes = TalkerLanes(talker, prefill_chunk=1 << 20)
        for d in decoders:
            lanes.add(d)
        start = time.perf_counter()
        while lanes.lanes:
            lanes.step()
        return time.perf_counter() - start

    rows = []
    for n in streams:
        list(decoded_frames(decoder(99, 2)))  # warm-up: weights touched, graphs built
        together([decoder(99 + i, 2) for i in range(n)])
        start = time.perf_counter()
        for i in range(n):
            list(decoded_frames(decoder(i)))
        alone = time.perf_counter() - start
        lanes = together([decoder(i) for i in range(n)])
        rows.append(f"| {path.stem} | {n} | {n * frames / alone:.2f} | {n * frames / lanes:.2f} | "
                    f"{frames / lanes:.2f} | {alone / lanes:.2f} |")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--types", default="q8_0,q4_0")
    parser.add_argument("--llama-tts", type=Path)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--streams", help="N,...: continuous batching of N streams (see the notes)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    work = args.dir or Path(tempfile.mkdtemp(prefix="ggtts-bench-qwen3tts-"))
    from ggtts.convert.qwen3tts_hf import convert_qwen3tts
    from ggtts.ops.precision import bfloat16_supported

    if args.streams:
        paths = [work / kind / f"qwen3tts-0.6b-{kind}.gguf" for kind in args.types.split(",")]
        if not all(p.exists() for p in paths):
            if not (work / "ckpt" / "model.safetensors").exists():
                build(work / "ckpt")
            for p, kind in zip(paths, args.types.split(","), strict=True):
                convert_qwen3tts([work / "ckpt"], p, kind)
        print(f"# Qwen3-TTS 0.6B shape, random weights; {cpu_model()}, {args.threads} threads; {args.frames} frames "
              "a stream, the talker and code predictor only")  # fmt: skip
        print("| file | streams | one by one, frames/s | lanes, frames/s | each stream in lanes | x |")
        print("|---|---|---|---|---|---|")
        for p in paths:
            print("\n".join(lanes_run(p, args.frames, [int(n) for n in args.streams.split(",")])))
        return
    model, decoder = build(work / "ckpt")
    results = {"qwen-tts f32": upstream_run(model, decoder, work / "ckpt", args.frames)}
    del model, decoder
    for kind in args.types.split(","):
        path = convert_qwen3tts([work / "ckpt"], work / kind / f"qwen3tts-0.6b-{kind}.gguf", kind)
        results[f"ggtts {kind}"] = ggtts_run(path, args.frames)
        if bfloat16_supported():  # the speech decoder's convolutions in bfloat16 (--precision bfloat16)
            results[f"ggtts {kind} bf16"] = ggtts_run(path, args.frames, "bfloat16")
        if args.llama_tts is not None:
            results[f"llama-tts {kind}"] = llama_run(args.llama_tts, path, args.frames, args.threads)
    print(f"Qwen3-TTS 0.6B shape, random weights; {cpu_model()}, {args.threads} threads; {TEXT!r}")
    print(f"{'peer':<16} {'frames':>6} {'gen s':>9} {'frames/s':>8} {'decode s':>8} {'RTF':>7} {'first':>7}")
    for name, r in results.items():
        print(row(name, r))
    for kind in args.types.split(","):
        precision = "bfloat16" if bfloat16_supported() else "float32"
        c = clone_run(work / kind / f"qwen3tts-0.6b-{kind}.gguf", args.frames, precision)
        (first, rtf), (again, rtf_again) = c["first"], c["again"]
        print(f"ggtts {kind} ({precision}), a voice cloned in context from {REFERENCE_SECONDS:g} s: voice create "
              f"{c['create_s']:.2f} s; speaking with it, first audio {first:.2f} s and RTF {rtf:.2f}, then "
              f"{again:.2f} s and {rtf_again:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
