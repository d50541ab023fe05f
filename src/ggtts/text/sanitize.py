"""Bound what reaches the tagger and the G2P, so the frontend's cost is linear in the input, whatever the input.

spaCy's tokenizer and misaki's token merging cost far more than linear time on some inputs: misaki merges the
tokens of one whitespace-free run with a cubic loop (600 apostrophes took 45 s), spaCy peels prefix punctuation
one character at a time (2000 ``[`` took 12 s), and a letter carrying 3000 combining accents is one "word" of
3001 characters (29 s). None of that is speech. Before the text frontend sees a line:

- Unicode is composed (NFC), and a character keeps at most :data:`MAX_COMBINING_MARKS` combining marks (stacked
  diacritics beyond two are decoration: "zalgo" text);
- a run of one repeated punctuation or symbol character is cut to :data:`MAX_PUNCTUATION_RUN` ("!!!!!!!"
  reads as "!!!"), a run of several to :data:`MAX_MIXED_PUNCTUATION_RUN` (so the Markdown around a word, which
  the normalizer takes away, is whole: "[**docs**](https://...)", "**[Kokoro](/kˈOkəɹO/)**");
- after normalization (so URLs, already spelled out as words, are not cut), a whitespace-free run longer than
  :data:`MAX_RUN_CHARS` is broken with spaces, after punctuation where there is some, else every
  :data:`MAX_RUN_CHARS` characters. No English word is that long; what is, is read in pieces.

Each step is a single pass, so a line's cost in the tagger and G2P is bounded per run and linear overall.
"""

from __future__ import annotations

import re
import unicodedata

MAX_COMBINING_MARKS = 2
MAX_PUNCTUATION_RUN = 3
MAX_MIXED_PUNCTUATION_RUN = 6
MAX_RUN_CHARS = 48
MAX_RUN_PUNCTUATION = 5

_PUNCTUATION_RUN = re.compile(rf"[^\w\s]{{{MAX_PUNCTUATION_RUN + 1},}}")
_RUN = re.compile(r"\S+")
_TABLE_RULE = re.compile(r"[|:-]+")
_PIECE = re.compile(r"\w+|[^\w\s]")


def _is_mark(char: str) -> bool:
    """A combining character: a nonzero combining class, or a nonspacing or enclosing mark."""
    return bool(unicodedata.combining(char)) or unicodedata.category(char) in ("Mn", "Me")


def _cap_combining_marks(text: str) -> str:
    out: list[str] = []
    marks = 0
    for char in text:
        if _is_mark(char):
            marks += 1
            if marks > MAX_COMBINING_MARKS:
                continue
        else:
            marks = 0
        out.append(char)
    return "".join(out)


def _cut_punctuation(run: str) -> str:
    if run[0] == run[-1] == "|" and _TABLE_RULE.fullmatch(run):
        return "|---|"  # a Markdown table's rule, "|---|:--:|": one cell of it is still one (the normalizer drops it)
    return run[: MAX_PUNCTUATION_RUN if run.count(run[0]) == len(run) else MAX_MIXED_PUNCTUATION_RUN]


def bound_marks(text: str) -> str:
    """NFC, at most :data:`MAX_COMBINING_MARKS` marks per character, runs of punctuation cut to three (one mark
    repeated) or six (several)."""
    text = unicodedata.normalize("NFC", text)
    if any(_is_mark(c) for c in text):
        text = _cap_combining_marks(text)
    return _PUNCTUATION_RUN.sub(lambda m: _cut_punctuation(m[0]), text)


def _break_run(run: str) -> str:
    """``run`` as pieces of at most MAX_RUN_CHARS characters, joined by spaces; a piece ends before the next word
    once it holds MAX_RUN_PUNCTUATION marks (so closing punctuation stays with what it closes)."""
    pieces: list[str] = []
    current, marks = "", 0
    for part in _PIECE.findall(run):
        mark = not part[0].isalnum() and part[0] != "_"
        while len(part) > MAX_RUN_CHARS:  # a "word" longer than any word: read in pieces
            if current:
                pieces.append(current)
                current, marks = "", 0
            pieces.append(part[:MAX_RUN_CHARS])
            part = part[MAX_RUN_CHARS:]
        if current and (len(current) + len(part) > MAX_RUN_CHARS or (not mark and marks >= MAX_RUN_PUNCTUATION)):
            pieces.append(current)
            current, marks = "", 0
        current += part
        marks += mark
    if current:
        pieces.append(current)
    return " ".join(pieces)


def _needs_break(run: str) -> bool:
    if len(run) > MAX_RUN_CHARS:
        return True
    return sum(1 for c in run if not (c.isalnum() or c == "_")) > MAX_RUN_PUNCTUATION


def break_long_runs(text: str) -> str:
    """Every whitespace-free run of more than :data:`MAX_RUN_CHARS` characters, or more than
    :data:`MAX_RUN_PUNCTUATION` punctuation marks, broken into pieces that have neither."""
    return _RUN.sub(lambda m: _break_run(m[0]) if _needs_break(m[0]) else m[0], text)
