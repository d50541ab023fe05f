"""Normalized text traced back to what the user wrote: spans through substitutions, the cursor over G2P tokens,
and the spoken words of each chunk (``$5`` one word said as two, punctuation no word)."""

from __future__ import annotations

import re

import pytest

from ggtts.text.frontend import phonemes_to_chunks, text_to_phoneme_chunks
from ggtts.text.normalize import normalize, normalize_tracked
from ggtts.text.tracking import SourceCursor, Tracked, shown, written_words


def test_a_substitution_gives_its_characters_the_span_it_replaced() -> None:
    tracked = Tracked.of("pay $5 now").sub(re.compile(r"\$(\d)"), lambda m: "five dollars")
    assert tracked.text == "pay five dollars now"
    assert tracked.span(4, 8) == (4, 6)  # "five" comes from "$5"
    assert tracked.span(9, 16) == (4, 6)  # so does "dollars"
    assert tracked.span(17, 20) == (7, 10)  # "now" is itself
    assert tracked.span(0, 3) == (0, 3)


def test_a_replacement_equal_to_its_match_keeps_each_characters_span() -> None:
    base = Tracked.of("ab cd")
    same = base.sub(re.compile(r"\w+"), lambda m: m[0])
    assert same is base
    grown = base.sub(re.compile("cd"), lambda m: "xyz")
    assert (grown.starts, grown.ends) == ([0, 1, 2, 3, 3, 3], [1, 2, 3, 5, 5, 5])


def test_spans_compose_over_several_substitutions() -> None:
    tracked = Tracked.of("a 1 b").sub(re.compile("1"), lambda m: "one").sub(re.compile("one"), lambda m: "uno!")
    assert tracked.text == "a uno! b"
    assert tracked.span(2, 6) == (2, 3)


def test_a_tracked_string_needs_one_span_per_character() -> None:
    with pytest.raises(ValueError, match="one span per character"):
        Tracked("abc", [0, 1], [1, 2])


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith paid $3.50 on 3/15/2024 at 3:45 pm.",
        "  Two   spaces\u00a0and\u2009thin  \n\n next   paragraph \n line ",
        "Call +1 (555) 123-4567 or mail me@example.com, see [Kokoro](/kˈOkəɹO/) v1.2.3.",
        "It's \u22125°C, 20% off, the 1990s, 5-10 km, No. 7 vs #8.",
        "# A *title*\n- **$5** [off](https://x.com)\n| a | b |\n<b>x</b> &amp; `y`",
    ],
)
def test_every_normalized_character_comes_from_a_span_of_the_text(text: str) -> None:
    tracked = normalize_tracked(text)
    assert len(tracked.starts) == len(tracked.text) == len(tracked.ends)
    assert all(0 <= s <= e <= len(text) for s, e in zip(tracked.starts, tracked.ends, strict=True))


def test_normalize_stays_linear_on_blank_lines_and_links() -> None:
    """Stripping the text's ends and joining the pieces between markdown links each take one pass."""
    from time_limit import time_limit

    with time_limit(5):
        assert normalize("Hello." + "\n" * 80_000 + "Bye.") == "Hello." + "\n" * 80_000 + "Bye."
        assert normalize("[x](/ɛks/) 5 " * 8_000).startswith("[x](/ɛks/) five [x](/ɛks/) five")


def test_the_cursor_finds_each_tokens_written_words_in_order() -> None:
    source = "“Hi,” he paid $5."
    cursor = SourceCursor(normalize_tracked(source), source)
    assert written_words(source) == [(0, 5), (6, 8), (9, 13), (14, 17)]
    found = [cursor.locate(t) for t in ["“", "Hi", ",", "”", "he", "paid", "five", "dollars", "."]]
    assert [w.text if w else None for w in found] == ["Hi", "Hi", "Hi", "Hi", "he", "paid", "$5", "$5", "$5"]
    assert [w.first if w else None for w in found][-3:] == [3, 3, 3]


