"""Continuous batching of the talker families (``parallel``: :mod:`ggtts.families.qwen3omni.lanes`), on Qwen3-TTS's
tiny model: several utterances' frames made together, each checked against the same utterance made alone; on the
CPU's ggml graphs, and (the end of the file) as a GPU runs them.

Exact equality where the arithmetic is the same: with prompts run whole, a step of several sequences is one ggml
graph whose every row is computed as it is alone (each row's dot products its own; measured 0 difference on Zen 3),
and each lane draws from its own generator in its own order. A prompt run in chunks is other arithmetic: there the
logits are compared teacher-forced, with a tolerance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _qwen3tts_tiny import Built, Recorder, need_qwen_tts

import ggtts
from ggtts.convert.qwen3tts_hf import convert_qwen3tts, mmproj_path
from ggtts.errors import InputError
from ggtts.families.qwen3omni.generate import (
    GraphedFrame,
    HFSampler,
    HostFrames,
    LaneFrame,
    TalkerSampling,
    generate_frames,
    talker_decoder,
)
from ggtts.families.qwen3omni.lanes import TalkerLane, TalkerLanes
from ggtts.families.qwen3omni.pipeline import static_decoder, talker_lanes
from ggtts.families.qwen3tts.pipeline import CHUNK_WORDS, Qwen3TTSPipeline
from ggtts.gguf import GGUFFile
from ggtts.models.qwen3tts.config import MIN_FRAMES
from ggtts.models.qwen3tts.model import Talker
from ggtts.ops.ggml_kernels import unavailable_reason
from ggtts.text.sentences import sentence_chunks
from near_ties import relative_difference

pytestmark = pytest.mark.needs_reference

TEXTS = ("Hello, world! How are you today?", "A second sentence, quite unlike the first one.", "Three.")
VOICES = ("vivian", "ryan", "vivian")
# teacher-forced logits of a lane whose prompt ran in chunks beside others, against alone (of the logits' peak,
# float32): measured 2.4e-7; a lane given another's positions or cache is off by more than 1e-1
FORCED_REL = 1e-5


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason() or "")
    return Built(tmp_path_factory.mktemp("qwen3tts-lanes"))


@pytest.fixture(scope="module")
def files(built: Built) -> dict[str, Path]:
    return {"f32": built.path, "q8_0": convert_qwen3tts([built.work / "ckpt"], built.work / "tiny-q8_0.gguf", "q8_0")}


def _talker(path: Path, eos: bool = True) -> Talker:
    talker = Talker.from_gguf(GGUFFile(path), GGUFFile(mmproj_path(path)))
    assert talker.graph is not None and talker.cp.graph is not None  # the CPU's ggml graphs
    if not eos:
        talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # no end: every frame drawn
    return talker


def _params(talker: Talker, seed: int, frames: int, greedy: bool = False) -> TalkerSampling:
    cfg = talker.cfg
    return TalkerSampling(greedy, cfg.sampling, cfg.cp_sampling, max_frames=frames, seed=seed)


def _run(lanes: TalkerLanes, join: dict[int, Any], steps: int = 400) -> tuple[dict[int, list[list[int]]], int]:
    """Step ``lanes`` until all are done; ``join[k]``: a callable adding a lane at step ``k``. Each lane's frames
    (by the number its adder returns), and the most lanes one step ran."""
    made: dict[int, list[list[int]]] = {}
    which: dict[int, int] = {}
    most = 0
    for step in range(steps):
        if step in join:
            lane, number = join[step]()
            which[id(lane)] = number
            made[number] = []
        most = max(most, len(lanes.lanes))
        for lane, frame in lanes.step():
            if frame is not None:
                made[which[id(lane)]].append(frame)
        if not lanes.lanes and step > max(join):
            break
    return made, most


@pytest.mark.parametrize("kind", ["f32", "q8_0"])
def test_lanes_make_the_frames_each_utterance_makes_alone(built: Built, files: dict[str, Path], kind: str) -> None:
    """Three utterances (their own texts, voices, seeds and budgets; one joining while the others speak), prompts
    run whole: each lane's sampled frames are exactly those its utterance samples alone, codec EOS included."""
    talker = _talker(files[kind])
    budgets, seeds = (30, 24, 12), (1, 2, 3)

    def inputs(i: int) -> Any:
        return built.inputs(TEXTS[i], "english", VOICES[i])

    alone = [
        list(generate_frames(talker, inputs(i), _params(talker, seeds[i], budgets[i]), min_frames=MIN_FRAMES))
        for i in range(3)
    ]
    lanes = TalkerLanes(talker, prefill_chunk=1 << 20)

    def joiner(i: int) -> Any:
        def join() -> tuple[TalkerLane, int]:
            decoder = talker_decoder(talker, inputs(i), _params(talker, seeds[i], budgets[i]), min_frames=MIN_FRAMES)
            return lanes.join(_Work(decoder)), i

        return join

    made, most = _run(lanes, {0: joiner(0), 1: joiner(1), 4: joiner(2)})
    assert most == 3 and not lanes.lanes
    assert [made[i] for i in range(3)] == alone
    assert len({len(a) for a in alone}) > 1  # (lanes that end at different steps)


