"""NeMo's ``ChinesePhonemesTokenizer`` over ``ChineseG2p`` without NeMo: Magpie's Mandarin tokenizer.

The steps NeMo takes, and this module after it:

1. the text is cased as ``ascii_letter_case`` says (the whole text: "ß" becomes "SS" in upper case);
2. jieba cuts it into words (``word_segmenter: jieba``; without one the text is a single word) and pypinyin reads
   each word in TONE3 style with 5 for the neutral tone, every character pypinyin cannot read coming out alone;
   NeMo first swaps pypinyin's character readings for CC-CEDICT's (``pypinyin_dict``'s ``cc_cedict.load()``);
3. a reading that ends in a tone 1..5 is a syllable: its phonemes from the pinyin dictionary, then the tone
   (``tone_prefix`` + digit); a syllable the dictionary lacks is dropped (NeMo logs an error), which also drops the
   digits 1..5 of the text, read as an empty syllable; an ASCII letter gets ``ascii_letter_prefix``; anything else
   goes on as it is;
4. the symbols are kept if the vocabulary has them (phonemes, tones, letters, the apostrophe) or are punctuation,
   spaces only after something kept and never twice; trailing spaces go and ``pad_with_space`` puts one at each
   end.

The pinyin dictionary (one ``syllable<TAB>phonemes`` line each, ``;;;`` comments) decides the phoneme symbols and
so the vocabulary. The readings are those of the installed jieba, pypinyin and pypinyin-dict.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ggtts.errors import GGTTSError
from ggtts.text.nemo_ipa import (
    DEFAULT_PUNCTUATION,
    checked_sections,
    optional_str,
    optional_symbols,
    refuse_callables,
    required_str,
    set_case,
    with_special_tokens,
)

CHINESE_TOKENIZER = "ChinesePhonemesTokenizer"
CHINESE_G2P = "ChineseG2p"
CASES = ("upper", "lower", "mixed")
WORD_SEGMENTERS = (None, "jieba")  # NeMo also offers pkuseg, not supported here

# ChinesePhonemesTokenizer.ZH_PUNCT_LIST: Chinese marks, then the base tokenizer's
ZH_PUNCTUATION = (*"，。？！；：、‘’“”（）【】「」《》", *DEFAULT_PUNCTUATION)
_TONES = "12345"
_COMMENT = ";;;"
_INSTALL = "pip install jieba pypinyin pypinyin-dict"

_TOKENIZER_KEYS = frozenset(("_target_", "g2p", "punct", "non_default_punct_list", "space", "silence"))
_TOKENIZER_KEYS |= {"apostrophe", "sep", "add_blank_at", "pad_with_space"}
_G2P_KEYS = frozenset(("_target_", "phoneme_dict", "phoneme_prefix", "phoneme_case", "tone_prefix"))
_G2P_KEYS |= {"ascii_letter_prefix", "ascii_letter_case", "word_segmenter"}
_G2P_KEYS |= {"word_tokenize_func", "apply_to_oov_word", "mapping_file"}  # stored by BaseG2p, never read here


@dataclass(frozen=True)
class MandarinTokenizerSpec:
    """One ``ChinesePhonemesTokenizer`` config with its ``ChineseG2p``. Defaults are NeMo's."""

    punct: bool = True
    non_default_punct_list: tuple[str, ...] | None = None  # None: ZH_PUNCTUATION
    space: str = " "
    silence: str | None = None
    apostrophe: bool = True
    sep: str = "|"  # only NeMo's decode() uses it
    add_blank_at: str | None = None  # None: no blank token; "last": blank after OOV; anything else: before it
    pad_with_space: bool = False
    phoneme_prefix: str = "#"
    phoneme_case: str = "upper"
    tone_prefix: str = "#"
    ascii_letter_prefix: str = ""
    ascii_letter_case: str = "lower"
    word_segmenter: str | None = None
    phoneme_dict: str | None = None  # the dictionary's path in the checkpoint; its text is passed separately

    def __post_init__(self) -> None:
        for key in ("phoneme_case", "ascii_letter_case"):
            if getattr(self, key) not in CASES:
                raise ValueError(f"{key} {getattr(self, key)!r} is not one of {', '.join(CASES)}")
        if self.word_segmenter not in WORD_SEGMENTERS:
            raise ValueError(f"word_segmenter {self.word_segmenter!r} is not supported; use jieba or null")

    @property
    def punct_marks(self) -> tuple[str, ...]:
        return ZH_PUNCTUATION if self.non_default_punct_list is None else self.non_default_punct_list

    @classmethod
    def from_config(cls, cfg: Mapping[str, object], *, nemo_version: str | None = None) -> MandarinTokenizerSpec:
        """The spec of one ``text_tokenizers`` entry of a NeMo model config (a plain mapping, as YAML loads it).

        ``nemo_version`` is accepted for symmetry with the other tokenizers: no Mandarin default is dated.
        Raises ValueError naming any class or setting this module cannot reproduce.
        """
        del nemo_version
        g2p = checked_sections(cfg, CHINESE_TOKENIZER, _TOKENIZER_KEYS, CHINESE_G2P, _G2P_KEYS)
        refuse_callables(g2p, CHINESE_G2P, ("word_tokenize_func", "apply_to_oov_word"))
        phoneme_dict = g2p.get("phoneme_dict")
        if not isinstance(phoneme_dict, str):
            raise ValueError(
                f"{CHINESE_G2P}'s phoneme_dict must be the path of a pinyin dictionary, not {phoneme_dict!r}"
            )
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
            phoneme_prefix=optional_str(g2p, "phoneme_prefix", "#") or "",  # NeMo: null is ""
            phoneme_case=required_str(g2p, "phoneme_case", "upper"),
            tone_prefix=optional_str(g2p, "tone_prefix", "#") or "",
            ascii_letter_prefix=optional_str(g2p, "ascii_letter_prefix", "") or "",
            ascii_letter_case=required_str(g2p, "ascii_letter_case", "lower"),
            word_segmenter=optional_str(g2p, "word_segmenter", None),
            phoneme_dict=phoneme_dict,
        )


