"""Continuous batching: several sequences in one ggml step graph, lanes of token loops stepped together, and OuteTTS's
``parallel`` load option; each checked against the same work done one sequence at a time."""

from __future__ import annotations

import gc
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_outetts import build_qwen2_checkpoint, build_wavtokenizer_ckpt

import ggtts
from ggtts.convert.outetts_hf import convert_outetts_hf
from ggtts.convert.wavtokenizer_ckpt import convert_wavtokenizer_ckpt
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import MAX_PARALLEL
from ggtts.families.outetts.pipeline import OuteTTS
from ggtts.families.outetts.prompt import default_speaker
from ggtts.gguf import GGUFFile
from ggtts.models.layers.ggml_stack import StepPart
from ggtts.models.layers.kv_cache import KVCacheFullError
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.runtime.frames import TokenDecoder, generate_tokens
from ggtts.runtime.lanes import PREFILL_CHUNK, LaneLoop, TokenLanes
from ggtts.runtime.sampling import Sampler, SamplingParams

TINY_SPEAKER = Path(__file__).parent / "data" / "tiny_speaker.json"
OPTS: dict[str, Any] = {"top_k": 0, "temperature": 1.0, "max_new_tokens": 60, "silence_start_s": 0.0}
TEXTS = ("Hello world, 42 times.", "one two", "the overall package is pretty remarkable")
# logits of a sequence stepped beside others against stepped alone (float32 activations; ggml's kernels per row):
# measured 0 for both files on AVX2 and the tolerance leaves room for a CPU whose kernels tile rows otherwise; a
# sequence attending over another's cache, or given another's positions, is off by 1e-1 and more
LOGITS_ATOL = 1e-4


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("oute-parallel")
    hf = build_qwen2_checkpoint(d / "hf")
    out = {t: convert_outetts_hf(hf, d / t / "outetts-tiny.gguf", t) for t in ("q8_0", "f32")}
    convert_wavtokenizer_ckpt(build_wavtokenizer_ckpt(d / "w.ckpt"), d / "q8_0" / "wavtok-tiny.gguf", "f16")
    return out


def _lm(path: Path) -> Qwen2Model:
    lm = Qwen2Model.from_gguf(GGUFFile(path))
    assert lm.graph is not None  # the steps run as ggml graphs
    return lm


def _prompts(lm: Qwen2Model) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, lm.cfg.n_vocab, (1, n), generator=g) for n in (5, 9, 300)]


@pytest.mark.parametrize("file_type", ["q8_0", "f32"])
def test_one_step_of_several_sequences_gives_each_its_own_logits(files: dict[str, Path], file_type: str) -> None:
    lm = _lm(files[file_type])
    prompts = _prompts(lm)
    head = lm.token_embd
    next_tokens = [torch.tensor([[7]]), torch.tensor([[11]]), torch.tensor([[13]])]
    # alone: each prompt, then one token, on caches of different sizes
    alone_caches = [lm.new_cache(n) for n in (40, 300, 600)]
    alone = []
    for p, t, c in zip(prompts, next_tokens, alone_caches, strict=True):
        first = lm(p, c)  # every row's logits
        alone.append((first, lm(t, c, last_only=True)))
    # together: the first two prompts in one step (all rows), the third prompt with the others' next tokens
    caches = [lm.new_cache(n) for n in (40, 300, 600)]
    embed = lm.token_embd
    with torch.inference_mode():
        a, b = lm.graph.step_many([StepPart(embed(p[0]), c) for p, c in zip(prompts[:2], caches, strict=False)], head)
        rest = lm.graph.step_many(
            [StepPart(embed(prompts[2][0]), caches[2])]
            + [StepPart(embed(t[0]), c, last_only=True) for t, c in zip(next_tokens[:2], caches, strict=False)],
            head,
        )
        c_first, a_next, b_next = rest
        c_next = lm.forward_many([next_tokens[2]], [caches[2]], last_only=True)[0]
    together = [(a.logits, a_next.logits), (b.logits, b_next.logits), (c_first.logits, c_next[0])]
    for (first, then), (got_first, got_then) in zip(alone, together, strict=True):
        torch.testing.assert_close(got_first, first[0], atol=LOGITS_ATOL, rtol=0)
        torch.testing.assert_close(got_then, then[0], atol=LOGITS_ATOL, rtol=0)
    assert [c.length for c in caches] == [c.length for c in alone_caches] == [6, 10, 301]
    for mine, theirs in zip(caches, alone_caches, strict=True):  # each cache holds its own sequence's keys/values
        n = theirs.length
        torch.testing.assert_close(mine.k[..., :n, :], theirs.k[..., :n, :], atol=1e-5, rtol=0)
        torch.testing.assert_close(mine.v[..., :n, :], theirs.v[..., :n, :], atol=1e-5, rtol=0)


