"""NeMo's ``JapanesePhonemeTokenizer`` over ``JapaneseKatakanaAccentG2p`` without NeMo: Magpie's Japanese tokenizer.

Despite its name the tokenizer does not speak in phonemes: it spells text in katakana, one symbol per character,
with a pitch mark ("0" low, "1" high) before each mora. The reading and the accent come from OpenJTalk's front end
(``pyopenjtalk.run_frontend``, the one call NeMo's G2P makes), which splits text into words, each with its
pronunciation, accent nucleus ``acc`` and ``chain_flag`` (1: the word joins the accent phrase before it).

The steps NeMo takes, and this module after it:

1. the text is lowercased (the tokenizer), then cased again as ``ascii_letter_case`` says (the G2P);
2. each word of OpenJTalk's is, in order:
   - Latin letters OpenJTalk could not read (part of speech フィラー): its letters, as they are;
   - a symbol (記号, 補助記号, but not an alphabet letter): a space if it is blank, the mark if it is one of
     ja-JP's punctuation marks (after NFKC, so "！" is "!"), else a space (NeMo warns); a space never follows a space;
   - a word with no pronunciation: a space unless it is blank, and it does not end the accent phrase;
   - otherwise part of an accent phrase, which ends before the next word whose ``chain_flag`` is not 1;
3. an accent phrase is split into morae (a kana and its small kana, a lone small kana, or "ー"); its first word
   whose ``chain_flag`` is not 1 gives the accent: 0 (heiban) L H H..., 1 (atamadaka) H L L..., n (nakadaka) L, H
   up to the n-th mora, then L; n past the end (odaka) L H H...;
4. the symbols are kept if the vocabulary has them (katakana, pitch marks, ASCII letters, the apostrophe,
   punctuation), spaces only after something kept and never twice; trailing spaces go and ``pad_with_space`` puts
   one at each end.

The readings are OpenJTalk's dictionary's: those of the installed pyopenjtalk build (pyopenjtalk-plus bundles a
dictionary of its own), which may differ from those the checkpoint was trained with.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ggtts.errors import GGTTSError
from ggtts.text.nemo_ipa import (
    checked_sections,
    ipa_punctuation,
    optional_str,
    optional_symbols,
    refuse_callables,
    required_str,
    set_case,
    with_special_tokens,
)

JAPANESE_TOKENIZER = "JapanesePhonemeTokenizer"
KATAKANA_ACCENT_G2P = "JapaneseKatakanaAccentG2p"
ASCII_LETTER_CASES = ("upper", "lower", "mixed")

# ja-JP's graphemes of NeMo's GRAPHEME_CHARACTER_SETS: katakana, voiced katakana, small katakana, long-vowel mark
_KATAKANA = (
    "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲン"
    "ガギグゲゴザジズゼゾダヂヅデドバビブベボパピプペポヴ"
    "ァィゥェォャュョッヮヵヶ"
    "ー"
)
_PITCH_LOW, _PITCH_HIGH = "0", "1"
# A mora: a kana of ア..ン (small kana lie in that range too) or ヴ with an optional small kana after it, a small
# kana alone, or the long-vowel mark. Anything else in a pronunciation (OpenJTalk's accent mark "’") is skipped.
_MORA = re.compile(r"[ア-ンヴ][ャュョァィゥェォヮ]?|[ァィゥェォヵヶッャュョヮ]|ー")

# OpenJTalk's parts of speech that matter here
_FILLER = "フィラー"  # what OpenJTalk calls a word it could only spell
_SYMBOLS = ("記号", "補助記号")
_ALPHABET = "アルファベット"  # a symbol that is a letter: read as a word

_TOKENIZER_KEYS = frozenset(("_target_", "g2p", "punct", "non_default_punct_list", "space", "silence"))
_TOKENIZER_KEYS |= {"apostrophe", "sep", "add_blank_at", "pad_with_space"}
_G2P_KEYS = frozenset(("_target_", "ascii_letter_prefix", "ascii_letter_case", "word_tokenize_func"))
_G2P_KEYS |= {"apply_to_oov_word", "mapping_file"}  # stored by NeMo's BaseG2p, never read by this G2P


@dataclass(frozen=True)
class JapaneseTokenizerSpec:
    """One ``JapanesePhonemeTokenizer`` config with its ``JapaneseKatakanaAccentG2p``. Defaults are NeMo's."""

    punct: bool = True
    non_default_punct_list: tuple[str, ...] | None = None  # None: ja-JP's marks
    space: str = " "
    silence: str | None = None
    apostrophe: bool = True
    sep: str = "|"  # only NeMo's decode() uses it
    add_blank_at: str | None = None  # None: no blank token; "last": blank after OOV; anything else: before it
    pad_with_space: bool = False
    ascii_letter_case: str = "lower"
    ascii_letter_prefix: str = field(default="", compare=False)  # NeMo keeps it in a table it never outputs

    def __post_init__(self) -> None:
        if self.ascii_letter_case not in ASCII_LETTER_CASES:
            raise ValueError(
                f"ascii_letter_case {self.ascii_letter_case!r} is not one of {', '.join(ASCII_LETTER_CASES)}"
            )

    @property
    def punct_marks(self) -> tuple[str, ...]:
        if self.non_default_punct_list is not None:
            return self.non_default_punct_list
        return tuple(ipa_punctuation("ja-JP"))

    @classmethod
    def from_config(cls, cfg: Mapping[str, object], *, nemo_version: str | None = None) -> JapaneseTokenizerSpec:
        """The spec of one ``text_tokenizers`` entry of a NeMo model config (a plain mapping, as YAML loads it).

        ``nemo_version`` is accepted for symmetry with the other tokenizers: no Japanese default is dated.
        Raises ValueError naming any class or setting this module cannot reproduce.
        """
        del nemo_version
        g2p = checked_sections(cfg, JAPANESE_TOKENIZER, _TOKENIZER_KEYS, KATAKANA_ACCENT_G2P, _G2P_KEYS)
        refuse_callables(g2p, KATAKANA_ACCENT_G2P, ("word_tokenize_func", "apply_to_oov_word"))
        add_blank_at = cfg.get("add_blank_at")
        return cls(
            punct=bool(cfg.get("punct", True)),
            non_default_punct_list=optional_symbols(cfg, "non_default_punct_list"),
            space=required_str(cfg, "space", " "),
            silence=optional_str(cfg, "silence", None),
            apostrophe=bool(cfg.get("apostrophe", True)),
            sep=required_str(cfg, "sep", "|"),
            add_blank_at=None if add_blank_at is None else str(add_blank_at),
            pad_with_space=bool(cfg.get("pad_with_space", False)),
            ascii_letter_case=required_str(g2p, "ascii_letter_case", "lower"),
            ascii_letter_prefix=optional_str(g2p, "ascii_letter_prefix", "") or "",
        )


