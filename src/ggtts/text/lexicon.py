"""A pronunciation lexicon: the user's own words, each said as the user spells it out ("ggtts" -> "gee gee tee tee
ess", "Nguyen" -> "win"), before any other reading of the text, in every family and language.

A lexicon file is UTF-8 text, one entry a line, ``written = said``; blank lines and lines starting with ``#`` are
skipped. A JSON file (``.json``) holds one object of the same pairs. An entry written in lowercase is found in any
capitalization ("ggtts", "GGTTS"); one with a capital only as written ("US" is not "us"). An entry is a whole word:
"cat" is not found in "catalog", though in text written without spaces (Japanese, Chinese) a word needs no space
around it. Where entries overlap, the longest written one wins. The said text is read as any text is (numbers,
Markdown...); for Kokoro's English it may hold misaki's pronunciation override, ``[Kokoro](/kˈOkəɹO/)``.

What is said keeps the span of what was written (:class:`~ggtts.text.tracking.Tracked`), so word timestamps and
captions show the word as written (in English; Japanese timestamps show the words its G2P reads, as said).
"""

from __future__ import annotations

import functools
import json
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggtts.errors import InputError
from ggtts.text.tracking import Tracked

MAX_ENTRIES = 100_000
MAX_WRITTEN_CHARS = 200
MAX_SAID_CHARS = 1000
MAX_FILE_BYTES = 16 * 1024 * 1024
SEPARATOR = "="