def test_a_token_not_in_the_text_is_not_placed_and_does_not_move_the_cursor() -> None:
    cursor = SourceCursor(Tracked.of("one two"), "one two")
    assert cursor.locate("zebra") is None
    assert cursor.locate("") is None
    place = cursor.locate("one")
    assert place is not None and place.text == "one"


def test_shown_words_lose_the_punctuation_around_them_only() -> None:
    assert [shown(w) for w in ["“Hello,”", "don't", "U.S.", "$5", "(5%)", "...", "「こんにちは」"]] == [
        "Hello",
        "don't",
        "U.S",
        "$5",
        "5%",
        "...",
        "こんにちは",
    ]


def _spoken(text: str, max_phonemes: int = 510) -> list[str]:
    return [w.text for chunk in text_to_phoneme_chunks(text, max_phonemes=max_phonemes) for w in chunk.words]


def test_words_inside_markup_are_the_written_words() -> None:
    text = "## The *plan*\n- I like **two words** and ~~that~~\n- <b>Costs</b> **$5**"
    assert _spoken(text) == ["The", "plan", "I", "like", "two", "words", "and", "that", "<b>Costs</b>", "$5"]


def test_the_spoken_words_are_the_written_words() -> None:
    text = "The “quick” brown fox — it's 5 years old — paid $5.50 for 3 apples on March 5, 2024!"
    expected = ["The", "quick", "brown", "fox", "it's", "5", "years", "old", "paid", "$5.50", "for", "3"]
    expected += ["apples", "on", "March 5", "2024"]  # "March 5" is one date: read as a whole, one word here
    assert _spoken(text) == expected


def test_a_word_cut_by_a_chunk_boundary_is_the_same_word_on_both_sides() -> None:
    """A long number is one written word said in many tokens; cut across chunks, each part keeps its source."""
    chunks = list(text_to_phoneme_chunks("I paid $1,234,567.89 today.", max_phonemes=40))
    assert len(chunks) > 2
    words = [w for c in chunks for w in c.words]
    assert {w.text for w in words} == {"I", "paid", "$1,234,567.89", "today"}
    number = [w for w in words if w.text == "$1,234,567.89"]
    assert len(number) > 1 and len({w.source for w in number}) == 1
    assert all(w.text for w in words)


def test_a_single_token_longer_than_a_chunk_keeps_its_text_in_every_part() -> None:
    chunks = list(text_to_phoneme_chunks("a supercalifragilisticexpialidocious day", max_phonemes=12))
    words = [w for c in chunks for w in c.words]
    assert all(w.text for w in words)
    long = [w for w in words if w.text == "supercalifragilisticexpialidocious"]
    assert len(long) > 1 and len({w.source for w in long}) == 1


def test_words_are_not_lost_or_repeated_across_chunks() -> None:
    text = " ".join(f"word{i}, and more." for i in range(40))
    words = _spoken(text, max_phonemes=40)
    assert words == [w for i in range(40) for w in (f"word{i}", "and", "more")]


def test_a_word_ending_a_sentence_says_so() -> None:
    [chunk] = text_to_phoneme_chunks("One two. Three?")
    assert [(w.text, w.ends_sentence) for w in chunk.words] == [("One", False), ("two", True), ("Three", True)]


def test_phoneme_input_words_are_the_phoneme_words() -> None:
    [chunk] = phonemes_to_chunks("həlˈO wˈɜɹld, hˈI.")
    assert [w.text for w in chunk.words] == ["həlˈO", "wˈɜɹld", "hˈI"]


def test_a_bracket_opened_or_closed_inside_a_word_keeps_its_partner() -> None:
    words = ["file(s)", "file(s),", "(file(s))", "f(x).", "(a)b", "[1]st", "(5%)", "「今日(きょう)」", "x)"]
    expected = ["file(s)", "file(s)", "file(s)", "f(x)", "(a)b", "[1]st", "5%", "今日(きょう)", "x"]
    assert [shown(w) for w in words] == expected
