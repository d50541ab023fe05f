"""Magpie TTS at the real 357M shape (random weights), ggtts against NeMo and three C++/ggml ports in one run: frames
per second of the model (encoder, decoder, local transformer, sampling), real-time factor with the nano codec, time
to first audio, peak memory.

    python benchmarks/bench_magpie.py [--frames 86] [--threads 2] [--dir DIR] [--peers ggtts-f32,ggtts-q8_0,nemo]
        [--shape 357m|357m-v2602] [--guidance on|off|both] [--prior on|off] [--ports PORTS_DIR]

    bash benchmarks/magpie_ports/build.sh ~/magpie-ports       # the C++ ports, once (benchmarks/magpie_ports/)
    python benchmarks/bench_magpie.py --ports ~/magpie-ports --peers ggtts-q8_0,mudler-q8_0,mudler-f32
    python benchmarks/bench_magpie.py --shape 357m-v2602 --ports ~/magpie-ports --guidance off --prior off \\
        --peers ggtts-q8_0,m1el-q8_0,nemo-speech-f32,nemo-speech-f16

The model and codec are built by NeMo at the released shapes (``--shape 357m``, ``REAL_357M``, the current release:
d_model 768, 6 encoder and 12 decoder layers, a 2-layer local transformer of width 768, 2 stacked frames of 8
codebooks, 217 context frames; ``--shape 357m-v2602``, the older release: the same but a 1-layer 1-head local
transformer of width 256 behind an input projection, no frame stacking, 110 context frames; the nano codec: 8 FSQ
groups, 864 channels upsampled 8 x 8 x 4 x 2 x 2 = 1024 samples per frame at 22.05 kHz), saved as ``.nemo``, and
converted by ggtts to f32 and q8_0 GGUF files (in ``--dir``; a temporary folder by default). Each peer runs in its
own process (its peak memory is its own) on the same 41 text tokens with guidance on, then off, and the attention
prior on (``--prior off``: off, for every peer that has one): EOS is held off so every peer writes exactly
``--frames`` codec frames (86 = 4.0 s of audio; 21.5 frames/s is real time).

- ggtts is warmed up first as ``ggtts serve`` warms a model (a few frames of another text), then streams as its
  pipeline does (the very first frame at once, then 4 frames, then 12 a chunk; ``ggtts-q8_0-chunks4``: 4 frames a
  chunk throughout, as ``chunk_frames=4`` does and as the pipeline did before), twice: first audio is when the
  first chunk's samples exist, for a text length it has not seen ("first audio": ggml builds its graphs for the
  new input length) and for the same text once more ("again");
- NeMo runs ``infer_batch`` with the local transformer as ``do_tts`` does, then its codec; it gives no audio before
  the end, and it is not warmed up. ``nemo``: the decoder uncached, as ``do_tts`` and the released config run it;
  ``nemo-cached``: with its KV cache (``use_kv_cache_for_inference``, as its batch inference runner sets it).
- With ``--ports DIR`` (the folder ``benchmarks/magpie_ports/build.sh`` built; without it these peers are skipped),
  the C++/ggml ports, each its own binary on the same token ids, threads and frames, sampling as the file says
  (temperature 0.6, top-k 80), all audio at the end (first audio = total), not warmed up (their graphs are built
  during the measured run) except mudler's: ``m1el-{f32,q8_0}`` (m1el/magpie-tts.cpp on ggtts's own files;
  ``357m-v2602`` only; it has neither guidance nor an attention prior: compare it with ``--guidance off --prior
  off``), ``mudler-{f32,q8_0,f16}`` (mudler/magpie-tts.cpp on files of its own converter, made in DIR/mudler;
  ``357m`` only; the median of 3 syntheses in one process as its ``bench`` prints it, the first one cold) and
  ``nemo-speech-{f32,f16}`` (NVIDIA/NeMo-Speech.cpp's ``synthesize_text`` on files of its own converter and its f16
  codec with NeMo's clamp output, made in DIR/nemo-speech; ``357m-v2602`` only; the codec deferred to after the
  decoder). Their frames/s, RTF and load come from their own printouts (see ``run_port``), peak memory from the
  kernel (the child's maximum resident set). benchmarks/magpie_ports/README.md says what differs between them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ggtts.gguf.keys import Magpie as K
from ggtts.measure.bench import cpu_model

TEXT_TOKENS = 40  # plus EOS: a sentence of about ten words
PEERS = ("ggtts-f32", "ggtts-q8_0", "nemo", "nemo-cached")
REAL_TIME_FPS = 22_050 / 1024
SHAPES = ("357m", "357m-v2602")
HERE = Path(__file__).resolve().parent

# The C++ ports: the weight types each runs, the one shape it runs (README.md in magpie_ports says why), its binary
# under the build.sh folder, and the peers --ports adds when --peers is not given
PORT_KINDS = {"m1el": ("f32", "q8_0"), "mudler": ("f32", "q8_0", "f16"), "nemo-speech": ("f32", "f16")}
PORT_SHAPE = {"m1el": "357m-v2602", "mudler": "357m", "nemo-speech": "357m-v2602"}
PORT_BINARY = {
    "m1el": "m1el+magpie-tts.cpp/magpie-tts",
    "mudler": "mudler+magpie-tts.cpp/build/examples/cli/magpie-cli",
    "nemo-speech": "NVIDIA+NeMo-Speech.cpp/build/cpu-tts/bin/synthesize_text",
}
PORT_PEERS = {"357m": ("mudler-f32", "mudler-q8_0"), "357m-v2602": ("m1el-f32", "m1el-q8_0", "nemo-speech-f32")}
# the attention prior's switch in each port's own file (m1el has no prior)
MUDLER_RUNS = 3  # its bench's median: a warm run (the first builds its graphs; of two it would average in the cold one)
PORT_PRIOR_KEY = {"mudler": "magpie.prior.apply", "nemo-speech": "magpietts.inference.apply_attention_prior"}


def magpie_shape(name: str) -> Any:
    """The ``Shape`` of ``--shape``: the current release's (``357m``) or the older one's (``357m-v2602``, the shape
    m1el/magpie-tts.cpp and NeMo-Speech.cpp hard-code)."""
    from ggtts.measure.magpie.upstream_tts import REAL_357M

    if name == "357m":
        return REAL_357M
    if name == "357m-v2602":
        return dataclasses.replace(
            REAL_357M, lt_layers=1, lt_dim=256, lt_heads=1, frame_stacking=1, context_frames=110,
            context_lengths=(110, 110, 110),
        )  # fmt: skip
    raise ValueError(f"unknown shape {name!r}: one of {', '.join(SHAPES)}")


def build(directory: Path, shape: str = "357m") -> None:
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie

    directory.mkdir(parents=True, exist_ok=True)
    codec = build_tiny_codec(
        directory / "codec.nemo", num_groups=8, samples_per_frame=1024, decoder_channels=864,
        up_sample_rates=[8, 8, 4, 2, 2],
    )  # fmt: skip
    model = build_tiny_magpie(directory / "magpie-357m.nemo", codec, shape=magpie_shape(shape))
    for t in ("f32", "q8_0"):
        convert_magpie([model], directory / f"magpie-357m-{t}.gguf", t)
    convert_nanocodec([codec], directory / "codec.gguf", "f32")


def check_shape(directory: Path, shape: str) -> None:
    """Exit when ``directory`` holds ggtts files of the other shape."""
    want = magpie_shape(shape)
    have = gguf_values(directory / "magpie-357m-q8_0.gguf", K.FRAME_STACKING, K.LT_DIM)
    if have != [want.frame_stacking, want.lt_dim]:
        sys.exit(f"{directory} does not hold the {shape} shape (frame stacking {have[0]}, local transformer width"
                 f" {have[1]}): another --shape or another --dir")  # fmt: skip


def gguf_values(path: Path, *keys: str) -> list[Any]:
    from gguf import GGUFReader

    reader = GGUFReader(path)
    values = []
    for key in keys:
        field = reader.get_field(key)
        if field is None:
            raise KeyError(f"{path} has no {key}")
        values.append(field.parts[field.data[0]][0].item())
    return values


def set_gguf_value(path: Path, key: str, value: bool | int) -> Any:
    """Set one scalar value of a GGUF file's metadata in place, as ``gguf-set-metadata`` does (its command line
    cannot set a bool to false: numpy reads any non-empty string as true); returns the old value."""
    from gguf import GGUFReader

    reader = GGUFReader(path, "r+")
    field = reader.get_field(key)
    if field is None:
        raise KeyError(f"{path} has no {key}")
    part = field.parts[field.data[0]]
    old = part[0].item()
    part[0] = value
    reader.data.flush()
    return old


def parse_port(peer: str) -> tuple[str, str] | None:
    """``("nemo-speech", "f16")`` for ``nemo-speech-f16`` (no suffix: f32), None for a peer that is no port."""
    for port in PORT_KINDS:
        if peer == port:
            return port, "f32"
        if peer.startswith(port + "-"):
            return port, peer.removeprefix(port + "-")
    return None


def _convert_step(what: str, cmd: list[str], cwd: Path | None = None) -> None:
    print(f"converting: {what} ...", file=sys.stderr)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run(cmd, cwd=cwd, env=env, stdout=sys.stderr, check=True)


def build_ports_files(directory: Path, ports_dir: Path, peers: list[str]) -> None:
    """The files of the ports that read their own format, for the ``peers`` that need them and only when missing
    (from ``directory``'s ``.nemo`` files, as ``build()`` made them): DIR/mudler/magpie-357m-{f32,q8_0,f16}.gguf by
    mudler's converter and quantizer, DIR/nemo-speech/magpie-357m-{f32,f16}.gguf and codec-f16.gguf by
    NeMo-Speech.cpp's convert_model.py. m1el reads ggtts's files as they are."""
    wanted: dict[str, set[str]] = {}
    for peer in peers:
        port = parse_port(peer)
        if port and port[0] != "m1el" and port[1] in PORT_KINDS[port[0]]:
            wanted.setdefault(port[0], set()).add(port[1])
    if "mudler" in wanted:
        repo, out = ports_dir / "mudler+magpie-tts.cpp", directory / "mudler"
        f32 = out / "magpie-357m-f32.gguf"
        if not f32.exists():
            out.mkdir(parents=True, exist_ok=True)
            part = out / "magpie-357m-f32.partial.gguf"
            _convert_step(
                "mudler f32",
                [sys.executable, str(HERE / "magpie_ports/mudler_convert.py"), str(repo),
                 str(directory / "magpie-357m.nemo"), str(directory / "codec.nemo"), str(part), str(out / "work")],
            )  # fmt: skip
            part.rename(f32)
        for kind in sorted(wanted["mudler"] - {"f32"}):
            target = out / f"magpie-357m-{kind}.gguf"
            if not target.exists():
                part = out / f"magpie-357m-{kind}.partial.gguf"
                _convert_step(
                    f"mudler {kind}",
                    [sys.executable, str(repo / "scripts/quantize_gguf.py"), "--src", str(f32), "--out", str(part),
                     "--type", kind],
                )  # fmt: skip
                part.rename(target)
    if "nemo-speech" in wanted:
        _nemo_speech_files(directory, ports_dir / "NVIDIA+NeMo-Speech.cpp", wanted["nemo-speech"])


def _nemo_speech_files(directory: Path, repo: Path, kinds: set[str]) -> None:
    import yaml

    out = directory / "nemo-speech"
    missing = [k for k in sorted(kinds) if not (out / f"magpie-357m-{k}.gguf").exists()]
    if missing:
        # its converter insists on has_baked_context_embedding: true in the config (NeMo's released config has it,
        # ggtts's test .nemo does not): it reads a copy of the extracted .nemo with that one key added
        extracted, src = out / "extracted", out / "src"
        if not (extracted / "model_config.yaml").exists():
            extracted.mkdir(parents=True, exist_ok=True)
            with tarfile.open(directory / "magpie-357m.nemo") as t:
                t.extractall(extracted)
        src.mkdir(exist_ok=True)
        if not (src / "model_weights.ckpt").exists():
            (src / "model_weights.ckpt").symlink_to(Path("../extracted/model_weights.ckpt"))
        for f in [*extracted.glob("*.json"), *extracted.glob("*.txt")]:
            shutil.copy(f, src / f.name)
        config = yaml.safe_load((extracted / "model_config.yaml").read_text(encoding="utf-8"))
        config["has_baked_context_embedding"] = True
        (src / "model_config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for kind in missing:
        part = out / f"magpie-357m-{kind}.partial.gguf"
        _convert_step(
            f"nemo-speech {kind}",
            [sys.executable, "convert_model.py", str(out / "src"), "--outfile", str(part), "--outtype", kind],
            cwd=repo,
        )
        # EOS held off through the file: its runtime has no flag for it (--tts.steps caps the frames)
        set_gguf_value(part, "magpietts.inference.min_generated_frames", 100_000)
        part.rename(out / f"magpie-357m-{kind}.gguf")
    codec = out / "codec-f16.gguf"
    if not codec.exists():
        # the released nano codec's output activation (clamp; ggtts's own test codec has tanh), which NeMo-Speech's
        # codec converter requires; f16: its CPU codec aborts on f32 convolution weights (ggml's im2col_f16)
        clamp = directory / "codec-clamp.nemo"
        if not clamp.exists():
            from ggtts.measure.magpie.upstream import build_tiny_codec

            print("building the clamp codec for nemo-speech ...", file=sys.stderr)
            build_tiny_codec(
                clamp, num_groups=8, samples_per_frame=1024, decoder_channels=864, up_sample_rates=[8, 8, 4, 2, 2],
                output_activation="clamp",
            )  # fmt: skip
        part = out / "codec-f16.partial.gguf"
        _convert_step(
            "nemo-speech codec f16",
            [sys.executable, "convert_model.py", str(clamp), "--outfile", str(part), "--outtype", "f16"],
            cwd=repo,
        )
        part.rename(codec)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# Every peer runs under this small launcher: Linux starts a child's maximum resident set at its parent's (fork copies
# the parent's pages, exec keeps the old high-water mark), so a peer started by this process would count this
# process's own peak (torch, and the models when build() ran here) as its own. The launcher's children start from its
# few MiB; it writes their peak (RUSAGE_CHILDREN's ru_maxrss, KiB) to the file argv[1] and exits with their status.
LAUNCHER = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)"
)


def run_measured(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    """``cmd``'s outcome (stdout and stderr captured) and its own peak resident memory in MiB."""
    with tempfile.TemporaryDirectory(prefix="bench-magpie-") as tmp:
        peak = Path(tmp) / "maxrss"
        done = subprocess.run(
            [sys.executable, "-c", LAUNCHER, str(peak), *cmd], capture_output=True, text=True, check=False
        )
        kib = peak.read_text().strip() if peak.exists() else ""
    return done, int(kib) / 1024 if kib else float("nan")


def run_ggtts(
    directory: Path, kind: str, frames: int, guidance: bool, prior: bool, chunk: int | None = None
) -> dict[str, float]:
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
        temperature=d.temperature, top_k=d.top_k, cfg_scale=d.cfg_scale if guidance else None, prior=prior,
        max_frames=frames, min_frames=frames + 1, seed=0,
    )  # fmt: skip
    # a new length, then again
    measured = [streamed_utterance(model, codec, params, ids, frames, chunk) for _ in range(2)]
    n, model_time, total, first = measured[0]
    return {"frames": n, "model_fps": n / model_time, "rtf": total / (n / REAL_TIME_FPS), "first_audio": first,
            "first_again": measured[1][3], "load": load, "peak_mib": peak_mib()}  # fmt: skip


