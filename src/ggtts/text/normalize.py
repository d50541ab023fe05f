"""English text normalization: turn what is written into the words a speaker says, before G2P.

``normalize("Dr. Smith paid $3.50 on 3/15/2024 at 3:45 pm.")`` gives "Doctor Smith paid three dollars and
fifty cents on March fifteenth, twenty twenty-four at three forty-five PM.". misaki reads some of these forms
on its own, but differently in places (it reads "3:45" as "three:forty-five" with a pause, "St." always as
"Saint"); doing it here keeps the behaviour explicit and tested.

Rules run in a fixed order, each a regular expression and a function of the match; later rules only see what
earlier ones left, so URLs, phone numbers, dates and times are claimed before the plain-number rule.
misaki's markdown-style pronunciation overrides (``[Kokoro](/kˈOkəɹO/)``) pass through untouched.

Before the rules, Markdown and HTML markup is taken away (what an LLM's reply or a pasted document holds): emphasis,
code, headings, quotes, list bullets, links and tags go, their text stays, and entities become their characters
(``**$5** off`` -> "five dollars off", not "asterisk asterisk ..."); see :mod:`ggtts.text.markup`.

The rules come in groups by what they read; :class:`Normalization` turns groups off (markup, e-mail addresses,
URLs, phone numbers, "file(s)", units, leftover symbols), or all of normalization (the text then goes on as
written).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ggtts.errors import InputError
from ggtts.runtime.cancel import check_cancelled
from ggtts.text import numbers
from ggtts.text.lexicon import Lexicon
from ggtts.text.markup import plain_text, strip_markup
from ggtts.text.tracking import Tracked
from ggtts.text.words import (
    ABBREVIATIONS,
    ALWAYS_TITLES,
    CURRENCIES,
    MONTH_NUMBERS,
    MONTHS,
    SCALES,
    SYMBOLS,
    TEMPERATURE_SCALES,
    TITLES,
    UNITS,
    URL_SEPARATORS,
)

Speaker = Callable[[re.Match[str], bool], str]
Rule = tuple[re.Pattern[str], Speaker]


@dataclass(frozen=True)
class Normalization:
    """Which groups of rules :func:`normalize` runs: all of them by default. ``enabled=False`` runs none (not even
    the tidying of spaces): the text is left exactly as written. The field names say what each group reads."""

    enabled: bool = True
    # "**bold**" -> "bold", "# Title" -> "Title.", "[docs](https://…)" -> "docs", "&amp;" -> "&", "✅ Done" -> "Done"
    markdown: bool = True
    emails: bool = True  # "john.doe@example.com" -> "john dot doe at example dot com"
    urls: bool = True  # "https://example.com/docs" -> "example dot com slash docs"
    phones: bool = True  # "(555) 123-4567" -> "five five five, one two three, four five six seven"
    plurals: bool = True  # "file(s)" -> "files"
    units: bool = True  # "5 km" -> "five kilometers", "2 GB" -> "two gigabytes", "20°C" -> "twenty degrees Celsius"
    symbols: bool = True  # symbols left over: "&" -> "and", "+" -> "plus", "=" -> "equals", "°" -> "degrees"


NORMALIZE_ALL = Normalization()
AS_WRITTEN = Normalization(enabled=False)


def normalization_switches(value: Normalization | bool) -> Normalization:
    """A family's ``normalization`` option as switches: ``True`` all of them, ``False`` none (the text as written),
    or the :class:`Normalization` given; an InputError for anything else."""
    if isinstance(value, bool):
        return NORMALIZE_ALL if value else AS_WRITTEN
    if not isinstance(value, Normalization):
        raise InputError(
            f"normalization must be true, false or a ggtts.text.normalize.Normalization, got {type(value).__name__}"
        )
    return value


def unmarked(text: str, normalization: Normalization | bool) -> str:
    """The text of a family that reads its input as written (no English rules), its Markdown, HTML and decorative
    emoji taken away (:func:`ggtts.text.markup.plain_text`) unless ``normalization`` turns that off."""
    switches = normalization_switches(normalization)
    return plain_text(text) if switches.enabled and switches.markdown else text


# A written amount without sign: "1,234.5", "12", ".5".
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
# Not glued to a word, a decimal point or a thousands comma on the left.
_START = r"(?<![\w.,])"
_YEAR_RANGE = range(1100, 2100)  # four-digit numbers in this range are read as years ("nineteen ninety-nine")
_MAX_CARDINAL_DIGITS = 9  # longer digit strings without commas are IDs, read digit by digit
_MAX_FRACTION_DENOMINATOR = 10  # "3/4" is "three quarters"; "3/15" is read "three fifteen"
_SENTENCE_GOES_ON = re.compile(r"\s+[A-Z\"“‘'(]")
_TEXT_ENDS = re.compile(r"\s*\Z")
_NAME_FOLLOWS = re.compile(r"\s+[A-Z]")
_SENTENCE_ENDS = (".", "!", "?", ":")
_CLAUSE_ENDS = r"(?:\s*[.,;:!?)]|\s*$)"
_EQUALS_FOLLOWS = re.compile(r"\s*=")
# words that go on from a time ("8 p.m. EST", "9 a.m. Monday through Friday"): no sentence ends before them
_TIME_WORD_FOLLOWS = re.compile(
    r"\s+(?:(?:[ECMP][SD]?T|UTC|GMT|BST|CET|CEST|IST|JST|AEST|AEDT)\b(?!\s+[a-z])|"
    r"(?:Pacific|Eastern|Central|Mountain|Atlantic)\s+(?:[Tt]ime|Standard|Daylight)\b|"
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\s*(?:through|thru|to|and|[-–,])"
    r"|(?:[ECMP][SD]?T|UTC|GMT)\s+(?:on|to|until|and|every|each|sharp)\b)"
)
_EQUALS_BEFORE = re.compile(r"=\s*\Z")
_OF_FOLLOWS = re.compile(r"\s+of\b")
_PHONE_CUE_CHARS = 40  # how far before a seven-digit number a word about phoning is looked for
_PHONE_CUE = re.compile(
    r"\b(?:call|calls|called|calling|phone|telephone|tel|dial|fax|text|mobile|cell|reach|contact|ring|number|"
    r"no|extension|ext)\b\.?[^.!?\n]*\Z",
    re.IGNORECASE,
)
_THE_BEFORE = re.compile(r"\bthe\s+\Z", re.IGNORECASE)
# How far back a title looks for the two words before it (a look at its context that stays short, so text of
# any length is read in linear time; a longer word is seen by its end, which is what decides).
_LOOK_BACK = 80
# misaki's syntax for a pronunciation override, kept away from the rules.
_MARKDOWN_LINK = re.compile(r"\[[^\[\]]+\]\([^()\s]*\)")  # brackets and parens excluded inside: linear


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


def _ends_sentence(text: str, end: int) -> bool:
    """Whether the period ending at ``end`` may also close a sentence: end of text or a capital follows."""
    return bool(_TEXT_ENDS.match(text, end) or _SENTENCE_GOES_ON.match(text, end))


def _kept_period(m: re.Match[str], written: bool) -> str:
    """The period a match took, written back where it also ends the sentence ("It weighs 5 lb." keeps it, "5 lb. of"
    does not): ``written``, whether the match holds one."""
    return "." if written and _ends_sentence(m.string, m.end()) else ""


def say_number(written: str, *, british: bool = False) -> str:
    """A written number in words, choosing how a speaker would read it.

    "007" -> "oh oh seven" (leading zero: a code), "1999" -> "nineteen ninety-nine" (a year),
    "1234567890" -> digit by digit (an ID),
    "-1,234.5" -> "minus one thousand two hundred thirty-four point five".
    """
    bare = written.lstrip("+-")
    if bare.isdigit() and len(bare) > 1 and bare.startswith("0"):
        return numbers.digits(bare)
    if written.isdigit() and len(written) == 4 and int(written) in _YEAR_RANGE:
        return numbers.year(int(written), british=british)
    if written.isdigit() and len(written) > _MAX_CARDINAL_DIGITS:
        return numbers.digits(written)
    return numbers.decimal(written, british=british)


# --- URLs, e-mail, phone numbers -------------------------------------------------------------------------

_URL_PIECE = re.compile(r"[A-Za-z]+|\d+|.", re.DOTALL)


def _say_address(address: str) -> str:
    """Read an address: "www.example.com/a-b" -> "w w w dot example dot com slash a dash b"."""
    spoken = []
    for piece in _URL_PIECE.findall(address):
        if piece.isdigit():
            spoken.append(numbers.digits(piece, zero="zero"))
        elif piece.lower() == "www":
            spoken.append("w w w")
        elif piece.isalpha():
            spoken.append(piece)
        elif piece in URL_SEPARATORS:
            spoken.append(URL_SEPARATORS[piece])
    return " ".join(spoken)


def _email(m: re.Match[str], british: bool) -> str:
    return f"{_say_address(m[1])} at {_say_address(m[2])}"


def _url(m: re.Match[str], british: bool) -> str:
    url = m[0]
    trailing = len(url) - len(url.rstrip(".,;:!?"))
    url, tail = url[: len(url) - trailing], url[len(url) - trailing :]
    url = re.sub(r"^[a-z]+://", "", url, flags=re.IGNORECASE).rstrip("/")
    return _say_address(url) + tail


def _local_phone(m: re.Match[str], british: bool) -> str:
    """ "Call 555-1234" is a phone number: where a word about phoning comes shortly before it in its sentence.
    Elsewhere "476-1453", "512-4096 tokens" are ranges, left to the number rules."""
    if not _PHONE_CUE.search(m.string, max(0, m.start() - _PHONE_CUE_CHARS), m.start()):
        return m[0]
    return f"{numbers.digits(m[1])}, {numbers.digits(m[2])}"


def _phone(m: re.Match[str], british: bool) -> str:
    text = m[0]
    groups = [numbers.digits(g) for g in re.findall(r"\d+", text)]
    spoken = ", ".join(groups)
    return f"plus {spoken}" if text.startswith("+") else spoken


# --- dates and times ---------------------------------------------------------------------------------------

_MONTH_NAMES = _alternation(list(MONTH_NUMBERS))
_DAYS_TO = r"(?:\s?[-–]\s?(\d{1,2})(?:st|nd|rd|th)?)?"  # the last day of a range ("Jan 5-7", "5th-7th May")


def _say_date(month: int, day: int, year: str | None, british: bool) -> str:
    """US "March fifteenth, twenty twenty-four"; British "the fifteenth of March, twenty twenty-four"."""
    name, nth = MONTHS[month - 1], numbers.ordinal(day, british=british)
    spoken = f"the {nth} of {name}" if british else f"{name} {nth}"
    if year is None:
        return spoken
    if len(year) == 4:
        year_words = numbers.year(int(year), british=british)
    else:  # "3/15/24": the century is not written, so it is not said ("twenty-four", "oh five")
        year_words = numbers.digits(year) if year.startswith("0") else numbers.cardinal(int(year))
    return f"{spoken}, {year_words}"


def _valid_date(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def _iso_date(m: re.Match[str], british: bool) -> str:
    year, month, day = m[1], int(m[2]), int(m[3])
    return _say_date(month, day, year, british) if _valid_date(month, day) else m[0]


def _slash_date(m: re.Match[str], british: bool) -> str:
    first, second, year = int(m[1]), int(m[2]), m[3]
    month, day = (second, first) if british else (first, second)
    if not _valid_date(month, day):
        month, day = day, month  # "15/3/2024" in American text is still unambiguous
    return _say_date(month, day, year, british) if _valid_date(month, day) else m[0]


def _month_day(m: re.Match[str], british: bool) -> str:
    month, day, last = MONTH_NUMBERS[m[1]], int(m[2]), int(m[3] or m[2])
    if not (_valid_date(month, day) and _valid_date(month, last)):
        return m[0]
    nth = numbers.ordinal(day, british=british)
    if m[3]:  # "Jan 5-7": "January fifth to seventh"
        nth += f" to {'the ' if british else ''}{numbers.ordinal(last, british=british)}"
    return f"{MONTHS[month - 1]} the {nth}" if british else f"{MONTHS[month - 1]} {nth}"


def _day_month(m: re.Match[str], british: bool) -> str:
    day, last, month = int(m[1]), int(m[2] or m[1]), MONTH_NUMBERS[m[3]]
    if not (_valid_date(month, day) and _valid_date(month, last)):
        return m[0]
    period = _kept_period(m, bool(m[4]))
    the = "" if _THE_BEFORE.search(m.string, max(0, m.start() - 8), m.start()) else "the "  # "on the 5th of May"
    days = numbers.ordinal(day, british=british)
    if m[2]:  # "5-7 Jan": "the fifth to the seventh of January"
        days += f" to the {numbers.ordinal(last, british=british)}"
    return f"{the}{days} of {MONTHS[month - 1]}{period}"


def _meridiem(m: re.Match[str], letter: str | None) -> str:
    """Say "AM"/"PM", keeping a written final period that also ends the sentence.

    Upper case without periods: misaki spells "AM" out (it would read "am" as the verb), and a sentence-final
    "p.m." would otherwise swallow the sentence's period or leave two ("p.m..").
    """
    if letter is None:
        return ""
    goes_on = _TIME_WORD_FOLLOWS.match(m.string, m.end()) is not None  # "8 p.m. EST", "9 a.m. Monday"
    period = _kept_period(m, m[0].endswith(".") and not goes_on)
    return f" {letter.upper()}M{period}"


def _clock(m: re.Match[str], british: bool) -> str:
    hour, minute, second, letter = int(m[1]), int(m[2]), m[3], m[4]
    if minute > 59 or hour > (12 if letter else 24) or (second is not None and int(second) > 59):
        return m[0]
    words = numbers.cardinal(hour, british=british)
    if minute == 0 and not letter:
        words += " o'clock" if hour <= 12 else " hundred"  # "fourteen hundred"
    elif 0 < minute < 10:
        words += f" {numbers.ZERO_IN_DIGIT_STRING} {numbers.cardinal(minute)}"
    elif minute:
        words += " " + numbers.cardinal(minute, british=british)
    if second is not None and int(second):
        unit = "second" if int(second) == 1 else "seconds"
        words += f" and {numbers.cardinal(int(second), british=british)} {unit}"
    return words + _meridiem(m, letter) + (" to " if m[5] else "")


def _hour_meridiem(m: re.Match[str], british: bool) -> str:
    hour = int(m[1])
    if not 1 <= hour <= 12:
        return m[0]
    return numbers.cardinal(hour, british=british) + _meridiem(m, m[2]) + (" to " if m[3] else "")


def _hour_minute(hour: int, minute: int, british: bool) -> str:
    """A time on a twelve-hour clock: "nine", "nine oh five", "nine thirty"."""
    words = numbers.cardinal(hour, british=british)
    if 0 < minute < 10:
        return f"{words} {numbers.ZERO_IN_DIGIT_STRING} {numbers.cardinal(minute)}"
    return f"{words} {numbers.cardinal(minute, british=british)}" if minute else words


def _hours_range(m: re.Match[str], british: bool) -> str:
    """The start of a range of hours whose end says AM or PM ("9-10 am", "9:30-11 pm"): "nine to", "nine thirty to"
    (the end's own rule reads it)."""
    hour, minute = int(m[1]), int(m[2] or 0)
    if not 1 <= hour <= 12 or minute > 59:
        return m[0]
    return _hour_minute(hour, minute, british) + " to "


def _feet_inches(m: re.Match[str], british: bool) -> str:
    feet, inches = int(m[1]), int(m[2])
    foot = "foot" if feet == 1 else "feet"
    inch = "inch" if inches == 1 else "inches"
    period = _kept_period(m, m[0].endswith("."))
    return f"{numbers.cardinal(feet)} {foot} {numbers.cardinal(inches)} {inch}{period}" if inches < 12 else m[0]


def _duration(*units: str) -> Speaker:
    """The reading of an amount of each of ``units`` in turn ("1h 23m 45s", "3h 20m", "1m 30s"): each amount and
    its unit, those after the first at most 59."""

    def speak(m: re.Match[str], british: bool) -> str:
        amounts = [int(g) for g in m.groups()]
        if any(n > 59 for n in amounts[1:]):
            return m[0]
        said = [
            f"{numbers.cardinal(n, british=british)} {unit}{'s' * (n != 1)}"
            for n, unit in zip(amounts, units, strict=True)
        ]
        return " ".join(said) + _kept_period(m, m[0].endswith("."))

    return speak


def _dotted_clock(m: re.Match[str], british: bool) -> str:
    hour, minute = int(m[1]), int(m[2])
    if not 1 <= hour <= 12 or minute > 59:
        return m[0]
    return _hour_minute(hour, minute, british) + _meridiem(m, m[3])


def _military(m: re.Match[str], british: bool) -> str:
    """ "0800 hours" -> "oh eight hundred", "1430 hours" -> "fourteen thirty"."""
    written_hour, written_minute = (m[1], m[2]) if m[1] else (m[3], m[4])
    hour = int(written_hour)
    oh = f"{numbers.ZERO_IN_DIGIT_STRING} " if written_hour.startswith("0") and hour else ""  # ("0000": "zero hundred")
    return oh + numbers.pairs(hour * 100 + int(written_minute))


def _height(m: re.Match[str], british: bool) -> str:
    feet, inches = int(m[1]), int(m[2])
    return f"{numbers.cardinal(feet)} foot {numbers.cardinal(inches)}" if inches < 12 else m[0]  # "five foot ten"


# --- amounts: currency, percent, temperature, units -------------------------------------------------------


def _currency(m: re.Match[str], british: bool) -> str:
    return _money(m[1], m[2], m[3], m[4], british)


def _currency_range(m: re.Match[str], british: bool) -> str:
    """ "$5-10", "$5-$10" -> "five to ten dollars"; "$1.5-2m" -> "one point five to two million dollars"; amounts
    with cents, or with scales of their own, each in full ("five dollars and fifty cents to six dollars")."""
    symbol, low, low_scale, high, high_scale = m[1], m[2], m[3], m[5], m[6]
    if _EQUALS_FOLLOWS.match(m.string, m.end()):  # "$5 - $3 = $2": a subtraction
        return f"{_money('', symbol, low, low_scale, british)} minus {_money('', symbol, high, high_scale, british)}"
    units = CURRENCIES[symbol].units
    if high_scale and low_scale in (None, high_scale):
        return f"{numbers.decimal(low, british=british)} to {numbers.decimal(high, british=british)} " + (
            f"{SCALES[high_scale]} {units}"
        )
    if not (low_scale or high_scale) and "." not in low + high:
        return f"{numbers.decimal(low, british=british)} to {numbers.decimal(high, british=british)} {units}"
    return f"{_money('', symbol, low, low_scale, british)} to {_money('', symbol, high, high_scale, british)}"


def _money(sign: str | None, symbol: str, amount: str, scale: str | None, british: bool) -> str:
    currency = CURRENCIES[symbol]
    minus = "minus " if sign else ""
    if scale:
        return f"{minus}{numbers.decimal(amount, british=british)} {SCALES[scale]} {currency.units}"
    whole, _, cents = amount.replace(",", "").partition(".")
    if len(cents) > 2 or (cents and currency.subunit is None):
        return f"{minus}{numbers.decimal(amount, british=british)} {currency.units}"
    parts = []
    units, subunits = whole.lstrip("0"), int(cents.ljust(2, "0") or "0")
    if units or not subunits:
        name = currency.unit if units == "1" else currency.units
        parts.append(f"{numbers.whole(units or '0', british=british)} {name}")
    if subunits and currency.subunit is not None and currency.subunits is not None:
        name = currency.subunit if subunits == 1 else currency.subunits
        parts.append(f"{numbers.cardinal(subunits, british=british)} {name}")
    return minus + " and ".join(parts)


def _amount_range(m: re.Match[str], british: bool) -> tuple[str, str]:
    """Groups (sign, amount, optional upper amount) -> (spoken, the amount that decides singular/plural)."""
    sign, low, high = m[1], m[2], m[3]
    spoken = ("minus " if sign else "") + numbers.decimal(low, british=british)
    if high:
        return f"{spoken} to {numbers.decimal(high, british=british)}", high
    return spoken, (sign or "") + low


def _percent(m: re.Match[str], british: bool) -> str:
    return _amount_range(m, british)[0] + " percent"


def _temperature(m: re.Match[str], british: bool) -> str:
    spoken, amount = _amount_range(m, british)
    unit = "degree" if numbers.is_singular(amount) else "degrees"
    scale = f" {TEMPERATURE_SCALES[m[4]]}" if m[4] else ""
    return f"{spoken} {unit}{scale}"


def _unit(m: re.Match[str], british: bool) -> str:
    spoken, amount = _amount_range(m, british)
    period = _kept_period(m, bool(m[5]))  # "5 lb. of": no sentence ends there
    return f"{spoken} {UNITS[m[4]].say(numbers.is_singular(amount), british)}{period}"


# --- ordinals, decades, abbreviations, Roman numerals ----------------------------------------------------

_ROMAN = re.compile(r"M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")
_ROMAN_VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}
# words a Roman numeral counts after ("Chapter IV", "World War II", "Super Bowl LVII"): read as a cardinal
_NUMBERED = ("Chapter", "Part", "Book", "Volume", "Vol.", "Act", "Scene", "Section", "Article", "Appendix", "Phase",
             "Stage", "Level", "Round", "Season", "Episode", "Step", "Title", "World War", "Super Bowl", "Apollo",
             "Rocky", "Star Wars: Episode")  # fmt: skip