class _Work:
    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder


def test_lanes_with_prompts_in_chunks_give_each_its_logits_alone(built: Built, files: dict[str, Path]) -> None:
    """Prompts run 4 rows a step beside the others' frames, one lane joining late: every logit each lane's talker
    and code predictor choose from is the one its utterance has alone along the same codes (teacher-forced)."""
    talker = _talker(files["f32"], eos=False)
    frames = 10
    inputs = [built.inputs(TEXTS[i], "english", VOICES[i]) for i in range(3)]
    greedy = [list(generate_frames(talker, x, _params(talker, 0, frames, greedy=True))) for x in inputs]
    alone = []
    for x, codes in zip(inputs, greedy, strict=True):
        first, rest = Recorder.along(codes)
        assert list(generate_frames(talker, x, _params(talker, 0, frames), pickers=(first, rest))) == codes
        alone.append((torch.stack(first.seen), torch.stack(rest.seen)))
    lanes = TalkerLanes(talker, prefill_chunk=4)
    forced = [Recorder.along(codes) for codes in greedy]

    def joiner(i: int) -> Any:
        def join() -> tuple[TalkerLane, int]:
            decoder = talker_decoder(talker, inputs[i], _params(talker, 0, frames), pickers=forced[i])
            return lanes.join(_Work(decoder)), i

        return join

    made, most = _run(lanes, {0: joiner(0), 1: joiner(1), 3: joiner(2)})
    assert most == 3 and [made[i] for i in range(3)] == greedy
    for (first, rest), (want_first, want_rest) in zip(forced, alone, strict=True):
        got_first, got_rest = torch.stack(first.seen), torch.stack(rest.seen)
        assert got_first.shape == want_first.shape and got_rest.shape == want_rest.shape
        assert float((got_first - want_first).abs().max() / want_first.abs().max()) < FORCED_REL
        assert float((got_rest - want_rest).abs().max() / want_rest.abs().max()) < FORCED_REL


def test_lanes_refuse_what_they_cannot_step(built: Built, files: dict[str, Path]) -> None:
    talker = _talker(files["f32"])
    with pytest.raises(ValueError, match="at least one row"):
        TalkerLanes(talker, prefill_chunk=0)
    lanes = TalkerLanes(talker)
    x = built.inputs(TEXTS[2], "english", "vivian")
    decoder = talker_decoder(talker, x, _params(talker, 0, 5))
    decoder.rest = lambda hidden, first: ([], first)  # a code predictor's frame that is not chosen on the host
    with pytest.raises(ValueError, match="on the host"):
        lanes.join(_Work(decoder))
    done = lanes.join(_Work(talker_decoder(talker, x, _params(talker, 0, 0))))  # no frames to make
    assert done.done and lanes.lanes == []


