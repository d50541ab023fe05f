"""Word tables for English normalization: months, currencies, units, abbreviations, spoken symbols.

Each table maps what is written to what is said. Spellings that differ between American and British English
("meter"/"metre") are given as (American, British) pairs.
"""

from __future__ import annotations

from typing import NamedTuple

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
# Written month (full or abbreviated, without its period) -> month number 1..12.
MONTH_NUMBERS: dict[str, int] = {name: i + 1 for i, name in enumerate(MONTHS)}
MONTH_NUMBERS.update({name[:3]: i + 1 for i, name in enumerate(MONTHS)})
MONTH_NUMBERS["Sept"] = 9


class Currency(NamedTuple):
    unit: str
    units: str
    subunit: str | None  # None: the currency is not spoken with a subunit (yen)
    subunits: str | None


CURRENCIES: dict[str, Currency] = {
    "$": Currency("dollar", "dollars", "cent", "cents"),
    "£": Currency("pound", "pounds", "penny", "pence"),
    "€": Currency("euro", "euros", "cent", "cents"),
    "¥": Currency("yen", "yen", None, None),
    "₹": Currency("rupee", "rupees", "paisa", "paise"),
}

# Scale written after an amount: "$5m", "€1.2 million", "$3bn", "$10k".
SCALES = {
    "k": "thousand",
    "K": "thousand",
    "thousand": "thousand",
    "m": "million",
    "M": "million",
    "mn": "million",
    "million": "million",
    "b": "billion",
    "B": "billion",
    "bn": "billion",
    "billion": "billion",
    "trillion": "trillion",
}


class Unit(NamedTuple):
    singular: str
    plural: str
    british_singular: str | None = None  # None: same spelling in British English
    british_plural: str | None = None

    def say(self, singular: bool, british: bool) -> str:
        if british and self.british_singular is not None and self.british_plural is not None:
            return self.british_singular if singular else self.british_plural
        return self.singular if singular else self.plural


def _metric(prefix: str, base: str, british_base: str) -> Unit:
    return Unit(prefix + base, prefix + base + "s", prefix + british_base, prefix + british_base + "s")


# Unit symbols are matched case-sensitively, only right after a number ("5 km", "20kg").
# "in" (inch) is left out on purpose: "5 in the box".
UNITS: dict[str, Unit] = {
    "km": _metric("kilo", "meter", "metre"),
    "m": _metric("", "meter", "metre"),
    "cm": _metric("centi", "meter", "metre"),
    "mm": _metric("milli", "meter", "metre"),
    "km²": Unit("square kilometer", "square kilometers", "square kilometre", "square kilometres"),
    "m²": Unit("square meter", "square meters", "square metre", "square metres"),
    "mi": Unit("mile", "miles"),
    "ft": Unit("foot", "feet"),
    "yd": Unit("yard", "yards"),
    "kg": Unit("kilogram", "kilograms"),
    "g": Unit("gram", "grams"),
    "mg": Unit("milligram", "milligrams"),
    "lb": Unit("pound", "pounds"),
    "lbs": Unit("pound", "pounds"),
    "oz": Unit("ounce", "ounces"),
    "l": _metric("", "liter", "litre"),
    "L": _metric("", "liter", "litre"),
    "ml": _metric("milli", "liter", "litre"),
    "mL": _metric("milli", "liter", "litre"),
    "km/h": Unit("kilometer per hour", "kilometers per hour", "kilometre per hour", "kilometres per hour"),
    "kph": Unit("kilometer per hour", "kilometers per hour", "kilometre per hour", "kilometres per hour"),
    "m/s": Unit("meter per second", "meters per second", "metre per second", "metres per second"),
    "mph": Unit("mile per hour", "miles per hour"),
    "ms": Unit("millisecond", "milliseconds"),
    "sec": Unit("second", "seconds"),
    "secs": Unit("second", "seconds"),
    "min": Unit("minute", "minutes"),
    "mins": Unit("minute", "minutes"),
    "tsp": Unit("teaspoon", "teaspoons"),
    "tbsp": Unit("tablespoon", "tablespoons"),
    "Tbsp": Unit("tablespoon", "tablespoons"),
    "h": Unit("hour", "hours"),
    "hr": Unit("hour", "hours"),
    "hrs": Unit("hour", "hours"),
    "KB": Unit("kilobyte", "kilobytes"),
    "kB": Unit("kilobyte", "kilobytes"),
    "MB": Unit("megabyte", "megabytes"),
    "GB": Unit("gigabyte", "gigabytes"),
    "TB": Unit("terabyte", "terabytes"),
    "Hz": Unit("hertz", "hertz"),
    "kHz": Unit("kilohertz", "kilohertz"),
    "MHz": Unit("megahertz", "megahertz"),
    "GHz": Unit("gigahertz", "gigahertz"),
    "W": Unit("watt", "watts"),
    "kW": Unit("kilowatt", "kilowatts"),
    "kWh": Unit("kilowatt hour", "kilowatt hours"),
    "V": Unit("volt", "volts"),
    "mAh": Unit("milliamp hour", "milliamp hours"),
}

