"""Markdown, HTML and emoji as a reader says them: the markup goes, the text it marks stays.

What an LLM's reply or a pasted document holds: emphasis (``**``, ``_``, ``~~``), code spans and fences (the code
itself is read), headings, quotes, list bullets, tables (a row is read "a, b."), links and images (their text),
tags, entities. A heading, list item or table row is said as a sentence of its own. Emoji that decorate (at a
line's start or end, before punctuation) are dropped; between words an English text says some ("I ❤️ it" is
"love", "★★★★☆" "four out of five stars") and leaves the others to its G2P to name.

This runs before any language's own reading of the text (English: :mod:`ggtts.text.normalize`; Japanese; the text
of a family that reads its input as written) and knows no language's words but English's few emoji words. Each
kept character keeps its span of the text (:class:`~ggtts.text.tracking.Tracked`), so word timestamps still point
into what the user wrote. misaki's markdown-style pronunciation overrides (``[Kokoro](/kˈOkəɹO/)``) are no links
and are left alone.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
import re
import unicodedata
from collections.abc import Callable

from ggtts.text.tracking import Tracked


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# Run before every other rule, on the whole text (line-start forms need whole lines): what is markup goes, what
# it marks stays with its own spans (a word inside "**bold**" traces back to itself), so the rules after it read
# the words ("**$5**" -> "five dollars"). Every pattern is linear: no quantifier overlaps another that could
# match the same characters, and the scans that can fail stop at the next bracket, tag or line end.

# A link to this target is misaki's pronunciation override, not a link (misaki's en.py, G2P.preprocess): a stress
# ("+1", "-2", "0", "0.5", "-0.5"), phonemes ("/kˈOkəɹO/") or number flags ("#...#"); it is left for misaki.
_OVERRIDE_TARGET = r"(?:[+-]?[0-9]+|[+-]?0\.5|/[^()\s]*/|#[^()\s]*#)\)"
_LINE_END = r"[ \t\r]*$"
_QUOTE_MARKER = re.compile(r"^[ \t]{0,3}(?:>(?!=)[ \t]?)+", re.MULTILINE)  # "> " (not ">=")
_FENCE = re.compile(r"^[ \t]{0,3}(?:`{3,}[^`\n]*|~{3,}[^~\n]*)$", re.MULTILINE)  # "```python", "~~~"
# "---", "***", "- - -", "___": a horizontal rule; "===" (and "---") under a line: a setext heading's underline
_RULE_LINE = re.compile(
    rf"^[ \t]{{0,3}}(?:(?:\*[ \t]*+){{3,}}|(?:-[ \t]*+){{3,}}|(?:_[ \t]*+){{3,}}|=++){_LINE_END}", re.MULTILINE
)
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}(?:[ \t]+([^\n]*))?$", re.MULTILINE)  # "## Title", not "#tag", "#1"
_TABLE_ROW = re.compile(rf"^[ \t]*\|[^\n]*\|{_LINE_END}", re.MULTILINE)
_TABLE_RULE = re.compile(r"[ \t]*:?-+:?[ \t]*")
_CELL_WALL = re.compile(r"(?<!\\)\|")
# "- item", "* item", "+ item", "• item", "1. item", "2) item", a task's "[ ]" or "[x]" after the bullet
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+•]|([0-9]{1,9})([.)]))[ \t]+(?:\[[ xX]\][ \t]+)?([^\n]*)$", re.MULTILINE)
# an indented line that is no item of its own: the item above goes on there
_ITEM_GOES_ON = re.compile(r"\n[ \t]+(?![-*+•][ \t]|[0-9]{1,9}[.)][ \t])\S")
# "[text](https://...)" and "![alt](image.png)" (a target of one level of parentheses, an optional title)
_LINK = re.compile(
    rf"!?\[([^\[\]\n]*)\]\((?!{_OVERRIDE_TARGET})(?:[^()\s]|\([^()\s]*\))*+"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'))?\)"
)
_AUTOLINK = re.compile(
    r"<(?:mailto:)?((?:https?|ftp)://[^\s<>]*|www\.[^\s<>]*|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>", re.IGNORECASE
)
# HTML tags by name (so "a < b > c", "x<y", "<3", "<=" and "List<String>" stay), attributes only as name=value
_BLOCK_TAG_NAMES = (  # each ends a line where it stands
    "address article aside blockquote br dd details div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 header hr "
    "li main nav ol p pre section summary table tbody td tfoot th thead tr ul"
)
_INLINE_TAG_NAMES = (
    "a abbr b big cite code del dfn em font i img ins kbd mark q s samp small span strike strong sub sup tt u var"
)
_BLOCK_TAGS = frozenset(_BLOCK_TAG_NAMES.split())
_INLINE_TAGS = frozenset(_INLINE_TAG_NAMES.split())
_TAG = re.compile(
    rf"</?({_alternation(sorted(_BLOCK_TAGS | _INLINE_TAGS))})"
    r"(?:\s++[\w:-]++\s*+=\s*+(?:\"[^\"<>\n]*+\"|'[^'<>\n]*+'|[^\s\"'<>=`]++))*+\s*+/?>",
    re.IGNORECASE,
)
_CODE_SPAN = re.compile(r"(?<!`)(`+)([^`\n]+)\1(?!`)")  # "`code`", "``a`b``" is left as written
_DELIMITER_RUN = re.compile(r"\*+|_+|~+")
_EMPHASIS_RUNS = frozenset({"*", "**", "***", "_", "__", "___", "~~"})
# Emphasis opens after a space or one of these, and closes before a space or one of these ("*" before a letter
# too): so "snake_case", "2*3*4", "(a)*(b)*(c)", "a * b" and a lone "note*" are no emphasis, nor "/_path_/".
# Text written without spaces (Japanese, Chinese) has "*" open between two of its letters too: "これは**重要**です"
# (not "送料無料*1": a footnote's mark).
_OPENS_AFTER = frozenset("\"'“‘([{«*_~-—–「『（【〔《〈")
_CLOSES_BEFORE = frozenset("\"'”’)]}».,;:!?…*_~-—–」』）】〕》〉。、，．！？；：")
_ESCAPED = re.compile(r"\\([*_~`#|\[\]<>\\])")  # "\*" is a "*" as written
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# A heading, list item or table row that ends without one of these gets a period: each is said as a sentence of
# its own (the G2P joins lines without a pause: "- Fast" "- Cheap" would be read "Fast Cheap").
_PAUSES = frozenset(".!?…,;:—–。、，．！？；：")
_NOT_LAST = " \t\r\"'”’)]}»*_~`」』）】〕》〉"  # what may stand after the last word before a pause

# Pieces of a rewritten match (see _rewrite): (None, i, j) keeps characters i to j with their own spans;
# (new, i, j) writes ``new`` with the span of the text's [i, j) (a point where i == j).
_Part = tuple[str | None, int, int]


def _rewrite(text: Tracked, pattern: re.Pattern[str], parts: Callable[[re.Match[str]], list[_Part] | None]) -> Tracked:
    """Each match of ``pattern`` replaced by ``parts(match)`` (``None``: left as it is); what is kept keeps its
    own spans, unlike :meth:`Tracked.sub`, which gives a whole replacement the span of the whole match."""
    pieces: list[Tracked] = []
    last = 0
    for m in pattern.finditer(text.text):
        made = parts(m)
        if made is None:
            continue
        pieces.append(text[last : m.start()])
        for new, i, j in made:
            if new is None:
                pieces.append(text[i:j])
            else:
                start, end = text.span(i, j)
                pieces.append(Tracked(new, [start] * len(new), [end] * len(new), [True] * len(new)))
        last = m.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return Tracked.join(pieces)


def _kept(m: re.Match[str], group: int) -> list[_Part]:
    """Group ``group`` of ``m`` kept, the rest of the match dropped."""
    return [(None, m.start(group), m.end(group))] if m[group] else []


def _ended(text: str, i: int, j: int, *, goes_on: bool = False) -> list[_Part]:
    """Characters ``i`` to ``j`` of ``text`` (spaces at the end dropped), and a period after them where they end
    without a pause and ``goes_on`` is false."""
    body = text[i:j].rstrip()
    j = i + len(body)
    if not body:
        return []
    last = body.rstrip(_NOT_LAST)[-1:]
    stop = not goes_on and last != "" and last not in _PAUSES
    return [(None, i, j)] + ([(".", j, j)] if stop else [])


def _heading(m: re.Match[str]) -> list[_Part]:
    if m[1] is None:
        return []
    body = m[1].rstrip()
    closed = body.rstrip("#")
    if closed != body and (not closed or closed[-1] in " \t"):  # "## Title ##": the closing hashes go too
        body = closed
    return _ended(m.string, m.start(1), m.start(1) + len(body))


def _table_row(m: re.Match[str]) -> list[_Part]:
    """A table's row as a sentence: "| a | b |" -> "a, b."; the rule under its header ("|---|:-:|") goes."""
    walls = [w.start() for w in _CELL_WALL.finditer(m.string, m.start(), m.end())]
    cells = [(i + 1, j) for i, j in itertools.pairwise(walls)]
    if all(_TABLE_RULE.fullmatch(m.string, i, j) or not m.string[i:j].strip() for i, j in cells):
        return []
    parts: list[_Part] = []
    for i, j in cells:
        cell = m.string[i:j]
        if cell.strip():
            start = i + len(cell) - len(cell.lstrip())
            if parts:
                parts.append((", ", start, start))
            parts.append((None, start, i + len(cell.rstrip())))
    end = parts[-1][2]
    return parts[:-1] + _ended(m.string, parts[-1][1], end)