def _ascii_letters(case: str) -> str:
    """NeMo's en-US graphemes in ``case``: the letters the G2P lets through and the vocabulary holds."""
    if case == "upper":
        return string.ascii_uppercase
    if case == "lower":
        return string.ascii_lowercase
    return string.ascii_uppercase + string.ascii_lowercase


def build_japanese_tokens(spec: JapaneseTokenizerSpec) -> list[str]:
    """NeMo's ``JapanesePhonemeTokenizer(JapaneseKatakanaAccentG2p(...)).tokens`` for this config.

    Space, silence, sorted katakana and pitch marks, sorted ASCII letters, apostrophe, punctuation, ``<pad>``,
    ``<blank>``, ``<oov>``.
    """
    tokens = [spec.space]
    if spec.silence is not None:
        tokens.append(spec.silence)
    tokens.extend(sorted([*_KATAKANA, _PITCH_LOW, _PITCH_HIGH]))
    tokens.extend(sorted(_ascii_letters(spec.ascii_letter_case)))
    if spec.apostrophe:
        tokens.append("'")
    if spec.punct:
        tokens.extend(spec.punct_marks)
    return with_special_tokens(tokens, spec.add_blank_at)


def pitch_pattern(acc: int, morae: int) -> list[int]:
    """The pitch of each mora of an accent phrase of ``morae`` morae with its accent nucleus at ``acc``."""
    if morae == 0:
        return []
    if acc == 1:  # atamadaka: H L L ...
        return [1] + [0] * (morae - 1)
    if acc == 0 or acc >= morae:  # heiban, odaka: L H H ...
        return [0] + [1] * (morae - 1)
    return [0] + [1] * (acc - 1) + [0] * (morae - acc)  # nakadaka: L H ... H L ... L