# names a Roman numeral of I, V and X counts the bearers of ("Henry VIII", "Louis XIV"): read "the eighth"
_REGNAL_NAMES = ("Alexander", "Alfonso", "Benedict", "Boniface", "Catherine", "Charles", "Christian", "Clement",
                 "Constantine", "David", "Edward", "Elizabeth", "Ferdinand", "Francis", "Frederick", "George",
                 "Gregory", "Gustav", "Harald", "Henry", "Innocent", "Ivan", "James", "John", "Julius", "Leo", "Louis",
                 "Mary", "Napoleon", "Nicholas", "Otto", "Paul", "Peter", "Philip", "Pius", "Ramesses",
                 "Richard", "Robert", "Rudolf", "Sixtus", "Stephen", "Urban", "Wilhelm", "William")  # fmt: skip


def _roman_value(written: str) -> int | None:
    """The value of a Roman numeral written in capitals, or None where ``written`` is not one."""
    if not written or not _ROMAN.fullmatch(written):
        return None
    values = [_ROMAN_VALUES[c] for c in written]
    return sum(-v if v < after else v for v, after in zip(values, [*values[1:], 0], strict=True))


def _numbered(m: re.Match[str], british: bool) -> str:
    value = _roman_value(m[2])
    return m[0] if value is None else f"{m[1]} {numbers.cardinal(value, british=british)}"


