"""The generation loop every autoregressive family runs: one *frame* per step, until the model ends it or the
budget runs out.

The shape is gpt-fast's (``prefill`` / ``decode_one_token`` / ``decode_n_tokens``), with each family's own
sampling order inside its step. A family writes a :class:`FrameDecoder` for one utterance:

- ``prefill()`` runs the prompt;
- ``draw(step)`` picks the next frame from the state the last model call left (the family's sampling, in its
  upstream's exact order: a token, a frame of codebooks filled by a local transformer or a code predictor, a
  stack of frames), or ``None`` when the model ends the utterance without one;
- ``is_last(frame)`` says the frame ends the utterance (it is yielded, never fed back);
- ``feed(frame)`` runs the model over it, for the next draw.

:func:`decode_frames` owns what is the same for every family: the frame budget, the end, that the last frame
is never fed back, and the cancellation point before each step (:mod:`ggtts.runtime.cancel`). Families:
OuteTTS (one token a frame, :func:`generate_tokens`), Magpie (a stack of frames of 8 codebooks a step, with
guidance and an attention prior), Qwen3-Omni (the talker's code, then the code predictor's). A decoder whose
``feed`` and ``draw`` keep their tensors in fixed places is what a captured graph per step replays.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Protocol, TypeVar

import torch

from ggtts.runtime.cancel import check_cancelled
from ggtts.runtime.kv_cache import KVCache
from ggtts.runtime.sampling import Sampler

F = TypeVar("F")
Rewrite = Callable[[int, Sequence[int]], int]  # (sampled token, tokens so far) -> the token to use


class FrameDecoder(Protocol[F]):
    """One utterance's decoding, as :func:`decode_frames` drives it."""

    def prefill(self) -> None: ...

    def draw(self, step: int) -> F | None: ...

    def is_last(self, frame: F) -> bool: ...

    def feed(self, frame: F) -> None: ...


def decode_frames(
    decoder: FrameDecoder[F], max_frames: int, check: Callable[[], None] = check_cancelled
) -> Iterator[F]:
    """Yield up to ``max_frames`` frames of ``decoder``; a last frame is yielded, then generation ends, and so does
    a draw of ``None``. ``check`` runs before the prefill and before each step (it raises to stop: by default
    :func:`~ggtts.runtime.cancel.check_cancelled`). Nothing runs when ``max_frames`` is below 1."""
    if max_frames < 1:
        return
    check()
    decoder.prefill()
    for step in range(max_frames):
        check()
        frame = decoder.draw(step)
        if frame is None:
            return
        yield frame
        if decoder.is_last(frame) or step == max_frames - 1:
            return
        decoder.feed(frame)


# ---- one token a frame: a decoder-only language model ------------------------------------------------------------
class TokenModel(Protocol):
    """A decoder that consumes tokens ``(1, T)`` at the cache's position and returns last-position logits."""

    def __call__(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = ...) -> torch.Tensor: ...


class TokenDecoder:
    """A decoder-only LM's token loop as a :class:`FrameDecoder` of ints: the sampler sees the prompt and the
    tokens drawn so far (a repetition penalty reads them, as llama.cpp's does); ``rewrite`` may replace each draw
    (guide tokens)."""

    def __init__(
        self,
        model: TokenModel,
        prompt: Sequence[int],
        cache: KVCache,
        sampler: Sampler,
        *,
        stop_tokens: Collection[int] = (),
        rewrite: Rewrite | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if not prompt:
            raise ValueError("the prompt is empty")
        self.model, self.prompt, self.cache, self.sampler = model, list(prompt), cache, sampler
        self.stop_tokens, self.rewrite, self.device = stop_tokens, rewrite, device
        self.history: list[int] = list(prompt)
        self.generated: list[int] = []
        self.logits: torch.Tensor | None = None

    def _run(self, tokens: Sequence[int]) -> None:
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        self.logits = self.model(ids, self.cache, last_only=True)[0, -1]

    def prefill(self) -> None:
        self._run(self.prompt)

    def draw(self, step: int) -> int:
        assert self.logits is not None, "prefill first"
        token = self.sampler(self.logits, self.history)
        if self.rewrite is not None:
            token = self.rewrite(token, self.generated)
        self.generated.append(token)
        self.history.append(token)
        return token

    def is_last(self, frame: int) -> bool:
        return frame in self.stop_tokens

    def feed(self, frame: int) -> None:
        self._run([frame])


@torch.inference_mode()
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
    decoder = TokenDecoder(model, prompt, cache, sampler, stop_tokens=stop_tokens, rewrite=rewrite, device=device)
    yield from decode_frames(decoder, max_new_tokens)
