"""Autoregressive decoding loop: prefill the prompt, then one token per step, yielding tokens as they come.

The loop knows nothing about text or audio. A ``rewrite`` hook may replace a sampled token before it is fed
back
(OuteTTS's guide tokens use it to force the first token of each word).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Protocol

import torch

from ggtts.runtime.kv_cache import KVCache
from ggtts.runtime.sampling import Sampler

Rewrite = Callable[[int, Sequence[int]], int]  # (sampled token, tokens generated so far) -> token to use


class StepModel(Protocol):
    """A decoder that consumes tokens ``(1, T)`` at the cache's position and returns last-position logits."""

    def __call__(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = ...) -> torch.Tensor: ...


@torch.inference_mode()
def generate_tokens(
    model: StepModel,
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
    history: list[int] = list(prompt)
    generated: list[int] = []
    logits = model(torch.tensor([list(prompt)], dtype=torch.long, device=device), cache, last_only=True)
    for i in range(max_new_tokens):
        token = sampler(logits[0, -1], history)
        if rewrite is not None:
            token = rewrite(token, generated)
        generated.append(token)
        history.append(token)
        yield token
        if token in stop_tokens or i == max_new_tokens - 1:
            return
        logits = model(torch.tensor([[token]], dtype=torch.long, device=device), cache, last_only=True)
