"""Text normalization for word error rates: both sides of a comparison go through :func:`normalize`.

Speech recognisers write what they hear in their own style ("$5", "five dollars", "5 dollars"; "3:30 p.m.";
"don't" / "do not"), so a reference and a transcript are only comparable once both are put in one canonical
form. The form chosen here is lower-case words with every number spelled out:

- numbers become words: integers, decimals ("3.14" -> "three point one four"), ordinals ("21st"), negatives,
  thousands separators, decades ("1990s"), times ("3:30" -> "three thirty", "10:05" -> "ten oh five"),
  currency ("$1,250.50" -> "one thousand two hundred fifty dollars fifty cents", "$2 million"), percent;
- spelled-out numbers are made to agree with that style ("one hundred and five" -> "one hundred five");
- contractions are expanded ("don't" -> "do not", "we're" -> "we are"); a possessive or "it's" loses its
  apostrophe;
- hyphens split words, punctuation goes, accents are stripped, a few spellings and abbreviations are made one
  ("Mr." -> "mister", "colour" -> "color", "OK" -> "okay").

The approach follows Whisper's ``EnglishTextNormalizer`` (which goes the other way, words to digits); the code
and its rules are ours, and ``tests/measure/test_normalize.py`` pins them down case by case.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from num2words import num2words

YEAR_DIGITS = 4
YEAR_RANGE = (1100, 2099)  # read as years: "nineteen eighty five", "twenty twenty four", "two thousand five"
MAX_SPELLED_DIGITS = 15  # longer digit strings (phone numbers, ids) are read digit by digit

_DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_SCALE_WORDS = ("hundred", "thousand", "million", "billion", "trillion")
_SMALL_NUMBER_WORDS = frozenset(
    (
        *_DIGIT_WORDS[1:],
        *["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen"],
        "nineteen",
        *["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"],
    )
)
# symbol -> (singular, plural, hundredth singular, hundredth plural)
_CURRENCIES: dict[str, tuple[str, str, str, str]] = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
    "€": ("euro", "euros", "cent", "cents"),
}
_SYMBOLS = {"&": " and ", "%": " percent ", "+": " plus ", "@": " at ", "=": " equals "}

# Whole-word replacements applied after punctuation is gone: abbreviations and variant spellings.
_WORD_MAP: dict[str, str] = {
    "mr": "mister",
    "mrs": "missus",
    "dr": "doctor",
    "jr": "junior",
    "sr": "senior",
    "prof": "professor",
    "vs": "versus",
    "etc": "et cetera",
    "ok": "okay",
    "cannot": "can not",
    "colour": "color",
    "colours": "colors",
    "favourite": "favorite",
    "centre": "center",
    "theatre": "theater",
    "metre": "meter",
    "metres": "meters",
    "kilometre": "kilometer",
    "kilometres": "kilometers",
    "realise": "realize",
    "organise": "organize",
    "grey": "gray",
    "travelling": "traveling",
    "travelled": "traveled",
    "percents": "percent",
    "oclock": "",
}
_ORDINAL_SUFFIX = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_CONTRACTIONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\bwon't\b", "will not"),
        (r"\bcan't\b", "can not"),
        (r"\bshan't\b", "shall not"),
        (r"\blet's\b", "let us"),
        (r"n't\b", " not"),
        (r"'re\b", " are"),
        (r"'ll\b", " will"),
        (r"'ve\b", " have"),
        (r"'m\b", " am"),
        (r"'d\b", " would"),
    )
)


# ---- numbers -> words --------------------------------------------------------------------------------------
def integer_words(digits: str) -> str:
    """A string of digits as a cardinal, without commas, hyphens or "and" ("105" -> "one hundred five")."""
    if len(digits) > MAX_SPELLED_DIGITS:
        return " ".join(_DIGIT_WORDS[int(d)] for d in digits)
    words = num2words(int(digits))
    words = words.replace(",", "").replace("-", " ")
    return " ".join(w for w in words.split() if w != "and")


def ordinal_words(digits: str) -> str:
    words = num2words(int(digits), to="ordinal").replace(",", "").replace("-", " ")
    return " ".join(w for w in words.split() if w != "and")


def number_words(digits: str) -> str:
    """A bare integer as people read it: four-digit numbers from 1100 to 2099 as years ("nineteen eighty
    five"), others as cardinals. Recognisers write "1985" for both readings; this matches the likelier one."""
    if len(digits) == len(digits.lstrip("0")) == YEAR_DIGITS and YEAR_RANGE[0] <= int(digits) <= YEAR_RANGE[1]:
        words = num2words(int(digits), to="year").replace(",", "").replace("-", " ")
        return " ".join(w for w in words.split() if w != "and")
    return integer_words(digits)


def decimal_words(integer: str, fraction: str) -> str:
    """ "3", "14" -> "three point one four" (each fractional digit read out, trailing zeros kept)."""
    return integer_words(integer or "0") + " point " + " ".join(_DIGIT_WORDS[int(d)] for d in fraction)


def _plural_number(words: str) -> str:
    """ "nineteen ninety" -> "nineteen nineties" (for decades written "1990s")."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + "s"


def _money(match: re.Match[str]) -> str:
    one, many, cent, cents = _CURRENCIES[match.group("symbol")]
    amount = match.group("amount").replace(",", "")
    scale = match.group("scale")
    integer, _, fraction = amount.partition(".")
    if scale:  # "$2.5 million" -> "two point five million dollars"
        number = decimal_words(integer, fraction) if fraction else integer_words(integer)
        return f" {number} {scale} {many} "
    parts = []
    if int(integer or "0") or not fraction:
        parts.append(f"{integer_words(integer or '0')} {one if integer == '1' else many}")
    if fraction:
        hundredths = int((fraction + "0")[:2])
        if hundredths:
            parts.append(f"{integer_words(str(hundredths))} {cent if hundredths == 1 else cents}")
    return " " + " ".join(parts) + " "


def _time(match: re.Match[str]) -> str:
    hour, minute = match.group(1), int(match.group(2))
    words = integer_words(hour)
    if minute == 0:
        return words
    if minute < 10:
        return f"{words} oh {_DIGIT_WORDS[minute]}"
    return f"{words} {integer_words(str(minute))}"


_NUMBER_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (
        re.compile(
            r"(?P<symbol>[$£€])\s?(?P<amount>\d[\d,]*(?:\.\d+)?)"
            r"(?:\s*(?P<scale>thousand|million|billion|trillion)\b)?"
        ),
        _money,
    ),
    (re.compile(r"(?<=\d),(?=\d{3}\b)"), lambda m: ""),  # thousands separators
    (_ORDINAL_SUFFIX, lambda m: " " + ordinal_words(m.group(1)) + " "),
    (re.compile(r"\b(\d{1,2}):(\d{2})\b"), _time),
    (re.compile(r"\b([ap])\.\s?m\b\.?"), lambda m: m.group(1) + "m"),
    (re.compile(r"\b(\d+)'?s\b"), lambda m: " " + _plural_number(number_words(m.group(1))) + " "),
    (re.compile(r"(?<![\w.])-(?=\d)"), lambda m: " minus "),
    (re.compile(r"(\d*)\.(\d+)"), lambda m: " " + decimal_words(m.group(1), m.group(2)) + " "),
    (re.compile(r"\d+"), lambda m: " " + number_words(m.group(0)) + " "),
)


def spell_numbers(text: str) -> str:
    """Replace every number (money, times, ordinals, decimals, integers) in lower-case ``text`` with words."""
    for pattern, replace in _NUMBER_RULES:
        text = pattern.sub(replace, text)
    return text


def _canonical_number_words(words: list[str]) -> list[str]:
    """Spelled-out numbers as :func:`integer_words` writes them: no "and" after a scale word, "a" -> "one"."""
    out: list[str] = []
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word == "and" and out and out[-1] in _SCALE_WORDS and nxt in _SMALL_NUMBER_WORDS:
            continue
        if word == "a" and nxt in _SCALE_WORDS:
            word = "one"
        out.append(word)
    return out


# ---- text --------------------------------------------------------------------------------------------------
def _strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.translate(_LIGATURES))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


# English letters that are no a-z letter with an accent: written as the letters they stand for
_LIGATURES = str.maketrans({"æ": "ae", "Æ": "Ae", "œ": "oe", "Œ": "Oe"})


def foreign_letters(text: str) -> str:
    """The letters of ``text`` that :func:`normalize` drops: those outside a-z once accents are stripped (Japanese,
    Greek, Cyrillic, "ß"). Text with any is not English, and its error rates would count words it never saw."""

    def foreign(c: str) -> bool:
        return c != "\u02bc" and any(x.isalpha() and not "a" <= x <= "z" for x in _strip_accents(c.lower()))

    return "".join(c for c in unicodedata.normalize("NFKC", text) if foreign(c))  # (ʼ: an apostrophe)


def normalize(text: str) -> str:
    """The canonical form of ``text`` for error rates: lower-case words, numbers spelled, no punctuation."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'").replace("\u02bc", "'")
    text = re.sub(r"[\u2010-\u2015]", "-", text)  # unicode hyphens and dashes
    text = text.lower()
    text = re.sub(r"\[[^\]]*\]", " ", text)  # recogniser annotations like "[music]"
    text = re.sub(r"\bo'clock\b", " ", text)
    text = re.sub(r"\bper cent\b", "percent", text)
    text = spell_numbers(text)
    for symbol, spoken in _SYMBOLS.items():
        text = text.replace(symbol, spoken)
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    text = _strip_accents(text)
    text = text.replace("'", "")  # possessives, "it's" -> "its", quotes
    text = re.sub(r"[^a-z0-9]+", " ", text)  # punctuation and hyphens
    mapped = " ".join(_WORD_MAP.get(w, w) for w in text.split())  # a mapping may give two words or none
    words = mapped.split()
    return " ".join(_canonical_number_words(words))
