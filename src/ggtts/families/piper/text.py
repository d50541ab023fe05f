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
        return cls(table, gguf.get_str(K.ESPEAK_VOICE, ""), gguf.get_str(K.PHONEME_TYPE, "espeak"))

    def sentences(self, text: str) -> list[list[str]]:
        """The phonemes of each sentence of ``text``."""
        if self.phoneme_type == "text":  # a voice trained on characters
            return [list(unicodedata.normalize("NFD", text))]
        from ggtts.text.espeak import espeak

        sentences: list[list[str]] = []
        current: list[str] = []
        for clause in espeak().clauses(text, self.espeak_voice or "en-us"):
            phonemes = LANGUAGE_SWITCH.sub("", clause.phonemes) + clause.end
            if clause.end in SPACED_ENDS:
                phonemes += " "
            current.extend(unicodedata.normalize("NFD", phonemes))
            if clause.sentence_end:
                sentences.append(current)
                current = []
        if current:
            sentences.append(current)
        return [s for s in sentences if s]

    def ids(self, phonemes: list[str]) -> list[int]:
        table = self.by_phoneme
        pad = table[K.PAD]
        out = [*table[K.BOS], *pad]
        for p in phonemes:
            if p in table:
                out += [*table[p], *pad]
        return out + table[K.EOS]
