"""Error-rate arithmetic: expectations worked out by hand, also checked against jiwer where installed."""

from __future__ import annotations

import math

import pytest

from ggtts.measure.wer import ErrorCounts, align, cer, char_errors, wer, word_errors

# reference, hypothesis, (substitutions, deletions, insertions, reference words)
WORD_CASES = [
    ("a b c", "a b c", (0, 0, 0, 3)),
    ("a b c", "a x c", (1, 0, 0, 3)),
    ("a b c", "a c", (0, 1, 0, 3)),
    ("a b c", "a b c d", (0, 0, 1, 3)),
    ("a b c", "", (0, 3, 0, 3)),
    ("", "a b", (0, 0, 2, 0)),
    ("", "", (0, 0, 0, 0)),
    ("a b c d", "x y", (2, 2, 0, 4)),
    ("the cat sat", "the cat sat on the mat", (0, 0, 3, 3)),
    ("one two three four", "two three four five", (0, 1, 1, 4)),
    ("a a a", "a", (0, 2, 0, 3)),
    ("a b", "b a", (2, 0, 0, 2)),  # a swap: two substitutions, rather than an insertion and a deletion
    ("  spaced   out ", "spaced out", (0, 0, 0, 2)),
]


@pytest.mark.parametrize(("reference", "hypothesis", "expected"), WORD_CASES)
def test_word_error_counts(reference: str, hypothesis: str, expected: tuple[int, int, int, int]) -> None:
    c = word_errors(reference, hypothesis)
    assert (c.substitutions, c.deletions, c.insertions, c.reference_length) == expected


# reference, hypothesis, word error rate
RATE_CASES = [
    ("a b c d", "a b c d", 0.0),
    ("a b c d", "a b x d", 0.25),
    ("a b", "x y z w", 2.0),  # insertions can push the rate above 1
    ("hello world", "", 1.0),
    ("", "", 0.0),
]


@pytest.mark.parametrize(("reference", "hypothesis", "rate"), RATE_CASES)
def test_word_error_rate(reference: str, hypothesis: str, rate: float) -> None:
    assert wer(reference, hypothesis) == pytest.approx(rate)


def test_empty_reference_with_insertions_is_infinite() -> None:
    assert math.isinf(wer("", "surprise"))


# reference, hypothesis, (character edits, reference characters)
CHAR_CASES = [
    ("cat", "cat", (0, 3)),
    ("cat", "cut", (1, 3)),
    ("cat", "cats", (1, 3)),
    ("kitten", "sitting", (3, 6)),  # the textbook Levenshtein example
    ("a b", "ab", (1, 3)),  # the space counts
    ("a  b ", " a b", (0, 3)),  # runs of space are one space; ends are trimmed
]


@pytest.mark.parametrize(("reference", "hypothesis", "expected"), CHAR_CASES)
def test_character_errors(reference: str, hypothesis: str, expected: tuple[int, int]) -> None:
    c = char_errors(reference, hypothesis)
    assert (c.errors, c.reference_length) == expected
    assert cer(reference, hypothesis) == pytest.approx(expected[0] / expected[1])


def test_corpus_rate_sums_counts_before_dividing() -> None:
    counts = [word_errors("a b c d e f g h i j", "a b c d e f g h i x"), word_errors("a b", "x y")]
    total = ErrorCounts.total(counts)
    assert (total.errors, total.reference_length) == (3, 12)
    assert total.rate == pytest.approx(3 / 12)  # not the mean of 0.1 and 1.0
    assert total.hits == 9


def test_align_takes_any_token_sequences() -> None:
    assert align(["x", "y"], ["x", "y"]).errors == 0
    assert align(list("abc"), list("abd")).substitutions == 1


@pytest.mark.parametrize(("reference", "hypothesis", "_"), [c for c in WORD_CASES if c[0].strip()])
def test_agrees_with_jiwer(reference: str, hypothesis: str, _: object) -> None:
    jiwer = pytest.importorskip("jiwer")
    out = jiwer.process_words(reference, hypothesis if hypothesis.strip() else "")
    c = word_errors(reference, hypothesis)
    assert c.errors == out.substitutions + out.deletions + out.insertions
    assert c.reference_length == out.hits + out.substitutions + out.deletions