def streamed_utterance(
    model: Any, codec: Any, params: Any, ids: list[int], frames: int, chunk: int | None = None,
    wait: Callable[[torch.Tensor], object] = lambda audio: None,
) -> tuple[int, float, float, float]:  # fmt: skip
    """(frames, model seconds, total seconds, first-audio seconds) of one streamed utterance, chunked as the pipeline
    chunks it (``chunk``: as ``chunk_frames=chunk`` does). ``wait(audio)`` after each push: until the audio is
    there (a GPU's codec returns before it is)."""
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
            wait(stream.push(pending[0][:, :1]))
            first = time.perf_counter() - start
            pending, pushed = [pending[0][:, 1:]], 1
        waiting = sum(c.shape[1] for c in pending)
        if waiting >= (chunk or chunk_frames(pushed)) or n == frames:
            t = time.perf_counter()
            wait(stream.push(torch.cat(pending, dim=1)))
            model_time -= time.perf_counter() - t  # the codec's share, counted apart
            pending, pushed = [], pushed + waiting
    total = time.perf_counter() - start
    return n, model_time + total, total, first


def run_nemo(directory: Path, frames: int, guidance: bool, prior: bool, cached: bool) -> dict[str, float]:
    import warnings

    warnings.filterwarnings("ignore")
    from nemo.collections.tts.models import MagpieTTSModel

    t0 = time.perf_counter()
    model = MagpieTTSModel.restore_from(str(directory / "magpie-357m.nemo"), map_location="cpu").eval()
    load = time.perf_counter() - t0
    p = model.inference_parameters
    p.max_decoder_steps, p.min_generated_frames = frames, frames + 1
    p.apply_attention_prior = prior
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


