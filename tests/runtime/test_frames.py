"""The generation runtime: the frame loop every autoregressive family runs (budget, end, cancellation), the
token loop OuteTTS runs on it (identical to the loop it replaced), a fixed cross-attention cache, windowed
decoding of frames."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from ggtts.runtime.cancel import Cancelled, CancelToken, cancellable
from ggtts.runtime.frames import decode_frames, generate_tokens
from ggtts.runtime.kv_cache import CrossAttentionCache, EncoderDecoderCache, KVCache
from ggtts.runtime.sampling import Sampler, SamplingParams
from ggtts.runtime.streaming import WindowedDecoder

VOCAB = 50
Frame = tuple[int, ...]


class FakeLM:
    """A deterministic 'language model': logits from the last token and the position (the cache's length)."""

    def __init__(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.by_token = torch.randn(VOCAB, VOCAB, generator=g) * 3
        self.by_position = torch.randn(512, VOCAB, generator=g)
        self.fed: list[list[int]] = []

    def __call__(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = False) -> torch.Tensor:
        self.fed.append(tokens[0].tolist())
        cache.advance(tokens.shape[1])
        last = int(tokens[0, -1])
        return (self.by_token[last] + self.by_position[cache.length])[None, None, :]


def old_token_loop(model, prompt, cache, sampler, *, max_new_tokens, stop_tokens=(), rewrite=None):  # type: ignore[no-untyped-def]
    """The loop OuteTTS ran before the frame runtime, kept here as the oracle."""
    history, generated = list(prompt), []
    logits = model(torch.tensor([list(prompt)]), cache, last_only=True)
    for i in range(max_new_tokens):
        token = sampler(logits[0, -1], history)
        if rewrite is not None:
            token = rewrite(token, generated)
        generated.append(token)
        history.append(token)
        yield token
        if token in stop_tokens or i == max_new_tokens - 1:
            return
        logits = model(torch.tensor([[token]]), cache, last_only=True)


def _cache() -> KVCache:
    return KVCache(1, 1, 1, 512)


@pytest.mark.parametrize("stop", [set(), {49}], ids=["no-stop", "stop-49"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_token_loop_is_identical_to_the_one_it_replaced(seed: int, stop: set[int]) -> None:
    params = SamplingParams(temperature=0.9, top_k=8, top_p=0.95, repetition_penalty=1.3, seed=seed)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]

    def every_fifth_is_seven(token: int, generated: Sequence[int]) -> int:  # a guide-token style rewrite
        return 7 if len(generated) % 5 == 4 else token

    runs = []
    for loop in (old_token_loop, generate_tokens):
        model = FakeLM(seed)
        tokens = list(
            loop(
                model,
                prompt,
                _cache(),
                Sampler(params),
                max_new_tokens=60,
                stop_tokens=stop,
                rewrite=every_fifth_is_seven,
            )
        )
        runs.append((tokens, model.fed))
    assert runs[0] == runs[1]
    if not stop:
        assert len(runs[0][0]) == 60 and len(set(runs[0][0])) > 10  # not degenerate


def test_the_token_loop_stops_at_a_stop_token_and_checks_the_cache() -> None:
    model = FakeLM()
    greedy = Sampler(SamplingParams(temperature=0.0))
    first = list(generate_tokens(model, [1, 2], _cache(), greedy, max_new_tokens=30))
    stop = first[4]
    tokens = list(generate_tokens(FakeLM(), [1, 2], _cache(), greedy, max_new_tokens=30, stop_tokens={stop}))
    assert tokens == first[: first.index(stop) + 1]
    with pytest.raises(ValueError, match="cache positions"):
        list(generate_tokens(FakeLM(), [1, 2], KVCache(1, 1, 1, 8), greedy, max_new_tokens=30))
    with pytest.raises(ValueError, match="prompt is empty"):
        list(generate_tokens(FakeLM(), [], _cache(), greedy, max_new_tokens=3))


class ScriptedDecoder:
    """Frames of three codes: frame ``i`` is ``(i, 10 + i, 20 + i)``; ``end`` (a step) draws None there, ``last``
    (a step) makes that frame the last. Records every call, in order."""

    def __init__(self, end: int | None = None, last: int | None = None) -> None:
        self.end, self.last, self.calls = end, last, []  # type: list[str]

    def prefill(self) -> None:
        self.calls.append("prefill")

    def draw(self, step: int) -> Frame | None:
        self.calls.append(f"draw {step}")
        return None if step == self.end else (step, 10 + step, 20 + step)

    def is_last(self, frame: Frame) -> bool:
        return frame[0] == self.last

    def feed(self, frame: Frame) -> None:
        self.calls.append(f"feed {frame[0]}")


def test_the_frame_loop_runs_to_its_budget_and_never_feeds_the_last_frame() -> None:
    decoder = ScriptedDecoder()
    assert list(decode_frames(decoder, 3)) == [(0, 10, 20), (1, 11, 21), (2, 12, 22)]
    assert decoder.calls == ["prefill", "draw 0", "feed 0", "draw 1", "feed 1", "draw 2"]
    idle = ScriptedDecoder()
    assert list(decode_frames(idle, 0)) == [] and idle.calls == []


def test_a_last_frame_is_yielded_and_a_draw_of_none_yields_nothing() -> None:
    last = ScriptedDecoder(last=1)
    assert [f[0] for f in decode_frames(last, 9)] == [0, 1]
    assert last.calls == ["prefill", "draw 0", "feed 0", "draw 1"]
    ended = ScriptedDecoder(end=2)
    assert [f[0] for f in decode_frames(ended, 9)] == [0, 1]
    assert ended.calls[-2:] == ["feed 1", "draw 2"]


def test_the_frame_loop_checks_for_cancellation_before_the_prefill_and_each_step() -> None:
    checks: list[int] = []

    def check() -> None:
        checks.append(len(decoder.calls))
        if len(checks) == 3:
            raise Cancelled("stop")

    decoder = ScriptedDecoder()
    frames = []
    with pytest.raises(Cancelled):
        for frame in decode_frames(decoder, 9, check):
            frames.append(frame)
    assert checks == [0, 1, 3]  # before the prefill, before draw 0, before draw 1: no draw after it
    assert frames == [(0, 10, 20)] and decoder.calls == ["prefill", "draw 0", "feed 0"]
    token, untouched = CancelToken(), ScriptedDecoder()
    frames_left = decode_frames(untouched, 3)
    with pytest.raises(Cancelled, match="gone"), cancellable(token):
        token.cancel("gone")
        next(frames_left)  # the default check is the thread's cancellation token
    assert untouched.calls == []


def test_cross_attention_cache_is_filled_once_and_read_after() -> None:
    cross = CrossAttentionCache(n_layers=2)
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match="layer 0 is empty"):
        cross.get(0)
    cross.fill(0, k, v)
    assert cross.filled(0) and not cross.filled(1)
    got_k, got_v = cross.get(0)
    assert got_k is k and got_v is v
    with pytest.raises(ValueError, match="layer 0 is filled already"):
        cross.fill(0, k, v)
    cache = EncoderDecoderCache(KVCache(2, 2, 4, 16), cross)
    cache.self_attention.update(0, 0, torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    cache.self_attention.advance(3)
    assert (cache.length, cache.max_len) == (3, 16) and cache.cross_attention.get(0)[0] is k


HOP = 4


def _pointwise(codes: torch.Tensor) -> torch.Tensor:
    """A decoder whose audio for a frame depends on that frame alone: windowing must then be exact."""
    assert codes.dim() == 3 and codes.shape[1] == 3  # (1, Q, T)
    per_frame = (codes[0, 0] * 100 + codes[0, 1] * 10 + codes[0, 2]).float()  # (T,)
    return per_frame.repeat_interleave(HOP)[None]


def test_windowed_decoding_of_frames() -> None:
    g = torch.Generator().manual_seed(0)
    frames = [tuple(int(c) for c in torch.randint(0, 10, (3,), generator=g)) for _ in range(37)]
    one_shot = _pointwise(torch.tensor([frames]).transpose(1, 2))[0]
    w = WindowedDecoder(_pointwise, HOP, chunk=5, left=3, lookahead=0, codebooks=3)
    pieces = [p for i in range(0, 37, 4) for p in w.push(frames[i : i + 4])] + list(w.flush())
    assert torch.equal(torch.cat(pieces), one_shot)
    assert len(pieces) > 5
    with pytest.raises(ValueError, match="each frame must have 3 codes"):
        list(w.push([(1, 2)]))