@pytest.fixture(scope="module")
def models(files: dict[str, Path]) -> Iterator[tuple[Qwen3TTSPipeline, Qwen3TTSPipeline]]:
    out = []
    for parallel in (1, 3):
        model = ggtts.load(files["q8_0"], parallel=parallel)
        assert isinstance(model, Qwen3TTSPipeline)
        out.append(model)
    assert out[0].lanes is None and out[1].lanes is not None and out[1].parallel_streams == 3
    out[1].lanes.lanes.prefill_chunk = 1 << 20  # prompts whole, as alone (in chunks: other arithmetic, above)
    yield out[0], out[1]
    out[1].lanes.close()


def _at_once(model: Qwen3TTSPipeline, texts: Any, options: list[dict[str, Any]]) -> list[list[Any]]:
    """Streams asked of ``model`` at once (all wait for its loop, which then takes them in one step), read whole."""
    assert model.lanes is not None
    with model.lanes._cond:
        streams = [model.stream(t, **o) for t, o in zip(texts, options, strict=True)]
    got = [list(s) for s in streams]
    assert model.lanes.most_lanes == len(texts)
    return got


def _joined(chunks: Any) -> np.ndarray:
    return np.concatenate([c.samples for c in chunks])


def test_parallel_streams_say_what_each_says_alone(models: tuple[Qwen3TTSPipeline, Qwen3TTSPipeline]) -> None:
    """Three streams asked at once of a ``parallel=3`` model (the second of two chunks of text, each its own lane in
    turn) are byte for byte what each says asked alone of a model without lanes, at the same offsets."""
    alone, together = models
    assert together.lanes is not None
    options = [{"voice": VOICES[i], "seed": i, "max_frames": 20, "chunk_frames": 5} for i in range(3)]
    long = " ".join(["one two three four five six seven eight nine ten"] * 6) + ". Three."  # sentences, as chunks
    assert len(sentence_chunks(long, CHUNK_WORDS)) == 2
    texts = [TEXTS[0], long, TEXTS[2]]
    expected = [list(alone.stream(t, **o)) for t, o in zip(texts, options, strict=True)]
    got = _at_once(together, texts, options)
    for e, g in zip(expected, got, strict=True):
        assert len(e) > 1
        np.testing.assert_array_equal(_joined(g), _joined(e))
        assert [c.offset for c in g] == [c.offset for c in e]
    whole = together.synthesize(TEXTS[0], **options[0])
    np.testing.assert_array_equal(whole.samples, alone.synthesize(TEXTS[0], **options[0]).samples)


def test_a_stream_given_up_leaves_and_the_others_finish(models: tuple[Qwen3TTSPipeline, Qwen3TTSPipeline]) -> None:
    alone, together = models
    assert together.lanes is not None
    options = {"voice": "ryan", "seed": 5, "max_frames": 20, "chunk_frames": 5}
    expected = _joined(alone.stream(TEXTS[1], **options))
    with together.lanes._cond:
        dropped = together.stream(TEXTS[0], voice="vivian", max_frames=20)
        kept = together.stream(TEXTS[1], **options)
    next(dropped)
    dropped.close()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(_joined(kept), expected)
    assert together.lanes.lanes.lanes == [] and together.lanes._jobs == []


def test_the_server_gives_a_parallel_model_as_many_turns(models: tuple[Qwen3TTSPipeline, Qwen3TTSPipeline]) -> None:
    from ggtts.server.worker import ModelWorker

    _, together = models
    worker = ModelWorker("tts", together, max_queue=4)
    try:
        assert worker.turns == 3  # three requests served at once, each on a thread that waits for its lane
    finally:
        worker.shutdown()


def test_parallel_is_a_whole_number(files: dict[str, Path]) -> None:
    for bad in (0, 65, 1.5, "two"):
        with pytest.raises(InputError, match="parallel"):
            ggtts.load(files["q8_0"], parallel=bad)


def test_a_request_failing_in_the_loop_fails_alone(models: tuple[Qwen3TTSPipeline, Qwen3TTSPipeline]) -> None:
    """A speech whose making fails on the loop's thread (here its decoder's stream) fails its own request only."""
    _, together = models
    assert together.lanes is not None
    real = together.decoder_stream

    def stream(speaker: str | None) -> Any:
        if speaker == "ryan":
            raise InputError("no stream for ryan")
        return real(speaker)

    together.decoder_stream = stream  # type: ignore[method-assign]
    try:
        with together.lanes._cond:
            bad = together.stream(TEXTS[0], voice="ryan", max_frames=6)
            good = together.stream(TEXTS[2], voice="vivian", max_frames=6)
        with pytest.raises(InputError, match="no stream for ryan"):
            list(bad)
        assert len(_joined(good)) > 0
    finally:
        del together.decoder_stream


