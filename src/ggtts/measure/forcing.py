"""Teacher forcing for the parity of greedy generations: ours follows the reference's picks, and says where it
would have picked otherwise.

Two correct implementations of one model agree on the logits to float noise, not bit for bit; where the reference's
top two are closer than that, either may win, and one flipped pick changes every later step. So a parity check does
not compare two free-running greedy generations: ours is fed the reference's pick at every decision, its own argmax
is recorded, and the comparison is made on those. A decision where ours would have picked another token is a failure
unless ours prefers its own by at most ``tie`` (a near-tie: its pick is then counted as the reference's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class Forcing:
    """The decisions of one generation, in the order the loop makes them."""

    def __init__(self, reference: Sequence[int | None], tie: float) -> None:
        """``reference``: its pick at each decision, in order (None: nothing to follow there)."""
        self.reference, self.tie = [None if t is None else int(t) for t in reference], tie
        self.own: list[int | None] = list(self.reference)  # ours' picks, near-ties counted as the reference's
        self.near_ties: list[int] = []  # the decisions forgiven
        self.made = 0

    def pick(self, scores: torch.Tensor) -> int:
        """A greedy decision: our scores ``(V,)`` -> the reference's pick (our own where it has none); the margin
        of a differing pick is how much ours prefers its own token."""
        mine = int(scores.argmax())
        return self.decide(mine, lambda theirs: float(scores[mine] - scores[theirs]))

    def decide(self, mine: int, margin: Callable[[int], float]) -> int:
        """Any decision: ours would take ``mine``; ``margin(theirs)`` says how far ours is from taking theirs
        instead (a near-tie at most ``tie``). Returns the reference's pick (our own where it has none)."""
        i, self.made = self.made, self.made + 1
        theirs = self.reference[i] if i < len(self.reference) else None
        if i == len(self.own):
            self.own.append(mine)
        if theirs is None:
            self.own[i] = mine
            return mine
        if mine != theirs:
            if margin(theirs) > self.tie:
                self.own[i] = mine
            else:
                self.near_ties.append(i)
        return theirs

    def picks(self) -> list[int | None]:
        """Ours' picks of the decisions made so far."""
        return self.own[: self.made]


def draw_margin(cumulative: torch.Tensor, point: float) -> Callable[[int], float]:
    """For a draw by inverse CDF (``cumulative`` probabilities (V,), the draw's ``point`` on their scale): how far,
    as a share of the total, the point lies from another index's interval (0 inside it): a draw's
    :meth:`Forcing.decide` margin."""
    total = float(cumulative[-1])

    def margin(other: int) -> float:
        low = float(cumulative[other - 1]) if other else 0.0
        return max(low - point, point - float(cumulative[other]), 0.0) / total

    return margin
