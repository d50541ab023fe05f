"""The operations (GPU kernel launches) one frame of Qwen3-Omni's and Qwen3-TTS's talkers, and one token of
OuteTTS's Qwen2, replay on a GPU, counted on any machine: the talker's static one-row step and the code predictor's
graphed frame (15 steps, codes chosen as tensors); a talker's 40-row prompt (the prefill's graph); a frame of N
streams in the talker's static lanes (``parallel=N`` on CUDA: one talker step and one code-predictor frame for all,
and what each stream adds around them); Qwen2's static step. With the projections fused (what ``ggtts.load`` runs
on CUDA) and with each projection its own.

    python benchmarks/step_operations.py [--greedy] [--magpie] [--blocks] [--decoders]

A replayed CUDA graph costs about its kernel count (Qwen3-Omni's graphed frame at ~5,300 kernels took 24 ms on an
H100: 41.4 frames/s), so this count is the lever on the GPU's frames per second that can be measured without one.
The models have the published layer structure (Qwen3-Omni-30B-A3B's talker: 20 layers of 128 experts, 6 picked
and a shared expert; Qwen3-TTS 0.6B's: 28 dense layers; both a 5-layer code predictor over 16 codebooks; OuteTTS
0.5B's Qwen2: 24 layers) at a small width: the count depends on the structure, not on the width. ``rms_norm`` is one
kernel on CUDA and counts as one (:mod:`ggtts.measure.operations`).

``--magpie`` (needs NeMo, to build the model): Magpie's first audio at the 357M structure (6 encoder, 12 decoder
and 2 local-transformer layers, 2 stacked frames; the nano codec's layers) and a small width, with guidance: the
operations from the request to the first frame (text encoder, the context's prefill, the first frame: eager on a
GPU but for the frame's graphs), the codec's first push (one frame: eager), and a later frame.

``--decoders``: the talker families' speech decoders streaming, at their published structure (Qwen3-Omni's code2wav
and Qwen3-TTS's 12 Hz decoder: 8 sliding-window transformer layers, two upsampling stages, four decoder blocks) and
a small width: a stream's first push of one frame (the first chunk a stream sends) and later pushes of 4 and 12
frames, an ordinary stream's (eager on a GPU) and a static one's (its graphs and what runs eagerly around them).

``--blocks``: the operations that widen one stored weight on a GPU (``ops/device_weights.py``, each block type a
GPU keeps as stored; a 4864 x 1024 weight, random blocks: the count depends on the type only), the type's bits
per weight, and the bytes those operations read and write per weight, eager (a replayed graph moves the same;
``torch.compile`` fuses them into about the blocks read and the float weight written). The product itself then
reads the widened weight: 4 bytes a weight in float32, what a weight widened at load costs a product.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_qwen3omni import build

from ggtts.families.magpie.pipeline import STREAM_GRAPH_FRAMES
from ggtts.families.qwen3omni.generate import GraphedFrame
from ggtts.gguf import GGUFFile
from ggtts.measure.operations import Operations
from ggtts.models.qwen2.config import Qwen2Config
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.models.qwen3omni_talker.config import StackConfig, TalkerConfig
from ggtts.models.qwen3omni_talker.model import Talker

OMNI_TALKER = dict(n_layers=20, n_expert=128, n_expert_used=6, norm_topk_prob=True)
TTS_TALKER = dict(n_layers=28, n_expert=0, n_expert_used=0, n_ff_exp=0, n_ff_shexp=0, n_ff=64)
CODE_PREDICTOR = dict(n_layers=5)
CODEBOOKS, CP_VOCAB = 16, 2048
QWEN2 = Qwen2Config(n_vocab=1024, dim=64, n_layers=24, n_heads=4, n_kv_heads=2, n_ff=96, context_length=256)


def shaped(tiny: TalkerConfig, talker: dict[str, object]) -> TalkerConfig:
    t: StackConfig = dataclasses.replace(tiny.talker, **talker)  # type: ignore[arg-type]
    c: StackConfig = dataclasses.replace(tiny.code_predictor, **CODE_PREDICTOR)  # type: ignore[arg-type]
    return dataclasses.replace(tiny, talker=t, code_predictor=c, n_codebooks=CODEBOOKS, cp_vocab=CP_VOCAB)


def random_talker(cfg: TalkerConfig, max_len: int, fuse: bool = True) -> Talker:
    """A talker of random weights with its GPU steps (run eagerly here)."""
    torch.manual_seed(0)
    talker = Talker(cfg, max_len)
    with torch.no_grad():
        for p in talker.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.fill_(1.0)
    talker.loaded("cpu", max_len, step_graphs=False, graph=False)
    talker.use_static_steps(capture=False, fuse=fuse)
    return talker


def count(cfg: TalkerConfig, fuse: bool, greedy: bool) -> Operations:
    talker = random_talker(cfg, 64, fuse)
    frame = GraphedFrame(talker.cp, cfg.cp_sampling, greedy, seed=0, capture=False)
    x = torch.randn(1, 1, cfg.talker.dim)
    with torch.inference_mode():
        cache = talker.new_cache(32)
        hidden, _ = talker.step(x, cache)
        frame(hidden, x)  # both made (and, on a GPU, captured)
        with Operations() as ops:
            hidden, _ = talker.step(x, cache)
            frame(hidden, x)
    return ops


def count_prompt(cfg: TalkerConfig, rows: int = 40) -> tuple[Operations, GraphShare]:
    """The operations of a talker's prompt (``rows`` rows; every expert through every row, as a GPU runs a prompt
    of up to 64), with their share inside the prefill's graph."""
    from ggtts.ops.stored_experts import Experts

    talker = random_talker(cfg, 256)
    for module in talker.modules():
        if isinstance(module, Experts):
            module.dense = True
    x = torch.randn(1, rows, cfg.talker.dim)
    with torch.inference_mode():
        talker.step(x, talker.new_cache(128))  # the prefill's graph made (and, on a GPU, captured)
        with Operations() as ops, GraphShare() as share:
            talker.step(x, talker.new_cache(128))
    return ops, share