def _regnal(m: re.Match[str], british: bool) -> str:
    value = _roman_value(m[2])
    return m[0] if value is None else f"{m[1]} the {numbers.ordinal(value, british=british).capitalize()}"


def _ordinal(m: re.Match[str], british: bool) -> str:
    return numbers.whole_ordinal(m[1], british=british)


_PLURAL_AMOUNTS = {
    "100": "hundreds", "1000": "thousands", "10000": "tens of thousands", "100000": "hundreds of thousands",
    "1000000": "millions", "10000000": "tens of millions", "100000000": "hundreds of millions",
    "1000000000": "billions",
}  # fmt: skip


def _plural_amount(m: re.Match[str], british: bool) -> str:
    """ "1,000s of fans" -> "thousands of fans", "100s" -> "hundreds" (not a decade: "the 1990s" is one)."""
    if "," not in m[1] and not _OF_FOLLOWS.match(m.string, m.end()):
        return m[0]  # ("a 100s timeout": seconds)
    return _PLURAL_AMOUNTS.get(m[1].replace(",", ""), m[0])


def _weekdays(m: re.Match[str], british: bool) -> str:
    period = _kept_period(m, bool(m[3]))
    return f"{_WEEKDAYS[m[1]]} to {_WEEKDAYS[m[2]]}{period}"