TEMPERATURE_SCALES = {"C": "Celsius", "F": "Fahrenheit", "K": "kelvin"}

# Titles, read as such before a capitalized name ("Dr. Smith"); see normalize._title.
# Written form without its period -> (title, what it means after a name such as "Elm Dr." or None).
TITLES: dict[str, tuple[str, str | None]] = {
    "Mr": ("Mister", None),
    "Mrs": ("Missus", None),
    "Ms": ("Miz", None),
    "Dr": ("Doctor", "Drive"),
    "Prof": ("Professor", None),
    "Rev": ("Reverend", None),
    "Capt": ("Captain", None),
    "Lt": ("Lieutenant", None),
    "Sgt": ("Sergeant", None),
    "Gov": ("Governor", None),
    "St": ("Saint", "Street"),
    "Mt": ("Mount", None),
}

# Titles that are never ordinary words: expanded even when no name follows ("Mr. and Mrs. Smith").
ALWAYS_TITLES = frozenset({"Mr", "Mrs", "Ms"})

# Abbreviations written with a final period. The flag says whether the abbreviation often ends a sentence,
# in which case a following capital letter or the end of the text means the period also closes the sentence.
ABBREVIATIONS: dict[str, tuple[str, bool]] = {
    "etc.": ("et cetera", True),
    "e.g.": ("for example", False),
    "i.e.": ("that is", False),
    "vs.": ("versus", False),
    "approx.": ("approximately", False),
    "Inc.": ("Incorporated", True),
    "Ltd.": ("Limited", True),
    "Co.": ("Company", True),
    "Corp.": ("Corporation", True),
    "Jr.": ("Junior", True),
    "Sr.": ("Senior", True),
    "Ave.": ("Avenue", True),
    "Blvd.": ("Boulevard", True),
    "Rd.": ("Road", True),
    "Dept.": ("Department", True),
    "Fig.": ("Figure", False),
    "fig.": ("figure", False),
    "cf.": ("compare", False),
    "ca.": ("circa", False),
    "esp.": ("especially", False),
}

# Symbols left after every number rule has run, read as words wherever they stand.
SYMBOLS = {
    "&&": "and",
    "||": "or",
    "==": "equals",
    "&": "and",
    "+": "plus",
    "!=": "is not equal to",
    "<=": "is less than or equal to",
    ">=": "is greater than or equal to",
    "=": "equals",
    "@": "at",
    "%": "percent",
    "°": "degrees",
    "×": "times",
}

# How the separators inside URLs and e-mail addresses are read.
URL_SEPARATORS = {
    ".": "dot",
    "/": "slash",
    "-": "dash",
    "_": "underscore",
    ":": "colon",
    "?": "question mark",
    "=": "equals",
    "&": "and",
    "#": "hash",
    "~": "tilde",
    "@": "at",
    "+": "plus",
    "%": "percent",
}