def test_a_step_of_several_sequences_refuses_what_it_cannot_do(files: dict[str, Path]) -> None:
    lm = _lm(files["q8_0"])
    head, x = lm.token_embd, lm.token_embd(torch.tensor([3]))
    cache, full = lm.new_cache(8), lm.new_cache(1)
    lm(torch.tensor([[1]]), full)
    with pytest.raises(ValueError, match="a cache of its own"):
        lm.graph.step_many([StepPart(x, cache), StepPart(x, cache)], head)
    with pytest.raises(KVCacheFullError):
        lm.graph.step_many([StepPart(x, cache), StepPart(x, full)], head)
    with pytest.raises(ValueError, match="at least one part"):
        lm.graph.step_many([], head)
    assert (cache.length, full.length) == (0, 1)  # nothing written or advanced
    with pytest.raises(ValueError, match="token rows for"):
        lm.forward_many([torch.tensor([[1]])], [cache, full])


def _decoder(lm: Qwen2Model, prompt: list[int], seed: int, max_new: int) -> TokenDecoder:
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=0, seed=seed))
    return TokenDecoder(lm, prompt, lm.new_cache(len(prompt) + max_new), sampler)


def _plain(path: Path) -> Qwen2Model:
    return Qwen2Model.from_gguf(GGUFFile(path), graph=False)


def _static_lanes(path: Path, slots: int) -> Qwen2Model:
    """A model whose one-token steps run as :class:`StaticLanes` (what ``parallel`` loads on CUDA, where the model
    came with its one-sequence static steps), eagerly: the code a CUDA graph captures."""
    lm = _plain(path)
    lm.use_static_steps(capture=False)
    lm.use_static_lanes(slots, capture=False)
    return lm


def _rows_held(lm: Qwen2Model) -> int:
    assert lm.lanes is not None
    return sum(ref is not None and ref() is not None for b in lm.lanes.buckets.values() for ref in b.held)


@pytest.mark.parametrize(("prefill_chunk", "kind"), [(PREFILL_CHUNK, "ggml"), (4, "ggml"), (4, "static lanes")])
def test_lanes_step_each_utterance_as_it_steps_alone(files: dict[str, Path], prefill_chunk: int, kind: str) -> None:
    """Each lane's logits at each draw are those its utterance has alone after the same tokens (teacher-forced:
    the prompt whole, then each token the lane drew), whether its prompt runs whole or in chunks beside the others'
    steps, with a lane joining late and lanes ending at different times. (A float32 file: a prompt cut into chunks
    is other arithmetic, and Q8_0's rounding of activations would turn its last-bit differences into larger ones.)
    ``static lanes``: the steps are CUDA's (one step of every row over fixed caches, run eagerly here), against a
    model without them; each lane's row is given back when it ends."""
    lm = _lm(files["f32"]) if kind == "ggml" else _static_lanes(files["f32"], 3)
    plain = lm if kind == "ggml" else _plain(files["f32"])
    prompts = [[int(t) for t in p[0, :n]] for p, n in zip(_prompts(lm), (5, 9, 30), strict=True)]
    budgets, seeds = (25, 40, 12), (1, 2, 3)
    lanes = TokenLanes(lm, prefill_chunk=prefill_chunk)
    seen: dict[int, list[torch.Tensor]] = {0: [], 1: [], 2: []}
    drawn: dict[int, list[int]] = {0: [], 1: [], 2: []}
    which: dict[int, int] = {}

    def join(i: int) -> None:
        decoder = _decoder(lm, prompts[i], seeds[i], budgets[i])
        draw = decoder.draw

        def recorded(step: int) -> int:  # the logits each draw reads
            assert decoder.logits is not None
            seen[i].append(decoder.logits.clone())
            return draw(step)

        decoder.draw = recorded  # type: ignore[method-assign]
        which[id(lanes.add(decoder, budgets[i]))] = i

    join(0)
    join(1)
    most = 0
    for step in range(80):
        if step == 3:  # the third joins while the others decode
            join(2)
        most = max(most, len(lanes.lanes))
        for lane, token in lanes.step():
            drawn[which[id(lane)]].append(token)
        if not lanes.lanes:
            break
    assert most == 3 and not lanes.lanes
    assert [len(drawn[i]) for i in range(3)] == list(budgets)  # each ran to its budget (no stop token given)
    if kind != "ggml":
        assert _rows_held(lm) == 0
    with torch.inference_mode():
        for i in range(3):
            cache = plain.new_cache(len(prompts[i]) + budgets[i])
            alone = [plain(torch.tensor([prompts[i]]), cache, last_only=True)[0, -1]]
            alone += [plain(torch.tensor([[t]]), cache, last_only=True)[0, -1] for t in drawn[i][:-1]]
            assert len(alone) == len(seen[i])
            for mine, theirs in zip(seen[i], alone, strict=True):
                torch.testing.assert_close(mine, theirs, atol=LOGITS_ATOL, rtol=0)


