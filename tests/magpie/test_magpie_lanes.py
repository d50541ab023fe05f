"""Magpie's continuous batching (:mod:`ggtts.families.magpie.lanes`, the ``parallel`` load option) on a tiny NeMo-built
model and codec: streams asked at once say byte for byte what each says alone (their own texts, voices, seeds and
sampling), every lane's share of a decoder step of several (guidance on and off together) is the modules' step of it
alone, and a stream given up leaves the others to finish."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _magpie_tiny import tiny_magpie_files

import ggtts
from ggtts.errors import InputError

pytestmark = pytest.mark.needs_reference

TEXTS = [
    "Hello world, this is a test.",
    "A second sentence, somewhat longer than the first one is.",
    "Short one.",
    "A fourth one, its budget short.",
]
OPTIONS: list[dict[str, Any]] = [
    {"voice": "Aria", "seed": 1},
    {"voice": "Leo", "seed": 2, "temperature": 0},
    {"voice": "Jason", "seed": 3, "top_k": 5},
    {"voice": "Aria", "seed": 4, "max_frames": 6},  # its frame budget ends it, not EOS
]
# one row a step instead of guidance's two: alone, ggml multiplies its float weights by one column, with other
# kernels (other roundings) than beside other rows, so its lane is checked step by step against the modules
GUIDANCE_OFF: dict[str, Any] = {"voice": "Leo", "seed": 5, "guidance": False}
FRAMES = 30  # (a stream's budget unless it says)
SAMPLES_PER_FRAME = 64  # the tiny codec's


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_magpie_files(tmp_path_factory.mktemp("magpie-lanes"), seed=2, kind="q8_0")


@pytest.fixture(scope="module")
def models(files: tuple[Path, Path]) -> Iterator[tuple[Any, Any]]:
    alone, together = ggtts.load(files[0]), ggtts.load(files[0], parallel=4)
    yield alone, together
    together.lanes.close()  # its thread ends (with its OpenMP team)


def _joined(chunks: Any) -> np.ndarray:
    return np.concatenate([c.samples for c in chunks])


def _at_once(model: Any, texts: list[str], options: list[dict[str, Any]]) -> list[list[Any]]:
    """The streams asked together (all waiting for the loop, which then takes them in one step), each read on a
    thread of its own."""
    with model.lanes._cond:
        streams = [model.stream(t, **{"max_frames": FRAMES, **o}) for t, o in zip(texts, options, strict=True)]
    out: list[list[Any]] = [[] for _ in streams]

    def read(i: int) -> None:
        out[i] = list(streams[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_parallel_streams_say_what_each_says_alone(models: tuple[Any, Any]) -> None:
    """Four streams asked at once of a ``parallel=4`` model (greedy and sampled, other voices, a short budget; the
    second of two sentences, each its own lane in turn) are byte for byte what each says asked alone of a model
    without lanes, chunk for chunk and at the same offsets: each lane's arithmetic is its arithmetic alone."""
    alone, together = models
    texts = [TEXTS[0], f"{TEXTS[1]} {TEXTS[2]}", TEXTS[2], TEXTS[3]]
    expected = [list(alone.stream(t, **{"max_frames": FRAMES, **o})) for t, o in zip(texts, OPTIONS, strict=True)]
    got = _at_once(together, texts, OPTIONS)
    assert together.lanes.most_lanes == 4
    for e, g in zip(expected, got, strict=True):
        assert len(e) > 1
        assert [len(c) for c in g] == [len(c) for c in e]
        np.testing.assert_array_equal(_joined(g), _joined(e))
        assert [c.offset for c in g] == [c.offset for c in e]
    assert len(_joined(got[3])) == 6 * SAMPLES_PER_FRAME
    whole = together.synthesize(TEXTS[0], max_frames=FRAMES, **OPTIONS[0])
    np.testing.assert_array_equal(whole.samples, alone.synthesize(TEXTS[0], max_frames=FRAMES, **OPTIONS[0]).samples)


def test_each_lanes_share_of_a_step_is_its_step_alone(files: tuple[Path, Path]) -> None:
    """Every decoder step the lanes run together, compared part by part with the torch modules' step of that
    utterance alone on a copy of its cache (its rows, its text's cross-attention and prior, the keys and values
    it wrote), a lane without guidance (one row) among lanes with it (two); the local transformer's steps over all
    lanes' rows likewise."""
    from test_magpie_graph import Shadow

    tts = ggtts.load(files[0], parallel=4)
    try:
        shadow = Shadow(tts.model.graph(), tts.model)
        parts: list[int] = []
        real = shadow.step_many

        def counted(p: list[Any]) -> list[Any]:
            parts.append(len(p))
            return real(p)

        shadow.step_many = counted  # type: ignore[method-assign]
        tts.model.step_graph = shadow
        _at_once(tts, TEXTS, [*OPTIONS[:3], GUIDANCE_OFF])
    finally:
        tts.lanes.close()
    assert max(parts) == 4  # steps of the four together ran
    print(f"steps of 1-4 lanes: {[parts.count(n) for n in (1, 2, 3, 4)]}; worst {max(shadow.errors):.1e}")
    # Q8_0 products round each activation row to Q8_0 blocks, in both paths (see test_magpie_graph's bound)
    assert np.median(shadow.errors) < 1e-5 and max(shadow.errors) < 3e-2
    assert np.median(shadow.local_errors) < 1e-5 and max(shadow.local_errors) < 3e-2