def count_lanes(cfg: TalkerConfig, streams: int, greedy: bool) -> tuple[Operations, GraphShare]:
    """The operations of one frame of ``streams`` streams in the talker's static lanes (their talker step, then
    their code-predictor frames: :meth:`TalkerStack.step_many` and :meth:`GraphedFrame.many`), with their share
    inside the two graphs (every expert through every row, as a GPU runs up to 64)."""
    from ggtts.ops.stored_experts import Experts

    talker = random_talker(cfg, 64)
    talker.use_static_lanes(streams, capture=False)
    for module in talker.modules():
        if isinstance(module, Experts):
            module.dense = True
    frames = GraphedFrame(talker.cp, cfg.cp_sampling, greedy, seed=0, capture=False, rows=streams)
    x = torch.randn(1, 1, cfg.talker.dim)
    generators = [torch.Generator().manual_seed(i) for i in range(streams)]
    with torch.inference_mode():
        caches = [talker.new_cache(32) for _ in range(streams)]

        def frame() -> None:
            hidden = [h for h, _ in talker.step_many([x] * streams, caches)]
            frames.many(hidden, [x] * streams, generators)

        frame()  # both made (and, on a GPU, captured)
        with Operations() as ops, GraphShare() as share:
            frame()
    return ops, share


def count_decoders() -> None:
    from ggtts.models.qwen3omni_code2wav.config import Code2WavConfig
    from ggtts.models.qwen3omni_code2wav.model import Code2Wav, StreamingDecoder
    from ggtts.models.qwen3tts.config import DecoderConfig
    from ggtts.models.qwen3tts.decoder import SpeechDecoder

    shape: dict[str, Any] = dict(num_quantizers=16, hidden_size=64, num_hidden_layers=8, num_attention_heads=4,
                                 num_key_value_heads=4, head_dim=16, intermediate_size=128, sliding_window=72,
                                 rope_theta=10000.0, rms_norm_eps=1e-5, upsampling_ratios=(2, 2),
                                 upsample_rates=(8, 5, 4, 3), decoder_dim=64)  # fmt: skip
    omni = Code2WavConfig(codebook_size=64, **shape)
    tts = DecoderConfig(codebook_size=64, codebook_dim=32, latent_dim=64, sample_rate=24000, **shape)
    decoders: list[tuple[str, StreamingDecoder]] = [
        ("Qwen3-Omni code2wav", Code2Wav(omni).prepare()),
        ("Qwen3-TTS 12 Hz decoder", SpeechDecoder(tts).prepare()),
    ]
    print("operations of a speech decoder's stream: ordinary (eager on a GPU), static (in graphs + eager)")
    for name, decoder in decoders:
        torch.manual_seed(0)
        with torch.no_grad():
            for p in decoder.parameters():
                p.normal_(0, 0.1)
        decoder.eval().use_static_streams(16, (12, 4, 2, 1), capture=False)
        codes = torch.randint(0, 64, (1, 16, 17))
        for kind, stream in (("ordinary", decoder.stream()), ("static", decoder.fresh_stream())):
            if kind == "static":
                decoder.fresh_stream().push(codes[..., :1])  # its graphs made (and, on a GPU, captured)
            counts = []
            for start, n in ((0, 1), (1, 4), (5, 12)):
                with Operations() as ops, GraphShare() as share:
                    stream.push(codes[..., start : start + n])
                split = f" ({share.operations} in {share.calls} + {ops.total - share.operations})" * share.calls
                counts.append(f"{'first' if start == 0 else 'later'} {n:2}: {ops.total:4}{split}")
            print(f"{name:24} {kind:9} " + ", ".join(counts))