def test_prompts_take_each_steps_budget_first_come_first_served(files: dict[str, Path]) -> None:
    """Two prompts of 9 tokens joining while a third lane speaks, 4 prompt tokens a step: the first runs alone until
    it is in and speaks; then the second, beside the first's decoding. With no lane speaking, the first prompt runs
    whole (as alone: the same arithmetic), then the second in chunks beside it."""
    lm = _lm(files["f32"])
    lanes = TokenLanes(lm, prefill_chunk=4)
    speaking = lanes.add(_decoder(lm, list(range(1, 10)), 0, 20), 20)
    assert [lane for lane, _ in lanes.step()] == [speaking]  # its prompt whole (in chunks of 4 it would not draw yet)
    first, second = (lanes.add(_decoder(lm, list(range(1, 10)), seed, 8), 8) for seed in (1, 2))
    pending = []
    for _ in range(5):
        drawn = [lane for lane, _ in lanes.step() if lane is not speaking]
        pending.append((len(first.pending), len(second.pending), [lane is first for lane in drawn]))
    assert pending == [(5, 9, []), (1, 9, []), (1, 6, [True]), (1, 2, [True]), (1, 1, [True, False])]
    quiet = TokenLanes(lm, prefill_chunk=4)
    one, two = (quiet.add(_decoder(lm, list(range(1, 10)), seed, 8), 8) for seed in (1, 2))
    assert [lane for lane, _ in quiet.step()] == [one] and len(two.pending) == 9  # none speaking: the first whole
    assert [lane for lane, _ in quiet.step()] == [one] and len(two.pending) == 5  # then the second beside it


def test_lanes_with_whole_prompts_draw_what_each_draws_alone(files: dict[str, Path]) -> None:
    """Prompts run whole and decoding steps of several rows: the same arithmetic per row as alone (each row's dot
    products are its own), so a seeded lane draws exactly the tokens its utterance draws alone, Q8_0 included."""
    lm = _lm(files["q8_0"])
    prompts = [[int(t) for t in p[0, :n]] for p, n in zip(_prompts(lm), (5, 9, 30), strict=True)]
    budgets, seeds = (25, 40, 12), (1, 2, 3)
    alone = []
    for prompt, seed, budget in zip(prompts, seeds, budgets, strict=True):
        sampler = Sampler(SamplingParams(temperature=1.0, top_k=0, seed=seed))
        alone.append(list(generate_tokens(lm, prompt, lm.new_cache(len(prompt) + budget), sampler,
                                          max_new_tokens=budget)))  # fmt: skip
    lanes = TokenLanes(lm, prefill_chunk=1 << 20)
    drawn: dict[int, list[int]] = {0: [], 1: [], 2: []}
    which = {id(lanes.add(_decoder(lm, prompts[i], seeds[i], budgets[i]), budgets[i])): i for i in range(3)}
    while lanes.lanes:
        for lane, token in lanes.step():
            drawn[which[id(lane)]].append(token)
    assert [drawn[i] for i in range(3)] == alone


