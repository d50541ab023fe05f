"""Text that arrives in pieces (a language model's reply, token by token) cut into stretches ready to speak.

A stretch is ready once what ends it has arrived: a sentence end followed by whitespace, or a line break (a
full-width Chinese or Japanese one, "。", followed by anything but another mark: no space follows it). The first
stretch of a reply may also end at a clause (a comma, semicolon, colon or dash followed by whitespace, once it holds
a few words; a full-width comma, "、", after a few characters), so the first audio can start before the first
sentence is complete; later stretches end at sentences, which a model reads with better prosody, unless one grows
past ``max_chars`` without a sentence end (then it is cut at its last clause, else its last space). Whatever is
left when the text ends is the last stretch.

The whitespace after a mark is awaited because the mark alone does not settle it: "3." may be "3.5", and
"Dr." is followed by a name, not a new sentence (a short list of English abbreviations and single capital
initials never end a sentence here). sentence-stream, which Home Assistant's Wyoming servers use, waits
for the next sentence's first letter instead and never cuts at a clause, so a voice agent would hear its
first word a sentence later.
"""

from __future__ import annotations

import re

from ggtts.text.chunking import CLAUSE_END, CLOSING, SENTENCE_END

FIRST_CLAUSE_MIN_WORDS = 3  # a first stretch cut at a clause holds at least this many words
MAX_CHARS = 400  # a stretch without a sentence end is cut before it grows longer than this

# Words after which a period does not end a sentence (lower case, without the period).
# Left out: words that also end sentences as words ("no.", "sun.", "mar.").
ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "sr", "jr", "mt", "ft", "vs", "etc", "e.g", "i.e", "cf", "vol", "fig"}
    | {"approx", "dept", "inc", "ltd", "corp", "jan", "feb", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov"}
)
# Chinese and Japanese marks (full width): no space follows them, and these are not ambiguous ("。" is never a
# decimal point; "．" is one, and is left out), so the next character that is not a mark settles them; a clause
# mark before a digit may be a thousands separator ("１，０００"), so it does not cut there
CJK_SENTENCE_END = frozenset("。！？")
CJK_CLAUSE_END = frozenset("、，；：")
CJK_CLOSING = frozenset("」』）】〕〉》")
FIRST_CLAUSE_MIN_CJK_CHARS = 8  # a first stretch cut at a full-width comma holds at least this many characters
_MARKS = SENTENCE_END | CLAUSE_END | CLOSING | CJK_SENTENCE_END | CJK_CLAUSE_END | CJK_CLOSING


def _chars(marks: frozenset[str]) -> str:
    return re.escape("".join(sorted(marks)))


_CLOSE, _CJK_CLOSE = _chars(CLOSING), _chars(CLOSING | CJK_CLOSING)
_SENTENCE = re.compile(
    f"[{_chars(SENTENCE_END)}]+[{_CLOSE}]*(?=\\s)|[{_chars(CJK_SENTENCE_END)}]+[{_CJK_CLOSE}]*(?=[^{_chars(_MARKS)}])|\\n"
)
_CLAUSE = re.compile(
    f"[{_chars(CLAUSE_END)}][{_CLOSE}]*(?=\\s)|[{_chars(CJK_CLAUSE_END)}]+(?=[^{_chars(_MARKS)}0-9０-９])"
)


class TextStream:
    """Feed text pieces as they come; get back the stretches that are ready to speak, in order.

    ``feed(piece)`` returns the stretches the piece completed (often none), ``flush()`` the rest. Every
    character fed lands in exactly one stretch (whitespace between stretches is dropped; a stretch of only
    whitespace is never returned).
    """

    def __init__(self, *, first_clause_min_words: int = FIRST_CLAUSE_MIN_WORDS, max_chars: int = MAX_CHARS) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {max_chars}")
        self.first_clause_min_words = first_clause_min_words
        self.max_chars = max_chars
        self._pending = ""
        self._searched = 0  # the pending text before this offset holds no boundary
        self._said_any = False

    @property
    def pending(self) -> str:
        """The text fed and not yet returned."""
        return self._pending

    def feed(self, piece: str) -> list[str]:
        self._pending += piece
        ready: list[str] = []
        while (cut := self._next_cut()) is not None:
            stretch, self._pending = self._pending[:cut], self._pending[cut:].lstrip()
            self._searched = 0
            if stretch.strip():
                ready.append(stretch.strip())
                self._said_any = True
        return ready

    def flush(self) -> list[str]:
        """What is left, as the last stretch (none when only whitespace is left); the stream starts over."""
        rest, self._pending, self._searched = self._pending.strip(), "", 0
        self._said_any = False
        return [rest] if rest else []

    def _next_cut(self) -> int | None:
        text = self._pending
        # A boundary needs the whitespace after it: one that ended the text searched before may complete now, so
        # the search goes back over the marks and closing quotes at its end.
        start = max(0, self._searched - 1)
        while start > 0 and text[start - 1] in _MARKS:
            start -= 1
        cuts = []
        for match in _SENTENCE.finditer(text, start):
            if match.group() == "\n" or not self._abbreviation(text, match.start()):
                cuts.append(match.end())
                break
        if not self._said_any:  # the first stretch: whichever comes first, a sentence end or a long enough clause
            for match in _CLAUSE.finditer(text, start, cuts[0] if cuts else len(text)):
                head = text[: match.start()]
                if len(head.split()) >= self.first_clause_min_words or (
                    match.group()[0] in CJK_CLAUSE_END and len("".join(head.split())) >= FIRST_CLAUSE_MIN_CJK_CHARS
                ):
                    cuts.append(match.end())
                    break
        if cuts:
            return min(cuts)
        self._searched = len(text)
        if len(text) > self.max_chars:
            return self._forced_cut(text)
        return None

    def _forced_cut(self, text: str) -> int:
        """Where to cut a stretch that grew past ``max_chars`` without a sentence end: its last clause end in
        the allowed length, else its last space there, else at the length itself (one huge word)."""
        head = text[: self.max_chars + 1]
        clauses = list(_CLAUSE.finditer(head))
        if clauses:
            return clauses[-1].end()
        space = head.rfind(" ")
        return space if space > 0 else self.max_chars

    @staticmethod
    def _abbreviation(text: str, mark: int) -> bool:
        """Whether the period at ``mark`` ends an abbreviation or an initial ("Dr.", "e.g.", "J.")."""
        if text[mark] != ".":
            return False
        words = text[max(0, mark - 40) : mark].split()  # the word before the mark, not the whole text
        if not words:
            return False
        word = words[-1].lstrip("\"'“‘([«").lower()
        return word in ABBREVIATIONS or (len(word) == 1 and word.isalpha() and words[-1][-1].isupper())
