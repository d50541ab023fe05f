"""Text -> a Piper voice's phoneme ids, sentence by sentence, as piper-tts makes them (without piper-tts).

espeak-ng gives each clause's IPA (:mod:`ggtts.text.espeak`); as piper does, language-switch marks ``(en)`` are
dropped, the clause's punctuation is kept as a phoneme (with a space after ``,`` ``:`` ``;``), the text is
decomposed (NFD) into code points, each one a phoneme, and a sentence ends where espeak-ng ends one. Ids: BOS, a
pad after BOS and after each phoneme, EOS; phonemes the voice has no id for are left out.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Piper as K

LANGUAGE_SWITCH = re.compile(r"\([^)]+\)")
SPACED_ENDS = frozenset(",:;")
PUNCTUATION = frozenset(" ,.;:!?")  # what a sentence made only of says nothing
PHONEME_TYPES = ("espeak", "text")
# most phonemes in one chunk: a sentence longer than this (rare: 300 phonemes is about 20 seconds of speech) is cut
# at its clauses, and a clause longer than this at its words, so that the encoder's attention (its memory grows
# with the square of the length) never sees a whole unpunctuated book
MAX_PHONEMES = 400


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
        table: dict[str, list[int]] = {}
        for p, i in zip(phonemes, ids, strict=True):
            table.setdefault(str(p), []).append(int(i))
        for needed in (K.BOS, K.EOS, K.PAD):
            if needed not in table:
                raise GGUFError(f"{gguf.path}: the phoneme map has no '{needed}'")
        kind, voice = gguf.get_str(K.PHONEME_TYPE, "espeak"), gguf.get_str(K.ESPEAK_VOICE, "")
        if kind not in PHONEME_TYPES:
            raise GGUFError(f"{gguf.path}: phoneme type '{kind}' is not one ggtts reads ({', '.join(PHONEME_TYPES)})")
        if kind == "espeak" and not voice:
            raise GGUFError(f"{gguf.path}: an espeak voice needs '{K.ESPEAK_VOICE}'")
        return cls(table, voice, kind)

    def check_vocabulary(self, n_vocab: int, path: object) -> None:
        """Every id within the model's embedding (a bad map would index past it)."""
        worst = max(max(ids) for ids in self.by_phoneme.values())
        if worst >= n_vocab or min(min(ids) for ids in self.by_phoneme.values()) < 0:
            raise GGUFError(f"{path}: the phoneme map uses id {worst}; the voice's embedding has {n_vocab} rows")

    def sentences(self, text: str) -> list[list[str]]:
        """The phonemes of each sentence of ``text`` (a sentence of over :data:`MAX_PHONEMES` in pieces), those
        that say something: a sentence of punctuation alone, or of phonemes the voice has no id for, is left out."""
        if self.phoneme_type == "text":  # a voice trained on characters
            pieces = _pieces([list(unicodedata.normalize("NFD", text))])
        else:
            from ggtts.text.espeak import espeak

            pieces = []
            sentence: list[list[str]] = []  # its clauses
            for clause in espeak().clauses(text, self.espeak_voice):
                phonemes = LANGUAGE_SWITCH.sub("", clause.phonemes) + clause.end
                if clause.end in SPACED_ENDS:
                    phonemes += " "
                sentence.append(list(unicodedata.normalize("NFD", phonemes)))
                if clause.sentence_end:
                    pieces += _pieces(sentence)
                    sentence = []
            pieces += _pieces(sentence)
        return [p for p in pieces if any(q in self.by_phoneme and q not in PUNCTUATION for q in p)]

    def ids(self, phonemes: list[str]) -> list[int]:
        table = self.by_phoneme
        pad = table[K.PAD]
        out = [*table[K.BOS], *pad]
        for p in phonemes:
            if p in table:
                out += [*table[p], *pad]
        return out + table[K.EOS]


def _pieces(clauses: list[list[str]]) -> list[list[str]]:
    """One sentence's clauses as one piece, or where it is longer than :data:`MAX_PHONEMES`, as pieces of whole
    clauses (a clause longer than that cut after a space)."""
    if sum(len(c) for c in clauses) <= MAX_PHONEMES:
        return [[p for c in clauses for p in c]] if clauses else []
    pieces: list[list[str]] = []
    current: list[str] = []
    for clause in clauses:
        while len(clause) > MAX_PHONEMES:
            cut = max((i for i, p in enumerate(clause[:MAX_PHONEMES]) if p == " "), default=MAX_PHONEMES - 1) + 1
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
