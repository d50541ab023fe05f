"""Letters as phonemes: the English frontend's stand-in for tiny test vocabularies."""

from __future__ import annotations

from collections.abc import Iterable

TINY_LETTERS = "abcdefghijklmnopqrstuvwxyz .,!?"


def tiny_phonemizer(text: str, language: str, max_phonemes: int = 0, vocab: object = None) -> Iterable[str]:
    """The English frontend's stand-in for the tiny vocabulary: letters as phonemes, a chunk per sentence."""
    letters = "".join(c for c in text.lower() if c in TINY_LETTERS)
    return [s.strip() + "." for s in letters.split(".") if s.strip()]
