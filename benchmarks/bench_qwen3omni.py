"""Qwen3-Omni at the published talker, code predictor and code2wav shapes (random weights), ggtts against
transformers in one run; the thinker at its published width but reduced depth.

    python benchmarks/bench_qwen3omni.py [--frames 24] [--threads 2] [--dir DIR] [--parts talker,code2wav,thinker]

Shapes (``Qwen3-Omni-30B-A3B``'s config): the talker has 20 MoE layers of width 1024 (16 query / 2 key-value heads
of 128, 128 experts of width 384 with 6 picked, a shared expert of width 768; 3.2B parameters, 0.3B active), a
codec vocabulary of 3072; the code predictor 5 dense layers of width 1024 (16 / 8 heads, feed-forward 3072) writing
15 more codebooks of 2048; code2wav is transformers' default config (8 layers of width 1024, decoder width 1536,
upsampling 2 x 2 x 8 x 5 x 4 x 3 = 1920 samples per frame at 24 kHz: 12.5 frames/s is real time). The thinker is
2048 wide (32 / 4 heads of 128, 128 experts of width 768, 8 picked, a vocabulary of 151936) with ``--thinker-layers``
of its 48 layers. transformers builds each model (seeded), ggtts converts it to GGUF; each peer runs in its own
process (its peak memory is its own), on ``--threads`` threads.

- talker: frames per second of the talker with its code predictor (every codebook of every frame) over a prefill
  of 40 rows and 16 text rows, sampled as ``generate`` samples (EOS held off so every peer writes exactly
  ``--frames`` frames); transformers runs ``Qwen3OmniMoeTalkerForConditionalGeneration.generate`` as
  ``Qwen3OmniMoeForConditionalGeneration.generate`` calls it; ggtts runs its generation loop, and its first frame's
  time is reported; then again with the file's code2wav streaming as the pipeline does (the first frame alone, then
  4, then 12 at a time): the real-time factor of speech and the time to first audio, on the same cores.
  ``ggtts-q8_0-modules`` / ``ggtts-q4_0-modules``: the talker's and code predictor's steps as torch modules op by
  op (``graph=False``) instead of one ggml graph each (the same for the thinker's ``ggtts-q8_0-modules``).
- code2wav: real-time factor of decoding ``--c2w-frames`` frames in one go (transformers' forward and ggtts's), of
  transformers' ``chunked_decode(300, 25)``, and ggtts's first audio when it streams (the first frame pushed alone);
  ``ggtts-bf16`` is the f32 file with ``precision="bfloat16"`` (decoder convolutions in bfloat16; where the CPU has
  no native bfloat16 it fails with that reason), with the relative RMS difference of its audio from float32's. ggtts's
  workers set the allocator as ``ggtts.load`` does (glibc's mmap threshold raised: the decoder's large activations
  are then reused instead of faulted in afresh); transformers runs as its users run it.
- thinker: prefill tokens/s over 64 tokens and greedy decode tokens/s, and the memory the whole 48-layer thinker
  needs at each file type.
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
from typing import Any

import torch

from ggtts.measure.bench import cpu_model

ROPE = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [24, 20, 20]}
TALKER_TEXT = dict(
    vocab_size=3072, hidden_size=1024, intermediate_size=2048, num_hidden_layers=20, num_attention_heads=16,
    num_key_value_heads=2, head_dim=128, moe_intermediate_size=384, shared_expert_intermediate_size=768,
    num_experts=128, num_experts_per_tok=6, norm_topk_prob=True, rope_parameters=ROPE, rms_norm_eps=1e-6,
)  # fmt: skip
CODE_PREDICTOR = dict(
    vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, num_code_groups=16, rope_parameters={"rope_type": "default",
    "rope_theta": 1_000_000.0},
)  # fmt: skip
TALKER = dict(
    text_config=TALKER_TEXT, code_predictor_config=CODE_PREDICTOR, num_code_groups=16, thinker_hidden_size=2048,
    accept_hidden_layer=24, codec_eos_token_id=2150, codec_nothink_id=2155, codec_think_bos_id=2156,
    codec_think_eos_id=2157, codec_pad_id=2148, codec_bos_id=2149, speaker_id={"ethan": 2302, "chelsie": 2301},
    spatial_merge_size=2,
)  # fmt: skip
TOP = dict(im_start_token_id=151644, im_end_token_id=151645, tts_pad_token_id=151671, tts_bos_token_id=151672,
           tts_eos_token_id=151673, system_token_id=8948, user_token_id=872, assistant_token_id=77091)  # fmt: skip
THINKER_TEXT = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=768, num_attention_heads=32, num_key_value_heads=4,
    head_dim=128, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
    rope_parameters=ROPE, rms_norm_eps=1e-6, max_position_embeddings=65536,
)  # fmt: skip
THINKER_LAYERS = 48
PREFILL, TEXT_ROWS = 40, 16
FRAME_RATE = 12.5  # code2wav frames per second of audio
PART_PEERS = {
    "talker": ("transformers", "ggtts-q8_0", "ggtts-q4_0", "ggtts-f16", "ggtts-q8_0-modules", "ggtts-q4_0-modules"),
    "code2wav": ("transformers", "ggtts-f32", "ggtts-q8_0", "ggtts-bf16"),
    "thinker": ("transformers", "ggtts-q8_0", "ggtts-q8_0-modules"),
}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _seconds(fn: Any, runs: int = 1) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


# ---- builders (in the transformers worker, which converts what it built) -------------------------------------
def _talker_model() -> Any:
    from transformers import Qwen3OmniMoeTalkerConfig, Qwen3OmniMoeTalkerForConditionalGeneration

    torch.manual_seed(0)
    return _randomized(Qwen3OmniMoeTalkerForConditionalGeneration(Qwen3OmniMoeTalkerConfig(**TALKER)).eval())


def _randomized(model: Any) -> Any:
    """Every matrix random (transformers leaves the MoE routers and expert stacks at zero: every token would pick
    the same experts, and zero pages cost no memory traffic)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02)
    return model


