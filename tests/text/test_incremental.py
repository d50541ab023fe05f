"""Text arriving in pieces, cut into stretches ready to speak (``ggtts.text.incremental``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ggtts.text.incremental import TextStream

REPLY = (
    'Sure, I can help with that, right away. Dr. Smith lives at 3.5 Main St. in Springfield! Does he? "Yes." '
    "Then a list:\n- one\n- two"
)
STRETCHES = [
    "Sure, I can help with that,",  # the first stretch ends at its first clause of three words or more
    "right away.",
    "Dr. Smith lives at 3.5 Main St. in Springfield!",  # not after "Dr." or "St.", nor inside "3.5"
    "Does he?",
    '"Yes."',  # the closing quote stays with its sentence
    "Then a list:",  # a line break ends a stretch
    "- one",
    "- two",
]


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def stretches_of(pieces: list[str], stream: TextStream | None = None) -> list[str]:
    stream = stream or TextStream()
    out = [s for p in pieces for s in stream.feed(p)]
    return out + stream.flush()


def test_a_reply_token_by_token() -> None:
    tokens = [REPLY[i : i + 3] for i in range(0, len(REPLY), 3)]
    assert stretches_of(tokens) == STRETCHES


def test_a_stretch_is_ready_only_once_the_whitespace_after_it_came() -> None:
    stream = TextStream()
    assert stream.feed("It is 3.") == []  # "3." may be "3.5"
    assert stream.feed("5 now. And") == ["It is 3.5 now."]
    assert stream.flush() == ["And"]


def test_later_stretches_end_at_sentences_not_clauses() -> None:
    stream = TextStream()
    assert stream.feed("One two three, four. ") == ["One two three,", "four."]
    assert stream.feed("Five six seven, eight nine") == []
    assert stream.feed(". ") == ["Five six seven, eight nine."]


def test_flush_starts_a_new_reply_whose_first_clause_is_cut_again() -> None:
    stream = TextStream()
    assert stream.feed("First reply here, it goes on. ") == ["First reply here,", "it goes on."]
    assert stream.flush() == []
    assert stream.feed("Second reply here, more. ") == ["Second reply here,", "more."]


def test_a_long_run_without_a_sentence_end_is_cut() -> None:
    stream = TextStream(max_chars=40)
    words = " ".join(["word"] * 30)
    out = stream.feed("Start: " + words) + stream.flush()
    assert all(len(s) <= 41 for s in out) and len(out) > 3
    assert " ".join(out).split() == ("Start: " + words).split()


def test_one_huge_word_is_cut_at_the_limit() -> None:
    stream = TextStream(max_chars=10)
    assert stream.feed("x" * 25) == ["x" * 10, "x" * 10]
    assert stream.flush() == ["x" * 5]


def test_max_chars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        TextStream(max_chars=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
def test_how_the_text_is_split_into_pieces_does_not_matter(cuts: list[int]) -> None:
    assert stretches_of(pieces_of(REPLY, cuts)) == STRETCHES


LATIN = "ab .,!?;:\n\"')(—…3"
CJK = "あ今日 。、！？」『』a.,\n"  # full-width marks among others


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([LATIN, CJK]).flatmap(lambda marks: st.text(alphabet=st.sampled_from(list(marks)), max_size=300)),
    st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_every_character_lands_in_exactly_one_stretch(text: str, cuts: list[int]) -> None:
    """Also how the text is split into pieces does not matter, for ASCII marks and for full-width ones."""
    stretches = stretches_of(pieces_of(text, cuts), TextStream(max_chars=50))
    assert all(s and s == s.strip() for s in stretches)
    assert "".join(stretches).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    assert stretches == stretches_of([text], TextStream(max_chars=50))


def test_chinese_and_japanese_sentences_end_without_a_space() -> None:
    """A full-width sentence end needs no space after it (none comes): the next character that is not a mark
    settles it, so a closing bracket stays with its sentence; a first clause may end at a full-width comma."""
    stream = TextStream()
    assert stream.feed("こんにちは。") == []  # a closing bracket may follow
    assert stream.feed("今日は") == ["こんにちは。"]
    assert stream.feed("いい天気ですね。また") == ["今日はいい天気ですね。"]
    assert stream.feed("明日、会いましょう。") == []
    assert stream.flush() == ["また明日、会いましょう。"]
    assert stretches_of(["彼は「こんにちは。", "」と言った。そして"]) == [
        "彼は「こんにちは。」",
        "と言った。",
        "そして",
    ]
    assert stretches_of(["今日はとても良い天気ですね、散歩に", "行きましょう。"]) == [
        "今日はとても良い天気ですね、",
        "散歩に行きましょう。",
    ]
    assert stretches_of(["你好，世界。今天", "很好。"]) == [
        "你好，世界。",
        "今天很好。",
    ]  # "你好" is too short a clause
