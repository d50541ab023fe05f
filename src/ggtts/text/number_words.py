"""Numbers in running text as English words, for OuteTTS's prompt: integers of any size, decimals digit by digit.

Unlike llama.cpp's ``number_to_words`` (``std::stoi``: numbers of 2^31 and more are dropped), integers of any
length are read: as cardinals (``num2words``, through :mod:`ggtts.text.numbers`) up to decillions, and digit by
digit beyond that.
"""

from __future__ import annotations

import re

from ggtts.text.numbers import digits, whole

NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def number_to_words(text: str) -> str:
    """``"1,234.05"`` -> ``"one thousand two hundred thirty-four point zero five"``."""
    integer, _, frac = text.replace(",", "").partition(".")
    words = whole(integer)
    return f"{words} point {digits(frac, zero='zero')}" if frac else words


def replace_numbers(text: str) -> str:
    return NUMBER.sub(lambda m: number_to_words(m.group()), text)
