"""Magpie's text side: the checkpoint's own tokenizers, stored in the GGUF file and run without NeMo.

NeMo aggregates several tokenizers (``text_tokenizers`` in the config, in order; each one's ids follow the ones
before it) and picks one per language. The converter stores, for each: its kind, offset and size, its config as
JSON, and for IPA tokenizers (:mod:`ggtts.text.nemo_ipa`) the token list, the phoneme dictionary and the
heteronyms. magpie-tts.cpp's own keys (the English tokens one per line, the dictionary as ``word\\tIPA`` lines, the
pad/OOV/space ids) are written too, so its runtime reads our files. Kinds ggtts cannot run yet (byt5 bytes,
Mandarin, Japanese, Arabic characters) are stored with their size, so the ids of the others stay right, and a
request in their language is refused naming the tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from ggtts.errors import GGUFError, InputError
from ggtts.gguf.keys import Magpie as K
from ggtts.gguf.keys import MagpieTokenizer as T

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile

IPA, SIZED, CPP, BYT5, CHARS, JAPANESE, MANDARIN = T.IPA, T.SIZED, T.CPP, T.BYT5, T.CHARS, T.JAPANESE, T.MANDARIN
ENGLISH = T.ENGLISH
BYT5_OFFSET = 3  # ByT5's ids: <pad> 0, </s> 1, <unk> 2, then the 256 byte values
BYT5_EOS = 1  # Hugging Face's encode() ends with </s>, and NeMo's aggregated tokenizer keeps it
RUNNABLE = frozenset({"ipa", "cpp", "byt5", "chars", "japanese", "mandarin"})
# nvidia/magpie_tts_multilingual_357m's English tokenizer settings (NeMo's magpietts_multilingual_v1.yaml): how a
# file from magpie-tts.cpp, which stores the tokens and dictionary but no settings, is read
CPP_ENGLISH_CONFIG: dict[str, Any] = {
    "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.IPATokenizer",
    "punct": True,
    "apostrophe": True,
    "pad_with_space": False,
    "g2p": {
        "_target_": "nemo.collections.tts.g2p.models.i18n_ipa.IpaG2p",
        "phoneme_dict": "ipa_cmudict-0.7b_nv23.01.txt",  # a name only: the words come from the file's key
        "phoneme_probability": 0.8,
        "ignore_ambiguous_words": False,
        "use_chars": True,
        "use_stresses": True,
    },
}
# language -> tokenizer name candidates, first present wins, where the checkpoint's own language_to_tokenizer_mapping
# says nothing: NeMo 3.0's LANGUAGE_TOKENIZER_MAP (tts_dataset_utils.py), with the names the multilingual 357M
# checkpoint gives its Italian, Vietnamese, Hindi, Portuguese, Korean and Arabic tokenizers added (NeMo's map lacks
# them and falls back to English for those languages)
LANGUAGE_CANDIDATES: dict[str, tuple[str, ...]] = {
    "en": ("english_phoneme", "english"),
    "de": ("german_phoneme", "german"),
    "es": ("spanish_phoneme", "spanish"),
    "fr": ("french_chartokenizer", "french"),
    "it": ("italian_phoneme", "italian", "italian_chartokenizer"),
    "vi": ("vietnamese_phoneme", "vietnamese", "vietnamese_chartokenizer"),
    "zh": ("mandarin_phoneme", "mandarin", "chinese"),
    "hi": ("hindi_phoneme", "hindi_chartokenizer", "hindi"),
    "ja": ("japanese_phoneme", "japanese"),
    "pt": ("portuguese_Brazilian_phoneme", "portuguese"),
    "ko": ("korean_chartokenizer", "korean"),
    "ar": ("arabic_MSA_chartokenizer", "arabic"),
}


_key = T.key


# ---- runtime ---------------------------------------------------------------------------------------------------
class Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """google/byt5-small as NeMo's aggregated tokenizer calls it: each UTF-8 byte + 3, then </s>."""

    def encode(self, text: str) -> list[int]:
        return [b + BYT5_OFFSET for b in text.encode("utf-8")] + [BYT5_EOS]


def tsv_to_dict(tsv: str) -> str:
    """magpie-tts.cpp's ``word\\tIPA`` lines as a NeMo dictionary (upper-case words, as NeMo's English one)."""
    lines = (line.split("\t", 1) for line in tsv.splitlines() if "\t" in line)
    return "".join(f"{word.upper()}  {ipa}\n" for word, ipa in lines)


@dataclass(frozen=True)
class TokenizerEntry:
    name: str
    kind: str
    offset: int
    size: int
    config: dict[str, Any]


