"""Generation for codec language models: each step yields one *frame*, one code per codebook.

The shape is gpt-fast's (``prefill`` / ``decode_one_token`` / ``decode_n_tokens``), one level up:

- a :class:`FrameModel` (the backbone) is prefilled with the prompt, then fed one frame per step, and returns
  the logits of the frame's first codebook and its last hidden state;
- a :class:`FramePredictor` (optional) completes each frame from that hidden state, codebook by codebook, in an
  inner loop of its own (Magpie's local transformer, the Qwen3-Omni talker's code predictor);
- each codebook has its own sampler (and its own history, for repetition penalties).

A single-codebook model (OuteTTS: a Qwen2 writing WavTokenizer codes) is the case ``Q = 1`` without a predictor:
:class:`TokenBackbone` adapts any decoder-only LM and :func:`generate_tokens` is the familiar token loop on top.
The loop knows nothing about text or audio.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ggtts.runtime.kv_cache import KVCache
from ggtts.runtime.sampling import Sampler

Frame = tuple[int, ...]  # one code per codebook
Rewrite = Callable[[int, Sequence[int]], int]  # (sampled first code, first codes so far) -> the code to use
# (codebook, logits (V,)) -> the code drawn by that codebook's sampler, with that codebook's history
SampleCode = Callable[[int, torch.Tensor], int]


@dataclass(frozen=True)
class StepOutput:
    logits: torch.Tensor  # (V,) the first codebook's logits for the next frame
    hidden: torch.Tensor | None = None  # (D,) the backbone's last hidden state, for a predictor


class FrameModel(Protocol):
    """A codec LM's backbone. ``cache`` is whatever state it keeps (a :class:`KVCache`, an encoder-decoder cache)."""

    def prefill(self, prompt: Sequence[int], cache: Any) -> StepOutput: ...

    def step(self, frame: Frame, cache: Any) -> StepOutput: ...


class FramePredictor(Protocol):
    """Completes a frame: codebooks ``1..Q-1`` from the backbone's hidden state and the first code."""

    def __call__(self, hidden: torch.Tensor | None, first: int, sample: SampleCode) -> Frame: ...


@torch.inference_mode()
def decode_frames(
    model: FrameModel,
    prompt: Sequence[int],
    cache: Any,
    samplers: Sequence[Sampler],
    *,
    max_frames: int,
    is_stop: Callable[[Frame], bool] = lambda frame: False,
    predictor: FramePredictor | None = None,
    rewrite: Rewrite | None = None,
) -> Iterator[Frame]:
    """Yield up to ``max_frames`` frames; a stop frame is yielded, then generation ends.

    ``samplers[q]`` draws codebook ``q`` (one sampler serves them all when only one is given). The first
    codebook's history starts with the prompt (so a repetition penalty sees it, as llama.cpp's does); the others
    start empty. A stop frame and the last frame are never fed back.
    """
    if not prompt:
        raise ValueError("the prompt is empty")
    if max_frames < 1:
        return
    if len(samplers) < 1:
        raise ValueError("give at least one sampler")
    histories: list[list[int]] = [list(prompt)]

    def sample(codebook: int, logits: torch.Tensor) -> int:
        while len(histories) <= codebook:
            histories.append([])
        sampler = samplers[codebook] if len(samplers) > 1 else samplers[0]
        return sampler(logits, histories[codebook])

    firsts: list[int] = []
    out = model.prefill(prompt, cache)
    for i in range(max_frames):
        first = sample(0, out.logits)
        if rewrite is not None:
            first = rewrite(first, firsts)
        frame: Frame = (first,) if predictor is None else predictor(out.hidden, first, sample)
        if frame[0] != first:
            raise ValueError("the frame predictor changed the first code")
        firsts.append(first)
        for codebook, code in enumerate(frame):
            while len(histories) <= codebook:
                histories.append([])
            histories[codebook].append(code)
        yield frame
        if is_stop(frame) or i == max_frames - 1:
            return
        out = model.step(frame, cache)


# ---- one codebook: a decoder-only language model -----------------------------------------------------------------
class TokenModel(Protocol):
    """A decoder that consumes tokens ``(1, T)`` at the cache's position and returns last-position logits."""

    def __call__(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = ...) -> torch.Tensor: ...


class TokenBackbone:
    """A decoder-only LM as a :class:`FrameModel` of one codebook (each token is a frame)."""

    def __init__(self, model: TokenModel, device: str | torch.device = "cpu") -> None:
        self.model, self.device = model, device

    def prefill(self, prompt: Sequence[int], cache: KVCache) -> StepOutput:
        tokens = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        return StepOutput(self.model(tokens, cache, last_only=True)[0, -1])

    def step(self, frame: Frame, cache: KVCache) -> StepOutput:
        tokens = torch.tensor([[frame[0]]], dtype=torch.long, device=self.device)
        return StepOutput(self.model(tokens, cache, last_only=True)[0, -1])


def generate_tokens(
    model: TokenModel,
    prompt: Sequence[int],
    cache: KVCache,
    sampler: Sampler,
    *,
    max_new_tokens: int,
    stop_tokens: Collection[int] = (),
    rewrite: Rewrite | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` new tokens; a stop token is yielded, then generation ends.

    The prompt is prefilled in one step from the cache's current position; the cache must have room for
    ``len(prompt) + max_new_tokens`` positions (the last token is never fed back, so one fewer suffices).
    """
    if not prompt:
        raise ValueError("the prompt is empty")
    needed = cache.length + len(prompt) + max_new_tokens - 1
    if needed > cache.max_len:
        raise ValueError(f"prompt and generation need {needed} cache positions; the cache holds {cache.max_len}")
    frames = decode_frames(
        TokenBackbone(model, device),
        prompt,
        cache,
        [sampler],
        max_frames=max_new_tokens,
        is_stop=lambda frame: frame[0] in stop_tokens,
        rewrite=rewrite,
    )
    for frame in frames:
        yield frame[0]
