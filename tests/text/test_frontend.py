"""The frontend a Kokoro pipeline calls: normalize -> G2P -> chunk -> vocabulary filter, on real text."""

from __future__ import annotations

import pytest

pytest.importorskip("misaki")
pytest.importorskip("espeakng_loader")

from ggtts.errors import InputError
from ggtts.text.frontend import text_to_phoneme_chunks
from ggtts.text.normalize import AS_WRITTEN, Normalization, normalize

pytestmark = pytest.mark.slow  # loads spaCy and misaki's lexicons once (several seconds)

PARAGRAPH = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of "
    "Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair. "
    "On March 3rd, 2024, Dr. Smith paid $3.50 for 2 coffees at 10am; then, without the slightest "
    "hesitation, she walked 5 km to the station — where the 4:15 pm train, delayed as usual, waited for "
    "1,234 impatient passengers. Pneumonoultramicroscopicsilicovolcanoconiosis is a long word! Is it? "
    "Yes... We had everything before us, we had nothing before us, we were all going direct to Heaven, "
    "we were all going direct the other way (in short, the period was so far like the present period) "
)
LONG_TEXT = PARAGRAPH * 3


@pytest.mark.parametrize("limit", [510, 120, 40, 12])
def test_long_text_invariants(limit: int) -> None:
    chunks = list(text_to_phoneme_chunks(LONG_TEXT, "a", limit))
    assert chunks
    assert all(0 < len(c.phonemes) <= limit for c in chunks)
    # Every word of the normalized text is in exactly one chunk, in order: none lost, none repeated.
    assert " ".join(c.text for c in chunks).split() == normalize(LONG_TEXT).split()


def test_chunks_end_at_sentences_when_they_can() -> None:
    chunks = list(text_to_phoneme_chunks(LONG_TEXT, "a", 510))
    assert len(chunks) > 3
    # A 510-phoneme chunk holds several sentences, so every chunk but the last ends one.
    assert all(c.text[-1] in ".!?" for c in chunks[:-1])


def test_a_clause_split_happens_at_a_comma() -> None:
    chunks = list(text_to_phoneme_chunks(PARAGRAPH.split(". ")[0] + ".", "a", 120))
    assert len(chunks) > 1
    assert all(c.text.endswith((",", ".")) for c in chunks)


def test_paragraphs_are_never_joined() -> None:
    chunks = list(text_to_phoneme_chunks("First paragraph.\n\nSecond paragraph.", "a"))
    assert [c.text for c in chunks] == ["First paragraph.", "Second paragraph."]


def test_text_is_normalized_before_g2p() -> None:
    (chunk,) = text_to_phoneme_chunks("It costs $5.", "a")
    assert chunk.text == "It costs five dollars."
    assert "fˈIv dˈɑləɹz" in chunk.phonemes


def test_normalization_switches_reach_the_g2p() -> None:
    (full,) = text_to_phoneme_chunks("It is 2 GB.", "a")
    (no_units,) = text_to_phoneme_chunks("It is 2 GB.", "a", normalization=Normalization(units=False))
    assert full.text == "It is two gigabytes." and "ɡˈɪɡəbˌIts" in full.phonemes
    assert no_units.text == "It is two GB." and "ɡˈɪɡə" not in no_units.phonemes
    assert [w.text for w in full.words] == ["It", "is", "2 GB"]
    assert [w.text for w in no_units.words] == ["It", "is", "2", "GB"]


def test_markdown_is_not_read_aloud() -> None:
    asterisk = "ˈæstəɹɹˌɪsk"
    text = "# Plan\nI like **bold** and *italic* words.\n- Fast\n- <b>Cheap</b>"
    (chunk,) = text_to_phoneme_chunks(text, "a")
    assert chunk.text == "Plan. I like bold and italic words. Fast. Cheap."
    assert asterisk not in chunk.phonemes and "hˈæʃ" not in chunk.phonemes
    assert "bˈOld ænd ɪtˈælɪk wˈɜɹdz." in chunk.phonemes and "fˈæst. ʧˈip." in chunk.phonemes
    words = ["Plan", "I", "like", "bold", "and", "italic", "words", "Fast", "<b>Cheap</b>"]
    assert [w.text for w in chunk.words] == words
    (as_written,) = text_to_phoneme_chunks(text, "a", normalization=Normalization(markdown=False))
    assert asterisk in as_written.phonemes


def test_a_markdown_table_reaches_the_normalizer_whole() -> None:
    """The sanitizer cut the rule under a table's header ("|---|---|") to six marks, which no longer read as a
    rule: the chunk's text kept "|---|-"."""
    chunks = list(text_to_phoneme_chunks("| Name | Age |\n|------|:---:|\n| Bob | 5 |", "a"))
    assert [c.text for c in chunks] == ["Name, Age.", "Bob, five."]
    assert [w.text for c in chunks for w in c.words] == ["Name", "Age", "Bob", "5"]


def test_text_as_written_still_chunks_and_traces_its_words() -> None:
    first, second = text_to_phoneme_chunks("  It  is\u00a02 GB.\n\n Next  one. ", "a", normalization=AS_WRITTEN)
    assert first.text == "It is 2 GB." and second.text == "Next one."
    assert [(w.text, w.source) for c in (first, second) for w in c.words] == [
        ("It", 0),
        ("is", 1),
        ("2", 2),
        ("GB", 3),
        ("Next", 4),
        ("one", 5),
    ]


def test_british_and_american() -> None:
    (us,) = text_to_phoneme_chunks("A tomato costs £1.", "en-us")
    (gb,) = text_to_phoneme_chunks("A tomato costs £1.", "en-gb")
    assert us.text == gb.text == "A tomato costs one pound."
    assert us.phonemes != gb.phonemes


def test_vocab_filter_drops_unknown_symbols() -> None:
    vocab = set("ðə kwɪkbɹWnfɑsʤʌmpˈOvəɹlAzidɔɡ")  # no punctuation, no secondary stress
    chunks = list(text_to_phoneme_chunks("The quick brown fox, jumps over the lazy dog!", "a", vocab=vocab))
    assert chunks
    for chunk in chunks:
        assert set(chunk.phonemes) <= vocab
        assert "  " not in chunk.phonemes


@pytest.mark.parametrize("text", ["", "   ", "\n\n", "...", "—"])
def test_nothing_to_say(text: str) -> None:
    assert list(text_to_phoneme_chunks(text, "a")) == []


def test_bad_arguments_are_input_errors() -> None:
    with pytest.raises(InputError, match="language code"):
        list(text_to_phoneme_chunks("Hello.", "xx"))
    with pytest.raises(InputError, match="max_phonemes"):
        list(text_to_phoneme_chunks("Hello.", "a", 0))
