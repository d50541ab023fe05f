"""NeMo's ``IPATokenizer`` over ``IpaG2p`` without NeMo: the phoneme tokenizers of Magpie TTS.

A Magpie checkpoint names its text tokenizers in ``model_config.yaml`` (``text_tokenizers``). The phoneme ones are
NeMo ``IPATokenizer``\\ s whose vocabulary NeMo builds when the model loads, from the tokenizer config and a
pronunciation dictionary ("WORD  ˈfoʊnimz" lines, variants as "WORD(1)"). This module rebuilds that vocabulary
(:func:`build_ipa_tokens`) and encodes text as NeMo does at inference (:class:`IpaTokenizer`), where every word the
dictionary knows is spoken as phonemes (``phoneme_probability`` 1.0, no sampling).

The steps NeMo takes, and this module after it:

1. the text is normalized: en-US decomposes it (NFD), drops combining marks (so "é" is "e") and turns curly quotes
   into straight ones; every other locale composes it (NFC) and turns "’" into "'".
2. the text is split into words (letters, inner hyphens and apostrophes), ``|verbatim|`` spans and everything else
   (spaces, punctuation, digits); en-US lowercases the words.
3. each word becomes phonemes from the dictionary (en-US adds the ``'s`` and plural ``s`` of a known word), or its
   letters as graphemes (cased and prefixed as configured) when it is a heteronym, unknown, or ambiguous and
   ambiguity is ignored; an unknown word with hyphens is looked up part by part.
4. every symbol the vocabulary lacks is dropped (NeMo logs a warning), trailing spaces go, and ``pad_with_space``
   puts a space at each end.

Words of NeMo's that matter here: a *symbol* is one vocabulary entry (one IPA character, a prefixed grapheme, a
punctuation mark); the dictionary's pronunciations are split into single characters, so "tʃ" is two symbols.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

# --- character classes (nemo/collections/common/tokenizers/text_to_speech/tokenizer_utils.py) ---------------

_LATIN = "A-Za-z"
_LATIN_ACCENTED = "À-ÖØ-öø-ÿ"
# Devanagari without the dandas (U+0964, U+0965: punctuation), Bengali, Tamil, Telugu, Kannada, Gujarati
_INDIC = r"\u0900-\u0963\u0966-\u097F\u0980-\u09FF\u0B80-\u0BFF\u0C00-\u0C7F\u0C80-\u0CFF\u0A80-\u0AFF"
_KOREAN = r"\uAC00-\uD7A3\u1100-\u11FF\u3130-\u318F"  # syllables, jamo, compatibility jamo
_WORD_CHARS = f"{_LATIN}{_LATIN_ACCENTED}{_INDIC}{_KOREAN}"

# A word, a |verbatim| span, or a run of anything else. The stdlib `re`, as NeMo: `\d` must mean what it means there.
_EN_US_WORDS = re.compile(rf"([{_LATIN}]+(?:[{_LATIN}\-']*[{_LATIN}]+)*)|(\|[^|]*\|)|([^{_LATIN}|]+)")
_ANY_LOCALE_WORDS = re.compile(
    rf"([{_WORD_CHARS}]+(?:[{_WORD_CHARS}\-']*[{_WORD_CHARS}]+)*)|(\|[^|]*\|)|([^{_WORD_CHARS}|]+)"
)
_WORD_GROUP, _VERBATIM_GROUP = 1, 2
_HAS_WORD_CHAR = re.compile(rf"[{_WORD_CHARS}\d]")  # a run without one is punctuation, kept symbol by symbol
_NOT_WORD_CHAR = re.compile(rf"[^{_WORD_CHARS}\d]")  # stripped from dictionary words before taking graphemes

# Dictionary lines: those starting with one of these are entries, all others (";;;" comments, "3-D") are skipped.
_DICT_ENTRY_START = re.compile(rf"[{_LATIN}{_LATIN_ACCENTED}'{_INDIC}{_KOREAN}]")
_VARIANT_MARK = re.compile(r"\([0-9]+\)")  # "WORD(1)" is the second pronunciation of WORD

_STRESS_MARKS = "ˈˌ"
# fr-FR elisions the G2P knows, as written (before the apostrophe) and as said
_FRENCH_ELISIONS = (
    ("l", "l"),
    ("c", "s"),
    ("d", "d"),
    ("j", "ʒ"),
    ("m", "m"),
    ("n", "n"),
    ("qu", "k"),
    ("s", "s"),
    ("t", "t"),
    ("puisqu", "pyisk"),
    ("lorsqu", "loʁsk"),
    ("jusqu", "ʒysk"),
)
_SYNOGLYPHS = str.maketrans({"’": "'", "”": '"', "“": '"'})  # en-US; other locales map only "’"

# --- punctuation and locales (nemo/collections/common/tokenizers/text_to_speech/ipa_lexicon.py) -------------

SUPPORTED_LOCALES = ("en-US", "de-DE", "es-ES", "it-IT", "fr-FR", "vi-VN", "ja-JP", "hi-IN", "ar-MSA", "pt-BR", "ko-KR")
DEFAULT_PUNCTUATION = (",", ".", "!", "?", "-", ":", ";", "/", '"', "(", ")", "[", "]", "{", "}")
_GUILLEMETS = ("«", "»", "‹", "›")
_GUILLEMET_LOCALES = ("de-DE", "es-ES", "it-IT", "fr-FR", "ja-JP", "pt-BR")
_GERMAN_MARKS = ("„", "“", "‚", "‘", "‒", "–", "—")  # low-9 and left quotes, figure/en/em dashes
_LOCALE_PUNCTUATION: dict[str, tuple[str, ...]] = {
    "de-DE": _GERMAN_MARKS,
    # Italian's list carries phonetic modifier letters, arrows, and one two-character entry, "˞↓"
    "it-IT": (*_GERMAN_MARKS, "ʴ", "ʰ", "ʱ", "ʲ", "ʷ", "ˠ", "ˤ", "˞↓", "↑", "→", "↗", "↘", "”", "’", "-"),
    "es-ES": ("¿", "¡"),
    "fr-FR": ("–", "“", "”", "…", "\u0300", "\u0301", "\u0302", "\u0308", "\u0327"),  # and combining accents
    "ja-JP": (
        *"【】…‥「」『』〜。、ー",
        "・・・",
        *"〃〔〕｟｠〈〉《》〖〗〘〙〚〛•◦﹅﹆※＊〽〓〒！？・",
    ),
    "ar-MSA": ("،", "؛", "؟"),
    "hi-IN": ("।", "॥"),
    "pt-BR": ("\u201c", "\u201d", "\u2018", "\u2019", "\u2013", "\u2014", "\u2026"),
    "ko-KR": ("『", "』", "「", "」", "《", "》", "…", "·", "—", "–", "〜"),
}


def ipa_punctuation(locale: str | None) -> list[str]:
    """The punctuation marks NeMo gives a locale (``get_ipa_punctuation_list``), sorted by code point."""
    marks = set(DEFAULT_PUNCTUATION)
    if locale is None:
        return sorted(marks)
    _check_locale(locale)
    if locale in _GUILLEMET_LOCALES:
        marks.update(_GUILLEMETS)
    marks.update(_LOCALE_PUNCTUATION.get(locale, ()))
    return sorted(marks)


def _check_locale(locale: str) -> None:
    if locale not in SUPPORTED_LOCALES:
        raise ValueError(f"locale {locale!r} is not one NeMo supports; use one of {', '.join(SUPPORTED_LOCALES)}")


# --- the tokenizer config -----------------------------------------------------------------------------------

PAD, BLANK, OOV = "<pad>", "<blank>", "<oov>"  # NeMo's BaseTokenizer names; IPATokenizer lets a config rename OOV
GRAPHEME_CASES = ("upper", "lower", "mixed")
NEMO_TOKENIZERS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers"
IPA_TOKENIZER_TARGET = f"{NEMO_TOKENIZERS}.IPATokenizer"
# NeMo 2.8.0 changed defaults a config may leave unset; a config stamped with an older nemo_version gets the old ones
VERSIONED_DEFAULTS_SINCE = (2, 8, 0)

# the constructor arguments of IPATokenizer and IpaG2p (and Hydra's _convert_), all a config can set
_TOKENIZER_KEYS = frozenset(("_target_", "g2p", "locale", "punct", "non_default_punct_list", "locale_specific_punct"))
_TOKENIZER_KEYS |= {"fixed_vocab", "space", "silence", "apostrophe", "oov", "sep", "add_blank_at", "pad_with_space"}
_G2P_KEYS = frozenset(("_target_", "_convert_", "phoneme_dict", "locale", "apply_to_oov_word", "heteronyms"))
_G2P_KEYS |= {"ignore_ambiguous_words", "use_chars", "phoneme_probability", "use_stresses", "grapheme_case"}
_G2P_KEYS |= {"grapheme_prefix", "mapping_file"}  # mapping_file: stored by NeMo's BaseG2p, never read


@dataclass(frozen=True)
class IpaTokenizerSpec:
    """One ``IPATokenizer`` config with its ``IpaG2p``: every setting that changes the vocabulary or an encoding.

    Defaults are NeMo's. ``locale`` is the tokenizer's (text normalization, punctuation); ``g2p_locale`` the
    G2P's (word splitting, the English ``'s`` rules): a config sets them apart.
    """

    # IPATokenizer
    locale: str | None = "en-US"
    punct: bool = True
    non_default_punct_list: tuple[str, ...] | None = None
    locale_specific_punct: bool = True
    fixed_vocab: tuple[str, ...] | None = None
    space: str = " "
    silence: str | None = None
    apostrophe: bool = False
    oov: str = OOV
    sep: str = "|"  # only NeMo's decode() uses it
    add_blank_at: str | None = None  # None: no blank token; "last": blank after OOV; anything else: before it
    pad_with_space: bool = False
    # IpaG2p
    g2p_locale: str | None = "en-US"
    use_chars: bool = False
    phoneme_probability: float | None = None  # not None also puts graphemes in the vocabulary; encoding uses 1.0
    ignore_ambiguous_words: bool = True
    use_stresses: bool = True
    grapheme_case: str = "upper"
    grapheme_prefix: str = ""
    heteronyms: tuple[str, ...] | None = None  # a list written in the config; a file comes as heteronyms_text
    # where the config says the files are (a path or a "nemo:" archive name), for the converter to find them
    phoneme_dict_paths: tuple[str, ...] = ()
    heteronyms_path: str | None = None

    def __post_init__(self) -> None:
        for locale in (self.locale, self.g2p_locale):
            if locale is not None:
                _check_locale(locale)
        if self.grapheme_case not in GRAPHEME_CASES:
            raise ValueError(f"grapheme_case {self.grapheme_case!r} is not one of {', '.join(GRAPHEME_CASES)}")

    @property
    def graphemes_in_vocab(self) -> bool:
        """Whether dictionary words give their letters to the vocabulary (NeMo forces it with a probability)."""
        return self.use_chars or self.phoneme_probability is not None

    @classmethod
    def from_config(cls, cfg: Mapping[str, object], *, nemo_version: str | None = None) -> IpaTokenizerSpec:
        """The spec of one ``text_tokenizers`` entry of a NeMo model config (a plain mapping, as YAML loads it).

        ``nemo_version`` is the model config's own stamp: with one older than 2.8.0, a pt-BR config that leaves
        ``locale_specific_punct`` unset gets the punctuation of its time, as NeMo's
        ``resolve_versioned_tokenizer_defaults`` decides. Raises ValueError naming any setting this module
        cannot reproduce.
        """
        target = str(cfg.get("_target_", ""))
        if target.rsplit(".", 1)[-1] != "IPATokenizer":
            raise ValueError(f"not an IPATokenizer config (_target_ {target!r})")
        check_keys(cfg, _TOKENIZER_KEYS, "IPATokenizer")
        g2p = cfg.get("g2p")
        if not isinstance(g2p, Mapping):
            raise ValueError("the IPATokenizer config has no g2p section; it needs an IpaG2p")
        g2p_target = str(g2p.get("_target_", ""))
        if g2p_target.rsplit(".", 1)[-1] != "IpaG2p":
            raise ValueError(f"IPATokenizer's g2p is {g2p_target!r}; only IpaG2p is supported")
        check_keys(g2p, _G2P_KEYS, "IpaG2p")
        if g2p.get("apply_to_oov_word") is not None:
            raise ValueError("IpaG2p's apply_to_oov_word (a Python callable) is not supported")

        locale = optional_str(cfg, "locale", "en-US")
        punct_list = optional_symbols(cfg, "non_default_punct_list")
        locale_specific = cfg.get("locale_specific_punct")
        if locale_specific is None:  # NeMo reads an explicit null as unset too
            locale_specific = not (
                target == IPA_TOKENIZER_TARGET
                and cfg.get("locale") == "pt-BR"
                and punct_list is None
                and predates_nemo_release(nemo_version, VERSIONED_DEFAULTS_SINCE)
            )
        add_blank_at = cfg.get("add_blank_at")
        probability = g2p.get("phoneme_probability")
        if probability is not None and not isinstance(probability, int | float):
            raise ValueError(f"IpaG2p's phoneme_probability must be a number or null, not {probability!r}")
        # Hydra hands IpaG2p YAML lists as ListConfig, which it does not take for a list, unless _convert_ says
        plain_lists = str(g2p.get("_convert_", "none")).lower() in ("partial", "object", "all")
        prefix = g2p.get("grapheme_prefix", "")
        if not isinstance(prefix, str):
            raise ValueError(f"IpaG2p's grapheme_prefix must be a string, not {prefix!r}")
        return cls(
            locale=locale,
            punct=bool(cfg.get("punct", True)),
            non_default_punct_list=punct_list,
            locale_specific_punct=bool(locale_specific),
            fixed_vocab=optional_symbols(cfg, "fixed_vocab") or None,  # NeMo treats an empty list as none
            space=required_str(cfg, "space", " "),
            silence=optional_str(cfg, "silence", None),
            apostrophe=bool(cfg.get("apostrophe", False)),
            oov=required_str(cfg, "oov", OOV),
            sep=required_str(cfg, "sep", "|"),
            add_blank_at=None if add_blank_at is None else str(add_blank_at),
            pad_with_space=bool(cfg.get("pad_with_space", False)),
            g2p_locale=optional_str(g2p, "locale", "en-US"),
            use_chars=bool(g2p.get("use_chars", False)),
            phoneme_probability=None if probability is None else float(probability),
            ignore_ambiguous_words=bool(g2p.get("ignore_ambiguous_words", True)),
            use_stresses=bool(g2p.get("use_stresses", True)),
            grapheme_case=required_str(g2p, "grapheme_case", "upper"),
            grapheme_prefix=prefix,
            heteronyms=_inline_heteronyms(g2p.get("heteronyms"), plain_lists),
            phoneme_dict_paths=_dict_paths(g2p.get("phoneme_dict"), plain_lists),
            heteronyms_path=g2p["heteronyms"] if isinstance(g2p.get("heteronyms"), str) else None,
        )


def check_keys(cfg: Mapping[str, object], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"{what} setting(s) {', '.join(map(repr, unknown))} are not supported")


def optional_str(cfg: Mapping[str, object], key: str, default: str | None) -> str | None:
    value = cfg.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def required_str(cfg: Mapping[str, object], key: str, default: str) -> str:
    value = optional_str(cfg, key, default)
    if value is None:
        raise ValueError(f"{key} must be a string, not null")
    return value


def optional_symbols(cfg: Mapping[str, object], key: str) -> tuple[str, ...] | None:
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, str):  # NeMo iterates it: one symbol per character
        return tuple(value)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{key} must be a list of strings, not {value!r}")


def _inline_heteronyms(value: object, plain_lists: bool) -> tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        # NeMo ignores a list that reaches it as ListConfig: no heteronyms at all
        return tuple(value) if plain_lists else None
    raise ValueError(f"IpaG2p's heteronyms must be a file or a list of words, not {value!r}")


def _dict_paths(value: object, plain_lists: bool) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        if not plain_lists:
            raise ValueError(
                "IpaG2p's phoneme_dict is a list, which NeMo cannot load from a config without `_convert_: all`"
            )
        return tuple(value)  # several dictionaries, merged in order (code-switching)
    raise ValueError(f"IpaG2p's phoneme_dict must be a file or a list of files, not {value!r}")


def predates_nemo_release(nemo_version: str | None, release: tuple[int, ...]) -> bool:
    """Whether a config stamped ``nemo_version`` was written before ``release`` (NeMo's ``_predates_nemo_release``).

    Unstamped or unreadable: no (today's defaults). Pre-releases count as their release ("2.8.0rc0" is 2.8.0), and
    the release numbers compare as tuples, as NeMo compares ``Version.release``, so "2.8" predates (2, 8, 0).
    """
    if nemo_version is None:
        return False
    match = re.fullmatch(
        r"\s*v?(?:\d+!)?(\d+(?:\.\d+)*)(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview|post|rev|r|dev)[-_.]?\d*)*"
        r"(?:-\d+)?(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*",
        str(nemo_version).lower(),
    )
    if match is None:
        return False
    return tuple(int(part) for part in match.group(1).split(".")) < release


# --- the dictionary -----------------------------------------------------------------------------------------

Prons = list[str]  # one word's pronunciations in dictionary order; each a string of one-character symbols


def _file_lines(text: str) -> list[str]:
    """The lines Python's text-mode file iteration gives (universal newlines), without their ends."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _parse_dictionary(text: str) -> dict[str, Prons]:
    """``IpaG2p._parse_phoneme_dict`` of one file: word -> pronunciations, variants folded into their word."""
    entries: dict[str, Prons] = {}
    for number, raw in enumerate(_file_lines(text), start=1):
        line = _nfc(raw)  # before the test of its first character, as NeMo ("\u212b" is "Å")
        if not line or _DICT_ENTRY_START.match(line) is None:
            continue
        parts = line.split(maxsplit=1)
        if len(parts) < 2:
            raise ValueError(f"pronunciation dictionary line {number} has a word but no pronunciation: {line!r}")
        word = _VARIANT_MARK.sub("", parts[0]) if "(" in parts[0] else parts[0]
        entries.setdefault(word, []).append("".join(parts[1].split()))
    return entries


def _parse_dictionaries(dict_text: str | Sequence[str]) -> dict[str, Prons]:
    if isinstance(dict_text, str):
        return _parse_dictionary(dict_text)
    merged: dict[str, Prons] = {}
    for text in dict_text:
        for word, prons in _parse_dictionary(text).items():
            merged.setdefault(word, []).extend(prons)
    return merged


def set_case(text: str, case: str) -> str:
    if case == "upper":
        return text.upper()
    if case == "lower":
        return text.lower()
    return text


@dataclass
class _Lexicon:
    """The dictionary as ``IpaG2p`` holds it (words cased, stresses kept or not) and the symbols it brings."""

    words: dict[str, Prons]
    symbols: set[str]

    @classmethod
    def build(cls, spec: IpaTokenizerSpec, dict_text: str | Sequence[str]) -> _Lexicon:
        parsed = _parse_dictionaries(dict_text)
        if not parsed:
            raise ValueError("the pronunciation dictionary has no entries")
        words: dict[str, Prons] = {}
        symbols: set[str] = set()
        unstress = str.maketrans("", "", _STRESS_MARKS)
        graphemes = spec.graphemes_in_vocab
        for word, prons in parsed.items():
            cased = set_case(word, spec.grapheme_case)
            if graphemes:
                symbols.update(_with_prefix(_NOT_WORD_CHAR.sub("", cased), spec.grapheme_prefix))
            if not spec.use_stresses:
                prons = [pron.translate(unstress) for pron in prons]
            for pron in prons:
                symbols.update(pron)
            # a later entry whose cased form collides replaces the earlier one whole, as in NeMo
            words[cased] = prons
            if spec.grapheme_case == "mixed" and not cased.isupper():
                words[cased.upper()] = prons  # "HALLO" finds "Hallo"
        return cls(words, symbols)

    def restrict(self, symbols: set[str], spec: IpaTokenizerSpec) -> None:
        """``IpaG2p.replace_symbols`` (a ``fixed_vocab``): drop words and pronunciations outside ``symbols``."""
        for word in list(self.words):
            prons = self.words[word]
            if not set(_with_prefix(set_case(word, spec.grapheme_case), spec.grapheme_prefix)) <= symbols:
                del self.words[word]
                continue
            legal = [pron for pron in prons if set(pron) <= symbols]
            if not legal:
                del self.words[word]
            elif len(legal) != len(prons):
                self.words[word] = legal
        self.symbols = set(symbols)


def _with_prefix(word: str, prefix: str) -> list[str]:
    return [prefix + char for char in word]


def _preprocessor(locale: str | None) -> Callable[[str], str]:
    """The tokenizer's text normalization for its locale."""
    return _english_text if locale == "en-US" else any_locale_text


def _english_text(text: str) -> str:
    """en-US: decompose, drop combining marks ("é" -> "e"), straighten curly quotes; case kept."""
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn").translate(_SYNOGLYPHS)


def any_locale_text(text: str) -> str:
    """Every other locale: compose (NFC), "’" -> "'"."""
    return _nfc(text).replace("’", "'")


def _nfc(text: str) -> str:
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def _lexicon_for(spec: IpaTokenizerSpec, dict_text: str | Sequence[str]) -> _Lexicon:
    """The dictionary after a ``fixed_vocab`` has trimmed it, as the tokenizer leaves its G2P."""
    lexicon = _Lexicon.build(spec, dict_text)
    if spec.fixed_vocab:
        preprocess = _preprocessor(spec.locale)
        fixed = {preprocess(symbol) for symbol in spec.fixed_vocab}
        if fixed != lexicon.symbols:
            lexicon.restrict(fixed, spec)
    return lexicon


def _vocabulary(spec: IpaTokenizerSpec, symbols: set[str]) -> list[str]:
    tokens = set(symbols)
    if spec.apostrophe:
        tokens.add("'")
    if spec.punct:
        tokens.update(_punctuation(spec))
    ordered = sorted(tokens)  # by code point, so the vocabulary is the same every time
    if spec.space not in symbols:
        ordered.append(spec.space)
    if spec.silence is not None:
        ordered.append(spec.silence)
    return with_special_tokens(ordered, spec.add_blank_at, spec.oov)


def with_special_tokens(tokens: list[str], add_blank_at: str | None, oov: str = OOV) -> list[str]:
    """NeMo's ``BaseTokenizer`` ending of every vocabulary: ``<pad>``, then ``<blank>`` (if any) and the OOV token,
    the blank after the OOV token when ``add_blank_at`` is "last". Extends and returns ``tokens``."""
    tokens.append(PAD)
    if add_blank_at is not None:
        tokens.append(BLANK)
    tokens.append(oov)
    if add_blank_at == "last":
        tokens[-1], tokens[-2] = tokens[-2], tokens[-1]
    return tokens


def _punctuation(spec: IpaTokenizerSpec) -> list[str]:
    if spec.non_default_punct_list is not None:
        return list(spec.non_default_punct_list)
    if spec.locale_specific_punct:
        return ipa_punctuation(spec.locale)
    return sorted(DEFAULT_PUNCTUATION)


def build_ipa_tokens(
    spec: IpaTokenizerSpec, dict_text: str | Sequence[str], heteronyms_text: str | None = None
) -> list[str]:
    """NeMo's ``IPATokenizer(IpaG2p(...)).tokens`` for this config and dictionary text (several: merged in order).

    Sorted symbols (dictionary phonemes, graphemes of dictionary words if enabled, apostrophe, punctuation), then
    space (unless a symbol already), silence, ``<pad>``, ``<blank>``, OOV. Heteronyms do not change it.
    """
    del heteronyms_text  # heteronyms only change encoding; the argument keeps the two entry points alike
    return _vocabulary(spec, _lexicon_for(spec, dict_text).symbols)


# --- encoding -----------------------------------------------------------------------------------------------


class IpaTokenizer:
    """NeMo's ``IPATokenizer.encode`` with ``phoneme_probability`` 1.0, over a stored vocabulary.

    ``tokens`` is the vocabulary the model was trained with (:func:`build_ipa_tokens` at conversion); a symbol
    outside it is dropped, as NeMo drops it. The dictionary is parsed once, here.
    """

    def __init__(
        self,
        spec: IpaTokenizerSpec,
        tokens: Sequence[str],
        dict_text: str | Sequence[str],
        heteronyms_text: str | None = None,
    ) -> None:
        if spec.space not in tokens:
            raise ValueError(f"the vocabulary has no space token {spec.space!r}; it is not this tokenizer's")
        self.spec = spec
        self.tokens = list(tokens)
        self._ids = {token: i for i, token in enumerate(self.tokens)}  # a repeated token keeps its last index
        self._words = _lexicon_for(spec, dict_text).words
        self._heteronyms = _heteronym_set(spec, heteronyms_text)
        self._preprocess = _preprocessor(spec.locale)
        self._word_pattern = _EN_US_WORDS if spec.g2p_locale == "en-US" else _ANY_LOCALE_WORDS

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: phonemes of known words, graphemes of the others, punctuation, spaces."""
        symbols = [s for s in self.g2p(self._preprocess(text)) if s in self._ids]
        space = self.spec.space
        while symbols and symbols[-1] == space:
            symbols.pop()
        if self.spec.pad_with_space:
            symbols = [space, *symbols, space]
        return [self._ids[s] for s in symbols]

    def g2p(self, text: str) -> list[str]:
        """``IpaG2p.__call__``: the symbols of (normalized) text, before the vocabulary filters them."""
        out: list[str] = []
        prefix = self.spec.grapheme_prefix
        for match in self._word_pattern.finditer(_nfc(text)):
            token = match.group(match.lastindex or 0)
            if match.lastindex == _VERBATIM_GROUP:  # |a b| -> "a", "b", each one symbol
                out.extend(prefix + word for word in token[1:-1].split(" "))
                continue
            if match.lastindex == _WORD_GROUP and self.spec.g2p_locale == "en-US":
                token = token.lower()
            symbols, known = self._word(token)
            if not known and "-" in token:  # an unknown hyphenated word: its parts, hyphens between
                symbols = []
                for part in token.split("-"):
                    symbols.extend(self._word(part)[0])
                    symbols.append("-")
                symbols.pop()
            out.extend(symbols)
        return out

    def _word(self, word: str) -> tuple[list[str], bool]:
        """``IpaG2p.parse_one_word``: the symbols of one word, and whether it was more than an OOV spelling."""
        spec = self.spec
        word = set_case(word, spec.grapheme_case)
        if _HAS_WORD_CHAR.search(word) is None:  # punctuation and spaces
            return list(word), True
        if self._heteronyms and word in self._heteronyms:
            return _with_prefix(word, spec.grapheme_prefix), True
        if spec.g2p_locale == "en-US":
            found = self._english_suffix(word)
            if found is not None:
                return found, True
        if spec.g2p_locale == "fr-FR":
            found = self._french_elision(word)
            if found is not None:
                return found, True
        if word in self._words and self._usable(word):
            return list(self._words[word][0]), True
        if spec.grapheme_case == "mixed" and word not in self._words and word.upper() in self._words:
            word = word.upper()  # an ambiguous upper-case entry is spelt out in upper case
            if self._usable(word):
                return list(self._words[word][0]), True
        return _with_prefix(word, spec.grapheme_prefix), False

    def _english_suffix(self, word: str) -> list[str] | None:
        """en-US: "dog's", "dogs" from "dog" when only the stem is in the dictionary ("t" +s, "s" +ɪz, else +z)."""
        if len(word) > 2 and word[-2:] in ("'s", "'S"):
            stem = self._stem(word, 2)
            if stem is not None:
                last = stem[-1]
                suffix = "s" if last in "Tt" else "ɪz" if last in "Ss" else "z"
                return list(self._words[stem][0] + suffix)
        if len(word) > 1 and word[-1] in "sS":
            stem = self._stem(word, 1)
            if stem is not None:
                return list(self._words[stem][0] + ("s" if stem[-1] in "Tt" else "z"))
        return None

    def _french_elision(self, word: str) -> list[str] | None:
        """fr-FR: "l'homme" from "homme" when only that is in the dictionary, the elided word's sound first."""
        for written, said in _FRENCH_ELISIONS:
            starter = written + "'"
            if len(word) > 2 and (word.startswith(starter) or word.startswith(starter.upper())):
                rest = self._stem(word, -len(starter))
                if rest is not None:
                    return list(said + self._words[rest][0])
        return None

    def _stem(self, word: str, cut: int) -> str | None:
        """``word`` less its last ``cut`` characters (negative: first), as the dictionary has it, if only it is."""
        if word in self._words or word.upper() in self._words:
            return None
        stem = word[:-cut] if cut > 0 else word[-cut:]
        if stem not in self._words:
            stem = stem.upper()
            if stem not in self._words:
                return None
        return stem if self._usable(stem) else None

    def _usable(self, word: str) -> bool:
        return not self.spec.ignore_ambiguous_words or len(self._words[word]) == 1


def _heteronym_set(spec: IpaTokenizerSpec, heteronyms_text: str | None) -> frozenset[str]:
    """Words always spelt out as graphemes: the file's lines (trailing blanks cut) or the config's list, cased."""
    if heteronyms_text is not None:
        words: Iterable[str] = (line.rstrip() for line in _file_lines(heteronyms_text))
    elif spec.heteronyms is not None:
        words = spec.heteronyms
    else:
        return frozenset()
    return frozenset(set_case(word, spec.grapheme_case) for word in words)


def dict_to_tsv(dict_text: str | Sequence[str]) -> str:
    """The dictionary as "word<TAB>IPA" lines, lower-case word and first pronunciation, in dictionary order.

    The form m1el/magpie-tts.cpp keeps in its GGUF key ``magpie.tokenizer.dict``. Words that differ only in case
    keep the first one's line; the other pronunciations are dropped.
    """
    lines: dict[str, str] = {}
    for word, prons in _parse_dictionaries(dict_text).items():
        lines.setdefault(word.lower(), f"{word.lower()}\t{prons[0]}\n")
    return "".join(lines.values())


# --- sizes of the other tokenizers of a Magpie checkpoint ---------------------------------------------------

# google/byt5-small's len(get_vocab()): <pad> <eos> <unk>, 256 bytes, and 125 <extra_id_N>: all rows of the
# aggregated vocabulary NeMo gives a Hugging Face tokenizer.
BYT5_VOCAB_SIZE = 3 + 256 + 125
_BYT5_MODELS = ("google/byt5-small",)

# Letters (and marks) of NeMo's grapheme sets for caseless scripts: case "upper" keeps one copy, "mixed" (the
# version-1 charsets) concatenates upper and lower, two identical copies.
_ARABIC_GRAPHEMES = 36 + 9  # letters + diacritics
_DEVANAGARI_GRAPHEMES = 14 + 36 + 22 + 1  # independent vowels, consonants, dependent vowels and signs, danda
_CHARS_TOKENIZERS = {
    "ArabicCharsTokenizer": ("ar-MSA", _ARABIC_GRAPHEMES),
    "HindiCharsTokenizer": ("hi-IN", _DEVANAGARI_GRAPHEMES),
}


def tokenizer_size(name: str, cfg: Mapping[str, object], *, nemo_version: str | None = None) -> int | None:
    """How many vocabulary rows a non-IPA tokenizer of ``text_tokenizers`` takes, or None if not known here.

    Known: ByT5 (``AutoTokenizer`` / ``T5Tokenizer`` of google/byt5-small) and NeMo's Arabic and Hindi character
    tokenizers, whose character sets are fixed (``nemo_version`` dates an unset ``charset_version``, as NeMo does).
    """
    target = str(cfg.get("_target_", ""))
    if target in ("AutoTokenizer", "T5Tokenizer"):
        return BYT5_VOCAB_SIZE if cfg.get("pretrained_model") in _BYT5_MODELS else None
    kind = target.rsplit(".", 1)[-1]
    if kind not in _CHARS_TOKENIZERS:
        return None
    locale, graphemes = _CHARS_TOKENIZERS[kind]
    versioned = target == f"{NEMO_TOKENIZERS}.{kind}"  # NeMo dates only configs naming the class in full
    legacy = versioned and predates_nemo_release(nemo_version, VERSIONED_DEFAULTS_SINCE)
    chars = cfg.get("chars")
    if chars is not None:
        if not isinstance(chars, str | Sequence):
            raise ValueError(f"{name}: chars must be a string or a list, not {chars!r}")
        n_chars = len(chars)
    else:
        version = config_version(cfg, "charset_version", name, legacy)
        latin = len(string.ascii_letters) if kind == "ArabicCharsTokenizer" or version == 2 else 26
        n_chars = graphemes * (2 if version == 1 else 1) + latin
    n_punct = 0
    if cfg.get("punct", True):
        punct_list = cfg.get(
            "non_default_punct_list", ipa_punctuation(locale) if kind == "ArabicCharsTokenizer" else None
        )
        if punct_list is None and kind == "HindiCharsTokenizer":
            version = config_version(cfg, "punct_version", name, legacy)
            punct_list = ipa_punctuation(locale) if version == 2 else DEFAULT_PUNCTUATION
        if not isinstance(punct_list, str | Sequence):
            punct_list = DEFAULT_PUNCTUATION  # an explicit null: the base class's list
        n_punct = len(punct_list)
    apostrophe = 1 if cfg.get("apostrophe", True) else 0
    blank = 0 if cfg.get("add_blank_at") is None else 1
    return 1 + n_chars + apostrophe + n_punct + 1 + blank + 1  # space, ..., pad, blank, oov


def config_version(cfg: Mapping[str, object], key: str, name: str, legacy: bool) -> int:
    value = cfg.get(key)
    if value is None:
        return 1 if legacy else 2
    if value == 1 or value == 2:
        return 1 if value == 1 else 2
    raise ValueError(f"{name}: {key} {value!r} is not 1 or 2")


def checked_sections(
    cfg: Mapping[str, object], tokenizer: str, tokenizer_keys: frozenset[str], g2p: str, g2p_keys: frozenset[str]
) -> Mapping[str, object]:
    """A tokenizer config's ``g2p`` section, once the config is checked to be a ``tokenizer`` over a ``g2p`` (class
    names) with only the settings those take; a ValueError naming what is not."""
    target = str(cfg.get("_target_", ""))
    if target.rsplit(".", 1)[-1] != tokenizer:
        raise ValueError(f"not a {tokenizer} config (_target_ {target!r})")
    check_keys(cfg, tokenizer_keys, tokenizer)
    section = cfg.get("g2p")
    if not isinstance(section, Mapping):
        raise ValueError(f"the {tokenizer} config has no g2p section; it needs a G2P")
    g2p_target = str(section.get("_target_", ""))
    if g2p_target.rsplit(".", 1)[-1] != g2p:
        raise ValueError(f"{tokenizer}'s g2p is {g2p_target!r}; only {g2p} is supported")
    check_keys(section, g2p_keys, g2p)
    return section


def refuse_callables(section: Mapping[str, object], g2p: str, keys: tuple[str, ...]) -> None:
    """A ValueError when the ``g2p`` section sets one of ``keys``: settings that name a Python callable."""
    for key in keys:
        if section.get(key) is not None:
            raise ValueError(f"{g2p}'s {key} (a Python callable) is not supported")