def _list_item(m: re.Match[str]) -> list[_Part]:
    """ "- item" -> "item."; "1. item" and "1) item" -> "1. item." (read "one. item.")."""
    parts: list[_Part] = []
    if m[1]:
        parts.append((None, m.start(1), m.end(1)))
        parts.append((None, m.start(2), m.end(2)) if m[2] == "." else (".", m.start(2), m.end(2)))
        parts.append((" ", m.end(2), m.end(2)))
    goes_on = _ITEM_GOES_ON.match(m.string, m.end()) is not None
    return parts + _ended(m.string, m.start(3), m.end(3), goes_on=goes_on)


def _tag(m: re.Match[str], code: list[tuple[int, int]]) -> str:
    name = m[1].lower()
    glued = m.start() > 0 and m.string[m.start() - 1].isalnum() and m[0][1] != "/"
    if _in_code(code, m.start()) or (glued and len(name) == 1):  # "`<div>`" is code; "Box<B>" a generic
        return m[0]
    return "\n" if name in _BLOCK_TAGS else ""


def _code_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _CODE_SPAN.finditer(text)]


def _in_code(spans: list[tuple[int, int]], i: int) -> bool:
    """Whether ``i`` is inside one of ``spans`` (in order, apart)."""
    at = bisect.bisect_right(spans, (i, math.inf)) - 1
    return at >= 0 and spans[at][0] <= i < spans[at][1]