def _decade(m: re.Match[str], british: bool) -> str:
    return numbers.decade(int(m[1]), british=british)


def _after_proper_name(text: str, start: int) -> bool:
    """Whether a capitalized word that does not begin a sentence comes right before ``start`` ("Main St.")."""
    words = text[max(0, start - _LOOK_BACK) : start].split()
    if len(words) < 2 or not words[-1][:1].isupper() or words[-1].endswith(_SENTENCE_ENDS):
        return False  # ("Smith. Dr. Jones": the word before ends a sentence, so it names no street)
    return not words[-2].endswith(_SENTENCE_ENDS)


def _title(m: re.Match[str], british: bool) -> str:
    title, place = TITLES[m[1]]
    text, end = m.string, m.end()
    name_follows = _NAME_FOLLOWS.match(text, end) is not None
    if place is not None and (not name_follows or _after_proper_name(text, m.start())):
        return place + _kept_period(m, bool(m[2]))
    return title if name_follows or m[1] in ALWAYS_TITLES else m[0]


def _abbreviation(m: re.Match[str], british: bool) -> str:
    written = m[0]
    key = written[0].lower() + written[1:]
    spoken, can_end_sentence = ABBREVIATIONS.get(written) or ABBREVIATIONS[key]
    if written[0].isupper() and key in ABBREVIATIONS:
        spoken = spoken[0].upper() + spoken[1:]
    return spoken + _kept_period(m, can_end_sentence)


