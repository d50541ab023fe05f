"""Greedy generations of two arithmetic paths, compared so that a near-tie cannot decide the verdict.

Two correct implementations that compute in a different order (transformers vs ours, ggml's integer kernels vs a
float emulation, one CPU's vector width vs another's) agree on the logits to a small tolerance, not bit for bit.
Where the reference's top two logits are closer than that, either may win, so comparing whole greedy sequences
token for token fails a correct program on some CPUs. Instead, both sides are teacher-forced along the reference's
own tokens and compared at every step:

- the logits must agree to the given tolerance (what catches a wrong model: a 1 % weight error moves them far more);
- where the two pick different tokens, both must see a near-tie: the reference prefers its token over ours by at
  most ``tie`` (a logit margin the test states, from the measured difference of the two paths), and so does ours
  in the other direction; then both continue on the reference's token;
- the model's own free-running greedy loop must reproduce the reference up to the first such forced position.

A step function returns the next-token logits (1-D) after a prompt (``start``) or after one more token (``step``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch


def relative_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference of ``a`` from ``b`` relative to ``b``'s peak; infinite where either holds a NaN or an
    infinity (which a ``max`` over floats would otherwise pass over)."""
    a, b = a.float(), b.float()
    if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        return float("inf")
    return float((a - b).abs().max() / b.abs().max())


class Stepper(Protocol):
    def start(self, prompt: Sequence[int]) -> torch.Tensor: ...

    def step(self, token: int) -> torch.Tensor: ...


class PrefixStepper:
    """Any ``logits_of(ids (1, T)) -> (1, T, V)``, run over the whole prefix at every step (a reference's plain
    forward pass: slow, but no cache of its own to trust)."""

    def __init__(self, logits_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.logits_of = logits_of
        self.ids: list[int] = []

    def _last(self) -> torch.Tensor:
        with torch.no_grad():
            return self.logits_of(torch.tensor([self.ids]))[0, -1].float()

    def start(self, prompt: Sequence[int]) -> torch.Tensor:
        self.ids = list(prompt)
        return self._last()

    def step(self, token: int) -> torch.Tensor:
        self.ids.append(token)
        return self._last()


class CacheStepper:
    """One of our decoder models, ``model(ids, cache, last_only=...)``: the prompt in one pass, then one token at a
    time through the KV cache, as the generation loops run it."""

    def __init__(self, model: Callable[..., torch.Tensor], new_cache: Callable[[], object]) -> None:
        self.model, self.new_cache = model, new_cache
        self.cache: object = None

    def start(self, prompt: Sequence[int]) -> torch.Tensor:
        self.cache = self.new_cache()
        with torch.no_grad():
            return self.model(torch.tensor([list(prompt)]), self.cache, last_only=True)[0, -1].float()

    def step(self, token: int) -> torch.Tensor:
        with torch.no_grad():
            return self.model(torch.tensor([[token]]), self.cache, last_only=True)[0, -1].float()


@dataclass
class Forced:
    position: int
    reference_token: int
    our_token: int
    reference_margin: float  # how much the reference prefers its token over ours
    difference: float  # max |ref - got| over the vocabulary at that step


@dataclass
class Comparison:
    tokens: list[int]  # the reference's greedy tokens (what both were forced along)
    forced: list[Forced] = field(default_factory=list)
    largest_difference: float = 0.0

    @property
    def agreed_prefix(self) -> int:
        """How many leading tokens both picked without forcing."""
        return self.forced[0].position if self.forced else len(self.tokens)


def compare_greedy(
    reference: Stepper,
    ours: Stepper,
    prompt: Sequence[int],
    n_new: int,
    *,
    close: Callable[[torch.Tensor, torch.Tensor], None],
    tie: float,
    max_forced: int | None = None,
) -> Comparison:
    """Teacher-force both along the reference's greedy tokens for ``n_new`` steps; ``close(got, ref)`` asserts the
    logits of one step agree. Fails when they do not, when the two pick different tokens without a near-tie on both
    sides (each prefers its own token by at most ``tie``), when the reference's generation is degenerate (the test
    would prove little), or when more than ``max_forced`` (default a quarter) of the positions needed forcing."""
    ref, got = reference.start(prompt), ours.start(prompt)
    result = Comparison(tokens=[])
    for position in range(n_new):
        try:
            close(got, ref)
        except AssertionError as error:
            raise AssertionError(f"logits differ at generated position {position}: {error}") from None
        difference = float((ref - got).abs().max())
        result.largest_difference = max(result.largest_difference, difference)
        r, g = int(ref.argmax()), int(got.argmax())
        if r != g:
            ref_margin, our_margin = float(ref[r] - ref[g]), float(got[g] - got[r])
            assert ref_margin <= tie and our_margin <= tie, (
                f"position {position}: the reference picks {r}, ours {g}; the reference prefers its token by "
                f"{ref_margin:.3g} and ours its own by {our_margin:.3g} (logits up to {difference:.3g} apart): "
                f"not a near-tie (at most {tie:.3g})"
            )
            result.forced.append(Forced(position, r, g, ref_margin, difference))
        result.tokens.append(r)
        if position + 1 < n_new:
            ref, got = reference.step(r), ours.step(r)
    assert len(set(result.tokens)) > 3, f"the reference generation {result.tokens} is degenerate; it proves little"
    limit = n_new // 4 if max_forced is None else max_forced
    assert len(result.forced) <= limit, f"{len(result.forced)} of {n_new} positions were near-ties: {result.forced}"
    return result


def assert_free_run_agrees(free_run: Sequence[int], comparison: Comparison) -> None:
    """The model's own greedy loop (no forcing) equals the reference up to the first near-tie, and entirely where
    there was none."""
    n = comparison.agreed_prefix
    assert list(free_run[:n]) == comparison.tokens[:n], (
        f"the free-running generation {list(free_run)} leaves the reference {comparison.tokens} before the first "
        f"near-tie (position {n})"
    )
    assert len(free_run) == len(comparison.tokens)


def allclose(rtol: float, atol: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def close(got: torch.Tensor, ref: torch.Tensor) -> None:
        torch.testing.assert_close(got, ref, rtol=rtol, atol=atol)

    return close


def relative_below(limit: float) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def close(got: torch.Tensor, ref: torch.Tensor) -> None:
        error = float((got - ref).norm() / ref.norm())
        assert error < limit, f"relative error {error:.3g} >= {limit:.3g}"

    return close
