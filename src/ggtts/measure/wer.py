"""Word and character error rates from a Levenshtein alignment.

``error rate = (substitutions + deletions + insertions) / reference length``. Over a corpus the counts are
summed before dividing (as jiwer and the usual ASR scoring tools do): long sentences weigh more than short.
Inputs are compared as given: run them through :func:`ggtts.measure.normalize.normalize` first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorCounts:
    """Edit operations that turn a reference into a hypothesis, with the reference length."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    reference_length: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def hits(self) -> int:
        return self.reference_length - self.substitutions - self.deletions

    @property
    def rate(self) -> float:
        """Errors per reference item; 0.0 for an empty reference with nothing inserted, else infinite."""
        if self.reference_length == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.reference_length

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.reference_length + other.reference_length,
        )

    @staticmethod
    def total(counts: Iterable[ErrorCounts]) -> ErrorCounts:
        result = ErrorCounts()
        for c in counts:
            result = result + c
        return result


def align(reference: Sequence[str], hypothesis: Sequence[str]) -> ErrorCounts:
    """Minimum-edit alignment of two token sequences (unit costs), counting each kind of edit.

    Among alignments with the fewest edits, the one with the most substitutions is kept (the usual tie-break:
    "a b" -> "a c" is one substitution, not one deletion plus one insertion).
    """
    n, m = len(reference), len(hypothesis)
    # row[j] = (edits, substitutions, deletions, insertions) to turn reference[:i] into hypothesis[:j]
    row = [(j, 0, 0, j) for j in range(m + 1)]
    for i in range(1, n + 1):
        prev, row = row, [(i, 0, i, 0)]
        for j in range(1, m + 1):
            if reference[i - 1] == hypothesis[j - 1]:
                row.append(prev[j - 1])
                continue
            e, s, d, a = prev[j - 1]
            sub = (e + 1, s + 1, d, a)
            e, s, d, a = prev[j]
            dele = (e + 1, s, d + 1, a)
            e, s, d, a = row[j - 1]
            ins = (e + 1, s, d, a + 1)
            # fewest edits first, then most substitutions
            row.append(min(sub, dele, ins, key=lambda t: (t[0], -t[1])))
    _, s, d, a = row[m]
    return ErrorCounts(substitutions=s, deletions=d, insertions=a, reference_length=n)


def word_errors(reference: str, hypothesis: str) -> ErrorCounts:
    """Word-level edits between two (already normalized) strings, split on whitespace."""
    return align(reference.split(), hypothesis.split())


def char_errors(reference: str, hypothesis: str) -> ErrorCounts:
    """Character-level edits; runs of whitespace count as one space, leading/trailing space is ignored."""
    return align(list(" ".join(reference.split())), list(" ".join(hypothesis.split())))


def wer(reference: str, hypothesis: str) -> float:
    return word_errors(reference, hypothesis).rate


def cer(reference: str, hypothesis: str) -> float:
    return char_errors(reference, hypothesis).rate