def _wide(char: str) -> bool:
    """Whether ``char`` is of a script written without spaces between words (East Asian wide or full-width)."""
    return unicodedata.east_asian_width(char) in ("W", "F")


def _paired_emphasis(text: str) -> set[int]:
    """Where the emphasis markers of ``text`` begin ("**", "_", "~~" ...): runs that open (after a space or an
    opening mark, before a word) paired with the next run of the same kind on the line that closes (after a word,
    before a space or a closing mark); nothing inside code spans. One pass with a stack per kind: linear."""
    code = _code_spans(text)
    paired: set[int] = set()
    open_runs: dict[str, list[int]] = {}
    in_code = 0  # the first code span that does not end before the run
    for m in re.finditer(r"\*+|_+|~+|\n", text):
        i, j = m.span()
        if m[0] == "\n":
            open_runs.clear()  # emphasis never spans lines
            continue
        while in_code < len(code) and code[in_code][1] <= i:
            in_code += 1
        if (in_code < len(code) and code[in_code][0] <= i) or m[0] not in _EMPHASIS_RUNS:
            continue
        before = text[i - 1] if i else " "
        after = text[j] if j < len(text) else " "
        if before == "\\":
            continue
        runs = open_runs.setdefault(m[0], [])
        closes = after.isspace() or after in _CLOSES_BEFORE or (after.isalnum() and m[0][0] == "*")  # "**a**b"
        if runs and not before.isspace() and closes:
            paired.add(runs.pop())
            paired.add(i)
        elif not after.isspace() and (
            before.isspace() or before in _OPENS_AFTER or (m[0][0] == "*" and _wide(before) and _wide(after))
        ):
            runs.append(i)
    return paired