# --- plain numbers and symbols -----------------------------------------------------------------------------


def _code(m: re.Match[str], british: bool) -> str:
    """Numbers joined by hyphens, three groups or more ("1-2-3", "978-3-16-148410-0", "1-800-FLOWERS"): a code,
    each group's digits said one by one, a pause between groups."""
    groups = m[0].split("-")
    if len(groups) < 3:
        return m[0]  # ("10-20": a range)
    return ", ".join(numbers.digits(g) if g.isdigit() else g for g in groups)


def _scaled_number(m: re.Match[str], british: bool) -> str:
    number, scale = (m[1], m[2]) if m[1] else (m[3], m[4])
    return f"{say_number(number, british=british)} {SCALES[scale]}"  # "1.5M residents", "3bn users"


_PAIRED_AFTER = ("RTX", "GTX", "GT", "RX", "ISO", "RFC", "IEEE", "DIN", "ANSI", "ASTM", "MIL-STD", "Boeing", "Airbus")


def _paired(m: re.Match[str], british: bool) -> str:
    """ "4090" -> "forty ninety", "9001" -> "ninety oh one", "1200" -> "twelve hundred"."""
    return m[1] + m[2] + numbers.pairs(int(m[3]))


def _emergency(m: re.Match[str], british: bool) -> str:
    """ "911" is the emergency number ("nine one one"), but a Porsche's "nine eleven"."""
    return "nine eleven" if m.string[max(0, m.start() - 8) : m.start()].endswith("Porsche ") else "nine one one"


def _dimensions(m: re.Match[str], british: bool) -> str:
    return f"{say_number(m[1], british=british)} by {say_number(m[2], british=british)}"


def _spaced_dash(m: re.Match[str], british: bool) -> str:
    """ "7 - 2 = 5" is a subtraction; "3 - 4 people" a range."""
    low, high = say_number(m[1], british=british), say_number(m[2], british=british)
    sums = _EQUALS_FOLLOWS.match(m.string, m.end()) or _EQUALS_BEFORE.search(m.string, max(0, m.start() - 4), m.start())
    return f"{low} minus {high}" if sums else f"{low} to {high}"


def _number_range(m: re.Match[str], british: bool) -> str:
    return f"{say_number(m[1], british=british)} to {say_number(m[2], british=british)}"


def _mixed_number(m: re.Match[str], british: bool) -> str:
    """ "1 1/2 cups" -> "one and a half cups", "2 3/4" -> "two and three quarters"."""
    whole, top, bottom = int(m[1]), int(m[2]), int(m[3])
    if not 0 < top < bottom <= _MAX_FRACTION_DENOMINATOR:
        return m[0]
    part = numbers.fraction(top, bottom, british=british)
    if top == 1:
        part = "a " + part.partition(" ")[2]
    return f"{numbers.cardinal(whole, british=british)} and {part}"


def _out_of(m: re.Match[str], british: bool) -> str:
    """A score: "9/10" -> "nine out of ten", "4.5/5 stars" -> "four point five out of five stars"."""
    score, scale = (m[1], m[2]) if m[1] else (m[3], m[4])
    return f"{say_number(score, british=british)} out of {say_number(scale, british=british)}"


def _slash_numbers(m: re.Match[str], british: bool) -> str:
    top, bottom = m[1].lstrip("0"), m[2].lstrip("0")
    if len(bottom) <= 2 and 0 < int(top or "0") < int(bottom or "0") <= _MAX_FRACTION_DENOMINATOR:
        return numbers.fraction(int(top), int(bottom), british=british)
    return f"{say_number(m[1], british=british)} {say_number(m[2], british=british)}"  # "24/7", "50/50"


_PRE_RELEASE = {"a": "alpha", "b": "beta", "rc": "R C"}


def _dotted_numbers(m: re.Match[str], british: bool) -> str:
    """Versions "v2.0.1" -> "version two point zero point one"; IP addresses (four parts) use "dot"."""
    parts = m[2].split(".")
    joiner = " dot " if len(parts) == 4 and not m[3] else " point "
    spoken = ("version " if m[1] else "") + joiner.join(say_number(p, british=british) for p in parts)
    if m[3]:  # "3.11.4rc1": "... point four R C one"
        tag = _PRE_RELEASE.get(m[3], m[3])
        spoken += f" {tag}" + (f" {say_number(m[4], british=british)}" if m[4] else "")
    return spoken