def count_qwen2(fuse: bool) -> Operations:
    torch.manual_seed(0)
    model = Qwen2Model(QWEN2, 64).eval()
    model.use_static_steps(capture=False, fuse=fuse)
    with torch.inference_mode():
        cache = model.new_cache(32)
        model(torch.tensor([[1, 2, 3]]), cache)  # the prompt, then the step made
        model(torch.tensor([[4]]), cache)
        with Operations() as ops:
            model(torch.tensor([[5]]), cache)
    return ops


class GraphShare:
    """Of the operations counted, those inside :class:`StepGraph` calls (what a GPU replays: one launch a call)."""

    def __init__(self) -> None:
        self.operations = self.calls = 0

    def __enter__(self) -> GraphShare:
        from ggtts.ops.step_graph import StepGraph

        real, share = StepGraph.__call__, self

        def counted(graph: StepGraph) -> object:
            with Operations() as ops:
                out = real(graph)
            share.operations, share.calls = share.operations + ops.total, share.calls + 1
            return out

        self._patch = mock.patch.object(StepGraph, "__call__", counted)
        self._patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def count_magpie(directory: Path) -> list[tuple[Operations, GraphShare]]:
    """The operations to Magpie's first frame, in the codec's first push, and in the next frame, each with its
    share inside graphs."""
    from gpu_magpie import params

    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.families.magpie.generate import MagpieGenerator
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import REAL_357M, build_tiny_magpie
    from ggtts.models.magpie.model import load_magpie
    from ggtts.models.nanocodec.model import NanoCodec

    codec_file = build_tiny_codec(directory / "codec.nemo", num_groups=8, samples_per_frame=1024,
                                  decoder_channels=32, up_sample_rates=[8, 8, 4, 2, 2])  # fmt: skip
    narrow = dataclasses.replace(REAL_357M, d_model=64, heads=4, lt_dim=64, lt_heads=4, xa_d_head=16)
    convert_magpie([build_tiny_magpie(directory / "m.nemo", codec_file, shape=narrow)], directory / "m.gguf", "f32")
    convert_nanocodec([codec_file], directory / "codec.gguf", "f32")
    model = load_magpie(GGUFFile(directory / "m.gguf"), "cpu", graph=False)
    model.use_static_steps(capture=False)  # the steps a GPU captures, run eagerly
    with mock.patch.object(NanoCodec, "use_channels_last", lambda self: 0):  # laid out as on a GPU (the CPU's own
        codec = NanoCodec.from_gguf(GGUFFile(directory / "codec.gguf"), "cpu")  # is channels-last: other operations)
    codec.use_static_streams(STREAM_GRAPH_FRAMES, capture=False)  # as the pipeline's, where the steps are graphs
    model.null_context_kv()
    ids = [*range(3, 43), model.cfg.text_eos_id]
    counted: list[tuple[Operations, GraphShare]] = []
    with torch.inference_mode():
        for _ in range(2):  # the first run makes the steps
            stream, frames = codec.stream(), MagpieGenerator(model, params(model, 40, True)).frames(ids, 0)
            with Operations() as first, GraphShare() as first_share:
                codes = next(frames)
            with Operations() as push, GraphShare() as push_share:
                stream.push(codes[:, :1])
            with Operations() as later, GraphShare() as later_share:
                next(frames)
            counted = [(first, first_share), (push, push_share), (later, later_share)]
    return counted


