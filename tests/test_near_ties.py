"""The near-tie comparison itself (tests/near_ties.py), on scripted logits: a flip at a near-tie is forced and
passes, a flip without one fails, logits beyond the tolerance fail, and so does a free run that leaves the
reference before the first near-tie."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from near_ties import allclose, assert_free_run_agrees, compare_greedy

V = 8
# The reference's greedy path: token t at step t (mod V), each by a clear margin except at step 3, where tokens 3 and 5
# are 0.001 apart.
TIE_STEP = 3


def _logits(step: int) -> torch.Tensor:
    x = torch.zeros(V)
    x[step % V] = 1.0
    if step == TIE_STEP:
        x[5] = 0.999
    return x


class Scripted:
    """Logits by step; ``bias(step)`` is added on top (how an implementation differs from the reference)."""

    def __init__(self, bias: dict[int, torch.Tensor] | None = None) -> None:
        self.bias, self.n = bias or {}, 0

    def _at(self) -> torch.Tensor:
        return _logits(self.n) + self.bias.get(self.n, torch.zeros(V))

    def start(self, prompt: Sequence[int]) -> torch.Tensor:
        self.n = 0
        return self._at()

    def step(self, token: int) -> torch.Tensor:
        assert token == self.n % V, "not forced onto the reference's token"
        self.n += 1
        return self._at()


def _nudge(token: int, by: float) -> torch.Tensor:
    x = torch.zeros(V)
    x[token] = by
    return x


def test_a_flip_at_a_near_tie_is_forced_and_the_rest_compared() -> None:
    ours = Scripted({TIE_STEP: _nudge(5, 0.002)})  # 0.002 of noise decides the tie the other way
    result = compare_greedy(Scripted(), ours, [0], 12, close=allclose(0, 0.005), tie=0.01)
    assert [(f.position, f.reference_token, f.our_token) for f in result.forced] == [(TIE_STEP, 3, 5)]
    assert result.tokens == [n % V for n in range(12)] and result.agreed_prefix == TIE_STEP
    assert_free_run_agrees([0, 1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0], result)  # anything after the tie


def test_a_flip_without_a_near_tie_fails() -> None:
    ours = Scripted({6: _nudge(2, 1.5)})  # a clear preference for another token
    with pytest.raises(AssertionError, match=r"position 6: the reference picks 6, ours 2.*not a near-tie"):
        compare_greedy(Scripted(), ours, [0], 12, close=allclose(0, 10.0), tie=0.01)


def test_logits_beyond_the_tolerance_fail_even_with_the_same_tokens() -> None:
    ours = Scripted({8: torch.full((V,), 0.01)})
    with pytest.raises(AssertionError, match="logits differ at generated position 8"):
        compare_greedy(Scripted(), ours, [0], 12, close=allclose(0, 0.005), tie=0.01)


def test_a_free_run_that_leaves_the_reference_before_a_tie_fails() -> None:
    result = compare_greedy(Scripted(), Scripted(), [0], 12, close=allclose(0, 1e-6), tie=0.01)
    assert result.forced == [] and result.largest_difference == 0
    with pytest.raises(AssertionError, match=r"before the first near-tie \(position 12\)"):
        assert_free_run_agrees([0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0], result)


def test_too_many_near_ties_or_a_degenerate_reference_fail() -> None:
    # every other step a near-tie, each decided the other way by ours
    reference = Scripted({s: _nudge((s + 1) % V, 0.999) for s in range(4, 12, 2)})
    ours = Scripted({s: _nudge((s + 1) % V, 1.001) for s in range(4, 12, 2)})
    with pytest.raises(AssertionError, match="4 of 12 positions were near-ties"):
        compare_greedy(reference, ours, [0], 12, close=allclose(0, 0.005), tie=0.01)

    class Flat(Scripted):
        def _at(self) -> torch.Tensor:
            return _nudge(0, 1.0)

        def step(self, token: int) -> torch.Tensor:
            return self._at()

    with pytest.raises(AssertionError, match="degenerate"):
        compare_greedy(Flat(), Flat(), [0], 12, close=allclose(0, 0), tie=0.01)
