"""Text that remembers where it came from: each character of a normalized string carries the span of the source
text it was made from, so words spoken after normalization ("five dollars") can be traced back to the words the
user wrote ("$5").

:class:`Tracked` applies regular-expression substitutions the way ``re.sub`` does. A character left alone keeps
its span; every character of a replacement gets the span of the whole match it replaced (a replacement equal to
what it replaces keeps the per-character spans). :class:`SourceCursor` then walks the tokens a G2P made from the
normalized text, in order, and finds each one's source span.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Replace = Callable[[re.Match[str]], str]

# Punctuation stripped from the ends of a written word when it is shown ("“Hello,”" -> "Hello", "**bold**" ->
# "bold", "~~gone~~" -> "gone"); inside a word ("don't", "U.S.") and symbols that are read ("$5", "5%") stay.
_EDGE_PUNCTUATION = ".,;:!?…\"'“”‘’«»()[]{}¿¡-–—*_~`/\\。、！？「」『』（）・"
_WRITTEN = re.compile(r"\S+")


class Tracked:
    """A string and, for each of its characters, the ``[start, end)`` span of the source text it came from and
    whether a substitution wrote it (``written``)."""

    __slots__ = ("ends", "starts", "text", "written")

    def __init__(self, text: str, starts: list[int], ends: list[int], written: list[bool] | None = None) -> None:
        written = [False] * len(text) if written is None else written
        if not len(text) == len(starts) == len(ends) == len(written):
            raise ValueError("a tracked string needs one span per character")
        self.text, self.starts, self.ends, self.written = text, starts, ends, written

    @classmethod
    def of(cls, source: str) -> Tracked:
        """``source`` itself: character ``i`` comes from ``[i, i + 1)``."""
        return cls(source, list(range(len(source))), list(range(1, len(source) + 1)))

    def __len__(self) -> int:
        return len(self.text)

    def __getitem__(self, index: slice) -> Tracked:
        return Tracked(self.text[index], self.starts[index], self.ends[index], self.written[index])

    @staticmethod
    def join(pieces: Sequence[Tracked]) -> Tracked:
        """The pieces one after another (in one pass: joining many pieces costs their total length)."""
        starts: list[int] = []
        ends: list[int] = []
        written: list[bool] = []
        for piece in pieces:
            starts += piece.starts
            ends += piece.ends
            written += piece.written
        return Tracked("".join(p.text for p in pieces), starts, ends, written)

    def span(self, i: int, j: int) -> tuple[int, int]:
        """The source span of characters ``[i, j)``; an empty range: the point where it stands."""
        if i < j:
            return min(self.starts[i:j]), max(self.ends[i:j])
        point = self.starts[i] if i < len(self.text) else (self.ends[-1] if self.text else 0)
        return point, point

    def sub(self, pattern: re.Pattern[str], replace: Replace) -> Tracked:
        """``pattern.sub(replace, text)``, spans carried along (``self`` when nothing matches)."""
        text, starts, ends, written = [], [], [], []
        last = 0
        for match in pattern.finditer(self.text):
            i, j = match.span()
            new = replace(match)
            if new == match[0]:
                continue  # left as it was: the characters keep their own spans
            text.append(self.text[last:i])
            starts += self.starts[last:i]
            ends += self.ends[last:i]
            written += self.written[last:i]
            start, end = self.span(i, j)
            text.append(new)
            starts += [start] * len(new)
            ends += [end] * len(new)
            written += [True] * len(new)
            last = j
        if last == 0 and not text:
            return self
        text.append(self.text[last:])
        starts += self.starts[last:]
        ends += self.ends[last:]
        written += self.written[last:]
        return Tracked("".join(text), starts, ends, written)


def written_words(source: str) -> list[tuple[int, int]]:
    """The spans of the whitespace-delimited runs of ``source``: the words as written."""
    return [m.span() for m in _WRITTEN.finditer(source)]


_BRACKETS = {"(": ")", "[": "]", "{": "}", "（": "）", "「": "」", "『": "』"}


def shown(word: str) -> str:
    """A written word as shown with its timing: without the punctuation around it (``"“Hello,”"`` -> ``Hello``),
    but a bracket opened or closed inside the word keeps its partner (``"file(s),"`` -> ``file(s)``); a word of
    nothing but punctuation is shown as written."""
    start = len(word) - len(word.lstrip(_EDGE_PUNCTUATION))
    end = len(word.rstrip(_EDGE_PUNCTUATION))
    if start >= end:
        return word

    def unbalanced(opening: str, closing: str) -> int:
        core = word[start:end]
        return core.count(opening) - core.count(closing)

    while end < len(word) and any(word[end] == c and unbalanced(o, c) > 0 for o, c in _BRACKETS.items()):
        end += 1
    while start > 0 and any(word[start - 1] == o and unbalanced(o, c) < 0 for o, c in _BRACKETS.items()):
        start -= 1
    return word[start:end]


@dataclass(frozen=True)
class SourceWord:
    """A stretch of the source a spoken token comes from: written words ``first`` to ``last`` (indices into
    :func:`written_words`) and their text as shown."""

    first: int
    last: int
    text: str


class SourceCursor:
    """Finds, token by token in reading order, which written words of the source each G2P token comes from.

    The tokens' texts, with whitespace removed, are consumed from the normalized text's non-space characters (the
    frontend only ever changes whitespace after normalizing, so those are the characters the G2P saw). A token
    whose text is not where it should be is looked for a little further on (:data:`LOOKAHEAD` characters); one not
    found there has no source word, and the cursor stays put.
    """

    LOOKAHEAD = 200

    def __init__(self, normalized: Tracked, source: str) -> None:
        keep = [i for i, c in enumerate(normalized.text) if not c.isspace()]
        self._chars = "".join(normalized.text[i] for i in keep)
        self._starts = [normalized.starts[i] for i in keep]
        self._ends = [normalized.ends[i] for i in keep]
        self._source = source
        self._words = written_words(source)
        self._word_starts = [s for s, _ in self._words]
        self._pos = 0

    def locate(self, token_text: str) -> SourceWord | None:
        """The written words the next token (``token_text``) comes from, or ``None`` if it cannot be placed."""
        needle = "".join(token_text.split())
        if not needle:
            return None
        at = self._chars.find(needle, self._pos, self._pos + self.LOOKAHEAD + len(needle))
        if at < 0:
            return None
        self._pos = at + len(needle)
        start = min(self._starts[at : self._pos])
        end = max(self._ends[at : self._pos])
        return self._written(start, end)

    @property
    def word_count(self) -> int:
        """How many written words the source has."""
        return len(self._words)

    def shown(self, first: int, last: int) -> str:
        """Written words ``first`` to ``last`` of the source, as shown (see :func:`shown`)."""
        return shown(self._source[self._words[first][0] : self._words[last][1]])

    def _written(self, start: int, end: int) -> SourceWord | None:
        if not self._words:
            return None
        first = max(bisect.bisect_right(self._word_starts, start) - 1, 0)
        last = max(bisect.bisect_left(self._word_starts, max(end, start + 1)) - 1, first)
        return SourceWord(first, last, self.shown(first, last))
