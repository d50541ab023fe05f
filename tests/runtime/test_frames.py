"""The generation runtime for codec language models: frames of Q codes, per-codebook sampling, a per-frame
predictor, a fixed cross-attention cache, windowed decoding of frames; and the one-codebook token loop OuteTTS
runs on, identical to the loop it replaced."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from ggtts.runtime.frames import Frame, SampleCode, StepOutput, decode_frames, generate_tokens
from ggtts.runtime.kv_cache import CrossAttentionCache, EncoderDecoderCache, KVCache
from ggtts.runtime.sampling import Sampler, SamplingParams
from ggtts.runtime.streaming import WindowedDecoder

VOCAB = 50


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


class ScriptedBackbone:
    """Q = 3: the first code's most likely value comes from the last frame's sum and the step; the hidden state
    is that sum."""

    def __init__(self) -> None:
        self.steps: list[Frame] = []
        self.prompt: list[int] = []

    def prefill(self, prompt: Sequence[int], cache: object) -> StepOutput:
        self.prompt = list(prompt)
        return self._out(sum(prompt))

    def step(self, frame: Frame, cache: object) -> StepOutput:
        self.steps.append(frame)
        return self._out(sum(frame))

    def _out(self, value: int) -> StepOutput:
        logits = torch.full((VOCAB,), -1.0)
        logits[(value * 7 + 3 + len(self.steps)) % VOCAB] = 5.0
        return StepOutput(logits, hidden=torch.tensor([float(value)]))


class OffsetPredictor:
    """Completes a frame: codebook 1's most likely code is (first + hidden) mod VOCAB; codebook 2's is always 17,
    with 18 a close runner-up, so a repetition penalty on codebook 2 (and on its own history) shows."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, hidden: torch.Tensor | None, first: int, sample: SampleCode) -> Frame:
        assert hidden is not None
        self.calls += 1
        codes = [first]
        for q, best in ((1, (first + int(hidden.item())) % VOCAB), (2, 17)):
            logits = torch.full((VOCAB,), -1.0)
            logits[best], logits[(best + 1) % VOCAB] = 5.0, 4.9
            codes.append(sample(q, logits))
        return tuple(codes)


def _expected(prompt: list[int], n: int, penalised: bool) -> list[Frame]:
    frames: list[Frame] = []
    value = sum(prompt)
    for step in range(n):
        first = (value * 7 + 3 + step) % VOCAB
        c1 = (first + value) % VOCAB
        # penalised: 17 once, then 18 (17 is in codebook 2's history), then 17 again (both are, 5/p > 4.9/p)
        c2 = 18 if penalised and step == 1 else 17
        frames.append((first, c1, c2))
        value = first + c1 + c2
    return frames


@pytest.mark.parametrize("penalty", [1.0, 100.0])
def test_frames_of_three_codebooks_with_a_predictor_and_per_codebook_samplers(penalty: float) -> None:
    greedy = Sampler(SamplingParams(temperature=0.0))
    penalised = Sampler(SamplingParams(temperature=0.0, repetition_penalty=penalty))
    backbone, predictor = ScriptedBackbone(), OffsetPredictor()
    prompt = [17, 4]  # in codebook 0's history only: codebook 2's penalty must not see its 17
    frames = list(
        decode_frames(backbone, prompt, None, [greedy, greedy, penalised], max_frames=12, predictor=predictor)
    )
    assert frames == _expected(prompt, 12, penalised=penalty > 1)
    assert backbone.prompt == prompt and backbone.steps == frames[:-1]  # the last frame is never fed back
    assert predictor.calls == 12


def test_a_stop_frame_ends_generation_and_a_predictor_keeps_the_first_code() -> None:
    greedy = Sampler(SamplingParams(temperature=0.0))
    want = _expected([4, 2], 12, penalised=False)
    at = next(i for i in range(3, 12) if want[i] not in want[:i])  # a frame not seen before
    stop = want[at]
    frames = list(
        decode_frames(
            ScriptedBackbone(), [4, 2], None, [greedy], max_frames=12, predictor=OffsetPredictor(),
            is_stop=lambda frame: frame == stop,
        )
    )  # fmt: skip
    assert frames == want[: at + 1]

    def liar(hidden: torch.Tensor | None, first: int, sample: SampleCode) -> Frame:
        return (first + 1, 0, 0)

    with pytest.raises(ValueError, match="changed the first code"):
        list(decode_frames(ScriptedBackbone(), [1], None, [greedy], max_frames=3, predictor=liar))


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
