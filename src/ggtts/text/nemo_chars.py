"""NeMo's ``ArabicCharsTokenizer`` and ``HindiCharsTokenizer`` without NeMo: the character tokenizers of Magpie TTS.

A multilingual Magpie checkpoint names them in ``text_tokenizers`` (``arabic_MSA_chartokenizer``,
``hindi_chartokenizer``, ...). Their vocabulary is fixed by the config alone, no dictionary:

    " ", the characters, "'" (``apostrophe``), the punctuation marks (``punct``), "<pad>", "<blank>", "<oov>"

The characters are the locale's letters (and Arabic's diacritics) followed by ASCII letters. ``charset_version``
2 takes the letters once ("upper" case, which these scripts do not have); version 1, the sets older checkpoints
were trained with, takes them twice ("mixed": upper then lower case, two identical copies), and for Hindi only
the lower-case ASCII letters. A config that leaves the version unset gets 2, or 1 when its ``nemo_version`` stamp
predates NeMo 2.8.0 (as NeMo's ``resolve_versioned_tokenizer_defaults`` decides). Hindi's ``punct_version`` works
the same way: 2 is hi-IN's marks (with the dandas), 1 NeMo's sorted default marks.

Encoding is character by character, after NFC and "’" -> "'": a character in the vocabulary is kept (the last of
repeated entries gives its id), a space only after something kept and not after another space, and everything
else, tabs and newlines included, is dropped (NeMo logs a warning). Trailing spaces go; ``pad_with_space`` puts a
space at each end.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ggtts.text.nemo_ipa import (
    DEFAULT_PUNCTUATION,
    NEMO_TOKENIZERS,
    VERSIONED_DEFAULTS_SINCE,
    check_keys,
    ipa_punctuation,
    optional_symbols,
    predates_nemo_release,
    with_special_tokens,
)
from ggtts.text.nemo_ipa import any_locale_text as _nfc_and_apostrophe
from ggtts.text.nemo_ipa import config_version as _dated_version

# --- character sets (nemo/collections/common/tokenizers/text_to_speech/ipa_lexicon.py, GRAPHEME_CHARACTER_SETS) --

_ARABIC_LETTERS = "ءآأإؤئابةتثجحخدذرزسشصضطظعغفقكلمنهوىي"
_ARABIC_DIACRITICS = "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0670\u0652"  # tanwin, harakat, shadda, ...
_DEVANAGARI_VOWELS = "अआइईउऊऋॠएऐओऔऍऑ"
_DEVANAGARI_CONSONANTS = "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहळऩऱ"
# dependent vowel signs, candrabindu, anusvara, visarga, virama, nukta, ...
_DEVANAGARI_SIGNS = "ािीुूृॄेैोौॅॉँंः़्ॊॢॣॆ"
_DEVANAGARI_DANDA = "।"  # also one of hi-IN's punctuation marks: the vocabulary has it twice

ARABIC = "ArabicCharsTokenizer"
HINDI = "HindiCharsTokenizer"


@dataclass(frozen=True)
class _Kind:
    """What one NeMo class brings: its locale, its letters, the ASCII letters its charset version 1 adds."""

    locale: str
    graphemes: str
    latin_v1: str


_KINDS = {
    ARABIC: _Kind("ar-MSA", _ARABIC_LETTERS + _ARABIC_DIACRITICS, string.ascii_letters),
    HINDI: _Kind(
        "hi-IN",
        _DEVANAGARI_VOWELS + _DEVANAGARI_CONSONANTS + _DEVANAGARI_SIGNS + _DEVANAGARI_DANDA,
        string.ascii_lowercase,
    ),
}
_HINDI_PUNCT_V1 = tuple(sorted(DEFAULT_PUNCTUATION))  # punct_version 1: NeMo's default marks, no dandas

# the constructor arguments a config can set, per class
_COMMON_KEYS = frozenset(("_target_", "chars", "charset_version", "punct", "apostrophe", "add_blank_at"))
_COMMON_KEYS |= {"pad_with_space", "non_default_punct_list"}
_KEYS = {ARABIC: _COMMON_KEYS, HINDI: _COMMON_KEYS | {"punct_version"}}


def default_charset(kind: str, charset_version: int) -> str:
    """The characters NeMo's ``kind`` takes when a config sets no ``chars``."""
    info = _KINDS[kind]
    if charset_version == 1:
        return info.graphemes.upper() + info.graphemes.lower() + info.latin_v1  # case "mixed": two copies
    if charset_version == 2:
        return info.graphemes.upper() + string.ascii_letters
    raise ValueError(f"{kind}: charset_version {charset_version!r} is not one of 1 (legacy) or 2")