def _number(m: re.Match[str], british: bool) -> str:
    return say_number((m[1] or "") + m[2], british=british)


def _symbol(m: re.Match[str], british: bool) -> str:
    return f" {SYMBOLS[m[0]]} "


def _amount(after: str, again: str) -> str:
    """An amount or an amount range ("5-10", "5%-10%": ``again`` after the low end) followed by ``after``; groups:
    sign, low, high, ``after``'s."""
    return rf"{_START}(-)?({_NUM})(?:(?:\s?{again})?\s?(?:-|–|to)\s?({_NUM}))?\s?{after}"


_TITLE_NAMES = _alternation(list(TITLES))
_ABBREVIATIONS = _alternation([*ABBREVIATIONS, *(k[0].upper() + k[1:] for k in ABBREVIATIONS if k[0].islower())])
_CURRENCY_SYMBOLS = "".join(re.escape(s) for s in CURRENCIES)
_SCALE_WORDS = _alternation(list(SCALES))
_UNIT_SYMBOLS = _alternation(list(UNITS))
_MERIDIEM = r"([AaPp])\.?\s?[Mm]\.?(?![A-Za-z])"
# a dash after a time that another time follows ("9am-5pm", "9:00-17:00"): a range, its dash read "to"
_TIME_FOLLOWS = r"(\s?[-–]\s?(?=\d{1,2}(?::\d{2}|\s*[AaPp]\.?\s?[Mm]\.?(?![A-Za-z]))))?"


def _plural(m: re.Match[str], british: bool) -> str:
    return "s"


_EMAIL_RULES: list[Rule] = [(re.compile(r"(?<![\w.+-])([\w.+-]+)@([\w-]+(?:\.[\w-]+)+)"), _email)]
_URL_RULES: list[Rule] = [
    (re.compile(r"\b(?:https?://|www\.)[^\s<>\"'()\[\]]+", re.IGNORECASE), _url),
    (
        re.compile(
            r"(?<![\w@.-])(?:[a-z0-9-]+\.)+(?:com|org|net|edu|gov|io|dev|ai|app|co|uk|info|me|tv)\b"
            r"(?:/[^\s<>\"'()]*)?",
            re.IGNORECASE,
        ),
        _url,
    ),
]
_PHONE_RULES: list[Rule] = [
    (re.compile(r"(?<![\w+])(?:\+?1[ .-]?)?\(\d{3}\)\s?\d{3}[ .-]\d{4}(?![\w-])"), _phone),
    (re.compile(r"(?<![\w+])(?:\+?1[.-])?\d{3}([.-])\d{3}\1\d{4}(?![\w-])"), _phone),
    (re.compile(r"(?<![\w+])\+\d{1,3}(?:[ .-]\(?\d{1,4}\)?){2,5}(?![\w-])"), _phone),
    (re.compile(r"(?<![\w+.,-])([2-9]\d{2})-(\d{4})(?![\w-]|[.,]\d)"), _local_phone),
]
_PLURAL_RULES: list[Rule] = [(re.compile(r"(?<=[^\W\d_])\(s\)(?!\w)"), _plural)]  # "file(s)", not "(s)" alone
_DATE_AND_TIME_RULES: list[Rule] = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), _iso_date),
    (re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b"), _slash_date),
    (re.compile(rf"\b({_MONTH_NAMES})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?{_DAYS_TO}\b(?![:\d])"), _month_day),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?{_DAYS_TO}\s+(?:of\s+)?({_MONTH_NAMES})\b(\.?)"), _day_month),
    (re.compile(rf"\b(\d{{1,2}})\.(\d{{2}})\s*{_MERIDIEM}"), _dotted_clock),  # British "3.30 pm" (before "05 pm")
    (re.compile(rf"\b(\d{{1,2}})(?::(\d{{2}}))?\s?[-–]\s?(?=\d{{1,2}}(?::\d{{2}})?\s*{_MERIDIEM})"), _hours_range),
    (re.compile(rf"\b(\d{{1,2}}):(\d{{2}})(?::(\d{{2}}))?(?:\s*{_MERIDIEM})?{_TIME_FOLLOWS}"), _clock),
    (re.compile(rf"\b(\d{{1,2}})\s*{_MERIDIEM}{_TIME_FOLLOWS}"), _hour_meridiem),
    (re.compile(r"(?<![\w.'])(\d)['′]\s?(\d{1,2})(?:\"|″|''|”)"), _height),
    (re.compile(r"(?<![\w.'])(\d)\s?ft\.?\s?(\d{1,2})\s?in\b\.?"), _feet_inches),  # "5 ft 10 in"
    # "1h 23m 45s", "3h 20m", "1m 30s", "2 hrs 30 mins": hours, minutes and seconds
    (
        re.compile(r"(?<![\w.])(\d{1,4})\s?(?:h|hrs?)\s?(\d{1,2})\s?(?:m|mins?)\s?(\d{1,2})\s?(?:s|secs?)\b\.?"),
        _duration("hour", "minute", "second"),
    ),
    (re.compile(r"(?<![\w.])(\d{1,4})\s?(?:h|hrs?)\s?(\d{1,2})\s?(?:m|mins?)\b\.?"), _duration("hour", "minute")),
    (re.compile(r"(?<![\w.])(\d{1,4})\s?(?:m|mins?)\s?(\d{1,2})\s?(?:s|secs?)\b\.?"), _duration("minute", "second")),
    # "0800 hours", "1430 hours" (not "1000 hours of practice": a count)
    (re.compile(r"\b(?:(0\d)([0-5]\d)|(1\d|2[0-3])([0-5][1-9]|[1-5]0))(?=\s+hours\b)"), _military),
]
_PER = {"hr": "hour", "h": "hour", "hour": "hour", "yr": "year", "year": "year", "mo": "month", "month": "month",
        "wk": "week", "week": "week", "day": "day", "night": "night", "person": "person", "head": "head",
        "unit": "unit", "item": "item", "kg": "kilogram", "lb": "pound", "GB": "gigabyte", "user": "user",
        "seat": "seat", "min": "minute", "mile": "mile", "km": "kilometer"}  # fmt: skip