class MagpieText:
    """The file's tokenizers; ``encode(text, language)`` -> text token ids, EOS included (NeMo's inference)."""

    def __init__(self, gguf: GGUFFile, eos_id: int) -> None:
        self.path, self.eos_id = gguf.path, eos_id
        self.entries: dict[str, TokenizerEntry] = {}
        self._gguf = gguf
        for name in gguf.get_list(K.TOKENIZERS, []):
            try:
                config = json.loads(gguf.get_str(_key(name, "config"), "{}"))
            except json.JSONDecodeError:
                raise GGUFError(f"{gguf.path}: tokenizer '{name}' has a config that is not JSON") from None
            self.entries[name] = TokenizerEntry(
                name, gguf.get_str(_key(name, "kind")), gguf.get_int(_key(name, "offset")),
                gguf.get_int(_key(name, "size")), config,
            )  # fmt: skip
        rows = gguf.info(K.TEXT_EMBEDDING).shape[0] if K.TEXT_EMBEDDING in gguf else 0
        for entry in self.entries.values():
            if entry.offset < 0 or entry.size < 1 or entry.offset + entry.size > rows - 2:
                last = entry.offset + entry.size - 1
                raise GGUFError(
                    f"{gguf.path}: tokenizer '{entry.name}' claims ids {entry.offset}..{last}, beyond the {rows}-token "
                    "text embedding (less BOS and EOS)"
                )
        mapping = dict(item.split("=", 1) for item in gguf.get_list(K.LANGUAGES, []) if "=" in item)
        self.languages: dict[str, str] = {}
        for lang, candidates in LANGUAGE_CANDIDATES.items():
            name = mapping.get(lang) or next((c for c in candidates if c in self.entries), None)
            if name is not None and name in self.entries:
                self.languages[lang] = name
        if not self.entries and gguf.get(K.TOKENIZER_VOCAB) is not None:
            self._cpp_english(gguf)
        self._ipa: dict[str, Encoder] = {}  # built on first use

    def _cpp_english(self, gguf: GGUFFile) -> None:
        """A file from magpie-tts.cpp: its English tokens and dictionary (``word\\tIPA``) keys, read with NeMo's
        English settings for this checkpoint (:data:`CPP_ENGLISH_CONFIG`); such files carry no heteronym list."""
        tokens = gguf.get_str(K.TOKENIZER_VOCAB).split("\n")
        self.entries[ENGLISH] = TokenizerEntry(ENGLISH, CPP, 0, len(tokens), dict(CPP_ENGLISH_CONFIG))
        self.languages["en"] = ENGLISH

    @cached_property
    def spoken(self) -> tuple[str, ...]:
        """Languages this file can speak here."""
        return tuple(lang for lang, name in self.languages.items() if self.entries[name].kind in RUNNABLE)

    def tokenizer(self, language: str) -> Encoder:
        from ggtts.text import nemo_ipa

        name = self.languages.get(language)
        if name is None:
            raise InputError(
                f"this Magpie model has no tokenizer for language '{language}'; it speaks {', '.join(self.spoken)}"
            )
        entry = self.entries[name]
        if entry.kind not in RUNNABLE:
            raise InputError(
                f"language '{language}' uses tokenizer '{name}', which ggtts cannot run yet; it speaks "
                f"{', '.join(self.spoken)}"
            )
        if entry.kind == BYT5:
            return ByteTokenizer()
        if entry.kind in (CHARS, JAPANESE, MANDARIN) and name not in self._ipa:
            self._ipa[name] = self._built(entry)
        if name not in self._ipa:
            g = self._gguf
            spec = nemo_ipa.IpaTokenizerSpec.from_config(
                entry.config, nemo_version=g.get_str(K.NEMO_VERSION, "") or None
            )
            if entry.kind == CPP:
                tokens = g.get_str(K.TOKENIZER_VOCAB).split("\n")
                self._ipa[name] = nemo_ipa.IpaTokenizer(spec, tokens, tsv_to_dict(g.get_str(K.TOKENIZER_DICT, "")))
            else:
                heteronyms = g.get_str(_key(name, "heteronyms"), "") or None
                tokens = list(g.get_list(_key(name, "tokens")))
                self._ipa[name] = nemo_ipa.IpaTokenizer(spec, tokens, g.get_str(_key(name, "dict"), ""), heteronyms)
        return self._ipa[name]

    def _built(self, entry: TokenizerEntry) -> Encoder:
        from ggtts.text import nemo_chars, nemo_japanese

        version = self._gguf.get_str(K.NEMO_VERSION, "") or None
        tokens = list(self._gguf.get_list(_key(entry.name, "tokens")))
        if entry.kind == CHARS:
            spec = nemo_chars.CharsTokenizerSpec.from_config(entry.config, nemo_version=version)
            return nemo_chars.CharsTokenizer(spec, tokens)
        if entry.kind == MANDARIN:
            from ggtts.text import nemo_mandarin

            mandarin = nemo_mandarin.MandarinTokenizerSpec.from_config(entry.config, nemo_version=version)
            dictionary = self._gguf.get_str(_key(entry.name, "dict"), "")
            return nemo_mandarin.MandarinTokenizer(mandarin, tokens, dictionary)
        japanese = nemo_japanese.JapaneseTokenizerSpec.from_config(entry.config, nemo_version=version)
        return nemo_japanese.JapaneseTokenizer(japanese, tokens)

    def encode(self, text: str, language: str) -> list[int]:
        name = self.languages.get(language, "")
        ids = self.tokenizer(language).encode(text)
        offset = self.entries[name].offset
        return [offset + i for i in ids] + [self.eos_id]
