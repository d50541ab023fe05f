"""Text -> a Piper voice's phoneme ids, sentence by sentence, as piper-tts makes them (without piper-tts).

espeak-ng gives each clause's IPA (:mod:`ggtts.text.espeak`); as piper does, language-switch marks ``(en)`` are
dropped, the clause's punctuation is kept as a phoneme (with a space after ``,`` ``:`` ``;``), the text is
decomposed (NFD) into code points, each one a phoneme, and a sentence ends where espeak-ng ends one. Ids: BOS, a
pad after BOS and after each phoneme, EOS; phonemes the voice has no id for are left out.

An English voice's text is normalized first (numbers, dates, units, symbols as words: :mod:`ggtts.text.normalize`,
as for Kokoro), unless the ``normalization`` option says otherwise; piper-tts reads the text as written.

Each phoneme also knows which written word it says (:class:`Piece`), for word timestamps. espeak-ng separates
the words it says with spaces; where a clause says as many words as it has written ones, they pair up in order.
Where it says more ("$25": "dollar twenty five") or fewer ("of the": one word), each written word is said alone
to learn how many phonemes it takes, and the clause's phonemes are shared out in those proportions, in order,
each cut moved to the nearest space between said words when one is near.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Piper as K
from ggtts.text.lexicon import Lexicon
from ggtts.text.markup import strip_markup
from ggtts.text.normalize import AS_WRITTEN, Normalization, normalize_tracked
from ggtts.text.tracking import Tracked, shown

LANGUAGE_SWITCH = re.compile(r"\([^)]+\)")
SPACED_ENDS = frozenset(",:;")
PUNCTUATION = frozenset(" ,.;:!?")  # what a sentence made only of says nothing
PHONEME_TYPES = ("espeak", "text")
ESPEAK_VOICE_NAME = re.compile(r"[A-Za-z0-9_+-]{1,64}")  # "en-us", "en-gb-x-rp", "en-us+f3"
# most phonemes in one chunk: a sentence longer than this (rare: 300 phonemes is about 20 seconds of speech) is cut
# at its clauses, and a clause longer than this at its words, so that the encoder's attention (its memory grows
# with the square of the length) never sees a whole unpunctuated book
MAX_PHONEMES = 400
WRITTEN = re.compile(r"\S+")
SNAP_PHONEMES = 3  # a shared-out cut this close to a space between said words moves to it
SENTENCE_ENDS = frozenset(".?!")

Tagged = list[tuple[str, int | None]]  # phonemes, each with the index of the written word it says (or None)


@dataclass(frozen=True)
class Word:
    """A written word that is said: as shown in captions, and whether a sentence ends after it."""

    text: str
    ends_sentence: bool = False


@dataclass(frozen=True)
class Piece:
    """One chunk's phonemes, and for each the index of the word it says in :attr:`Spoken.words` (None: a space,
    punctuation)."""

    phonemes: list[str]
    words: list[int | None]


@dataclass(frozen=True)
class Spoken:
    pieces: list[Piece] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)


@dataclass(frozen=True)
class PhonemeTable:
    by_phoneme: dict[str, list[int]]
    espeak_voice: str
    phoneme_type: str

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> PhonemeTable:
        phonemes, ids = gguf.get_list(K.PHONEMES), gguf.get_list(K.PHONEME_IDS)
        if len(phonemes) != len(ids) or not phonemes:
            raise GGUFError(f"{gguf.path}: '{K.PHONEMES}' and '{K.PHONEME_IDS}' must be equally long, and not empty")
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise GGUFError(f"{gguf.path}: '{K.PHONEME_IDS}' should hold integers")
        table: dict[str, list[int]] = {}
        for p, i in zip(phonemes, ids, strict=True):
            table.setdefault(str(p), []).append(i)
        for needed in (K.BOS, K.EOS, K.PAD):
            if needed not in table:
                raise GGUFError(f"{gguf.path}: the phoneme map has no '{needed}'")
        kind, voice = gguf.get_str(K.PHONEME_TYPE, "espeak"), gguf.get_str(K.ESPEAK_VOICE, "")
        if kind not in PHONEME_TYPES:
            raise GGUFError(f"{gguf.path}: phoneme type '{kind}' is not one ggtts reads ({', '.join(PHONEME_TYPES)})")
        if kind == "espeak":
            if not voice:
                raise GGUFError(f"{gguf.path}: an espeak voice needs '{K.ESPEAK_VOICE}'")
            from ggtts.text.espeak import espeak

            # a voice name, not a path (espeak-ng would look for a file by it): letters, digits, "-", "_", "+"
            if not ESPEAK_VOICE_NAME.fullmatch(voice) or not espeak().has_voice(voice):
                raise GGUFError(f"{gguf.path}: espeak-ng has no voice {voice[:40]!r} (metadata '{K.ESPEAK_VOICE}')")
        return cls(table, voice, kind)

    def check_vocabulary(self, n_vocab: int, path: object) -> None:
        """Every id within the model's embedding (a bad map would index past it)."""
        worst = max(max(ids) for ids in self.by_phoneme.values())
        if worst >= n_vocab or min(min(ids) for ids in self.by_phoneme.values()) < 0:
            raise GGUFError(f"{path}: the phoneme map uses id {worst}; the voice's embedding has {n_vocab} rows")

    def sentences(self, text: str) -> list[list[str]]:
        """The phonemes of each sentence of ``text`` (a sentence of over :data:`MAX_PHONEMES` in pieces), those
        that say something: a sentence of punctuation alone, or of phonemes the voice has no id for, is left out."""
        return [piece.phonemes for piece in self.spoken(text).pieces]

    @property
    def english(self) -> bool:
        """Whether the voice reads English (its espeak-ng voice), whose text ggtts normalizes first."""
        return self.phoneme_type == "espeak" and self.espeak_voice.lower().startswith("en")

    def spoken(self, text: str, normalization: Normalization = AS_WRITTEN, lexicon: Lexicon | None = None) -> Spoken:
        """:meth:`sentences`, each phoneme knowing the written word of ``text`` it says. An English voice reads
        numbers, dates, units and symbols as words first, as ``normalization`` says (:mod:`ggtts.text.normalize`:
        "$25" "twenty-five dollars" where espeak-ng alone says "dollar twenty five"); a voice of another language
        has only Markdown, HTML and decorative emoji taken away (:mod:`ggtts.text.markup`). A ``lexicon``'s words are
        said as it says, before all (:mod:`ggtts.text.lexicon`). The words stay as written."""
        words: list[Word] = []
        pieces: list[Tagged] = []
        if self.phoneme_type == "text":  # a voice trained on characters: its words are the text's own
            said = text if lexicon is None else lexicon.said(text)
            pieces = _pieces([_tag_characters(unicodedata.normalize("NFD", said), words)])
        else:
            from ggtts.text.espeak import espeak

            if self.english and normalization.enabled:  # (the normalizer says the lexicon's words first)
                british = self.espeak_voice.lower().startswith("en-gb")
                tracked = normalize_tracked(text, british=british, switches=normalization, lexicon=lexicon)
            else:
                tracked = Tracked.of(text) if lexicon is None else lexicon.apply(Tracked.of(text))
                if normalization.enabled and normalization.markdown:  # another language: only its markup goes
                    tracked = strip_markup(tracked, english=False)
            owners = _Owners(text, tracked, words)
            sentence: list[Tagged] = []  # its clauses
            for clause in espeak().clauses(tracked.text, self.espeak_voice):
                said = unicodedata.normalize("NFD", LANGUAGE_SWITCH.sub("", clause.phonemes))
                tokens = owners.tokens(clause.text, ends_sentence=clause.end in SENTENCE_ENDS)
                tagged = _tag_clause(said, tokens, self._said_alone)
                tail = clause.end + (" " if clause.end in SPACED_ENDS else "")
                sentence.append(tagged + [(p, None) for p in unicodedata.normalize("NFD", tail)])
                if clause.sentence_end:
                    pieces += _pieces(sentence)
                    sentence = []
            pieces += _pieces(sentence)
        kept = [p for p in pieces if any(q in self.by_phoneme and q not in PUNCTUATION for q, _ in p)]
        return Spoken([Piece([q for q, _ in p], [w for _, w in p]) for p in kept], words)

    def _said_alone(self, word: str) -> int:
        """How many phonemes espeak-ng says ``word`` with, on its own (spaces between its said words excluded)."""
        from ggtts.text.espeak import espeak

        said = "".join(LANGUAGE_SWITCH.sub("", c.phonemes) for c in espeak().clauses(word, self.espeak_voice))
        return len(unicodedata.normalize("NFD", said).replace(" ", ""))

    def id_spans(self, phonemes: list[str]) -> list[tuple[int, int] | None]:
        """Where each phoneme's ids (and the pad after them) are in :meth:`ids`'s list: ``[start, end)``, or None
        for a phoneme the voice has no id for."""
        table, pad = self.by_phoneme, len(self.by_phoneme[K.PAD])
        at = len(table[K.BOS]) + pad
        spans: list[tuple[int, int] | None] = []
        for p in phonemes:
            if p in table:
                spans.append((at, at + len(table[p]) + pad))
                at += len(table[p]) + pad
            else:
                spans.append(None)
        return spans

    def ids(self, phonemes: list[str]) -> list[int]:
        table = self.by_phoneme
        pad = table[K.PAD]
        out = [*table[K.BOS], *pad]
        for p in phonemes:
            if p in table:
                out += [*table[p], *pad]
        return out + table[K.EOS]


