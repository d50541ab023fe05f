"""English number words for any size of integer, plus decimals read digit by digit ("three point one four").

Unlike llama.cpp's ``number_to_words`` (``std::stoi``: numbers of 2^31 and more are dropped), integers of any
length
are read: with scale words up to decillions (10^33), and digit by digit beyond that.
"""

from __future__ import annotations

import re

ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
SCALES = (
    "",
    "thousand",
    "million",
    "billion",
    "trillion",
    "quadrillion",
    "quintillion",
    "sextillion",
    "septillion",
    "octillion",
    "nonillion",
    "decillion",
)
MAX_SCALED_DIGITS = 3 * len(SCALES)  # 36 digits: longer numbers are read digit by digit
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def _below_thousand(n: int) -> str:
    words: list[str] = []
    if n >= 100:
        words += [ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else ""))
    elif n:
        words.append(ONES[n])
    return " ".join(words)


def digits_to_words(digits: str) -> str:
    return " ".join(ONES[int(d)] for d in digits)


def integer_to_words(n: int) -> str:
    if n < 0:
        return "minus " + integer_to_words(-n)
    if n == 0:
        return ONES[0]
    if len(str(n)) > MAX_SCALED_DIGITS:
        return digits_to_words(str(n))
    groups: list[str] = []
    scale = 0
    while n:
        n, chunk = divmod(n, 1000)
        if chunk:
            groups.append(_below_thousand(chunk) + (f" {SCALES[scale]}" if SCALES[scale] else ""))
        scale += 1
    return " ".join(reversed(groups))


def number_to_words(text: str) -> str:
    """``"1,234.05"`` -> ``"one thousand two hundred thirty-four point zero five"``."""
    whole, _, frac = text.replace(",", "").partition(".")
    words = integer_to_words(int(whole))
    return f"{words} point {digits_to_words(frac)}" if frac else words


def replace_numbers(text: str) -> str:
    return NUMBER.sub(lambda m: number_to_words(m.group()), text)