@pytest.fixture(scope="module")
def models(files: dict[str, Path]) -> Iterator[tuple[OuteTTS, OuteTTS]]:
    out = []
    for parallel in (1, 3):
        model = ggtts.load(files["q8_0"], parallel=parallel)
        assert isinstance(model, OuteTTS)
        model._speakers.clear()
        model.add_speaker(TINY_SPEAKER)
        out.append(model)
    assert out[0].lanes is None and out[1].lanes is not None
    # prompts run whole, as they do alone, so that each stream's arithmetic is its own alone (a prompt in chunks is
    # other arithmetic: tests above)
    out[1].lanes.lanes.prefill_chunk = 1 << 20
    yield out[0], out[1]
    out[1].lanes.close()  # its thread ends (with its OpenMP team, which would slow this process's later tests)


def _joined(chunks: object) -> np.ndarray:
    return np.concatenate([c.samples for c in chunks])  # type: ignore[attr-defined]


def test_parallel_streams_say_what_each_says_alone(models: tuple[OuteTTS, OuteTTS]) -> None:
    alone, together = models
    assert together.lanes is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-range codes of the tiny vocoder
        expected = [_joined(alone.stream(t, seed=i, **OPTS)) for i, t in enumerate(TEXTS)]
        whole = alone.synthesize(TEXTS[0], seed=0, **OPTS).samples
        with together.lanes._cond:  # all three wait for the loop, which then takes them in one step
            streams = [together.stream(t, seed=i, **OPTS) for i, t in enumerate(TEXTS)]
        got = [_joined(s) for s in streams]
        got_whole = together.synthesize(TEXTS[0], seed=0, **OPTS).samples
    assert together.lanes.most_lanes == 3
    for e, g in zip(expected, got, strict=True):
        assert len(e) > 0
        np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(got_whole, whole)


def test_a_lane_given_up_leaves_and_the_others_finish(models: tuple[OuteTTS, OuteTTS]) -> None:
    alone, together = models
    assert together.lanes is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _joined(alone.stream(TEXTS[1], seed=5, **OPTS))
        with together.lanes._cond:
            dropped = together.stream(TEXTS[0], seed=4, **OPTS)
            kept = together.stream(TEXTS[1], seed=5, **OPTS)
        next(dropped)
        dropped.close()  # type: ignore[attr-defined]
        np.testing.assert_array_equal(_joined(kept), expected)
    assert together.lanes.lanes.lanes == []  # the loop kept no lane


def test_a_stream_dropped_unread_leaves_the_loop(models: tuple[OuteTTS, OuteTTS]) -> None:
    _, together = models
    assert together.lanes is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with together.lanes._cond:
            unread = together.stream(TEXTS[0], seed=7, **OPTS)
            job = unread._job  # type: ignore[attr-defined]
            del unread  # never read: dropping it gives its utterance up
        assert job.given_up
        out = _joined(together.stream(TEXTS[1], seed=8, **OPTS))  # the loop goes on with the next
    assert len(out) > 0 and together.lanes._jobs == [] and together.lanes.lanes.lanes == []


def test_a_step_of_as_many_sequences_as_parallel_allows(files: dict[str, Path]) -> None:
    """A step of 64 sequences (OuteTTS's largest ``parallel``) builds and runs: its graph's context holds every tensor
    (sized for too few, it ran out and the process died), and each sequence gets its logits alone."""
    lm = _lm(files["q8_0"])
    head = lm.token_embd
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, lm.cfg.n_vocab, (1, 2 + i % 5), generator=g) for i in range(MAX_PARALLEL)]
    with torch.inference_mode():
        alone = [lm(p, lm.new_cache(8), last_only=True)[0] for p in prompts]
        caches = [lm.new_cache(8) for _ in prompts]
        together = lm.graph.step_many(
            [StepPart(lm.token_embd(p[0]), c, last_only=True) for p, c in zip(prompts, caches, strict=True)], head
        )
    for mine, theirs in zip(together, alone, strict=True):
        torch.testing.assert_close(mine.logits, theirs, atol=LOGITS_ATOL, rtol=0)
    with pytest.raises(InputError, match="parallel must be a whole number from 1 to 64"):
        ggtts.load(files["q8_0"], parallel=MAX_PARALLEL + 1)


