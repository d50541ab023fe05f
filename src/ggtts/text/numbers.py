"""Numbers as English words: cardinals, ordinals, decimals, years, decades, digit strings, fractions.

American English leaves out the "and" inside numbers ("one hundred five"); British English keeps it
("one hundred and five"). Every function takes ``british`` for that reason.
"""

from __future__ import annotations

import re

from num2words import num2words

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# How a zero is read inside a digit string (phone numbers, codes) and inside years ("nineteen oh five").
ZERO_IN_DIGIT_STRING = "oh"
# Whole numbers up to "nine hundred ninety-nine decillion ..." are read with scale words; longer ones digit by
# digit (num2words overflows a little beyond, and nobody says "undecillion"). It also keeps every int() here
# far below Python's 4300-digit conversion limit.
MAX_SCALED_DIGITS = 36

# Denominators read with a special word instead of the ordinal ("half", not "second").
_FRACTION_DENOMINATORS = {2: ("half", "halves"), 4: ("quarter", "quarters")}

_AND = re.compile(r"\band\b ?")


def _tidy(words: str, british: bool) -> str:
    """num2words writes "one thousand, two hundred and five": drop its commas, and "and" for American."""
    words = words.replace(",", "")
    if not british:
        words = _AND.sub("", words)
    return " ".join(words.split())


def _too_long(n: int) -> bool:
    return abs(n) >= 10**MAX_SCALED_DIGITS


def cardinal(n: int, *, british: bool = False) -> str:
    """``-1205`` -> "minus one thousand two hundred five" (British: "... two hundred and five").

    Beyond :data:`MAX_SCALED_DIGITS` digits, the digits one by one.
    """
    words = digits(str(abs(n)), zero="zero") if _too_long(n) else _tidy(num2words(abs(n)), british)
    return f"minus {words}" if n < 0 else words


def ordinal(n: int, *, british: bool = False) -> str:
    """``22`` -> "twenty-second"; beyond :data:`MAX_SCALED_DIGITS` digits, the digits then "th"."""
    if _too_long(n):
        return f"{digits(str(n), zero='zero')} th"
    return _tidy(num2words(n, to="ordinal"), british)


def whole(text: str, *, british: bool = False) -> str:
    """A written whole number of any length, ``"1,000,000"`` or 5000 digits, as a cardinal (or digit by digit
    when longer than :data:`MAX_SCALED_DIGITS`); characters other than digits are ignored."""
    bare = "".join(c for c in text if c.isdecimal())
    if not bare:
        return ""
    if len(bare.lstrip("0")) > MAX_SCALED_DIGITS:
        return digits(bare, zero="zero")
    return cardinal(int(bare), british=british)


def whole_ordinal(text: str, *, british: bool = False) -> str:
    """``"1,000th"``'s number part, ``"1,000"``, as an ordinal, whatever its length."""
    bare = "".join(c for c in text if c.isdecimal())
    if len(bare.lstrip("0")) > MAX_SCALED_DIGITS:
        return f"{digits(bare, zero='zero')} th"
    return ordinal(int(bare or "0"), british=british)


def digits(text: str, *, zero: str = ZERO_IN_DIGIT_STRING) -> str:
    """``"0451"`` -> "oh four five one": each digit of ``text`` on its own; other characters are skipped."""
    return " ".join(zero if c == "0" else DIGIT_WORDS[int(c)] for c in text if c.isdecimal())


def decimal(text: str, *, british: bool = False) -> str:
    """A written number, possibly with thousands commas, sign and decimals: ``"-1,234.05"``, ``".5"``.

    The integer part is read as a cardinal and the decimals digit by digit: "minus one thousand two hundred
    thirty-four point zero five"; ``".5"`` is "point five".
    """
    text = text.replace(",", "")
    negative = text.startswith("-")
    integer, _, fraction = text.lstrip("+-").partition(".")
    parts = []
    if integer:
        parts.append(whole(integer, british=british))
    if fraction:
        parts.append("point " + digits(fraction, zero="zero"))
    words = " ".join(parts)
    return f"minus {words}" if negative else words


def is_singular(text: str) -> bool:
    """Whether a written amount takes a singular unit: "1 km", "-1 °C" but "1.5 km", "0 km", "1.0 km"."""
    return text.lstrip("+-") == "1"


def year(n: int, *, british: bool = False) -> str:
    """A four-digit year as people say it: 1999 "nineteen ninety-nine", 1905 "nineteen oh five",
    1900 "nineteen hundred", 2000 "two thousand", 2005 "two thousand five", 2024 "twenty twenty-four".

    Numbers outside 1000..9999 are read as cardinals.
    """
    if not 1000 <= n <= 9999:
        return cardinal(n, british=british)
    century, rest = divmod(n, 100)
    if rest == 0:
        if century % 10 == 0:  # 1000, 2000
            return cardinal(n, british=british)
        return f"{cardinal(century)} hundred"
    if century % 10 == 0 and rest < 10:  # 2001..2009: "two thousand five"
        return cardinal(n, british=british)
    return pairs(n)


def pairs(n: int) -> str:
    """A number said as two pairs of digits (a model's number, a time in hours): 4090 "forty ninety", 9001 "ninety oh
    one", 1200 "twelve hundred", 805 "eight oh five", 5 "zero oh five"."""
    high, low = divmod(n, 100)
    if not low:
        return f"{cardinal(high)} hundred"
    if low < 10:
        return f"{cardinal(high)} {ZERO_IN_DIGIT_STRING} {cardinal(low)}"
    return f"{cardinal(high)} {cardinal(low)}"


def _plural(word: str) -> str:
    return word[:-1] + "ies" if word.endswith("y") else word + "s"


def decade(n: int, *, british: bool = False) -> str:
    """A decade written as its first year: 1990 "nineteen nineties", 2010 "twenty tens", 80 "eighties"."""
    words = year(n, british=british) if n >= 1000 else cardinal(n, british=british)
    head, _, last = words.rpartition(" ")
    return f"{head} {_plural(last)}" if head else _plural(last)


def fraction(numerator: int, denominator: int, *, british: bool = False) -> str:
    """``1/2`` -> "one half", ``3/4`` -> "three quarters", ``2/3`` -> "two thirds"."""
    top = cardinal(numerator, british=british)
    singular, plural = _FRACTION_DENOMINATORS.get(denominator, (ordinal(denominator, british=british), ""))
    if abs(numerator) == 1:
        return f"{top} {singular}"
    return f"{top} {plural or _plural(singular)}"
