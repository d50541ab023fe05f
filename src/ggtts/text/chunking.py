"""Split text into chunks whose phoneme strings fit the model's context.

Kokoro reads at most 510 phonemes at a time (its 512 positions minus BOS and EOS). Long text is cut where
a reader would pause, trying the strongest boundary first: line breaks and sentence ends, then clause
punctuation (, ; : —), then any word boundary; a single word longer than the limit (only nonsense does that)
is cut inside its phonemes. Pieces are packed greedily, so a chunk holds as many whole sentences as fit.
Every word of the input lands in exactly one chunk, in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ggtts.errors import InputError
from ggtts.runtime.cancel import check_cancelled
from ggtts.text.g2p import G2PToken, get_g2p

KOKORO_MAX_PHONEMES = 510  # 512 positions minus BOS and EOS

SENTENCE_END = frozenset(".!?…")
CLAUSE_END = frozenset(",;:—–")
CLOSING = frozenset("”’\"')]»")  # stays with the sentence it closes
# Symbols that are not speech: a chunk of nothing else is skipped.
NOT_SPOKEN = SENTENCE_END | CLAUSE_END | CLOSING | frozenset(" “‘([«-")

# Boundary strength after a piece; packing splits at the strongest available boundary first.
WORD, CLAUSE, SENTENCE = 0, 1, 2

_SPACES = re.compile(r"\s+")
_RUNS_OF_SPACES = re.compile(" {2,}")
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")  # a blank line: no chunk spans it
_RAW_PIECE = re.compile(r"\S+\s*")
# The tagger and G2P see a line at most this long at a time (cut at sentence ends): memory stays bounded and
# a cancelled request stops between pieces.
MAX_G2P_CHARS = 1000
_SENTENCE_BREAK = re.compile(f"[{re.escape(''.join(SENTENCE_END))}][{re.escape(''.join(CLOSING))}]*\\s")


@dataclass(frozen=True)
class Chunk:
    """A stretch of normalized text and its phonemes (at most the chunker's ``max_phonemes`` characters).

    ``tokens`` are the G2P tokens it was made from, in order (a word cut in pieces for being longer than the
    limit: its text with the first piece); ``words`` are the spoken words the frontend traced back to the
    user's text, for timestamps.
    """

    text: str
    phonemes: str
    tokens: tuple[G2PToken, ...] = ()
    words: tuple[SpokenWord, ...] = ()


@dataclass(frozen=True)
class SpokenWord:
    """A word as the user wrote it (``text``, punctuation around it removed) and the phonemes that say it in a
    chunk: one string per G2P token ("$5": "fˈIv", "dˈɑləɹz"), in the order they stand in the chunk's phonemes
    (which may hold punctuation between them: "555-1234" is said with a pause). ``source`` numbers the written
    words it comes from (the same number in two chunks: one written word spoken across a chunk boundary);
    ``None`` for a word that could not be traced back."""

    text: str
    phonemes: tuple[str, ...]
    source: int | None = None
    ends_sentence: bool = False  # sentence-final punctuation follows it
    goes_on: bool = False  # the chunk after begins with the rest of this written word (same ``source``)


@dataclass(frozen=True)
class _Piece:
    """A word or punctuation mark with the whitespace after it, and the boundary strength after it."""

    text: str
    phonemes: str
    boundary: int


def _boundary(symbols: str) -> int:
    """Boundary strength after a word or punctuation mark, from its last symbol before closing quotes."""
    last = symbols.rstrip().rstrip("".join(CLOSING))[-1:]
    if last and last in SENTENCE_END:
        return SENTENCE
    if last and last in CLAUSE_END:
        return CLAUSE
    return WORD


def is_spoken(phonemes: str) -> bool:
    """Whether a phoneme string has anything to say (not only punctuation and spaces)."""
    return any(c not in NOT_SPOKEN for c in phonemes)


def _is_trailing_punctuation(piece: _Piece) -> bool:
    """Punctuation that belongs to what precedes it: the rest of "...", a closing quote or bracket."""
    symbols = piece.phonemes.strip() or piece.text.strip()
    return bool(symbols) and all(c in SENTENCE_END | CLAUSE_END | CLOSING for c in symbols)


def _phonemes(pieces: Sequence[_Piece]) -> str:
    return _RUNS_OF_SPACES.sub(" ", "".join(p.phonemes for p in pieces)).strip()


def _groups(pieces: Sequence[_Piece], level: int) -> list[list[_Piece]]:
    """Split after every piece whose boundary is at least ``level``, keeping trailing punctuation attached
    and never splitting where the text has no whitespace ("(in", "dog.”")."""
    groups: list[list[_Piece]] = [[]]
    pending = False
    for piece in pieces:
        previous = groups[-1][-1] if groups[-1] else None
        spaced = previous is not None and previous.text[-1:].isspace()
        if pending and spaced and not _is_trailing_punctuation(piece):
            groups.append([])
            pending = False
        groups[-1].append(piece)
        if piece.boundary >= level:
            pending = True
    return [g for g in groups if g]


def _cut_word(piece: _Piece, limit: int) -> list[list[_Piece]]:
    """A single piece over the limit: cut its phonemes at spaces where possible, else anywhere."""
    parts, rest = [], piece.phonemes.strip()
    while len(rest) > limit:
        cut = rest.rfind(" ", 1, limit + 1)
        cut = cut if cut > 0 else limit
        parts.append(rest[:cut])
        rest = rest[cut:].lstrip()
    parts.append(rest)
    if piece.text.strip() == piece.phonemes.strip():  # phonemes given as input: they are the text
        return [[_Piece(part + " ", part, WORD)] for part in parts]
    # The text goes with the first part, so it is neither lost nor repeated.
    return [[_Piece(piece.text if i == 0 else "", part, WORD)] for i, part in enumerate(parts)]


def _pack(pieces: Sequence[_Piece], limit: int, level: int = SENTENCE) -> list[list[_Piece]]:
    """Greedily pack groups split at ``level`` into runs of at most ``limit`` phonemes; recurse into groups
    that are too long on their own at the next weaker boundary."""
    if len(_phonemes(pieces)) <= limit:
        return [list(pieces)]
    if level < WORD:  # one word, with the punctuation around it, longer than the limit
        word = _Piece("".join(p.text for p in pieces), "".join(p.phonemes for p in pieces), WORD)
        return _cut_word(word, limit)
    packed: list[list[_Piece]] = []
    current: list[_Piece] = []
    for group in _groups(pieces, level):
        if len(_phonemes(current + group)) <= limit:
            current += group
            continue
        if current:
            packed.append(current)
            current = []
        if len(_phonemes(group)) <= limit:
            current = group
        else:
            packed.extend(_pack(group, limit, level - 1))
    if current:
        packed.append(current)
    return packed


def chunk_pieces(lines: Sequence[Sequence[G2PToken]], max_phonemes: int) -> Iterator[Chunk]:
    """Chunks from the G2P tokens of consecutive lines; each line end is a sentence-strength boundary."""
    if max_phonemes < 1:
        raise InputError(f"max_phonemes must be at least 1, got {max_phonemes}.")
    pieces: list[_Piece] = []
    for tokens in lines:
        for i, token in enumerate(tokens):
            last = i == len(tokens) - 1
            space = " " if token.whitespace or last else ""
            boundary = SENTENCE if last else _boundary(token.phonemes or token.text)
            phonemes = token.phonemes + space  # a silent token's space still parts the words around it
            pieces.append(_Piece(token.text + space, phonemes, boundary))
    for run in _pack(pieces, max_phonemes):
        tokens = tuple(G2PToken(p.text.rstrip(), p.phonemes.strip(), p.text[len(p.text.rstrip()) :]) for p in run)
        chunk = Chunk(text="".join(p.text for p in run).strip(), phonemes=_phonemes(run), tokens=tokens)
        if is_spoken(chunk.phonemes):
            yield chunk


def g2p_segments(line: str, max_chars: int = MAX_G2P_CHARS) -> Iterator[str]:
    """``line`` in pieces of at most ``max_chars`` characters for the tagger, cut after sentence ends where
    possible, else at a space, else anywhere; the pieces joined with spaces give ``line`` back."""
    while len(line) > max_chars:
        window = line[: max_chars + 1]
        ends = [m.end() for m in _SENTENCE_BREAK.finditer(window)]
        cut = ends[-1] if ends else window.rfind(" ") + 1
        cut = cut if cut > 0 else max_chars
        yield line[:cut].strip()
        line = line[cut:].lstrip()
    if line:
        yield line


def iter_chunks(text: str, lang: str = "a", max_phonemes: int = KOKORO_MAX_PHONEMES) -> Iterator[Chunk]:
    """Phonemize ``text`` (already normalized, see ``frontend``) and split it into chunks under the limit.

    A blank line ends a paragraph: no chunk spans two paragraphs. A single line break is a boundary as strong
    as a sentence end. Chunks with nothing to say (only punctuation, or words nobody could read) are skipped.
    """
    for chunks in iter_paragraphs(text, lang, max_phonemes):
        yield from chunks


def iter_paragraphs(text: str, lang: str = "a", max_phonemes: int = KOKORO_MAX_PHONEMES) -> Iterator[list[Chunk]]:
    """:func:`iter_chunks`'s chunks a paragraph at a time: each paragraph is phonemized whole before its chunks
    are given, and the next one only when asked for."""
    g2p = get_g2p(lang)
    for paragraph in PARAGRAPH_BREAK.split(text):
        lines = [_SPACES.sub(" ", line).strip() for line in paragraph.split("\n")]
        tokens = []
        for line in lines:
            for segment in g2p_segments(line):
                check_cancelled()  # the G2P is no torch module: a cancelled request stops between segments
                tokens.append(g2p.tokens(segment))
        yield list(chunk_pieces([t for t in tokens if t], max_phonemes))


def iter_phoneme_chunks(phonemes: str, max_phonemes: int = KOKORO_MAX_PHONEMES) -> Iterator[Chunk]:
    """Split a phoneme string the user wrote into chunks under the limit, at punctuation, then spaces.

    There is no source text, so each chunk's ``text`` is its phonemes.
    """
    lines = []
    for line in phonemes.split("\n"):
        words = _RAW_PIECE.findall(_SPACES.sub(" ", line).strip())
        lines.append([G2PToken(text=w.strip(), phonemes=w.strip(), whitespace=" ") for w in words])
    yield from chunk_pieces([line for line in lines if line], max_phonemes)