def test_a_bad_request_fails_alone_and_the_others_speak(models: tuple[OuteTTS, OuteTTS]) -> None:
    alone, together = models
    assert together.lanes is not None
    builtin = default_speaker()  # its codes go up to 1832: the tiny model lacks the tokens (found on the loop's thread)
    together._speakers[builtin.name] = builtin
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = _joined(alone.stream(TEXTS[2], seed=6, **OPTS))
            with together.lanes._cond:
                good = together.stream(TEXTS[2], seed=6, **OPTS)
                bad = together.stream(TEXTS[0], voice=builtin.name, **OPTS)
            with pytest.raises(InputError, match="lacks"):
                next(bad)
            np.testing.assert_array_equal(_joined(good), expected)
    finally:
        del together._speakers[builtin.name]


def test_parallel_must_be_a_whole_number_of_streams(files: dict[str, Path]) -> None:
    for bad in (0, -1, 1.5, "two"):
        with pytest.raises(InputError, match="parallel"):
            ggtts.load(files["q8_0"], parallel=bad)


# ---- static lanes: the steps of several sequences as one step over fixed caches (CUDA's; run eagerly here) ------
# the rows' logits against each sequence stepped alone without them: measured 4.5e-6 (the whole cache attended
# under a mask, and torch's products over several rows); a row written at another's position, or a row sitting a
# step out written anyway, is off by more than 1e-1
def test_static_lanes_step_each_row_as_its_sequence_steps_alone(files: dict[str, Path]) -> None:
    """Three sequences in rows of one fixed cache, one of them sitting out every third step (its row then writes
    nothing), each row at its own position: each one's logits are those it has alone."""
    lm, plain = _static_lanes(files["f32"], 3), _plain(files["f32"])
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, lm.cfg.n_vocab, (1, n), generator=g) for n in (5, 9, 30)]
    with torch.inference_mode():
        caches = [lm.new_cache(p.shape[1] + 20) for p in prompts]
        alone = [plain.new_cache(p.shape[1] + 20) for p in prompts]
        assert lm.lanes is not None and all(lm.lanes.holds(c) for c in caches) and _rows_held(lm) == 3
        mine = lm.forward_many(prompts, caches, last_only=True)
        theirs = [plain(p, c, last_only=True) for p, c in zip(prompts, alone, strict=True)]
        for step in range(15):
            tokens = [t[0, -1].argmax().view(1, 1) for t in theirs]
            stepping = [0, 2] if step % 3 == 0 else [0, 1, 2]
            mine = lm.forward_many([tokens[i] for i in stepping], [caches[i] for i in stepping], last_only=True)
            for i, logits in zip(stepping, mine, strict=True):
                theirs[i] = plain(tokens[i], alone[i], last_only=True)
                torch.testing.assert_close(logits, theirs[i], atol=LOGITS_ATOL, rtol=0)
    assert [c.length for c in caches] == [c.length for c in alone] == [20, 19, 45]


def test_parallel_streams_in_static_lanes_say_what_each_says_alone_in_them(files: dict[str, Path]) -> None:
    """OuteTTS's ``parallel`` as it runs on CUDA: every stream's steps one step over fixed caches of ``parallel`` rows
    (run eagerly here). Each step computes every row, so a stream's arithmetic is the same whether the other rows
    hold other streams or nothing: each of three streams asked at once says exactly what it says asked alone, and
    every row is given back after."""
    model = ggtts.load(files["q8_0"], parallel=3)
    assert isinstance(model, OuteTTS) and model.lanes is not None
    model.lm.graph = None  # CUDA's steps, not the CPU's ggml graphs
    model.lm.use_static_lanes(3, capture=False)
    model._speakers.clear()
    model.add_speaker(TINY_SPEAKER)
    model.lanes.lanes.prefill_chunk = 1 << 20  # prompts whole, as alone
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # out-of-range codes of the tiny vocoder
            alone = [_joined(model.stream(t, seed=i, **OPTS)) for i, t in enumerate(TEXTS)]
            assert model.lanes.most_lanes == 1
            with model.lanes._cond:  # all three wait for the loop, which then takes them in one step
                streams = [model.stream(t, seed=i, **OPTS) for i, t in enumerate(TEXTS)]
            together = [_joined(s) for s in streams]
    finally:
        model.lanes.close()
    assert model.lanes.most_lanes == 3 and _rows_held(model.lm) == 0
    for a, t in zip(alone, together, strict=True):
        assert len(a) > 0
        np.testing.assert_array_equal(t, a)


