"""Text normalization for word error rates, case by case (expectations written by hand)."""

from __future__ import annotations

import pytest

from ggtts.measure.normalize import (
    decimal_words,
    foreign_letters,
    integer_words,
    normalize,
    number_words,
    ordinal_words,
)

CASES = [
    # case and punctuation
    ("Hello, World!", "hello world"),
    ("  What?  Really...  ", "what really"),
    ('"Quoted" (aside) text.', "quoted aside text"),
    # integers, thousands separators, years
    ("3 apples", "three apples"),
    ("105 people", "one hundred five people"),
    ("250,000 people", "two hundred fifty thousand people"),
    ("1,234,567", "one million two hundred thirty four thousand five hundred sixty seven"),
    ("in 1985", "in nineteen eighty five"),
    ("in 2005", "in two thousand five"),
    ("in 2024", "in twenty twenty four"),
    ("the 1990s", "the nineteen nineties"),
    ("the '90s", "the nineties"),
    ("0", "zero"),
    (
        "1234567890123456789",
        "one two three four five six seven eight nine zero one two three four five six seven eight nine",
    ),
    # decimals, negatives, ordinals
    ("3.14", "three point one four"),
    ("0.50", "zero point five zero"),
    ("-5 degrees", "minus five degrees"),
    ("1st, 2nd, 3rd and 21st", "first second third and twenty first"),
    ("the 103rd time", "the one hundred third time"),
    # money and percent
    ("$25", "twenty five dollars"),
    ("$1", "one dollar"),
    ("$12.50", "twelve dollars fifty cents"),
    ("$0.99", "ninety nine cents"),
    ("$1,250.01", "one thousand two hundred fifty dollars one cent"),
    ("$2.5 million", "two point five million dollars"),
    ("£3.20", "three pounds twenty pence"),
    ("€40", "forty euros"),
    ("15%", "fifteen percent"),
    ("15 per cent", "fifteen percent"),
    # times
    ("9:30", "nine thirty"),
    ("10:05 p.m.", "ten oh five pm"),
    ("at 3:00 a.m.", "at three am"),
    ("three o'clock", "three"),
    ("I am here", "i am here"),  # "am" the verb is left alone
    # spelled numbers made to agree
    ("one hundred and five", "one hundred five"),
    ("a hundred people", "one hundred people"),
    ("twenty-five", "twenty five"),
    ("salt and pepper", "salt and pepper"),
    # contractions and apostrophes
    ("don't", "do not"),
    ("I can't and won't", "i can not and will not"),
    ("cannot", "can not"),
    ("we're, you'll, they've, I'm, she'd", "we are you will they have i am she would"),
    ("let's go", "let us go"),
    ("it's John's", "its johns"),
    ("It\u2019s", "its"),
    # hyphens, accents, spellings, abbreviations
    ("well-known", "well known"),
    ("a long\u2014very long\u2014day", "a long very long day"),
    ("café naïve", "cafe naive"),
    ("colour centre grey", "color center gray"),
    ("Mr. and Mrs. Smith", "mister and missus smith"),
    ("Dr. Who", "doctor who"),
    ("OK", "okay"),
    ("cats & dogs", "cats and dogs"),
    ("[Music] hello", "hello"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


# a reference and what a recogniser may write for the same speech: equal once normalized
EQUIVALENT = [
    ("The ticket costs $25.", "the ticket costs twenty-five dollars"),
    ("It was 15% higher.", "It was fifteen percent higher"),
    ("Meet me at 9:30.", "Meet me at nine thirty."),
    ("Dr. Smith lives on the 2nd floor.", "Doctor Smith lives on the second floor"),
    ("I don't know.", "I do not know"),
    ("Born in 1985.", "born in nineteen eighty-five"),
    ("About 3,000 people.", "about three thousand people"),
    ("It's 3 o'clock.", "its 3:00"),
    ("The encyclopædia, donʼt.", "the encyclopaedia don't"),
]


@pytest.mark.parametrize(("reference", "transcript"), EQUIVALENT)
def test_equivalent_writings_agree(reference: str, transcript: str) -> None:
    assert normalize(reference) == normalize(transcript)


def test_number_helpers() -> None:
    assert integer_words("1000") == "one thousand"
    assert integer_words("1985") == "one thousand nine hundred eighty five"
    assert number_words("1985") == "nineteen eighty five"
    assert number_words("3000") == "three thousand"  # outside the year range: a cardinal
    assert number_words("0800") == "eight hundred"  # a leading zero is no year
    assert ordinal_words("12") == "twelfth"
    assert decimal_words("", "5") == "zero point five"


def test_idempotent() -> None:
    for text, _ in CASES:
        once = normalize(text)
        assert normalize(once) == once


@pytest.mark.parametrize(
    ("text", "foreign"),
    [
        ("Hello, World! $5 at 3:30 p.m.", ""),
        ("Café, naïve, résumé; ﬁne", ""),  # accents are stripped, the ligature is two letters
        ("今日は3月1日です。", "今日は月日です"),  # the original letters, not their stripped forms
        ("Straße", "ß"),
        ("An encyclopædia’s Œuvre; donʼt", ""),  # ligatures are their letters, U+02BC an apostrophe
        ("Ωmega and Москва", "ΩМосква"),
    ],
)
def test_foreign_letters_are_those_normalize_drops(text: str, foreign: str) -> None:
    assert foreign_letters(text) == foreign