def test_a_stream_given_up_leaves_and_the_others_finish(models: tuple[Any, Any]) -> None:
    alone, together = models
    expected = _joined(alone.stream(TEXTS[1], max_frames=FRAMES, **OPTIONS[1]))
    with together.lanes._cond:
        dropped = together.stream(TEXTS[0], max_frames=FRAMES, **OPTIONS[0])
        kept = together.stream(TEXTS[1], max_frames=FRAMES, **OPTIONS[1])
    next(dropped)
    dropped.close()
    np.testing.assert_array_equal(_joined(kept), expected)
    assert together.lanes.lanes.lanes == [] and together.lanes._jobs == []


def test_a_stream_whose_first_step_fails_fails_alone(models: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer's first step (its text and speaker through the model) failing fails its own request, with its
    error; the stream beside it goes on and says what it says alone."""
    from ggtts.families.magpie.generate import Utterance

    alone, together = models
    expected = _joined(alone.stream(TEXTS[1], max_frames=FRAMES, **OPTIONS[1]))
    real = Utterance.prefill

    def prefill(self: Utterance) -> None:
        if self.gen.params.seed == 99:
            raise RuntimeError("its own failure")
        real(self)

    monkeypatch.setattr(Utterance, "prefill", prefill)
    with together.lanes._cond:
        kept = together.stream(TEXTS[1], max_frames=FRAMES, **OPTIONS[1])
        failing = together.stream(TEXTS[0], max_frames=FRAMES, voice="Aria", seed=99)
    with pytest.raises(RuntimeError, match="its own failure"):
        list(failing)
    np.testing.assert_array_equal(_joined(kept), expected)
    assert together.lanes.lanes.lanes == [] and together.lanes._jobs == []


def test_the_server_gives_a_parallel_model_as_many_turns(models: tuple[Any, Any]) -> None:
    from ggtts.server.worker import ModelWorker

    _, together = models
    worker = ModelWorker("tts", together, max_queue=4)
    try:
        assert worker.turns == 4
    finally:
        worker.shutdown()


def test_parallel_is_a_whole_number_of_streams(files: tuple[Path, Path]) -> None:
    for bad in (0, 65, 1.5, "two"):
        with pytest.raises(InputError, match="parallel"):
            ggtts.load(files[0], parallel=bad)


def test_steps_over_fixed_tensors_take_no_lanes(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA each utterance's steps are graphs of their own: ``parallel`` is refused there with the way out,
    before any weight is read (a server of several models checks it before the first loads); the lanes refuse such
    an utterance too (the CPU path of the CUDA code, run eagerly, stands in for it)."""
    from ggtts.families.magpie import FAMILY, pipeline
    from ggtts.families.magpie.generate import GenerationParams, MagpieGenerator
    from ggtts.families.magpie.lanes import MagpieLanes
    from ggtts.gguf import GGUFFile

    with pytest.raises(InputError, match="--replicas"):
        pipeline.MagpieTTSPipeline.from_gguf(GGUFFile(files[0]), device="cuda:0", parallel=2)
    FAMILY.check_load_on({"parallel": 2}, "cpu")
    FAMILY.check_load_on({"parallel": 1}, "cuda")
    real = pipeline.load_magpie

    def static(*args: Any, **kwargs: Any) -> Any:
        model = real(*args, **kwargs)
        model.use_static_steps(capture=False)
        return model

    monkeypatch.setattr(pipeline, "load_magpie", static)
    model = ggtts.load(files[0]).model
    assert model.static_capture is not None

    class Work:
        generator = MagpieGenerator(model, GenerationParams(max_frames=4))
        utterance = generator.utterance([3, 4, model.cfg.text_eos_id], 0)
        steps = generator.steps

    with pytest.raises(ValueError, match="fixed tensors"):
        MagpieLanes().join(Work())


def test_lanes_start_one_a_step_and_end_with_their_budgets(files: tuple[Path, Path]) -> None:
    """Two lanes joining at once, EOS held off: the first starts at the first step, the second at the next (one
    newcomer's first step a step); each ends at its frame budget with exactly the frames it gives alone, the last
    with its budget's last step (no step runs past it, none ends without a frame)."""
    from ggtts.families.magpie.generate import GenerationParams, MagpieGenerator
    from ggtts.families.magpie.lanes import MagpieLanes

    model = ggtts.load(files[0]).model
    eos = model.cfg.text_eos_id
    params = [
        GenerationParams(max_frames=6, min_frames=7, seed=1),
        GenerationParams(max_frames=10, min_frames=11, seed=2),
    ]
    texts = [[3, 9, 14, 2, eos], [7, 11, 5, 8, 12, 6, eos]]
    alone = [list(MagpieGenerator(model, p).frames(t, 1)) for p, t in zip(params, texts, strict=True)]

    class Work:
        def __init__(self, p: GenerationParams, text: list[int]) -> None:
            generator = MagpieGenerator(model, p)
            self.utterance, self.steps = generator.utterance(text, 1), generator.steps

    lanes = MagpieLanes()
    joined = [lanes.join(Work(p, t)) for p, t in zip(params, texts, strict=True)]
    made: dict[int, list[Any]] = {0: [], 1: []}
    framed: list[list[int]] = []  # which lanes gave a frame at each step
    while lanes.lanes:
        framed.append([])
        for lane, frame in lanes.step():
            made[joined.index(lane)].append(frame)
            framed[-1].append(joined.index(lane))
    # the second's first step runs at the second step (one newcomer's a step), then 10 frames, two a step
    assert framed == [[0], [0, 1], [0, 1], [1], [1], [1]]
    for i in range(2):
        assert all(f is not None for f in made[i])
        assert [f.tolist() for f in made[i]] == [f.tolist() for f in alone[i]]
    assert [sum(f.shape[1] for f in made[i]) for i in range(2)] == [6, 10]