_MONEY_WORDS = _alternation(
    sorted(
        {w for c in CURRENCIES.values() for w in (c.unit, c.units, c.subunit, c.subunits) if w} | set(SCALES.values())
    )
)
_MONEY_AND_PERCENT_RULES: list[Rule] = [
    (re.compile(r"~\s?(?=[\d$£€¥₹])"), lambda m, british: "about "),
    (
        re.compile(
            rf"(?<![\w.-])([{_CURRENCY_SYMBOLS}])\s?({_NUM})(?:\s?({_SCALE_WORDS})\b)?\s?(?:-|–)\s?(\1)?\s?({_NUM})"
            rf"(?:\s?({_SCALE_WORDS})\b)?"
        ),
        _currency_range,
    ),
    (
        re.compile(rf"(?:(?<![\w.])(-))?([{_CURRENCY_SYMBOLS}])\s?({_NUM})(?:\s?({_SCALE_WORDS})\b)?"),
        _currency,
    ),
    (re.compile(_amount("%", "%")), _percent),
    # "$5/hr", "$40k/yr", "$9.99/month": a price per something (the amount already said)
    (re.compile(rf"\b({_MONEY_WORDS})\s?/\s?({_alternation(list(_PER))})\b"), lambda m, b: f"{m[1]} per {_PER[m[2]]}"),
]
_UNIT_RULES: list[Rule] = [
    (re.compile(_amount(r"°(?:\s?([CFK])\b)?", r"°(?:\s?[CFK]\b)?")), _temperature),
    (re.compile(_amount(rf"({_UNIT_SYMBOLS})(?![\w²])(\.(?!\w))?", rf"(?:{_UNIT_SYMBOLS})(?![\w²])\.?")), _unit),
]
_WEEKDAYS = {"Mon": "Monday", "Tue": "Tuesday", "Tues": "Tuesday", "Wed": "Wednesday", "Thu": "Thursday",
             "Thur": "Thursday", "Thurs": "Thursday", "Fri": "Friday", "Sat": "Saturday", "Sun": "Sunday"}  # fmt: skip
_WEEKDAY_NAMES = _alternation(list(_WEEKDAYS))
_WORD_RULES: list[Rule] = [
    # "Mon-Fri", "Sat.–Sun.": a range of days (a short day's name alone is left: "Sun", "Sat", "Wed" are words)
    (re.compile(rf"\b({_WEEKDAY_NAMES})\.?\s?[-–]\s?({_WEEKDAY_NAMES})\b(\.?)"), _weekdays),
    (re.compile(r"\b(pp?)\.\s?(?=\d)"), lambda m, b: "pages " if m[1] == "pp" else "page "),  # "p. 5", "pp. 10-12"
    (re.compile(r"(?<![\w.,'’])((?:1|10|100)(?:,000)+|10{2,9})s(?![\w'’])"), _plural_amount),
    # (two letters or more, or I, V, X: "Part D", "Appendix C" are letters)
    (re.compile(rf"\b({_alternation(list(_NUMBERED))})\s+([IVXLCDM]{{2,}}|[IVX])\b(?![-'’]\w)(?!\.\w)"), _numbered),
    (
        re.compile(rf"\b({_alternation(list(_REGNAL_NAMES))})\s+([IVX]{{2,}}|V(?!\.\s+[A-Z]))\b(?!-\w)"),
        _regnal,
    ),  # (not "Malcolm X", "George V. Voinovich")
    (re.compile(r"(?<![\w.])['’]?([1-9]0|\d{3}0)['’]?s\b"), _decade),
    (re.compile(rf"{_START}(\d{{1,3}}(?:,\d{{3}})+|\d+)(?:st|nd|rd|th)\b"), _ordinal),
    (re.compile(rf"\b({_TITLE_NAMES})(\.?)(?=[\s,;:!?)]|$)"), _title),
    (re.compile(rf"(?<![\w.])(?:{_ABBREVIATIONS})(?!\w)"), _abbreviation),
    (re.compile(r"\bvs\b\.?"), lambda m, british: "versus"),
    (re.compile(r"\b[Nn]o\.\s?(?=\d)|#(?=\d)"), lambda m, british: "number "),
]
_COMPARISONS = {"<": " is less than ", ">": " is greater than "}
_NUMBER_RULES: list[Rule] = [
    # "a < b", "3<4", "x > 5"; not "<3", "->", "<b>"
    # (a spaced one between one-letter or digit operands only: "Settings > Privacy" is a path)
    (
        re.compile(r"(?<=\d)\s?([<>])\s?(?=\d)|(?<=\w)(?<!\w\w) ([<>]) (?=\w(?!\w))"),
        lambda m, b: _COMPARISONS[m[1] or m[2]],
    ),
    # (possessive, and not begun inside a chain: linear on "1-1-1-...")
    (re.compile(r"(?<![\w.,-])\d++(?:-\d++)++(?:-[A-Za-z]++)?+(?![\w-])"), _code),
    # "1.5M", "2bn": not "4B", "3M", "100M" (a flat, a company, a sprint)
    (re.compile(rf"{_START}(\d+\.\d+)([kKMB]|bn|mn)(?![\w])|{_START}(\d+)(bn|mn)(?![\w])"), _scaled_number),
    (re.compile(rf"{_START}(?!0x)(\d+)x(\d+)(?![\w])"), _dimensions),  # "4x4", "1920x1080"; not "0x10"
    (
        re.compile(rf"{_START}(\d+(?:\.\d+)?)x\s?[-–]\s?(\d+(?:\.\d+)?)x(?![\w])"),
        lambda m, b: f"{say_number(m[1], british=b)} to {say_number(m[2], british=b)} times",
    ),  # "2x-3x"
    # a model's or a standard's number after its name ("RTX 4090", "ISO 9001", "RFC 2616"): said in pairs
    (re.compile(rf"\b({_alternation(list(_PAIRED_AFTER))})([ -])([1-9]\d{{3}})(?![\w,.]\d|\w)"), _paired),
    (re.compile(r"\b911\b"), _emergency),  # "call 911": "nine one one" (a Porsche 911 is "nine eleven")
    (re.compile(rf"{_START}(\d+(?:\.\d+)?)[x×](?![\w×])"), lambda m, b: f"{say_number(m[1], british=b)} times"),
    (re.compile(rf"(?<![\w.,-])({_NUM})\s+-\s+({_NUM})(?![\w])"), _spaced_dash),
    (re.compile(rf"{_START}({_NUM})(?:-|\s?–\s?)({_NUM})(?![\w])"), _number_range),
    (re.compile(r"(?<![\w./])(\d{1,3}) (\d)/(\d{1,2})(?![\w/])"), _mixed_number),  # (not "In 2020 1/3 of")
    # a score: a rating's out of ten or a hundred at a clause's end or after a rating word, or a decimal over a small
    # whole number ("4.5/5"); "a 1/10 scale model", "3/10 of" are fractions
    (
        re.compile(
            rf"(?<![\w./])(\d+(?:\.\d+)?)/(10|100)(?![\w/])(?!\.\d)(?={_CLAUSE_ENDS}|\s+(?:stars?|points?)\b)"
            rf"|(?<![\w./])(\d+\.\d)/(5|10)(?![\w/])(?!\.\d)(?!\s*[.,]?\d)"
        ),
        _out_of,
    ),
    (re.compile(r"(?<![\w./])(\d+)/(\d+)(?![\w/])"), _slash_numbers),
    (
        re.compile(r"(?<![\w.])(v)?(\d+(?:\.\d+){2,})(?:(a|b|rc|alpha|beta|dev|post)(\d*))?(?![\w])(?!\.\d)"),
        _dotted_numbers,
    ),
    (re.compile(rf"{_START}(-(?=[\d.]))?({_NUM})(?![\w])"), _number),
]
_SYMBOL_RULES: list[Rule] = [
    (re.compile(_alternation(list(SYMBOLS))), _symbol),  # (the longest first: "<=" before "=")
]