class PortError(RuntimeError):
    pass


def _run_binary(cmd: list[str]) -> tuple[str, str, float]:
    """(stdout, stderr, peak resident MiB) of one run of a port's binary; PortError if it fails."""
    done, peak = run_measured(cmd)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise PortError(f"exit {done.returncode}: {lines[-1] if lines else ''}")
    return done.stdout, done.stderr, peak


def _number(pattern: str, text: str) -> float:
    found = re.findall(pattern, text)
    if not found:
        raise PortError(f"no {pattern!r} in its output")
    return float(found[-1])


def run_port(
    ports_dir: Path, directory: Path, port: str, kind: str, frames: int, threads: int, guidance: bool, prior: bool
) -> dict[str, float | None]:
    """One synthesis by a C++ port: the same text token ids, threads and frame count as the ggtts peers, EOS held
    off, guidance as asked (m1el: off only), the codec after the decoder. Model frames/s (text encoder + context +
    decoder + local transformer + sampling, no codec), RTF (synthesis with the codec / audio seconds) and first
    audio (= the total: no port gives audio before the end here) from each port's own figures:

    - m1el: its ``timing: synthesis (tokens -> codes)`` (encoder, context and decoder) and ``timing: codec`` lines
      (both our patch's, around its own calls); no load time printed;
    - mudler: ``magpie-cli bench --json``'s median of 3 runs in one process (the first one cold: it builds its
      graphs), ``encode_ms + decode_ms`` for the model (its decode loop holds the context and the local
      transformer), ``total_ms`` with the codec, ``load_ms``;
    - nemo-speech: our patch's ``stats:`` line of its runtime's own figures: ``decoder_fps`` (frames over the
      decoder's elapsed time, which runs from the start of synthesis, encoder included, to the last frame) and
      ``e2e_elapsed_s`` (to the last sample; ``--tts.chunk-frames FRAMES``: its codec, which otherwise streams in a
      thread beside the decoder, runs once at the end); no load time printed.

    The attention prior is switched in the port's own file (restored after) where it has one; m1el has none."""
    binary = ports_dir / PORT_BINARY[port]
    if not binary.exists():
        raise PortError(f"{binary} missing: run benchmarks/magpie_ports/build.sh {ports_dir}")
    ggtts_file = directory / f"magpie-357m-{kind}.gguf"
    temperature, top_k, eos = gguf_values(
        directory / "magpie-357m-q8_0.gguf", K.TEMPERATURE, K.TOP_K, K.TEXT_EOS_ID
    )  # fmt: skip
    tokens = ",".join(map(str, [*range(TEXT_TOKENS), eos]))
    with tempfile.TemporaryDirectory(prefix="bench-magpie-port-") as tmp:
        wav = str(Path(tmp) / "out.wav")
        if port == "m1el":
            cmd = [str(binary), "-m", str(ggtts_file), "-c", str(directory / "codec.gguf"), "--tokens", tokens,
                   "--threads", str(threads), "--min-frames", str(frames + 1), "--max-frames", str(frames),
                   "--temp", f"{temperature:.6g}", "--top-k", str(top_k), "-o", wav]  # fmt: skip
            out, err, peak = _run_binary(cmd)
            text = out + err
            n = int(_number(r"Generated (\d+) frames", text))
            model_time = _number(r"timing: synthesis \(tokens -> codes\) ([\d.]+) s", text)
            total = model_time + _number(r"timing: codec \d+ frames ([\d.]+) s", text)
            return {"frames": n, "model_fps": n / model_time, "rtf": total / (n / REAL_TIME_FPS),
                    "first_audio": total, "load": None, "peak_mib": peak}  # fmt: skip
        model_file = directory / port / f"magpie-357m-{kind}.gguf"
        old_prior = set_gguf_value(model_file, PORT_PRIOR_KEY[port], prior)
        try:
            if port == "mudler":
                cmd = [str(binary), "bench", "--model", str(model_file), "--tokens", tokens, "--threads",
                       str(threads), "--seed", "1", "--max-frames", str(frames), "--min-frames", str(frames + 1),
                       "--runs", str(MUDLER_RUNS), "--json", *([] if guidance else ["--no-cfg"])]  # fmt: skip
                out, _, peak = _run_binary(cmd)
                report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
                m = report["median"]
                n = round(m["audio_seconds"] * REAL_TIME_FPS)
                total = m["total_ms"] / 1000
                return {"frames": n, "model_fps": n / ((m["encode_ms"] + m["decode_ms"]) / 1000),
                        "rtf": total / (n / REAL_TIME_FPS), "first_audio": total, "load": report["load_ms"] / 1000,
                        "peak_mib": peak}  # fmt: skip
            cmd = [str(binary), "--tts.magpie-model", str(model_file), "--tts.codec-model",
                   str(directory / port / "codec-f16.gguf"), "--tts.tokens", tokens, "--tts.speaker", "0",
                   "--tts.seed", "1", "--tts.steps", str(frames), "--threads", str(threads), "--tts.chunk-frames",
                   str(frames), "--tts.wav-out", wav, *([] if guidance else ["--tts.no-cfg"])]  # fmt: skip
            text, _, peak = _run_binary(cmd)
            n = int(_number(r"stats: frames=(\d+)", text))
            fps, total = _number(r"decoder_fps=([\d.]+)", text), _number(r"e2e_elapsed_s=([\d.]+)", text)
            return {"frames": n, "model_fps": fps, "rtf": total / (n / REAL_TIME_FPS), "first_audio": total,
                    "load": None, "peak_mib": peak}  # fmt: skip
        finally:
            set_gguf_value(model_file, PORT_PRIOR_KEY[port], old_prior)