def _speaks(token: str) -> bool:
    return any(c.isalnum() for c in token)


def _tag_characters(text: str, words: list[Word]) -> Tagged:
    """A character voice's phonemes (the text's code points), each tagged with its whitespace-separated word."""
    tags: list[int | None] = [None] * len(text)
    for match in WRITTEN.finditer(text):
        if _speaks(match[0]):
            words.append(Word(shown(match[0])))
            tags[match.start() : match.end()] = [len(words) - 1] * (match.end() - match.start())
    return list(zip(text, tags, strict=True))


class _Owners:
    """The written word of the source each said token comes from, clause after clause of the (normalized) text
    espeak-ng reads; each written word that is said is appended to ``words`` once."""

    def __init__(self, source: str, tracked: Tracked, words: list[Word]) -> None:
        self.tracked = tracked
        self.written = [(m.start(), m.end()) for m in WRITTEN.finditer(source)]
        self.starts = [start for start, _ in self.written]
        self.source = source
        self.words = words
        self.index: dict[int, int] = {}  # a written word -> its place in ``words``
        self.at = 0  # where the next clause starts in the tracked text

    def tokens(self, clause_text: str, *, ends_sentence: bool) -> list[tuple[str, int]]:
        """The clause's tokens that say something, each with the index in ``words`` of its written word."""
        start = self.at  # espeak-ng's clauses are the text it read, one after another
        self.at = start + len(clause_text)
        tokens = []
        for m in WRITTEN.finditer(clause_text):
            if not _speaks(m[0]) or not self.written:
                continue
            first, last = min(start + m.start(), len(self.tracked)), min(start + m.end(), len(self.tracked))
            if first >= last:  # past the text (espeak-ng read other than it was given): no source to name
                continue
            source_at, _ = self.tracked.span(first, last)
            written = max(0, bisect.bisect_right(self.starts, source_at) - 1)
            if written not in self.index:
                self.index[written] = len(self.words)
                first, last = self.written[written]
                self.words.append(Word(shown(self.source[first:last])))
            tokens.append((m[0], self.index[written]))
        if tokens and ends_sentence:
            last = tokens[-1][1]
            self.words[last] = dataclasses.replace(self.words[last], ends_sentence=True)
        return tokens


