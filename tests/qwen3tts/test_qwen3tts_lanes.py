"""Continuous batching of the talker families (``parallel``: :mod:`ggtts.families.qwen3omni.lanes`), on Qwen3-TTS's
tiny model: several utterances' frames made together, each checked against the same utterance made alone.

Exact equality where the arithmetic is the same: with prompts run whole, a step of several sequences is one ggml
graph whose every row is computed as it is alone (each row's dot products its own; measured 0 difference on Zen 3),
and each lane draws from its own generator in its own order. A prompt run in chunks is other arithmetic: there the
logits are compared teacher-forced, with a tolerance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _qwen3tts_tiny import Built, Recorder, need_qwen_tts

import ggtts
from ggtts.convert.qwen3tts_hf import convert_qwen3tts, mmproj_path
from ggtts.errors import InputError
from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames, talker_decoder
from ggtts.families.qwen3omni.lanes import TalkerLane, TalkerLanes
from ggtts.families.qwen3tts.pipeline import CHUNK_WORDS, Qwen3TTSPipeline
from ggtts.gguf import GGUFFile
from ggtts.models.qwen3tts.config import MIN_FRAMES
from ggtts.models.qwen3tts.model import Talker
from ggtts.ops.ggml_kernels import unavailable_reason
from ggtts.text.sentences import sentence_chunks

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
    with together.lanes._cond:  # all three wait for the loop, which then takes them in one step
        streams = [together.stream(t, **o) for t, o in zip(texts, options, strict=True)]
    got = [list(s) for s in streams]
    assert together.lanes.most_lanes == 3
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


def test_parallel_is_a_whole_number_and_for_the_cpu(files: dict[str, Path]) -> None:
    for bad in (0, 65, 1.5, "two"):
        with pytest.raises(InputError, match="parallel"):
            ggtts.load(files["q8_0"], parallel=bad)
    with pytest.raises(InputError, match="parallel is for the CPU for now with a talker"):
        Qwen3TTSPipeline.from_gguf(GGUFFile(files["q8_0"]), "cuda", parallel=2)


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