@dataclass(frozen=True)
class CharsTokenizerSpec:
    """One ``ArabicCharsTokenizer`` or ``HindiCharsTokenizer`` config, its versioned defaults resolved.

    ``chars`` and ``punct_marks`` are what the vocabulary is made of; :meth:`from_config` fills them in from the
    charset and punctuation versions, or from the config's own ``chars`` and ``non_default_punct_list``.
    """

    kind: str  # ARABIC or HINDI
    chars: tuple[str, ...]
    punct_marks: tuple[str, ...]  # in the vocabulary only when punct
    punct: bool = True
    apostrophe: bool = True
    add_blank_at: str | None = None  # None: no blank token; "last": blank after OOV; anything else: before it
    pad_with_space: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(_KINDS)}")

    @classmethod
    def from_config(cls, cfg: Mapping[str, object], *, nemo_version: str | None = None) -> CharsTokenizerSpec:
        """The spec of one ``text_tokenizers`` entry of a NeMo model config (a plain mapping, as YAML loads it).

        ``nemo_version`` is the model config's own stamp: older than 2.8.0, an unset ``charset_version`` (and
        Hindi's ``punct_version``) is 1, as NeMo dates them; NeMo dates only configs that name the class in full.
        Raises ValueError naming a class or setting this module cannot reproduce.
        """
        target = str(cfg.get("_target_", ""))
        kind = target.rsplit(".", 1)[-1]
        if kind not in _KINDS:
            raise ValueError(f"not an ArabicCharsTokenizer or HindiCharsTokenizer config (_target_ {target!r})")
        check_keys(cfg, _KEYS[kind], kind)
        info = _KINDS[kind]
        legacy = target == f"{NEMO_TOKENIZERS}.{kind}" and predates_nemo_release(nemo_version, VERSIONED_DEFAULTS_SINCE)
        chars = optional_symbols(cfg, "chars")
        if chars is None:
            chars = tuple(default_charset(kind, _dated_version(cfg, "charset_version", kind, legacy)))
        marks = optional_symbols(cfg, "non_default_punct_list")
        if marks is None:
            if kind == ARABIC:
                # the class's default is ar-MSA's marks; a null in the config leaves NeMo's base-class marks
                explicit_null = "non_default_punct_list" in cfg
                marks = DEFAULT_PUNCTUATION if explicit_null else tuple(ipa_punctuation(info.locale))
            elif _dated_version(cfg, "punct_version", kind, legacy) == 1:
                marks = _HINDI_PUNCT_V1
            else:
                marks = tuple(ipa_punctuation(info.locale))
        add_blank_at = cfg.get("add_blank_at")
        return cls(
            kind=kind,
            chars=chars,
            punct_marks=marks,
            punct=bool(cfg.get("punct", True)),
            apostrophe=bool(cfg.get("apostrophe", True)),
            add_blank_at=None if add_blank_at is None else str(add_blank_at),
            pad_with_space=bool(cfg.get("pad_with_space", False)),
        )


def build_chars_tokens(spec: CharsTokenizerSpec) -> list[str]:
    """NeMo's ``.tokens``: space, characters, apostrophe, punctuation, ``<pad>``, ``<blank>``, ``<oov>``.

    Nothing is sorted or deduplicated: version-1 charsets and Hindi's danda give repeated entries, as in NeMo.
    """
    tokens = [" ", *spec.chars]
    if spec.apostrophe:
        tokens.append("'")
    if spec.punct:
        tokens.extend(spec.punct_marks)
    return with_special_tokens(tokens, spec.add_blank_at)


class CharsTokenizer:
    """NeMo's ``ArabicCharsTokenizer.encode`` / ``HindiCharsTokenizer.encode`` over a stored vocabulary.

    ``tokens`` is the vocabulary the model was trained with (:func:`build_chars_tokens` at conversion).
    """

    SPACE = " "

    def __init__(self, spec: CharsTokenizerSpec, tokens: Sequence[str]) -> None:
        if not tokens or tokens[0] != self.SPACE:
            raise ValueError("the vocabulary does not start with the space token; it is not a NeMo chars tokenizer's")
        self.spec = spec
        self.tokens = list(tokens)
        self._ids = {token: i for i, token in enumerate(self.tokens)}  # a repeated token keeps its last index
        # NeMo's third test, a punctuation mark, only adds something when a custom mark is a space
        self._marks = frozenset(spec.punct_marks) if spec.punct else frozenset()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, one per kept character."""
        space, kept = self.SPACE, list[str]()
        for char in _nfc_and_apostrophe(text):
            after_char = bool(kept) and kept[-1] != space
            if (char == space and after_char) or (char != space and char in self._ids) or char in self._marks:
                kept.append(char)
        while kept and kept[-1] == space:
            kept.pop()
        if self.spec.pad_with_space:
            kept = [space, *kept, space]
        return [self._ids[char] for char in kept]