# ---- on a GPU (``parallel`` on CUDA: TalkerStack.use_static_lanes), run eagerly here ---------------------------------
# every lane's talker step one step over fixed caches of one row per lane, every lane's code-predictor frame one
# graphed frame of as many rows (LaneFrame), its codes chosen as tensors from each lane's own generator. A row's
# arithmetic is the same whichever rows take part (each row's products and attention its own, the shapes fixed by the
# number of rows), so an utterance made beside others is compared exactly with the same utterance made alone in the
# same lanes; the lanes' numbers are checked against the eager modules with a measured tolerance.

# a lanes row's hidden state and logits against the eager modules' over the same sequence (of the peak, float32):
# measured 5.7e-7; a row given another's position or cache is off by more than 1e-1
ROW_REL = 1e-5


def _float_talker(built: Built, slots: int | None = None) -> Talker:
    """The tiny talker in float (as a GPU holds the f32 file), its steps the torch modules'; with ``slots``, its
    static lanes turned on (eagerly: the code their CUDA graphs hold)."""
    talker = Talker.from_gguf(GGUFFile(built.path), GGUFFile(mmproj_path(built.path)), graph=False)
    if slots is not None:
        talker.use_static_lanes(slots, capture=False)
    return talker


def test_a_lanes_step_gives_each_row_what_its_sequence_gives_alone(built: Built) -> None:
    """Three sequences at their own positions, their prompts of 5 and 20 rows as graphs (padded to 16 and 32 rows
    over a scratch cache, copied into their rows; a NaN left in the padding changes nothing) and of 70 rows eagerly,
    then stepped a row at a time through the lanes, some steps without one of them: each row's hidden state and
    logits are those of the eager modules over its own sequence, and a row left out of a step keeps its cache."""
    lanes, eager = _float_talker(built, slots=3), _float_talker(built)
    dim = eager.cfg.talker.dim
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randn(1, t, dim, generator=g) for t in (5, 70, 20)]
    worst = 0.0
    with torch.inference_mode():
        rows = [lanes.new_cache(128) for _ in prompts]
        alone = [eager.new_cache(128) for _ in prompts]
        assert lanes.lanes is not None and all(lanes.lanes.holds(c) for c in rows)
        for i, (x, row, own) in enumerate(zip(prompts, rows, alone, strict=True)):
            if i == 2:
                for prefill in next(iter(lanes.lanes.buckets.values())).prefills.values():
                    prefill.input.fill_(float("nan"))
            for got, want in zip(lanes.step(x, row), eager.step(x, own), strict=True):
                worst = max(worst, relative_difference(got, want))
            assert row.length == own.length == x.shape[1]
        assert sorted(next(iter(lanes.lanes.buckets.values())).prefills) == [16, 32, 64]  # made at the first
        for step in range(6):
            taking = [0, 1, 2] if step % 3 else [0, 2]  # the middle one sits some steps out
            xs = [torch.randn(1, 1, dim, generator=g) for _ in taking]
            outs = lanes.step_many(xs, [rows[i] for i in taking])
            for i, x, (hidden, logits) in zip(taking, xs, outs, strict=True):
                want_hidden, want_logits = eager.step(x, alone[i])
                assert hidden.shape == want_hidden.shape and logits.shape == want_logits.shape
                worst = max(worst, relative_difference(hidden, want_hidden), relative_difference(logits, want_logits))
                assert rows[i].length == alone[i].length
    print(f"lanes rows against the modules: {worst:.1e}")
    assert worst < ROW_REL, worst