def port_skip_reason(peer: str, shape: str, guidance: str, ports: Path | None) -> str | None:
    """Why a port's row has no figures (None: it runs)."""
    port, kind = parse_port(peer) or ("", "")
    if ports is None:
        return "skipped: --ports not given"
    if kind not in PORT_KINDS[port]:
        return f"n/a: {port} runs {', '.join(PORT_KINDS[port])}"
    if PORT_SHAPE[port] != shape:
        return f"n/a: {port} runs --shape {PORT_SHAPE[port]} only"
    if port == "m1el" and guidance == "on":
        return "n/a: no guidance in m1el"
    return None


def worker(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    guidance, prior = args.guidance == "on", args.prior == "on"
    if args.worker in ("nemo", "nemo-cached"):
        result = run_nemo(args.dir, args.frames, guidance, prior, cached=args.worker == "nemo-cached")
    else:
        kind, _, chunk = args.worker.removeprefix("ggtts-").partition("-chunks")  # ggtts-q8_0-chunks4: fixed
        result = run_ggtts(args.dir, kind, args.frames, guidance, prior, int(chunk) if chunk else None)
    print(json.dumps(result))


def _row(peer: str, guidance: str, r: dict[str, Any]) -> str:
    again = f"{r['first_again']:.2f}s" if r.get("first_again") is not None else "-"
    load = f"{r['load']:.1f}" if r.get("load") is not None else "-"
    return (f"{peer:<16}{guidance:>9}{r['model_fps']:>10.2f}{r['rtf']:>8.2f}{r['first_audio']:>12.2f}s{again:>8}"
            f"{load:>8}{r['peak_mib']:>10.0f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=86)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--shape", choices=SHAPES, default="357m")
    ap.add_argument("--peers", help=f"default: {','.join(PEERS)} (and with --ports the ports that run the shape)")
    ap.add_argument("--guidance", choices=("on", "off", "both"), default="both")
    ap.add_argument("--prior", choices=("on", "off"), default="on")
    ap.add_argument("--ports", type=Path, help="the folder benchmarks/magpie_ports/build.sh built")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    peers = args.peers.split(",") if args.peers else [*PEERS, *(PORT_PEERS[args.shape] if args.ports else ())]
    directory = args.dir or Path(tempfile.mkdtemp(prefix="bench-magpie-"))
    if not (directory / "codec.gguf").exists():
        print(f"building the {args.shape}-shape model and codec in {directory} ...", file=sys.stderr)
        build(directory, args.shape)
    check_shape(directory, args.shape)
    if args.ports:
        runnable = [
            p for p in peers
            if (port := parse_port(p)) and not port_skip_reason(p, args.shape, "off", args.ports)
            and (args.ports / PORT_BINARY[port[0]]).exists()  # else its row says to build it
        ]  # fmt: skip
        build_ports_files(directory, args.ports, runnable)
    print(f"CPU: {cpu_model()}; {args.threads} threads; {args.frames} frames ({args.frames / REAL_TIME_FPS:.1f} s);"
          f" shape {args.shape}; prior {args.prior}")  # fmt: skip
    print(f"{'peer':<16}{'guidance':>9}{'frames/s':>10}{'RTF':>8}{'first audio':>13}{'again':>8}{'load s':>8}"
          f"{'peak MiB':>10}")  # fmt: skip
    guidances = ("on", "off") if args.guidance == "both" else (args.guidance,)
    for guidance in guidances:
        for peer in peers:
            port = parse_port(peer)
            if port:
                reason = port_skip_reason(peer, args.shape, guidance, args.ports)
                if reason:
                    print(f"{peer:<16}{guidance:>9}  {reason}")
                    continue
                try:
                    r: dict[str, Any] = run_port(
                        args.ports, directory, *port, args.frames, args.threads, guidance == "on", args.prior == "on"
                    )
                except (PortError, KeyError, OSError) as e:
                    print(f"{peer:<16}{guidance:>9}  failed: {e}")
                    continue
                print(_row(peer, guidance, r))
                continue
            cmd = [sys.executable, __file__, "--worker", peer, "--dir", str(directory), "--frames", str(args.frames),
                   "--threads", str(args.threads), "--guidance", guidance, "--prior", args.prior]  # fmt: skip
            done, peak = run_measured(cmd)
            if done.returncode != 0:
                print(f"{peer:<16}{guidance:>9}  failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(_row(peer, guidance, {**r, "peak_mib": peak}))  # the worker's own figure, measured from outside
    m1el = any((parse_port(p) or ("",))[0] == "m1el" for p in peers)
    if m1el and args.ports and args.prior == "on" and args.shape == PORT_SHAPE["m1el"]:
        print("m1el has no attention prior: compare it with --prior off")


if __name__ == "__main__":
    main()
