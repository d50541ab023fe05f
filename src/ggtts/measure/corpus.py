"""A corpus of varied English sentences for text-frontend parity (Piper's phoneme ids against piper-tts's), built
offline and the same on every run.

Two halves:

- **Written prose**: the sentences of Python's own reference manual (``pydoc_data.topics``, in every CPython), as
  people wrote them: long clauses, quotes, parentheses, semicolons, technical words and names.
- **Composed sentences**: a seeded draw over templates that hold what a text frontend gets wrong first: numbers
  (integers, decimals, thousands, negatives, fractions, ordinals, years, times, phone-like digit runs), money,
  percentages, units, abbreviations and titles (Dr., Mr., St., e.g., i.e., vs.), acronyms, contractions and
  possessives, hyphenated words, and punctuation (quotes, parentheses, dashes, ellipses, "?!", colons, semicolons).
"""

from __future__ import annotations

import random
import re

PROSE_CHARS = re.compile(r"[A-Za-z0-9 ,.;:'\"()!?%$&/-]+")
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")

NAMES = ("Smith", "Brown", "Garcia", "O'Neil", "Nguyen", "Kowalski", "Adams", "Okafor", "Lee", "McArthur")
FIRST = ("Anna", "James", "Maria", "Tom", "Priya", "Lucas", "Chen", "Fatima", "Olivia", "Noah")
TITLES = ("Dr.", "Mr.", "Mrs.", "Ms.", "Prof.")
PLACES = ("Boston", "Denver", "Main St.", "Oak Ave.", "the harbor", "Lake Tahoe", "New York", "the station")
THINGS = ("apples", "tickets", "books", "chairs", "cookies", "emails", "files", "bikes", "songs", "stamps")
UNITS = ("km", "kg", "mph", "cm", "ml", "GB", "MHz", "lbs", "ft", "mg")
ACRONYMS = ("NASA", "FBI", "USB", "HTML", "CEO", "UN", "BBC", "DVD", "ATM", "GPS")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October")
VERBS = ("bought", "sold", "found", "lost", "counted", "shipped", "printed", "returned", "ordered", "packed")
ADJECTIVES = ("well-known", "self-driving", "long-term", "old-fashioned", "up-to-date", "two-way", "hand-made")

TEMPLATES: tuple[str, ...] = (
    "{title} {name} {verb} {int} {thing} on {month} {ordinal}, {year}.",
    "The price went from ${money} to ${money2}, a rise of {pct}%.",
    "Is it {time} already? We leave for {place} at {time2}!",
    "Call {digits} before {time}; ask for {first} {name}.",
    '"{first}," she said, "the {adj} plan costs ${money}."',
    "It weighs {dec} {unit} (about {int} {thing}).",
    "We drove {int} {unit} -- then {int2} more -- to reach {place}.",
    "Wait... did the {acronym} really say {big}?",
    "Really?! {first} won {ordinal} place out of {int}.",
    "The {acronym}'s report, e.g. page {int}, lists {big} {thing}.",
    "Temperatures fell to {neg} degrees; i.e. colder than in {year}.",
    "{first} vs. {first2}: {int} to {int2}, a {fraction} lead.",
    "I can't believe it's {time}, and we haven't {verb} the {thing} yet.",
    "Room {int}, floor {ordinal}: that's where {title} {name} works.",
    "In {year}, the {adj} {thing} cost {pct}% less than in {year2}.",
    "Don't forget: {int} {thing}, {int2} {thing2}, and {dec} {unit} of rice.",
    "The {acronym} moved from {place} to {place2} on {month} {day}.",
    'Section {int}.{int2} says: "{first} shouldn\'t sign it."',
    "About {big} people ({pct}%) voted; the rest -- {int} -- stayed home.",
    "Why would {first}'s {adj} idea fail? It won't!",
)


def prose_sentences() -> list[str]:
    """The sentences of Python's reference manual that are plain prose: 30 to 200 characters of letters, digits
    and ordinary punctuation, ending with a full stop, question or exclamation mark; in order, without repeats."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    found = []
    for name in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[name]):
            if paragraph.startswith((" ", "\t")) or "::" in paragraph or ">>>" in paragraph:
                continue  # code, grammar rules, examples
            for sentence in SENTENCE_SPLIT.split(" ".join(paragraph.split())):
                if not (30 <= len(sentence) <= 200 and sentence[-1] in ".!?" and PROSE_CHARS.fullmatch(sentence)):
                    continue
                if "__" in sentence or "()" in sentence or sentence in seen:
                    continue
                seen.add(sentence)
                found.append(sentence)
    return found


def composed_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences drawn from the templates with ``random.Random(seed)``; no repeats."""
    draw = random.Random(seed)
    found: list[str] = []
    seen: set[str] = set()
    while len(found) < n:
        sentence = draw.choice(TEMPLATES).format(**_fillers(draw))
        if sentence not in seen:
            seen.add(sentence)
            found.append(sentence)
    return found


def _fillers(draw: random.Random) -> dict[str, str]:
    def ordinal(k: int) -> str:
        suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
        return f"{k}{suffix}"

    return {
        "title": draw.choice(TITLES),
        "name": draw.choice(NAMES),
        "first": draw.choice(FIRST),
        "first2": draw.choice(FIRST),
        "verb": draw.choice(VERBS),
        "thing": draw.choice(THINGS),
        "thing2": draw.choice(THINGS),
        "place": draw.choice(PLACES),
        "place2": draw.choice(PLACES),
        "unit": draw.choice(UNITS),
        "acronym": draw.choice(ACRONYMS),
        "adj": draw.choice(ADJECTIVES),
        "month": draw.choice(MONTHS),
        "int": str(draw.choice([draw.randint(0, 20), draw.randint(21, 999), draw.randint(1000, 9999)])),
        "int2": str(draw.randint(2, 500)),
        "day": str(draw.randint(1, 31)),
        "ordinal": ordinal(draw.randint(1, 120)),
        "year": str(draw.randint(1900, 2030)),
        "year2": str(draw.randint(1950, 2030)),
        "money": f"{draw.randint(1, 999)}.{draw.randint(0, 99):02d}",
        "money2": f"{draw.randint(1, 99_999):,}",
        "pct": draw.choice([str(draw.randint(1, 100)), f"{draw.randint(0, 99)}.{draw.randint(1, 9)}"]),
        "time": f"{draw.randint(1, 12)}:{draw.choice(['00', '05', '15', '30', '45', '59'])}",
        "time2": f"{draw.randint(0, 23)}:{draw.randint(0, 59):02d}",
        "digits": f"{draw.randint(200, 999)}-{draw.randint(100, 999)}-{draw.randint(1000, 9999)}",
        "dec": f"{draw.randint(0, 99)}.{draw.randint(0, 999)}",
        "big": f"{draw.randint(1, 999)},{draw.randint(0, 999):03d},{draw.randint(0, 999):03d}",
        "neg": f"-{draw.randint(1, 60)}",
        "fraction": f"{draw.randint(1, 9)}/{draw.randint(2, 12)}",
    }


def english_corpus(n: int = 2000, seed: int = 0) -> list[str]:
    """``n`` English sentences: the reference manual's prose (up to half of them), then composed ones."""
    prose = prose_sentences()[: n // 2]
    return prose + composed_sentences(n - len(prose), seed)