def count_blocks() -> None:
    from gpu_blocks import random_blocks

    from ggtts.ops.device_weights import DEVICE_TYPES, DeviceStoredWeight

    rows, cols = 4864, 1024
    print(f"operations to widen one stored weight ({rows} x {cols}) on a GPU, eager")
    for qtype in DEVICE_TYPES:
        weight = DeviceStoredWeight(random_blocks(qtype, rows, cols), qtype, rows, cols)
        with torch.inference_mode(), Operations() as ops:
            weight.widened(torch.float32)
        top = ", ".join(f"{n} {c}" for n, c in ops.counts.most_common(4))
        moved = ops.traffic / (rows * cols)
        bits = 8 * weight.stored_bytes() / (rows * cols)
        print(f"{qtype.name:8} {bits:5.2f} bits/weight {ops.total:4} operations {moved:5.1f} bytes "
              f"moved/weight  {top}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--greedy", action="store_true", help="the code predictor's codes by argmax, not sampled")
    ap.add_argument("--magpie", action="store_true", help="also Magpie's first audio (needs NeMo)")
    ap.add_argument("--blocks", action="store_true", help="only the widening of each stored block type")
    ap.add_argument("--decoders", action="store_true", help="only the talker families' speech decoders' pushes")
    args = ap.parse_args()
    if args.blocks:
        count_blocks()
        return
    if args.decoders:
        count_decoders()
        return
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build(Path(d), small=True)
        tiny = TalkerConfig.from_gguf(GGUFFile(Path(d) / "talker-f16.gguf"))
    print(f"operations per frame (talker step + code predictor frame, {'greedy' if args.greedy else 'sampled'})")
    print(f"{'model':34} {'projections':12} {'operations':>10} {'products':>9}  most frequent")
    for name, talker in (("Qwen3-Omni talker (20 MoE layers)", OMNI_TALKER), ("Qwen3-TTS 0.6B (28 dense layers)",
                                                                              TTS_TALKER)):  # fmt: skip
        for fuse in (False, True):
            ops = count(shaped(tiny, talker), fuse, args.greedy)
            top = ", ".join(f"{n} {c}" for n, c in ops.counts.most_common(6))
            print(f"{name:34} {'fused' if fuse else 'each its own':12} {ops.total:10} {ops.products:9}  {top}")
    print("operations of a talker's 40-row prompt (fused; the prefill's graph and what runs eagerly)")
    for name, talker in (("Qwen3-Omni talker (20 MoE layers)", OMNI_TALKER), ("Qwen3-TTS 0.6B (28 dense layers)",
                                                                              TTS_TALKER)):  # fmt: skip
        ops, share = count_prompt(shaped(tiny, talker))
        print(f"{name:34} {ops.total:6} ({share.operations} in {share.calls} graph + "
              f"{ops.total - share.operations} eager) {ops.products:6} products")  # fmt: skip
    print("operations of a frame of N streams in the talker's static lanes (fused; in the 2 graphs + eager)")
    for name, talker in (("Qwen3-Omni talker (20 MoE layers)", OMNI_TALKER), ("Qwen3-TTS 0.6B (28 dense layers)",
                                                                              TTS_TALKER)):  # fmt: skip
        for streams in (1, 2, 8):
            ops, share = count_lanes(shaped(tiny, talker), streams, args.greedy)
            print(f"{name:34} {streams} stream{'s' if streams > 1 else ' '} {ops.total:6} ({share.operations} in "
                  f"{share.calls} graphs + {ops.total - share.operations} eager)")  # fmt: skip
    print("operations per token (Qwen2's static step)")
    for fuse in (False, True):
        ops = count_qwen2(fuse)
        top = ", ".join(f"{n} {c}" for n, c in ops.counts.most_common(6))
        print(f"{'OuteTTS Qwen2 (24 layers)':34} {'fused' if fuse else 'each its own':12} {ops.total:10} "
              f"{ops.products:9}  {top}")  # fmt: skip
    if args.magpie:
        with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts = count_magpie(Path(d))
        print("Magpie 357M structure, with guidance (operations: in graphs + eager; a GPU launches a graph's once)")
        for name, (ops, share) in zip(("to the first frame", "the codec's first push", "a later frame"), parts,
                                      strict=True):  # fmt: skip
            top = ", ".join(f"{n} {c}" for n, c in ops.counts.most_common(4))
            split = f"{share.operations} in {share.calls} graphs + {ops.total - share.operations} eager"
            print(f"{name:24} {ops.total:6} ({split:30}) {ops.products:6} products  {top}")


if __name__ == "__main__":
    main()