@dataclass(frozen=True)
class Lexicon:
    """Written forms and what to say for each (see the module's notes); ``name``: where they came from, for
    messages. Equal lexicons say the same: it takes part in a text's reading key (Kokoro's read-ahead)."""

    entries: tuple[tuple[str, str], ...]
    name: str = "the lexicon"

    def __post_init__(self) -> None:
        if len(self.entries) > MAX_ENTRIES:
            raise InputError(f"{self.name}: {len(self.entries)} entries; at most {MAX_ENTRIES}")
        seen: dict[str, str] = {}
        for written, said in self.entries:
            _check_entry(written, said, self.name)
            key = _key(written)
            if key in seen and seen[key] != said:
                raise InputError(f"{self.name}: {written!r} is given twice, said {seen[key]!r} and {said!r}")
            seen[key] = said

    @classmethod
    def of(cls, pairs: Mapping[str, str], name: str = "the lexicon") -> Lexicon:
        """A lexicon of ``{written: said}``."""
        if not isinstance(pairs, Mapping):
            raise InputError(f"{name} must map written words to what is said, got {type(pairs).__name__}")
        for written, said in pairs.items():
            if not isinstance(written, str) or not isinstance(said, str):
                raise InputError(f"{name}: every written word and what is said must be text, got {written!r}: {said!r}")
        return cls(tuple(pairs.items()), name)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Lexicon:
        """The lexicon in file ``path`` (text lines ``written = said``, or a ``.json`` object); an InputError naming
        the file, and the line, for a file that cannot be read or a line that is not an entry."""
        p = Path(path).expanduser()
        try:
            found = p.stat()
        except FileNotFoundError:
            raise InputError(f"{p}: no such lexicon file") from None
        except OSError as e:
            raise InputError(f"{p}: cannot read the lexicon file: {e.strerror or e}") from None
        # (a command line checks the file, reads it ahead and loads it: one reading while it stays the same)
        return _read(p, found.st_mtime_ns, found.st_size)

    @classmethod
    def _read(cls, p: Path) -> Lexicon:
        try:
            if p.stat().st_size > MAX_FILE_BYTES:
                raise InputError(f"{p}: a lexicon file is at most {MAX_FILE_BYTES // 2**20} MiB")
            content = p.read_text(encoding="utf-8-sig")  # (a byte-order mark is no word)
        except FileNotFoundError:
            raise InputError(f"{p}: no such lexicon file") from None
        except IsADirectoryError:
            raise InputError(f"{p}: a lexicon is a file, not a folder") from None
        except UnicodeDecodeError as e:
            raise InputError(f"{p}: a lexicon file is UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise InputError(f"{p}: cannot read the lexicon file: {e.strerror or e}") from None
        if p.suffix.lower() == ".json":
            try:
                pairs = json.loads(content)
            except json.JSONDecodeError as e:
                raise InputError(f"{p}: not JSON ({e.msg}, line {e.lineno})") from None
            if not isinstance(pairs, dict):
                raise InputError(f'{p}: a JSON lexicon is one object, {{"written": "said", ...}}')
            return cls.of(pairs, str(p))
        entries = []
        for number, line in enumerate(content.splitlines(), 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            written, separator, said = stripped.partition(SEPARATOR)
            if not separator:
                raise InputError(f"{p}:{number}: an entry is 'written {SEPARATOR} said', got {stripped[:80]!r}")
            entries.append((written.strip(), said.strip()))
            _check_entry(*entries[-1], name=f"{p}:{number}")
        return cls(tuple(entries), str(p))

    @functools.cached_property
    def _tries(self) -> tuple[dict[str, Any], dict[str, Any], re.Pattern[str] | None]:
        """The written forms as two tries of characters, each form's said text at its end (:data:`_END`): those
        found as written, and the lowercase ones (walked with the text lowercased); and the characters a form may
        start with, to find where to walk from."""
        exact: dict[str, Any] = {}
        folded: dict[str, Any] = {}
        firsts: set[str] = set()
        for written, said in self.entries:
            lowercase = written == written.lower()
            node = folded if lowercase else exact
            for char in written:
                node = node.setdefault(char, {})
            node[_END] = said
            firsts.update({written[0], written[0].upper(), written[0].title()} if lowercase else {written[0]})
        starts = re.compile(f"[{''.join(re.escape(c) for c in sorted(firsts))}]") if firsts else None
        return exact, folded, starts

    def apply(self, text: Tracked) -> Tracked:
        """``text`` with each entry found said as the lexicon says, what is said keeping the span of the written
        word."""
        found = self._found(text.text)
        if not found:
            return text
        pieces: list[Tracked] = []
        last = 0
        for i, j, said in found:
            pieces.append(text[last:i])
            start, end = text.span(i, j)
            pieces.append(Tracked(said, [start] * len(said), [end] * len(said), [True] * len(said)))
            last = j
        pieces.append(text[last:])
        return Tracked.join(pieces)

    def said(self, text: str) -> str:
        """:meth:`apply` for a text whose spans nobody needs."""
        return self.apply(Tracked.of(text)).text

    def _found(self, text: str) -> list[tuple[int, int, str]]:
        """Where entries are found in ``text``, left to right, apart: at each place a form may start (not inside a
        word), the longest form that ends there as a whole word. Each place is walked as far as the longest
        form is long, so the cost is the text's length times that at most, however many entries there are."""
        exact, folded, starts = self._tries
        if starts is None:
            return []
        found: list[tuple[int, int, str]] = []
        done = 0  # where the last one found ends: none overlap
        for m in starts.finditer(text):
            i = m.start()
            if i < done or (i > 0 and _spaced_letter(text[i - 1]) and _spaced_letter(text[i])):
                continue
            best: tuple[int, str] | None = None
            for trie, fold in ((folded, True), (exact, False)):  # at equal length the one as written wins
                node, k = trie, i
                while k < len(text):
                    char = text[k].lower() if fold else text[k]
                    step = node.get(char) if len(char) == 1 else None
                    if step is None:
                        break
                    node, k = step, k + 1
                    ends_word = not (k < len(text) and _spaced_letter(text[k - 1]) and _spaced_letter(text[k]))
                    if _END in node and ends_word and (best is None or k >= best[0]):
                        best = (k, node[_END])
            if best is not None:
                found.append((i, best[0], best[1]))
                done = best[0]
        return found


_END = ""  # a trie node's key for the said text of the form that ends there (no character is "")


@functools.lru_cache(maxsize=8)
def _read(path: Path, mtime_ns: int, size: int) -> Lexicon:
    """:meth:`Lexicon.read` of a file as it is (its time and size are the key)."""
    return Lexicon._read(path)


def _key(written: str) -> str:
    """How an entry is looked up: a lowercase one by any capitalization, the others as written."""
    return written.lower() if written == written.lower() else written


def _check_entry(written: object, said: object, name: str) -> None:
    if not isinstance(written, str) or not isinstance(said, str):
        raise InputError(f"{name}: every written word and what is said must be text")
    if not written.strip() or not said.strip():
        raise InputError(f"{name}: an entry needs a written word and what to say, got {written!r} = {said!r}")
    if written != written.strip():
        raise InputError(f"{name}: the written word {written!r} begins or ends with a space")
    if len(written) > MAX_WRITTEN_CHARS or len(said) > MAX_SAID_CHARS:
        raise InputError(
            f"{name}: an entry is at most {MAX_WRITTEN_CHARS} characters written and {MAX_SAID_CHARS} said"
        )
    if "\n" in written or "\n" in said:
        raise InputError(f"{name}: an entry is one line")


def _spaced_letter(char: str) -> bool:
    return (char.isalnum() or char == "_") and unicodedata.east_asian_width(char) not in ("W", "F")


def as_lexicon(value: object) -> Lexicon | None:
    """The ``lexicon`` load option as a lexicon: a file's path, a ``{written: said}`` mapping, a :class:`Lexicon`,
    or None; an InputError for anything else."""
    if value is None or isinstance(value, Lexicon):
        return value
    if isinstance(value, str | os.PathLike) and not isinstance(os.fspath(value), bytes):
        return Lexicon.read(value)
    if isinstance(value, Mapping):
        return Lexicon.of(value)
    raise InputError(f"lexicon must be a file's path or a mapping of written words to what is said, got {value!r}")