def test_a_graphed_frame_of_several_rows_picks_what_each_rows_logits_pick(built: Built) -> None:
    """The code predictor's frame of three rows at once (greedy): each row's codes are the argmax of the logits the
    host loop sees along those codes, and its embedding sum theirs (within rounding); sampled, each row's noise is
    its own generator's, as one frame alone draws it."""
    talker = _float_talker(built)
    cp, cfg = talker.cp, talker.cfg
    frames = GraphedFrame(cp, cfg.cp_sampling, greedy=True, seed=0, capture=False, rows=3)
    g = torch.Generator().manual_seed(3)
    hiddens = [torch.randn(1, 1, cp.embed_dim, generator=g) for _ in range(3)]
    firsts = [torch.randn(1, 1, cp.embed_dim, generator=g) for _ in range(3)]
    with torch.inference_mode():
        made = frames.many(hiddens, firsts, [torch.Generator() for _ in range(3)])
        for (codes, total), hidden, first in zip(made, hiddens, firsts, strict=True):
            seen: list[torch.Tensor] = []
            answers = iter(codes)

            def along(logits: torch.Tensor, *_: Any, seen: list[torch.Tensor] = seen, it: Any = answers) -> int:
                seen.append(logits.float().clone())
                return next(it)

            host_codes, host_total = HostFrames(cp, along)(hidden, first)
            assert host_codes == codes and len(seen) == cfg.n_codebooks - 1
            for logits, code in zip(seen, codes, strict=True):
                assert float(logits.max() - logits[code]) < 1e-5  # its pick is the best (up to a near-tie)
            assert relative_difference(total, host_total) < 1e-6
        assert len({tuple(c) for c, _ in made}) == 3  # three frames of their own
        sampled = GraphedFrame(cp, cfg.cp_sampling, greedy=False, seed=0, capture=False, rows=3)
        sampled.many(hiddens[:2], firsts[:2], [torch.Generator().manual_seed(s) for s in (4, 5)])
        for row, seed in zip(sampled.noise[:2], (4, 5), strict=True):
            want = torch.empty(cfg.n_codebooks - 1, cfg.cp_vocab).exponential_(
                generator=torch.Generator().manual_seed(seed)
            )
            assert torch.equal(row, want)
        with pytest.raises(ValueError, match="4 frames"):
            frames.many(hiddens + hiddens[:1], firsts + firsts[:1], [torch.Generator()] * 4)
        with pytest.raises(ValueError, match="a graphed frame makes at least one row"):
            GraphedFrame(cp, cfg.cp_sampling, greedy=True, seed=0, capture=False, rows=0)


def test_gpu_lanes_make_the_frames_each_utterance_makes_alone_in_them(built: Built) -> None:
    """Three sampled utterances (their own texts, voices, seeds and budgets; one joining while the others speak),
    prompts run whole, on a talker with static lanes: their code-predictor frames are made in the lanes' graphed
    frame, and each lane's frames are exactly those its utterance makes alone in the same lanes; every row is free
    again at the end."""
    talker = _float_talker(built, slots=3)
    budgets, seeds = (30, 24, 12), (1, 2, 3)

    def decoder(i: int) -> Any:
        inputs = built.inputs(TEXTS[i], "english", VOICES[i])
        made = talker_decoder(talker, inputs, _params(talker, seeds[i], budgets[i]), min_frames=MIN_FRAMES)
        assert isinstance(made.rest, LaneFrame) and made.rest.frames.rows == 3
        return made

    def joiner(lanes: TalkerLanes, i: int) -> Callable[[], tuple[TalkerLane, int]]:
        return lambda: (lanes.join(_Work(decoder(i))), i)

    alone = []
    for i in range(3):
        lanes = TalkerLanes(talker, prefill_chunk=1 << 20)
        made, _ = _run(lanes, {0: joiner(lanes, i)})
        alone.append(made[i])
    lanes = TalkerLanes(talker, prefill_chunk=1 << 20)
    made, most = _run(lanes, {0: joiner(lanes, 0), 1: joiner(lanes, 1), 4: joiner(lanes, 2)})
    assert most == 3 and not lanes.lanes
    assert [made[i] for i in range(3)] == alone
    assert len({len(a) for a in alone}) > 1 and all(len(a) > 0 for a in alone)
    assert talker.lanes is not None and talker.lanes.buckets
    # given back as each lane ended (not merely let go: a row whose cache is still referenced stays held)
    assert all(ref is None for b in talker.lanes.buckets.values() for ref in b.held)


