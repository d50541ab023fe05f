"""Next-token sampling: repetition penalty, top-k, top-p, min-p, temperature, seeded draw.

The order follows llama.cpp's default sampler chain (penalties -> top-k -> top-p -> min-p -> temperature ->
draw), so
top-p and min-p see the untempered distribution. ``temperature == 0`` is greedy (argmax after the penalty).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    min_p: float = 0.0  # 0.0: off
    repetition_penalty: float = 1.0  # 1.0: off; >1 discourages tokens seen in the last `repetition_window`
    repetition_window: int = 64  # llama.cpp's penalty_last_n
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def apply_repetition_penalty(logits: torch.Tensor, recent: Sequence[int], penalty: float) -> torch.Tensor:
    """CTRL-style penalty: recent tokens' positive logits divided by ``penalty``, negatives multiplied."""
    if penalty == 1.0 or not recent:
        return logits
    ids = torch.tensor(sorted(set(recent)), dtype=torch.long, device=logits.device)
    picked = logits[ids]
    logits = logits.clone()
    logits[ids] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return logits


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    threshold = torch.topk(logits, k).values[-1]
    return logits.masked_fill(logits < threshold, float("-inf"))


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches ``p`` (at least one token)."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= p  # mass before this token already >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def filter_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    if min_p <= 0.0:
        return logits
    probs = torch.softmax(logits, dim=-1)
    return logits.masked_fill(probs < min_p * probs.max(), float("-inf"))


class Sampler:
    """Draws token ids from logits; owns its random generator so a seed reproduces a run."""

    def __init__(self, params: SamplingParams | None = None, device: str | torch.device = "cpu") -> None:
        self.params = params or SamplingParams()
        self.generator = torch.Generator(device=device)
        if self.params.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(self.params.seed)

    def __call__(self, logits: torch.Tensor, history: Sequence[int] = ()) -> int:
        """``logits``: ``(V,)`` for one position; ``history``: tokens so far (for the repetition penalty)."""
        p = self.params
        logits = logits.float()
        recent = history[-p.repetition_window :] if p.repetition_window > 0 else ()
        logits = apply_repetition_penalty(logits, recent, p.repetition_penalty)
        if p.greedy:
            return int(torch.argmax(logits))
        logits = filter_min_p(filter_top_p(filter_top_k(logits, p.top_k), p.top_p), p.min_p)
        probs = torch.softmax(logits / p.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