def _tag_clause(said: str, tokens: list[tuple[str, int]], said_alone: Callable[[str], int]) -> Tagged:
    """A clause's phonemes (``said``), each tagged with the word of the token it says: ``tokens`` are the clause's
    words as espeak-ng read them, in order, each with its word's index (two tokens may share one written word)."""
    runs = [m.span() for m in WRITTEN.finditer(said)]  # the words espeak-ng says: runs of non-spaces
    tags: list[int | None] = [None] * len(said)
    if not tokens or not runs:
        return list(zip(said, tags, strict=True))
    if len(runs) == len(tokens):
        for (start, end), (_, owner) in zip(runs, tokens, strict=True):
            tags[start:end] = [owner] * (end - start)
        return list(zip(said, tags, strict=True))
    # share the said phonemes out in proportion to each token said alone, cuts snapped to spaces near them
    places = [i for i, c in enumerate(said) if not c.isspace()]  # the said phonemes, spaces left out
    run_ends = list(itertools.accumulate(e - s for s, e in runs))  # cuts between said words, in said phonemes
    weights = [max(1, said_alone(token)) for token, _ in tokens]
    total, done = sum(weights), 0
    cuts: list[int] = []
    for weight in weights:
        done += weight
        cut = round(len(places) * done / total)
        at = bisect.bisect_left(run_ends, cut - SNAP_PHONEMES)
        near = run_ends[at : bisect.bisect_right(run_ends, cut + SNAP_PHONEMES)]
        if near:
            cut = min(near, key=lambda r: (abs(r - cut), r))
        floor = (cuts[-1] if cuts else 0) + 1  # each token keeps at least one phoneme, where there are enough
        cuts.append(min(len(places), max(cut, min(floor, len(places)))))
    cuts[-1] = len(places)
    start = 0
    for (_, owner), end in zip(tokens, cuts, strict=True):
        for k in range(start, end):
            tags[places[k]] = owner
        start = max(start, end)
    return list(zip(said, tags, strict=True))


def _pieces(clauses: list[Tagged]) -> list[Tagged]:
    """One sentence's clauses as one piece, or where it is longer than :data:`MAX_PHONEMES`, as pieces of whole
    clauses (a clause longer than that cut after a space)."""
    if sum(len(c) for c in clauses) <= MAX_PHONEMES:
        return [[p for c in clauses for p in c]] if clauses else []
    pieces: list[Tagged] = []
    current: Tagged = []
    for clause in clauses:
        while len(clause) > MAX_PHONEMES:
            cut = max((i for i, (p, _) in enumerate(clause[:MAX_PHONEMES]) if p == " "), default=MAX_PHONEMES - 1) + 1
            if current:
                pieces.append(current)
                current = []
            pieces.append(clause[:cut])
            clause = clause[cut:]
        if len(current) + len(clause) > MAX_PHONEMES:
            pieces.append(current)
            current = []
        current = current + clause
    return [p for p in [*pieces, current] if p]