def _code2wav_model() -> Any:
    from transformers import Qwen3OmniMoeCode2Wav
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeCode2WavConfig

    torch.manual_seed(1)
    model = Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig()).eval()
    with torch.no_grad():  # upstream's init leaves SnakeBeta's log-parameters at 0 and layer scales tiny
        for name, p in model.named_parameters():
            if name.endswith(("alpha", "beta", "scale", "gamma")):
                p.normal_(0, 0.1)
    return model


def _convert_talker(directory: Path, talker: Any, code2wav: Any, types: list[str]) -> None:
    from ggtts.convert.qwen3omni_talker import write_talker

    config = {**TOP, "model_type": "qwen3_omni_moe", "talker_config": talker.config.to_dict(),
              "code2wav_config": code2wav.config.to_dict()}  # fmt: skip
    tensors = {f"talker.{k}": v for k, v in talker.state_dict().items()}
    tensors.update({f"code2wav.{k}": v for k, v in code2wav.state_dict().items()})
    for t in types:
        path = directory / f"talker-{t}.gguf"
        if not path.exists():
            write_talker(path, config, tensors, t)


# ---- workers ---------------------------------------------------------------------------------------------------
def _inputs(dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    prefill = torch.randn(1, PREFILL, dim, generator=g) * 0.5
    return prefill, torch.randn(1, TEXT_ROWS, dim, generator=g) * 0.5, torch.randn(1, 1, dim, generator=g) * 0.5


def talker_transformers(directory: Path, frames: int) -> dict[str, float]:
    from ggtts.convert.qwen3omni_code2wav import write_code2wav

    talker, code2wav = _talker_model(), _code2wav_model()
    _convert_talker(directory, talker, code2wav, ["q8_0", "q4_0", "f16"])
    if not (directory / "code2wav-f32.gguf").exists():
        state = {f"code2wav.{k}": v for k, v in code2wav.state_dict().items()}
        write_code2wav(directory / "code2wav-f32.gguf", code2wav.config.to_dict(), state, "f32")
        write_code2wav(directory / "code2wav-q8_0.gguf", code2wav.config.to_dict(), state, "q8_0")
    del code2wav
    prefill, trailing, pad = _inputs(1024)
    vocab = TALKER_TEXT["vocab_size"]
    suppressed = list(range(vocab - 1024, vocab))  # EOS too: every peer writes exactly `frames` frames

    def run() -> Any:
        return talker.generate(
            inputs_embeds=prefill, trailing_text_hidden=trailing, tts_pad_embed=pad,
            attention_mask=torch.ones(1, PREFILL, dtype=torch.long), max_new_tokens=frames + 1,
            do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05, suppress_tokens=suppressed,
            output_hidden_states=True, return_dict_in_generate=True,
        )  # fmt: skip

    with torch.inference_mode():
        seconds = _seconds(run)
    return {"frames": frames, "fps": frames / seconds, "first": float("nan"), "peak_mib": peak_mib()}


def talker_ggtts(directory: Path, kind: str, frames: int) -> dict[str, float]:
    import dataclasses

    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
    from ggtts.families.qwen3omni.prompt import TalkerInputs
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.runtime.memory import tune_allocator

    tune_allocator()  # as ggtts.load does
    kind, modules = kind.removesuffix("-modules"), kind.endswith("-modules")
    t = time.perf_counter()
    talker = Talker.from_gguf(GGUFFile(directory / f"talker-{kind}.gguf"), graph=not modules)
    load = time.perf_counter() - t
    talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # EOS suppressed like the others: exactly `frames`
    talker.cp.cfg = talker.cfg
    inputs = TalkerInputs(*_inputs(talker.cfg.talker.dim))
    params = TalkerSampling(False, talker.cfg.sampling, talker.cfg.cp_sampling, max_frames=frames)
    list(generate_frames(talker, inputs, dataclasses.replace(params, max_frames=2)))  # warm-up, as a server does
    t = time.perf_counter()
    first = 0.0
    for i, _ in enumerate(generate_frames(talker, inputs, params)):
        if i == 0:
            first = time.perf_counter() - t
    seconds = time.perf_counter() - t
    # with code2wav (the file's own), as the pipeline streams: the first frame alone, then 4, then 12 at a time
    from ggtts.families.qwen3omni import Qwen3OmniOptions
    from ggtts.families.qwen3omni.pipeline import chunk_size
    from ggtts.models.qwen3omni_code2wav.model import Code2Wav

    code2wav = Code2Wav.from_gguf(GGUFFile(directory / f"talker-{kind}.gguf"))
    code2wav.stream().push(torch.zeros(1, 16, 2, dtype=torch.long))  # warm-up
    stream, pending, first_audio, samples = code2wav.stream(), [], 0.0, 0
    t = time.perf_counter()
    for frame in generate_frames(talker, inputs, params):
        pending.append(frame)
        if len(pending) >= chunk_size(stream.frames, first=not first_audio, most=Qwen3OmniOptions().chunk_frames):
            samples += stream.push(torch.tensor(pending).T.unsqueeze(0)).shape[-1]
            pending = []
            first_audio = first_audio or time.perf_counter() - t
    if pending:
        samples += stream.push(torch.tensor(pending).T.unsqueeze(0)).shape[-1]
    rtf = (time.perf_counter() - t) / (frames / FRAME_RATE)
    return {"frames": frames, "fps": frames / seconds, "first": first, "first_audio": first_audio, "rtf": rtf,
            "load": load, "peak_mib": peak_mib()}  # fmt: skip


def code2wav_worker(directory: Path, peer: str, frames: int) -> dict[str, float]:
    codes = torch.randint(0, 2048, (1, 16, frames), generator=torch.Generator().manual_seed(3))
    audio_s = frames / FRAME_RATE
    result: dict[str, float] = {}
    if peer == "transformers":
        model = _code2wav_model()
        with torch.inference_mode():
            result["rtf"] = _seconds(lambda: model(codes), 3) / audio_s
            result["rtf_chunked"] = _seconds(lambda: model.chunked_decode(codes, 300, 25)) / audio_s
        result["first"] = float("nan")
    else:
        from ggtts.gguf import GGUFFile
        from ggtts.models.qwen3omni_code2wav.model import Code2Wav
        from ggtts.runtime.memory import tune_allocator

        tune_allocator()  # as ggtts.load does
        kind = peer.removeprefix("ggtts-")
        file = GGUFFile(directory / f"code2wav-{'f32' if kind == 'bf16' else kind}.gguf")
        model = Code2Wav.from_gguf(file, precision="bfloat16" if kind == "bf16" else "float32")
        model(codes[..., :4])  # warm-up
        result["rtf"] = _seconds(lambda: model(codes), 3) / audio_s
        if kind == "bf16":  # how far bfloat16 convolutions move the audio from float32's
            want = Code2Wav.from_gguf(file)(codes)
            result["rel_rms"] = float((model(codes) - want).norm() / want.norm())
        stream = model.stream()
        t = time.perf_counter()
        stream.push(codes[..., :1])
        result["first"] = time.perf_counter() - t
        result["rtf_chunked"] = float("nan")
    return {**result, "peak_mib": peak_mib()}


def thinker_worker(directory: Path, peer: str, layers: int) -> dict[str, float]:
    from transformers import Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    tokens = torch.randint(0, 151_000, (1, 64), generator=torch.Generator().manual_seed(4))
    new = 16
    if peer == "transformers":
        config = Qwen3OmniMoeThinkerConfig(text_config={**THINKER_TEXT, "num_hidden_layers": layers},
                                           vision_config={"depth": 1}, audio_config={"encoder_layers": 1},
                                           vision_start_token_id=151652)  # fmt: skip
        torch.manual_seed(5)
        model = _randomized(Qwen3OmniMoeThinkerForConditionalGeneration(config).eval())
        path = directory / f"thinker-{layers}l-q8_0.gguf"
        if not path.exists():
            from ggtts.convert.qwen3omni_thinker import write_thinker

            write_thinker(path, config.to_dict(), dict(model.state_dict()), None, "q8_0")
        lm = model

        def generate(n: int) -> Any:
            return lm.generate(input_ids=tokens, max_new_tokens=n, min_new_tokens=n, do_sample=False)

        with torch.inference_mode():
            generate(1)  # warm-up
            prefill = _seconds(lambda: lm(input_ids=tokens), 2)
            decode = _seconds(lambda: generate(new + 1), 2) - _seconds(lambda: generate(1), 2)
    else:
        from ggtts.gguf import GGUFFile
        from ggtts.models.qwen3omnimoe.model import Thinker

        model = Thinker.from_gguf(
            GGUFFile(directory / f"thinker-{layers}l-q8_0.gguf"), graph=not peer.endswith("-modules")
        )
        ids = tokens[0].tolist()
        with torch.inference_mode():
            model.greedy(ids, 2)  # warm-up
            prefill = _seconds(lambda: model(tokens, model.new_cache(64), last_only=True), 2)
            decode = _seconds(lambda: model.greedy(ids, new + 1), 2) - _seconds(lambda: model.greedy(ids, 1), 2)
    decode_tps = new / decode
    return {"prefill_tps": 64 / prefill, "decode_tps": decode_tps, "peak_mib": peak_mib()}


def thinker_memory() -> list[tuple[str, float]]:
    """GiB the 48-layer thinker's weights take at each file type (norms stay F32; block types' bytes per weight)."""
    d, v, e, f = THINKER_TEXT["hidden_size"], THINKER_TEXT["vocab_size"], THINKER_TEXT["num_experts"], 768
    heads, kv, hd = THINKER_TEXT["num_attention_heads"], THINKER_TEXT["num_key_value_heads"], THINKER_TEXT["head_dim"]
    per_layer = d * heads * hd * 2 + d * kv * hd * 2 + e * d + e * 3 * d * f
    total = THINKER_LAYERS * per_layer + 2 * v * d
    return [(t, total * b / 2**30) for t, b in (("f16", 2.0), ("q8_0", 34 / 32), ("q4_0", 18 / 32))]


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    part, peer = args.worker.split(":")
    if part == "talker":
        r = talker_transformers(args.dir, args.frames) if peer == "transformers" else talker_ggtts(
            args.dir, peer.removeprefix("ggtts-"), args.frames)  # fmt: skip
    elif part == "code2wav":
        r = code2wav_worker(args.dir, peer, args.c2w_frames)
    else:
        r = thinker_worker(args.dir, peer, args.thinker_layers)
    print(json.dumps(r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=24, help="talker frames per run")
    ap.add_argument("--c2w-frames", type=int, default=100, help="code2wav frames per run (8 s)")
    ap.add_argument("--thinker-layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--parts", default="talker,code2wav,thinker")
    ap.add_argument("--peers", default="", help="only these peers (default: all)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-qwen3omni-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_model()}; {args.threads} threads; files in {directory}")
    for part in args.parts.split(","):
        for peer in PART_PEERS[part]:
            if args.peers and peer not in args.peers.split(","):
                continue
            cmd = [sys.executable, __file__, "--worker", f"{part}:{peer}", "--dir", str(directory), "--frames",
                   str(args.frames), "--c2w-frames", str(args.c2w_frames), "--thinker-layers", str(args.thinker_layers),
                   "--threads", str(args.threads)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{part:<9}{peer:<14} failed: {done.stderr.strip().splitlines()[-3:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            if part == "talker":
                first = f"{r['first']:.2f}s" if r["first"] == r["first"] else "-"
                e2e = f"; with code2wav: RTF {r['rtf']:.2f}, first audio {r['first_audio']:.2f}s" if "rtf" in r else ""
                print(f"talker   {peer:<14}{r['fps']:>8.2f} frames/s  (real time {FRAME_RATE}){first:>8} first frame"
                      f"{r['peak_mib']:>8.0f} MiB peak{e2e}")  # fmt: skip
            elif part == "code2wav":
                chunked = f"  chunked RTF {r['rtf_chunked']:.2f}" if r["rtf_chunked"] == r["rtf_chunked"] else ""
                first = f"  first audio {r['first']:.2f}s" if r["first"] == r["first"] else ""
                rms = f"  {r['rel_rms']:.1e} relative RMS from f32" if "rel_rms" in r else ""
                print(f"code2wav {peer:<14} RTF {r['rtf']:.2f}{chunked}{first}{r['peak_mib']:>8.0f} MiB peak{rms}")
            else:
                print(f"thinker  {peer:<14}{r['prefill_tps']:>8.1f} prefill tok/s{r['decode_tps']:>8.2f} decode tok/s"
                      f"{r['peak_mib']:>8.0f} MiB peak ({args.thinker_layers} of {THINKER_LAYERS} layers)")  # fmt: skip
        if part == "thinker":
            sizes = ", ".join(f"{t} {gib:.1f} GiB" for t, gib in thinker_memory())
            print(f"thinker  all {THINKER_LAYERS} layers' weights: {sizes} (plus the KV cache and activations)")


if __name__ == "__main__":
    main()
