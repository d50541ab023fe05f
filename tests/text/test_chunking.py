"""Chunking: boundaries in order of strength, the phoneme limit, and no word lost or repeated."""

from __future__ import annotations

import pytest

from ggtts.errors import InputError
from ggtts.text.chunking import chunk_pieces, iter_phoneme_chunks
from ggtts.text.frontend import filter_phonemes, phonemes_to_chunks
from ggtts.text.g2p import G2PToken


@pytest.mark.parametrize(
    ("phonemes", "limit", "expected"),
    [
        ("aa bb. cc dd.", 20, ["aa bb. cc dd."]),  # fits: one chunk
        ("aa bb. cc dd. ee ff.", 13, ["aa bb. cc dd.", "ee ff."]),  # whole sentences packed
        ("aa bb, cc dd ee ff.", 12, ["aa bb,", "cc dd ee ff."]),  # sentence too long: clause
        ("aa bb; cc dd: ee ff.", 8, ["aa bb;", "cc dd:", "ee ff."]),
        ("aa — bb cc dd", 10, ["aa —", "bb cc dd"]),
        ("aaaa bbbb cccc dddd", 10, ["aaaa bbbb", "cccc dddd"]),  # no punctuation: words
        ("abcdefghijkl", 5, ["abcde", "fghij", "kl"]),  # one word over the limit is cut
        ('aa bb." cc dd.', 8, ['aa bb."', "cc dd."]),  # the closing quote stays with its sentence
        ("aa bb\ncc dd", 20, ["aa bb cc dd"]),  # a line break is a boundary, not a forced split
        ("aa bb cc\ndd", 8, ["aa bb cc", "dd"]),  # ... which is preferred to a word boundary
        ("", 10, []),
    ],
)
def test_raw_phonemes(phonemes: str, limit: int, expected: list[str]) -> None:
    chunks = list(iter_phoneme_chunks(phonemes, limit))
    assert [c.phonemes for c in chunks] == expected
    assert all(c.text == c.phonemes for c in chunks)


def _tokens(*items: tuple[str, str]) -> list[G2PToken]:
    """(text, whitespace) pairs whose phonemes are their text, like misaki's tokens for punctuation."""
    return [G2PToken(text=text, phonemes=text, whitespace=space) for text, space in items]


def test_ellipsis_and_closing_bracket_stay_with_what_they_end() -> None:
    line = _tokens(("aa", ""), (".", ""), (".", ""), (".", " "), ("(", ""), ("bb", ""), (")", ""), (".", ""))
    chunks = list(chunk_pieces([line], 5))
    assert [c.phonemes for c in chunks] == ["aa...", "(bb)."]


def test_tokens_without_phonemes_keep_their_text() -> None:
    line = [
        G2PToken("aa", "aa", " "),
        G2PToken("zzz", "", " "),  # a word nobody could read
        G2PToken("bb", "bb", ""),
    ]
    (chunk,) = chunk_pieces([line], 510)
    assert chunk.text == "aa zzz bb"
    assert chunk.phonemes == "aa bb"


def test_a_silent_token_keeps_the_space_after_it() -> None:
    # "See note* below.": the "*" says nothing, but its space still parts "note" from "below"
    line = [
        G2PToken("note", "nˈOt", ""),
        G2PToken("*", "", " "),
        G2PToken("below", "bəlˈO", ""),
        G2PToken(".", ".", ""),
    ]
    (chunk,) = chunk_pieces([line], 510)
    assert chunk.phonemes == "nˈOt bəlˈO."
    assert chunk.text == "note* below."


@pytest.mark.parametrize("limit", [0, -5])
def test_limit_must_be_positive(limit: int) -> None:
    with pytest.raises(InputError, match="max_phonemes"):
        list(iter_phoneme_chunks("aa", limit))


def test_raw_phonemes_long_input_invariants() -> None:
    words = [f"w{i}ə" + ("," if i % 7 == 3 else ".") * (i % 11 == 5) for i in range(600)]
    text = " ".join(words)
    for limit in (510, 64, 9):
        chunks = list(iter_phoneme_chunks(text, limit))
        assert all(0 < len(c.phonemes) <= limit for c in chunks)
        assert " ".join(c.text for c in chunks).split() == words


@pytest.mark.parametrize(
    ("phonemes", "vocab", "expected"),
    [
        ("həlˈO, wˈɜɹld!", set("həlˈO wɜɹd,!"), "həlˈO, wˈɜɹld!"),
        ("həlˈO, wˈɜɹld!", set("həlO wɜɹd"), "həlO wɜɹld"),  # stress and punctuation dropped
        ("a ✱ b", set("ab "), "a b"),  # no double space where a symbol was dropped
        ("✱✱", set("ab "), ""),
    ],
)
def test_filter_phonemes(phonemes: str, vocab: set[str], expected: str) -> None:
    assert filter_phonemes(phonemes, vocab) == expected


def test_phonemes_to_chunks_filters_and_skips_empty_chunks() -> None:
    chunks = list(phonemes_to_chunks("✱✱. aa bb.", 4, vocab=set("ab .")))
    assert [c.phonemes for c in chunks] == ["aa", "bb."]