def _import_openjtalk() -> Any:
    try:
        import pyopenjtalk
    except ImportError as error:
        raise GGTTSError(
            f"NeMo's Japanese tokenizer needs pyopenjtalk ({error}); install ggtts's Japanese frontend with "
            "pip install 'ggtts[ja]'."
        ) from error
    return pyopenjtalk


class JapaneseTokenizer:
    """NeMo's ``JapanesePhonemeTokenizer.encode`` over a stored vocabulary, with OpenJTalk as NeMo calls it.

    ``tokens`` is the vocabulary the model was trained with (:func:`build_japanese_tokens` at conversion).
    """

    def __init__(self, spec: JapaneseTokenizerSpec, tokens: Sequence[str]) -> None:
        if spec.space not in tokens:
            raise ValueError(f"the vocabulary has no space token {spec.space!r}; it is not this tokenizer's")
        self.spec = spec
        self.tokens = list(tokens)
        self._ids = {token: i for i, token in enumerate(self.tokens)}  # a repeated token keeps its last index
        letters = _ascii_letters(spec.ascii_letter_case)
        self._letters = frozenset(letters)
        self._word_symbols = frozenset([*_KATAKANA, _PITCH_LOW, _PITCH_HIGH, *letters, "'"])
        self._marks = frozenset(spec.punct_marks) if spec.punct else frozenset()
        self._ja_marks = frozenset(ipa_punctuation("ja-JP"))  # what the G2P keeps, whatever the tokenizer's
        self._openjtalk = _import_openjtalk()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: pitch-marked katakana, unread Latin letters, punctuation and spaces."""
        space, kept = self.spec.space, list[str]()
        for symbol in self.g2p(text.lower()):
            after_symbol = bool(kept) and kept[-1] != space
            known = (symbol.isalnum() or symbol in self._word_symbols) and symbol in self._ids
            if (symbol == space and after_symbol) or known or symbol in self._marks:
                kept.append(symbol)
        while kept and kept[-1] == space:  # NeMo raises IndexError where this empties the list
            kept.pop()
        if self.spec.pad_with_space:
            kept = [space, *kept, space]
        return [self._ids[symbol] for symbol in kept]

    def g2p(self, text: str) -> list[str]:
        """``JapaneseKatakanaAccentG2p.__call__``: the symbols of (lowercased) text, before the vocabulary."""
        words = self._openjtalk.run_frontend(set_case(text, self.spec.ascii_letter_case))
        out: list[str] = []
        phrase: list[Mapping[str, Any]] = []

        def end_phrase() -> None:
            if phrase:
                out.extend(_accent_phrase(phrase))
                phrase.clear()

        def add_space() -> None:
            if not out or out[-1] != " ":
                out.append(" ")

        for index, word in enumerate(words):
            if not isinstance(word, Mapping):
                continue
            surface = unicodedata.normalize("NFKC", word.get("string", ""))
            pos = word.get("pos", "")
            if surface and pos == _FILLER and all(c in self._letters for c in surface):
                end_phrase()
                out.extend(surface)  # letters OpenJTalk could not read, as they are
                continue
            if pos in _SYMBOLS and word.get("pos_group1", "") != _ALPHABET:
                end_phrase()
                if surface in self._ja_marks and not surface.isspace():
                    out.append(surface)
                else:
                    add_space()  # a blank, or a mark ja-JP does not have (NeMo warns)
                continue
            if not word.get("pron", "") or word.get("mora_size", 0) == 0:
                if surface and not surface.isspace():
                    add_space()  # NeMo warns; the accent phrase goes on past it
                continue
            phrase.append(word)
            following = words[index + 1] if index + 1 < len(words) else None
            if not (isinstance(following, Mapping) and following.get("chain_flag", 0) == 1):
                end_phrase()
        end_phrase()
        return out


def _accent_phrase(words: Sequence[Mapping[str, Any]]) -> list[str]:
    """The morae of an accent phrase's words, each after its pitch mark."""
    head = next((word for word in words if word.get("chain_flag", 0) != 1), words[0])
    morae = [mora for word in words for mora in _MORA.findall(word.get("pron", ""))]
    out: list[str] = []
    for mora, pitch in zip(morae, pitch_pattern(head.get("acc", 0), len(morae)), strict=False):
        out.append(_PITCH_HIGH if pitch else _PITCH_LOW)
        out.extend(mora)
    return out