def test_a_model_with_static_steps_gets_static_lanes(built: Built) -> None:
    """``parallel`` on a model whose talker steps are graphs over fixed caches (CUDA) turns on its static lanes with
    the same capture and compile settings; on the CPU's ggml graphs the lanes step those."""
    talker = _float_talker(built)
    talker.use_static_steps(capture=False)
    loop = talker_lanes(talker, 4)
    assert loop is not None and loop.max_lanes == 4
    assert talker.static is None and talker.lanes is not None and talker.lanes.slots == 4
    assert not talker.lanes.capture and not talker.static_capture
    plain = Talker.from_gguf(GGUFFile(built.path), GGUFFile(mmproj_path(built.path)))
    assert talker_lanes(plain, 4) is not None and plain.lanes is None
    assert talker_lanes(plain, 1) is None


@pytest.fixture(scope="module")
def gpu_model(built: Built) -> Iterator[Qwen3TTSPipeline]:
    """A ``parallel=3`` model with its talker's static lanes and its decoder's static streams, as a GPU loads it
    (eagerly)."""
    model = ggtts.load(built.path, parallel=3)
    assert isinstance(model, Qwen3TTSPipeline) and model.lanes is not None
    model.talker.use_static_lanes(3, capture=False)
    static_decoder(model.talker, model.decoder, model.decoder.cfg.num_quantizers, model.lanes)
    model.lanes.lanes.prefill_chunk = 1 << 20  # prompts whole, as alone
    yield model
    model.lanes.close()


def test_parallel_streams_in_gpu_lanes_say_what_each_says_alone_in_them(
    gpu_model: Qwen3TTSPipeline,
) -> None:
    """Three streams asked at once of a model whose talker has static lanes (and whose speech decoder has a
    fixed-tensor stream for each) are sample for sample what each says asked alone of it, and a stream takes its
    talker rows and its decoder stream back at its end."""
    model = gpu_model
    assert model.lanes is not None and model.talker.lanes is not None and model.decoder.static is not None
    held: list[object] = []  # every decoder stream, alive: its lane is free only if it was given back
    fresh = model.decoder.fresh_stream
    model.decoder.fresh_stream = lambda: held.append(fresh()) or held[-1]  # type: ignore[method-assign]
    options = [{"voice": VOICES[i], "seed": i, "max_frames": 16, "chunk_frames": 4} for i in range(3)]
    expected = [_joined(model.stream(t, **o)) for t, o in zip(TEXTS, options, strict=True)]
    assert [len(pool) for pool in model.decoder.static.lanes.values()] == [1]  # one at a time: one lane
    for e, g in zip(expected, _at_once(model, TEXTS, options), strict=True):
        assert len(e) > 0
        np.testing.assert_array_equal(_joined(g), e)
    assert model.talker.lanes.buckets and all(
        ref is None for b in model.talker.lanes.buckets.values() for ref in b.held
    )
    [pool] = model.decoder.static.lanes.values()
    assert len(pool) == 3 and all(lane.owner is None for lane in pool)  # each stream its own, each given back
    assert len(held) == 6
    del model.decoder.fresh_stream


def test_a_stream_given_up_in_gpu_lanes_gives_its_decoder_lane_back(gpu_model: Qwen3TTSPipeline) -> None:
    """A stream given up after its first audio leaves the loop with its decoder's fixed tensors given back (not
    only once it is garbage: a live stream's lane taken by a newcomer would fail that stream)."""
    model = gpu_model
    assert model.lanes is not None and model.decoder.static is not None
    held: list[object] = []
    fresh = model.decoder.fresh_stream
    model.decoder.fresh_stream = lambda: held.append(fresh()) or held[-1]  # type: ignore[method-assign]
    try:
        dropped = model.stream(TEXTS[0], voice=VOICES[0], seed=1, max_frames=16, chunk_frames=4)
        next(dropped)
        dropped.close()  # type: ignore[attr-defined]
        assert len(_joined(model.stream(TEXTS[1], voice=VOICES[1], seed=2, max_frames=16))) > 0  # the loop went on
    finally:
        del model.decoder.fresh_stream
    assert len(held) == 2 and model.lanes._jobs == []
    assert all(lane.owner is None for pool in model.decoder.static.lanes.values() for lane in pool)