def _always(switches: Normalization) -> bool:
    return True


# The groups in the order they run, each with the switch that turns it off (dates, times, money, percentages,
# abbreviations and plain numbers have none: without them the rest would read digits a speaker never says).
_RULES: list[tuple[Callable[[Normalization], bool], list[Rule]]] = [
    (lambda n: n.emails, _EMAIL_RULES),
    (lambda n: n.urls, _URL_RULES),
    (lambda n: n.phones, _PHONE_RULES),
    (lambda n: n.plurals, _PLURAL_RULES),
    (_always, _DATE_AND_TIME_RULES),
    (_always, _MONEY_AND_PERCENT_RULES),
    (lambda n: n.units, _UNIT_RULES),
    (_always, _WORD_RULES),
    (_always, _NUMBER_RULES),
    (lambda n: n.symbols, _SYMBOL_RULES),
]


_UNICODE_SPACES = re.compile("[\u00a0\u2009]")
_DOUBLE_HYPHEN = re.compile(r"(?<=\w)--(?=\w)|(?<=\w) -- (?=\w)")  # "wait--what": a dash (not "pip --upgrade")
_CURLY_N = re.compile(r"(?<=\w)\s?[’‘]n[’‘]\s?(?=\w)")  # "rock ’n’ roll" as "rock'n'roll" (misaki knows it)
_INLINE_SPACE = re.compile(r"[^\S\n]+")
_LINE_EDGE = re.compile(r" ?\n ?")


def _normalize_plain(text: Tracked, british: bool, switches: Normalization) -> Tracked:
    for runs, rules in _RULES:
        if not runs(switches):
            continue
        for pattern, speak in rules:
            check_cancelled()  # each rule is one pass over the text: a cancelled request stops between them
            text = text.sub(pattern, lambda m, speak=speak: speak(m, british))  # type: ignore[misc]
    return text


def normalize_tracked(
    text: str, *, british: bool = False, switches: Normalization = NORMALIZE_ALL, lexicon: Lexicon | None = None
) -> Tracked:
    """:func:`normalize`, each character of the result knowing the span of ``text`` it was made from. A
    ``lexicon``'s words are said as it says first, whatever the switches (they are the user's own)."""
    tracked = Tracked.of(text) if lexicon is None else lexicon.apply(Tracked.of(text))
    if not switches.enabled:
        return tracked
    if switches.markdown:
        tracked = strip_markup(tracked)
    tracked = tracked.sub(re.compile("\u2212"), lambda m: "-").sub(_UNICODE_SPACES, lambda m: " ")
    tracked = tracked.sub(_DOUBLE_HYPHEN, lambda m: " — ").sub(_CURLY_N, lambda m: "'n'")
    pieces, last = [], 0
    for link in _MARKDOWN_LINK.finditer(tracked.text):
        pieces.append(_normalize_plain(tracked[last : link.start()], british, switches))
        pieces.append(tracked[link.start() : link.end()])
        last = link.end()
    pieces.append(_normalize_plain(tracked[last:], british, switches))
    # each line's runs of spaces become one space, lines are stripped, and so is the whole
    joined = Tracked.join(pieces).sub(_INLINE_SPACE, lambda m: " ").sub(_LINE_EDGE, lambda m: "\n")
    first = len(joined.text) - len(joined.text.lstrip())
    return joined[first : len(joined.text.rstrip())]


def normalize(text: str, *, british: bool = False, switches: Normalization = NORMALIZE_ALL) -> str:
    """Write numbers, amounts, dates, times, abbreviations, addresses and symbols as spoken English words; the
    groups ``switches`` turns off are left as written (see :class:`Normalization`).

    Line breaks are kept (the chunker treats them as boundaries); runs of spaces become one space.
    """
    return normalize_tracked(text, british=british, switches=switches).text