def parse_pinyin_dict(spec: MandarinTokenizerSpec, dict_text: str) -> dict[str, list[str]]:
    """``ChineseG2p._parse_as_pinyin_dict``: lowercased syllable -> its phonemes, cased and prefixed.

    A later line for a syllable replaces an earlier one. ``dict_text`` is the file decoded as UTF-8 (a BOM stays
    part of the first syllable, as in NeMo).
    """
    table: dict[str, list[str]] = {}
    lines = dict_text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # Python's universal newlines
    for number, line in enumerate(lines, start=1):
        if line.startswith(_COMMENT) or not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            raise ValueError(f"line {number} of the pinyin dictionary has no tab between syllable and phonemes")
        phonemes = set_case(parts[1], spec.phoneme_case).split()
        table[parts[0].lower()] = [spec.phoneme_prefix + phoneme for phoneme in phonemes]
    return table


def _ascii_letters(case: str) -> str:
    """NeMo's en-US graphemes in ``case``: the letters the G2P prefixes and the vocabulary holds."""
    if case == "upper":
        return string.ascii_uppercase
    if case == "lower":
        return string.ascii_lowercase
    return string.ascii_uppercase + string.ascii_lowercase


@dataclass(frozen=True)
class _Symbols:
    """The G2P's three symbol lists, each sorted as NeMo sorts it."""

    phonemes: list[str]
    tones: list[str]
    letters: list[str]

    @classmethod
    def of(cls, spec: MandarinTokenizerSpec, table: Mapping[str, list[str]]) -> _Symbols:
        return cls(
            phonemes=sorted({phoneme for phonemes in table.values() for phoneme in phonemes}),
            tones=sorted(spec.tone_prefix + tone for tone in _TONES),
            letters=sorted(spec.ascii_letter_prefix + letter for letter in _ascii_letters(spec.ascii_letter_case)),
        )


def build_mandarin_tokens(spec: MandarinTokenizerSpec, dict_text: str) -> list[str]:
    """NeMo's ``ChinesePhonemesTokenizer(ChineseG2p(...)).tokens`` for this config and pinyin dictionary.

    Space, silence, sorted phonemes, sorted tones, sorted ASCII letters, apostrophe, punctuation, ``<pad>``,
    ``<blank>``, ``<oov>``.
    """
    symbols = _Symbols.of(spec, parse_pinyin_dict(spec, dict_text))
    tokens = [spec.space]
    if spec.silence is not None:
        tokens.append(spec.silence)
    tokens += symbols.phonemes + symbols.tones + symbols.letters
    if spec.apostrophe:
        tokens.append("'")
    if spec.punct:
        tokens.extend(spec.punct_marks)
    return with_special_tokens(tokens, spec.add_blank_at)