def test_host_sampled_frames_still_run_in_lanes(built: Built) -> None:
    """A talker with static lanes still takes an utterance whose code predictor is chosen on the host (given
    pickers): its talker steps run in the lanes, its frame through the modules."""
    talker = _float_talker(built, slots=2)
    x = built.inputs(TEXTS[2], "english", "vivian")
    greedy = HFSampler(talker.cfg.sampling, True, torch.Generator())
    rest = HFSampler(talker.cfg.cp_sampling, True, torch.Generator())
    decoder = talker_decoder(talker, x, _params(talker, 0, 6), pickers=(greedy, rest))
    assert isinstance(decoder.rest, HostFrames)
    assert talker.lanes is not None and talker.lanes.holds(decoder.cache)
    lanes = TalkerLanes(talker)
    lane = lanes.join(_Work(decoder))
    frames = []
    while lanes.lanes:
        frames += [f for _, f in lanes.step() if f is not None]
    assert lane.done and 0 < len(frames) <= 6


def _graphs(model: Qwen3TTSPipeline) -> set[object]:
    """What a GPU captures for a talker's requests: its static steps by capacity (and their prompts' graphs), its
    lanes' fixed caches by capacity (and theirs), its graphed code-predictor frames by settings, its speech
    decoder's fixed streams by batch size."""
    from ggtts.families.qwen3omni.generate import _GRAPHED

    talker = model.talker
    made: set[object] = set(_GRAPHED.get(talker, {}))
    pools = model.decoder.static.lanes if model.decoder.static is not None else {}
    made |= {("decoder", batch, i) for batch, pool in pools.items() for i in range(len(pool))}
    for capacity, decode in (talker.static.decoders if talker.static is not None else {}).items():
        made |= {("step", capacity), *(("prompt", capacity, rows) for rows in decode.prefills)}
    for capacity, bucket in (talker.lanes.buckets if talker.lanes is not None else {}).items():
        made |= {("lanes", capacity), *(("lanes prompt", capacity, rows) for rows in bucket.prefills)}
    return made


@pytest.mark.parametrize("parallel", [1, 2])
def test_the_warm_up_makes_the_graphs_a_default_request_uses(built: Built, parallel: int) -> None:
    """The warm-up streams the first chunks of a default request, sampled then greedy: on a GPU every graph a
    request with the default frame budget replays (the step and prompt graphs of its cache's capacity, the code
    predictor's sampled and greedy frames, the speech decoder's pushes; the lanes' with ``parallel``) is captured
    there, not in the first request. Here the static steps run eagerly: nothing new is made by the requests after
    it."""
    model = ggtts.load(built.path, parallel=parallel)
    assert isinstance(model, Qwen3TTSPipeline)
    model.talker.use_static_steps(capture=False)  # as a GPU's load: the steps, then the lanes, then the decoder
    if parallel > 1:
        model.talker.use_static_lanes(parallel, capture=False)
    static_decoder(model.talker, model.decoder, model.decoder.cfg.num_quantizers, model.lanes)
    assert model.decoder.static is not None and model.decoder.static.streams == parallel
    try:
        model.warm_up()
        warm = _graphs(model)
        assert any(k[0] == "step" or k[0] == "lanes" for k in warm if isinstance(k, tuple) and isinstance(k[0], str))
        assert sum(1 for k in warm if isinstance(k, tuple) and not isinstance(k[0], str)) == 2  # sampled, greedy
        assert {("decoder", 1, i) for i in range(parallel)} <= warm  # a decoder's streams for each lane
        for options in ({"seed": 4}, {"temperature": 0}):
            streams = [model.stream(t, VOICES[1], **options) for t in TEXTS[:parallel]]  # (at once, with lanes)
            for stream in streams:
                assert len([c for _, c in zip(range(3), stream, strict=False)]) == 3
                stream.close()
        assert _graphs(model) == warm
    finally:
        if model.lanes is not None:
            model.lanes.close()