def test_a_request_alone_on_a_parallel_model_says_what_it_says_without_lanes(
    models: tuple[OuteTTS, OuteTTS], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model loaded with ``parallel`` serving one request at a time runs its prompt (longer than a chunk) whole, in
    one step, as without lanes: the same arithmetic, so the same audio, byte for byte, with the loop's own prefill
    chunk."""
    alone, together = models
    assert together.lanes is not None
    prompt = together.prompt_tokens(TEXTS[2], together._speaker(None), together.version)[0]
    assert len(prompt) > PREFILL_CHUNK
    rows: list[int] = []
    forward_many = together.lm.forward_many

    def counted(tokens: Any, caches: Any, **kwargs: Any) -> Any:
        rows.extend(t.shape[1] for t in tokens)
        return forward_many(tokens, caches, **kwargs)

    monkeypatch.setattr(together.lm, "forward_many", counted)
    monkeypatch.setattr(together.lanes.lanes, "prefill_chunk", PREFILL_CHUNK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = _joined(alone.stream(TEXTS[2], seed=9, **OPTS))
        got = _joined(together.stream(TEXTS[2], seed=9, **OPTS))
    assert rows[0] == len(prompt) and set(rows[1:]) == {1}  # the prompt in one step, then a token a step
    np.testing.assert_array_equal(got, expected)


def test_a_parallel_batch_speaks_that_many_items_at_once(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ggtts batch --parallel 3`` in one process: three items are in hand at once (each on a thread, the model's
    lanes decoding them together; a barrier that only three items reaching it together pass), then the rest, and
    every item is written."""
    from ggtts.batch.items import Item
    from ggtts.batch.local import run_here
    from ggtts.batch.work import ItemWorker, JobSettings

    settings = JobSettings(tmp_path / "out", model=str(files["q8_0"]),
                           options={"seed": 1, "max_new_tokens": 30},
                           load_options={"parallel": 3, "speaker": str(TINY_SPEAKER)})  # fmt: skip
    assert settings.streams == 3
    items = [Item(f"{n:04d}", f"Item number {n}.") for n in range(1, 6)]
    together = threading.Barrier(3, timeout=DIED_S)  # (a bound for a broken build only, which gives one at a time)
    run = ItemWorker.run

    def held_together(self: ItemWorker, item: Item) -> dict[str, Any]:
        if item.id <= "0003":
            together.wait()
        return run(self, item)

    monkeypatch.setattr(ItemWorker, "run", held_together)
    records: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # out-of-range codes of the tiny vocoder
        run_here(items, settings, records.append, threading.Event(), threads=None)
    assert sorted(r["id"] for r in records) == [i.id for i in items]
    assert {r["status"] for r in records} == {"done"}, records
    assert all((tmp_path / "out" / r["output"]).stat().st_size == r["bytes"] for r in records)


def test_static_lanes_hold_a_row_until_it_is_given_back(files: dict[str, Path]) -> None:
    lm = _static_lanes(files["f32"], 2)
    assert lm.lanes is not None
    token = torch.tensor([[3]])
    with torch.inference_mode():
        first, second = lm.new_cache(50), lm.new_cache(50)
        third, fourth = lm.new_cache(50), lm.new_cache(50)  # every row of that size is held: caches of their own
        assert lm.lanes.holds(first) and lm.lanes.holds(second) and not lm.lanes.holds(third)
        for cache in (third, fourth, third):  # stepped alone, side by side (not one static cache each replaces)
            assert lm(token, cache).shape == (1, 1, lm.cfg.n_vocab)
        assert (third.length, fourth.length) == (2, 1)
        lm.release_cache(first)
        again = lm.new_cache(50)  # first's row
        assert lm.lanes.holds(again) and _rows_held(lm) == 2
        with pytest.raises(RuntimeError, match="no longer held"):
            lm(token, first)
        del again  # a cache dropped without being given back frees its row too
        assert _rows_held(lm) == 1
        longer = lm.new_cache(400)  # another capacity: another fixed cache
        assert lm.lanes.holds(longer) and sorted(lm.lanes.buckets) == [256, 512]
        mixed = lm.forward_many([token, token], [second, longer], last_only=True)  # one step per fixed cache
        assert [m.shape for m in mixed] == [(1, 1, lm.cfg.n_vocab)] * 2 and second.length == longer.length == 1
        with pytest.raises(ValueError, match="not a row"):
            lm.lanes.step([token], [third])
        with pytest.raises(ValueError, match="two inputs for one cache"):
            lm.lanes.step([token, token], [second, second])
        with pytest.raises(ValueError, match="2 inputs for 1 caches"):
            lm.lanes.step([token, token], [second])
        short = lm.new_cache(1)
        lm(token, short)
        with pytest.raises(KVCacheFullError):
            lm(token, short)
    assert lm.lanes.new_cache(lm.rope.max_len + 1) is None  # past the model's positions: no row
    for cache in (second, longer, short):
        lm.release_cache(cache)
    assert _rows_held(lm) == 0
    lanes, sampler = TokenLanes(lm), Sampler(SamplingParams(seed=0))
    nothing = TokenDecoder(lm, [1, 2], lm.new_cache(8), sampler)
    assert lanes.add(nothing, 0).done and _rows_held(lm) == 0  # nothing to decode: its row is free at once
    too_long = TokenDecoder(lm, [1, 2], lm.new_cache(4), sampler)
    with pytest.raises(KVCacheFullError):
        lanes.add(too_long, 10)  # never joins: its row is free again
    assert _rows_held(lm) == 0 and lanes.lanes == []
    with pytest.raises(ValueError, match="at least one slot"):
        lm.use_static_lanes(0)


def test_the_server_streams_parallel_requests_as_it_streams_them_one_by_one(
    models: tuple[OuteTTS, OuteTTS],
) -> None:
    """Requests served at once by a model of parallel streams give the bytes the same requests give from a model
    that decodes one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from fastapi.testclient import TestClient

    from ggtts.server.app import create_app
    from ggtts.server.settings import ServerSettings

    alone, together = models

    def body(i: int) -> dict[str, object]:
        options = {k: v for k, v in OPTS.items()} | {"seed": i}
        return {"model": "o", "input": TEXTS[i], "response_format": "pcm", "stream": True, "options": options}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with TestClient(create_app({"o": alone}, ServerSettings())) as client:
            expected = [client.post("/v1/audio/speech", json=body(i)).content for i in range(3)]
        with TestClient(create_app({"o": together}, ServerSettings())) as client, ThreadPoolExecutor(3) as pool:
            responses = list(pool.map(lambda i: client.post("/v1/audio/speech", json=body(i)), range(3)))
    assert [r.status_code for r in responses] == [200, 200, 200]
    for r, e in zip(responses, expected, strict=True):
        assert len(e) > 2000 and r.content == e


class _Work:
    """A lane loop's work of four tokens after a three-token prompt: each token, then -1 at the end."""

    def __init__(self, lm: Qwen2Model) -> None:
        self.decoder = _decoder(lm, [1, 2, 3], 0, 4)
        self.max_new_tokens = 4

    def on_frame(self, token: int) -> list[int]:
        return [token]

    def on_end(self) -> list[int]:
        return [-1]


def test_a_closed_lane_loop_ends_its_thread_and_takes_no_more(files: dict[str, Path]) -> None:
    lm = _lm(files["q8_0"])

    def Work() -> _Work:
        return _Work(lm)

    class FailsAtItsEnd(_Work):
        def __init__(self) -> None:
            super().__init__(lm)
            self.max_new_tokens = 0  # done as it joins: its end runs at once, and fails

        def on_end(self) -> list[int]:
            raise InputError("no audio")

    loop: LaneLoop[int] = LaneLoop(TokenLanes(lm), 2)
    with pytest.raises(InputError, match="no audio"):
        list(loop.run(FailsAtItsEnd))
    with loop._cond:  # (the loop drops a failed job under its lock, after handing over the error)
        assert loop._jobs == [] and loop.steps == 0  # nothing left for the loop to step
    out = list(loop.run(Work))
    assert len(out) == 5 and out[-1] == -1 and loop.steps == 4
    thread = loop._thread
    assert thread is not None and thread.is_alive()
    loop.close()
    assert not thread.is_alive()
    with pytest.raises(GGTTSError, match="closed"):
        loop.run(Work)


def test_a_parallel_model_closed_or_dropped_lets_go_of_its_lanes(files: dict[str, Path]) -> None:
    """A model's lanes end with it: closed (``with``, ``close()``) or dropped, its loop's thread ends and lets go of
    the weights (it held them until the process ended: a notebook loading models again kept each one's memory)."""

    def spoken(model: ggtts.TTSModel) -> threading.Thread:
        model.synthesize("one two", **OPTS)
        assert model.lanes is not None and model.lanes._thread is not None
        return model.lanes._thread

    with ggtts.load(files["q8_0"], speaker=str(TINY_SPEAKER), parallel=2) as model:
        thread = spoken(model)
    assert not thread.is_alive()
    with pytest.raises(GGTTSError, match="the model is closed"):
        model.synthesize("one two", **OPTS)
    model = ggtts.load(files["q8_0"], speaker=str(TINY_SPEAKER), parallel=2)
    thread = spoken(model)
    assert model.lanes is not None
    lanes = weakref.ref(model.lanes.lanes)
    del model
    gc.collect()
    thread.join(DIED_S)
    assert not thread.is_alive()
    gc.collect()
    assert lanes() is None


DIED_S = 30.0  # only bounds a run where a caller does not hear that its loop died


class _LoopKilled(BaseException):
    """Not an Exception: nothing in the lane loop catches it, so its thread dies of it."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_caller_whose_loop_died_hears_so(files: dict[str, Path]) -> None:
    lm = _lm(files["q8_0"])

    class Kills(_Work):
        def __init__(self) -> None:
            super().__init__(lm)

        def on_frame(self, token: int) -> list[int]:
            raise _LoopKilled

    loop: LaneLoop[int] = LaneLoop(TokenLanes(lm), 1)
    heard: list[BaseException] = []

    def read() -> None:
        try:
            list(loop.run(Kills))
        except RuntimeError as e:
            heard.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(DIED_S)  # (a bound for a broken build only, where the caller waits for ever)
    assert not reader.is_alive() and "the lane loop's thread has stopped" in str(heard[0])
    with pytest.raises(ValueError, match="at least one lane"):
        LaneLoop(TokenLanes(lm), 0)
    with pytest.raises(ValueError, match="at least one token"):
        TokenLanes(lm, prefill_chunk=0)


@pytest.mark.parametrize("parallel", [1, 3])
def test_the_warm_up_makes_the_step_a_default_request_uses(files: dict[str, Path], parallel: int) -> None:
    """OuteTTS's warm-up runs the first codes of a request with the defaults: on a GPU the decode step over the
    cache capacity of the default token budget (the lanes' step with ``parallel``) is captured there, not in the
    first request. Here the steps over fixed caches run eagerly: the requests after it make none."""
    import itertools

    model = ggtts.load(files["q8_0"], parallel=parallel)
    assert isinstance(model, OuteTTS)
    model.lm.graph = None  # CUDA's steps, not the CPU's ggml graphs
    if parallel > 1:
        model.lm.use_static_lanes(parallel, capture=False)
    else:
        model.lm.use_static_steps(capture=False)
    model._speakers.clear()
    model.add_speaker(TINY_SPEAKER)  # (the tiny vocabulary lacks the built-in speaker's tokens)

    def made() -> set[int]:
        fixed = model.lm.lanes.buckets if model.lm.lanes is not None else {}
        return set(fixed) | set(model.lm.static.decoders if model.lm.static is not None else {})

    try:
        assert made() == set()
        model.warm_up()
        warm = made()
        assert len(warm) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # out-of-range codes of the tiny vocoder
            for text in TEXTS[:2]:  # requests as a server's run them (in the lane loop, with parallel)
                chunks = model.stream(text, seed=2, chunk_codes=4)
                assert len(list(itertools.islice(chunks, 2))) == 2
                chunks.close()
        assert made() == warm
    finally:
        if model.lanes is not None:
            model.lanes.close()