@dataclass(frozen=True)
class _Readers:
    """The third-party readers, as NeMo sets them up."""

    cut: Callable[[str], Iterable[str]]
    lazy_pinyin: Callable[..., list[str]]
    tone3: Any


def _load_readers(word_segmenter: str | None) -> _Readers:
    try:
        import pypinyin
        from pypinyin_dict.pinyin_data import cc_cedict
    except ImportError as error:
        raise GGTTSError(f"NeMo's Mandarin tokenizer needs pypinyin and pypinyin-dict ({error}); {_INSTALL}") from error
    cut: Callable[[str], Iterable[str]] = _whole
    if word_segmenter == "jieba":
        try:
            import jieba
        except ImportError as error:
            raise GGTTSError(f"NeMo's Mandarin tokenizer needs jieba ({error}); {_INSTALL}") from error
        jieba.setLogLevel(logging.WARNING)  # its dictionary loading talks at DEBUG on stderr
        jieba.initialize()  # reads the bundled dictionary (and caches it in the temp folder); no network
        cut = jieba.cut
    cc_cedict.load()  # as NeMo: CC-CEDICT's character readings replace pypinyin's, for the whole process
    return _Readers(cut=cut, lazy_pinyin=pypinyin.lazy_pinyin, tone3=pypinyin.Style.TONE3)


def _whole(text: str) -> list[str]:
    return [text]


def _characters(unread: str) -> list[str]:
    """pypinyin's ``errors`` handler of NeMo's: what it cannot read comes out one character at a time."""
    return list(unread)


class MandarinTokenizer:
    """NeMo's ``ChinesePhonemesTokenizer.encode`` over a stored vocabulary and pinyin dictionary.

    ``tokens`` is the vocabulary the model was trained with (:func:`build_mandarin_tokens` at conversion);
    ``dict_text`` the checkpoint's pinyin dictionary, which gives each syllable its phonemes.
    """

    def __init__(self, spec: MandarinTokenizerSpec, tokens: Sequence[str], dict_text: str) -> None:
        if spec.space not in tokens:
            raise ValueError(f"the vocabulary has no space token {spec.space!r}; it is not this tokenizer's")
        self.spec = spec
        self.tokens = list(tokens)
        self._ids = {token: i for i, token in enumerate(self.tokens)}  # a repeated token keeps its last index
        self._table = parse_pinyin_dict(spec, dict_text)
        symbols = _Symbols.of(spec, self._table)
        self._g2p_symbols = frozenset([*symbols.phonemes, *symbols.tones, *symbols.letters])
        self._tones = {tone: spec.tone_prefix + tone for tone in _TONES}
        self._letters = {letter: spec.ascii_letter_prefix + letter for letter in _ascii_letters(spec.ascii_letter_case)}
        self._marks = frozenset(spec.punct_marks) if spec.punct else frozenset()
        self._readers = _load_readers(spec.word_segmenter)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: phonemes and tones of its hanzi, ASCII letters, punctuation and spaces."""
        space, kept = self.spec.space, list[str]()
        for symbol in self.g2p(text):
            after_symbol = bool(kept) and kept[-1] != space
            known = (symbol.isalnum() or symbol == "'" or symbol in self._g2p_symbols) and symbol in self._ids
            if (symbol == space and after_symbol) or known or symbol in self._marks:
                kept.append(symbol)
        while kept and kept[-1] == space:
            kept.pop()
        if self.spec.pad_with_space:
            kept = [space, *kept, space]
        return [self._ids[symbol] for symbol in kept]

    def pinyin(self, text: str) -> list[str]:
        """The TONE3 readings NeMo's G2P looks up: one per syllable, one per character pypinyin cannot read."""
        readers, out = self._readers, list[str]()
        for word in readers.cut(set_case(text, self.spec.ascii_letter_case)):
            out += readers.lazy_pinyin(word, style=readers.tone3, neutral_tone_with_five=True, errors=_characters)
        return out

    def g2p(self, text: str) -> list[str]:
        """``ChineseG2p.__call__``: the symbols of ``text``, before the vocabulary."""
        out: list[str] = []
        for reading in self.pinyin(text):
            last = reading[-1:]
            if last in self._tones:
                phonemes = self._table.get(reading[:-1])
                if phonemes is not None:  # NeMo drops a syllable its dictionary lacks, logging an error
                    out += phonemes
                    out.append(self._tones[last])
            elif last in self._letters:
                out.append(self._letters[last])
            else:
                out.append(reading)
        return out
