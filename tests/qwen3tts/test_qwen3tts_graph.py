"""Qwen3-TTS's talker and code predictor with each step one ggml graph (the CPU default) against the same weights
run by the torch modules op by op (``graph=False``): every logit both pick from, teacher-forced along the modules'
greedy frames, on float32, Q8_0 and Q4_0 files; one graph serving two utterances' caches in turn.

Measured (AMD EPYC Zen 5), of the logits' peak: float32 5e-7 (talker) and 7e-7 (code predictor); Q8_0 and Q4_0
0 and 1.5e-4 (the hidden states differ by ~2e-7, which the heads' Q8_0 activations mostly absorb; where an
activation's rounding flips, the code predictor's logits move by up to ~2e-4).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from _qwen3tts_tiny import Built, Recorder, need_qwen_tts

from ggtts.convert.qwen3tts_hf import convert_qwen3tts, mmproj_path
from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
from ggtts.gguf import GGUFFile
from ggtts.models.layers.ggml_stack import StackGraph, StackShape, graphable
from ggtts.models.qwen3tts.config import MIN_FRAMES
from ggtts.models.qwen3tts.model import Talker
from ggtts.ops.ggml_kernels import unavailable_reason

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"
FRAMES = 24
FLOAT_REL = 1e-5  # of the logits' peak; measured ~3e-7
BLOCKS_REL = 5e-3  # Q8_0 / Q4_0: measured up to 1.7e-4, where an activation's Q8_0 rounding flips


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason() or "")
    return Built(tmp_path_factory.mktemp("qwen3tts-graph"))


@pytest.fixture(scope="module")
def files(built: Built) -> dict[str, Path]:
    out = {"f32": built.path}
    for kind in ("q8_0", "q4_0"):
        out[kind] = convert_qwen3tts([built.work / "ckpt"], built.work / f"tiny-{kind}.gguf", kind)
    return out


def _load(path: Path, graph: bool) -> Talker:
    talker = Talker.from_gguf(GGUFFile(path), GGUFFile(mmproj_path(path)), graph=graph)
    talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # no end: every frame drawn
    return talker


def _greedy(talker: Talker, built: Built, text: str = TEXT) -> list[list[int]]:
    cfg = talker.cfg
    params = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=FRAMES)
    return list(generate_frames(talker, built.inputs(text, "english", "vivian"), params, min_frames=MIN_FRAMES))


def _logits_along(talker: Talker, built: Built, frames: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The talker's and the code predictor's logits at every decision, each fed ``frames``' codes."""
    cfg = talker.cfg
    first, rest = Recorder.along(frames)
    params = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=len(frames))
    inputs = built.inputs(TEXT, "english", "vivian")
    made = list(generate_frames(talker, inputs, params, pickers=(first, rest), min_frames=MIN_FRAMES))
    assert made == frames
    return torch.stack(first.seen), torch.stack(rest.seen)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("kind", ["f32", "q8_0", "q4_0"])
def test_graph_steps_give_the_torch_modules_logits(built: Built, files: dict[str, Path], kind: str) -> None:
    modules, graph = _load(files[kind], graph=False), _load(files[kind], graph=True)
    assert modules.graph is None and modules.cp.graph is None
    assert graph.graph is not None and graph.cp.graph is not None
    frames = _greedy(modules, built)
    assert len(frames) == FRAMES
    want_first, want_rest = _logits_along(modules, built, frames)
    got_first, got_rest = _logits_along(graph, built, frames)
    assert want_rest.shape == (FRAMES * (graph.cfg.n_codebooks - 1), graph.cfg.cp_vocab)
    errors = _relative(got_first, want_first), _relative(got_rest, want_rest)
    print(f"{kind}: talker {errors[0]:.1e}, code predictor {errors[1]:.1e}")
    assert max(errors) < (FLOAT_REL if kind == "f32" else BLOCKS_REL)


def test_the_check_sees_a_graph_that_drops_the_head_norms(
    built: Built, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison can fail: graphs built without Qwen3's per-head query/key norms give other logits."""
    modules = _load(files["f32"], graph=False)
    frames = _greedy(modules, built)
    want_first, want_rest = _logits_along(modules, built, frames)
    broken = _load(files["f32"], graph=True)
    for blk in [*broken.blk, *broken.cp.blk]:
        monkeypatch.delattr(blk.attn, "attn_q_norm")  # what the graph builder looks for
    got_first, got_rest = _logits_along(broken, built, frames)
    assert _relative(got_first, want_first) > 1e-2 and _relative(got_rest, want_rest) > 1e-2


def test_one_graph_serves_two_utterances_in_turn(built: Built, files: dict[str, Path]) -> None:
    """Graphs are per cache shape, not per cache: two utterances stepped in turn (each on its own caches) give
    what each gives alone, exactly."""
    talker = _load(files["q4_0"], graph=True)
    other = "A second sentence, quite unlike the first one."
    alone = _greedy(talker, built), _greedy(talker, built, other)
    cfg = talker.cfg
    params = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=FRAMES)
    runs = [
        generate_frames(talker, built.inputs(text, "english", "vivian"), params, min_frames=MIN_FRAMES)
        for text in (TEXT, other)
    ]
    turns: list[list[list[int]]] = [[], []]
    for _ in range(FRAMES):
        for made, run in zip(turns, runs, strict=True):
            made.append(next(run))
    assert turns[0] == alone[0] and turns[1] == alone[1]
    assert turns[0] != turns[1]


def test_a_step_of_no_rows_is_refused(built: Built, files: dict[str, Path]) -> None:
    talker = _load(files["f32"], graph=True)
    assert talker.graph is not None
    cache = talker.new_cache(8)
    with pytest.raises(ValueError, match="at least one row"):
        talker.graph.step(torch.zeros(0, talker.cfg.talker.dim), cache, talker.output)
    assert cache.length == 0


def test_weights_replaced_after_the_graphs_were_built_are_refused(built: Built, files: dict[str, Path]) -> None:
    """The graphs read the weights' memory as it was when they were built: a weight replaced out of place since is
    one clear error, not the old weights' logits."""
    talker = _load(files["f32"], graph=True)
    _greedy(talker, built)  # the graphs, built
    assert talker.graph is not None and talker.graph.current()
    norm = talker.graph.output_norm.weight
    with torch.no_grad():
        norm.data = norm.data * 1.5  # new memory
    assert not talker.graph.current()
    with pytest.raises(ValueError, match="replaced out of place"):
        talker.graph.step(torch.zeros(1, talker.cfg.talker.dim), talker.new_cache(8), talker.output)


def test_blocks_it_cannot_build_are_refused() -> None:
    """A block whose feed-forward is neither SwiGLU nor a mixture of SwiGLU experts is left to torch (the model's
    loader asks :func:`graphable` first); building a graph of it is refused in one sentence."""
    from ggtts.models.layers.qwen3 import Attention, Block
    from ggtts.models.layers.transformer import RMSNorm

    other = Block(64, 1e-6, Attention(64, 4, 2, 16, 1e-6), torch.nn.GELU())
    assert not graphable(other)
    shape = StackShape(64, 4, 2, 16, 1e-6, 10_000.0, 32)
    with pytest.raises(ValueError, match="attention and a SwiGLU feed-forward or experts only"):
        StackGraph([other], RMSNorm(64, 1e-6), shape)