def strip_markup(text: Tracked, *, english: bool = True) -> Tracked:
    """Markdown, HTML and emoji as the words a reader says (see the module's notes): markup goes, what it marks
    stays with its own spans. ``english``: emoji between words may be said in English words ("love", "yes");
    otherwise they are left for the language's G2P (those that decorate go either way)."""
    text = text.sub(_QUOTE_MARKER, lambda m: "")
    text = text.sub(_FENCE, lambda m: "")  # the code inside is read as written: it is what the text says
    text = text.sub(_RULE_LINE, lambda m: "")
    text = _rewrite(text, _HEADING, _heading)
    text = _rewrite(text, _TABLE_ROW, _table_row)
    text = _rewrite(text, _LIST_ITEM, _list_item)
    # links and tags inside code spans are code: "`[a](b)`", "`<div>`" are read as written
    code = _code_spans(text.text)
    text = _rewrite(text, _LINK, lambda m: None if _in_code(code, m.start()) else _kept(m, 1))
    code = _code_spans(text.text)
    text = _rewrite(text, _AUTOLINK, lambda m: None if _in_code(code, m.start()) else _kept(m, 1))
    code = _code_spans(text.text)
    text = text.sub(_TAG, lambda m: _tag(m, code))
    paired = _paired_emphasis(text.text)
    if paired:
        text = text.sub(_DELIMITER_RUN, lambda m: "" if m.start() in paired else m[0])
    text = _rewrite(text, _CODE_SPAN, lambda m: _kept(m, 2))
    text = _rewrite(text, _ESCAPED, lambda m: _kept(m, 1))
    text = text.sub(_ENTITY, lambda m: html.unescape(m[0]))
    return text.sub(_EMOJI, lambda m: _no_emoji(m, english))


def plain_text(text: str, *, english: bool = False) -> str:
    """:func:`strip_markup` of a text whose spans nobody needs (a family that reads its input as written), without
    the blanks it leaves at either end ("✅ Done" -> "Done")."""
    return strip_markup(Tracked.of(text), english=english).text.strip()


# pictographs, dingbats, flags and their joiners (not music's ♩-♯, nor ⌘ and the other technical signs), with the
# blanks before them
_EMOJI = re.compile(
    "(?<![ \t])[ \t]*+[\U0001f000-\U0001faff\u2600-\u2668\u2670-\u27bf\u2b00-\u2bff\u231a\u231b\u23e9-\u23fa"
    "\ufe0f\u200d\u20e3]+"
)
_WORD_FOLLOWS = re.compile(r" ?\w")
_TICKS = {"✓": "yes", "✔": "yes", "☑": "yes", "✗": "no", "✘": "no"}  # a table's or a list's answers
_STARS = frozenset("★⭐☆")
_LOVE = frozenset("❤♥💕💖💗💓💞💘💝")


def _no_emoji(m: re.Match[str], english: bool) -> str:
    """An emoji at a line's start or end, or before punctuation, is an LLM's decoration ("✅ Done!", "Thanks ❤️."):
    dropped. After a word it is a word of the sentence: "I ❤️ it" is "love", "rated ★★★★☆" "four out of five stars";
    other emoji between words are left for the G2P to name ("Grab a ☕" is "hot beverage"). Ticks and crosses are
    "yes" and "no"."""
    run = m[0].lstrip(" \t")
    lead = m[0][: len(m[0]) - len(run)]
    run = run.replace("\ufe0f", "")
    before, after = m.string[m.start() - 1 : m.start()], m.string[m.end() : m.end() + 1]
    word_before = (lead and m.string[m.start() - 1 : m.start()].isalnum()) or (not lead and before.isalnum())
    tail = " " if after.isalnum() else ""
    if not run.strip("\u200d\u20e3"):
        return lead  # a keycap's or a presentation's modifiers alone ("1️⃣" is "1")
    if english and run in _TICKS:
        return f"{lead}{_TICKS[run]}{tail}"
    if english and word_before and set(run) <= _STARS:
        filled = sum(c != "☆" for c in run)
        said = f"{filled} out of {len(run)} stars" if "☆" in run else "star" if filled == 1 else f"{filled} stars"
        return f"{lead}{said}{tail}"
    if not (word_before and _WORD_FOLLOWS.match(m.string, m.end())):
        return " " if before.isalnum() and after.isalnum() else ""  # decoration ("great👍thanks": two words still)
    return f"{lead}love{tail}" if english and set(run) <= _LOVE else m[0]
