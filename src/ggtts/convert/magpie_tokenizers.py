"""Magpie's tokenizers into the GGUF file (:class:`~ggtts.gguf.keys.MagpieTokenizer`): for each of the checkpoint's
``text_tokenizers``, in NeMo's order, its kind, offset, size and config, and what ggtts needs to run it without
NeMo (token lists, phoneme dictionaries, heteronyms). The pipeline's reader is :mod:`ggtts.families.magpie.text`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ggtts.errors import ConversionError
from ggtts.gguf.keys import Magpie as K
from ggtts.gguf.keys import MagpieTokenizer as T

if TYPE_CHECKING:
    from ggtts.convert.nemo_archive import NemoArchive
    from ggtts.gguf.write import ModelWriter

IPA_TARGET = "IPATokenizer"
MANDARIN_TARGET = "ChinesePhonemesTokenizer"
IPA, SIZED, BYT5, CHARS, JAPANESE, MANDARIN, ENGLISH = (
    T.IPA,
    T.SIZED,
    T.BYT5,
    T.CHARS,
    T.JAPANESE,
    T.MANDARIN,
    T.ENGLISH,
)
_key = T.key


def _chars_tokens(cfg: Mapping[str, Any], version: str | None) -> list[str]:
    from ggtts.text import nemo_chars

    return nemo_chars.build_chars_tokens(nemo_chars.CharsTokenizerSpec.from_config(cfg, nemo_version=version))


def _japanese_tokens(cfg: Mapping[str, Any], version: str | None) -> list[str]:
    from ggtts.text import nemo_japanese

    spec = nemo_japanese.JapaneseTokenizerSpec.from_config(cfg, nemo_version=version)
    return nemo_japanese.build_japanese_tokens(spec)


# NeMo class -> (kind, its token list from its config): tokenizers whose vocabulary needs no file
BUILT_TOKENS: dict[str, tuple[str, Callable[[Mapping[str, Any], str | None], list[str]]]] = {
    "ArabicCharsTokenizer": (CHARS, _chars_tokens),
    "HindiCharsTokenizer": (CHARS, _chars_tokens),
    "JapanesePhonemeTokenizer": (JAPANESE, _japanese_tokens),
}


def _target(cfg: Mapping[str, Any]) -> str:
    return str(cfg.get("_target_", "")).rsplit(".", 1)[-1]


def add_tokenizers(writer: ModelWriter, archive: NemoArchive, n_tokens: int) -> None:
    """Store the checkpoint's tokenizers; their sizes must add up to the text embedding's ``n_tokens``."""
    from ggtts.text import nemo_ipa

    configs = archive.config.get("text_tokenizers") or {}
    if not configs and "text_tokenizer" in archive.config:  # older English-only checkpoints
        configs = {ENGLISH: archive.config["text_tokenizer"]}
    if not configs:
        raise ConversionError(f"{archive.path}: the Magpie config has no text_tokenizers")
    version = archive.config.get("nemo_version")
    version = None if version is None else str(version)
    writer.add(K.NEMO_VERSION, version or "")
    names, offset, unknown = list(configs), 0, []
    sizes: dict[str, int | None] = {}
    for name in names:
        cfg = configs[name]
        if _target(cfg) == IPA_TARGET:
            try:
                spec = nemo_ipa.IpaTokenizerSpec.from_config(cfg, nemo_version=version)
            except ValueError as e:
                raise ConversionError(f"{archive.path}: tokenizer '{name}': {e}") from None
            g2p = cfg.get("g2p") or {}
            dictionary = archive.artifact_text(str(g2p["phoneme_dict"])) if g2p.get("phoneme_dict") else ""
            heteronyms = archive.artifact_text(str(g2p["heteronyms"])) if g2p.get("heteronyms") else ""
            tokens = nemo_ipa.build_ipa_tokens(spec, dictionary, heteronyms or None)
            writer.add(_key(name, "tokens"), tokens)
            writer.add(_key(name, "dict"), dictionary)
            writer.add(_key(name, "heteronyms"), heteronyms)
            writer.add(_key(name, "kind"), IPA)
            sizes[name] = len(tokens)
            if name == ENGLISH and offset == 0:  # magpie-tts.cpp's keys
                writer.add(K.TOKENIZER_VOCAB, "\n".join(tokens))
                writer.add(K.TOKENIZER_DICT, nemo_ipa.dict_to_tsv(dictionary))
                writer.add(K.TOKENIZER_SPACE, tokens.index(spec.space))
                writer.add(K.TOKENIZER_PAD, tokens.index("<pad>"))
                writer.add(K.TOKENIZER_OOV, tokens.index("<oov>"))
        elif _target(cfg) == MANDARIN_TARGET:
            from ggtts.text import nemo_mandarin

            try:
                mandarin = nemo_mandarin.MandarinTokenizerSpec.from_config(cfg, nemo_version=version)
            except ValueError as e:
                raise ConversionError(f"{archive.path}: tokenizer '{name}': {e}") from None
            g2p = cfg.get("g2p") or {}
            dictionary = archive.artifact_text(str(g2p["phoneme_dict"])) if g2p.get("phoneme_dict") else ""
            tokens = nemo_mandarin.build_mandarin_tokens(mandarin, dictionary)
            writer.add(_key(name, "tokens"), tokens)
            writer.add(_key(name, "dict"), dictionary)
            writer.add(_key(name, "kind"), MANDARIN)
            sizes[name] = len(tokens)
        elif _target(cfg) in BUILT_TOKENS:
            kind, build = BUILT_TOKENS[_target(cfg)]
            try:
                tokens = build(cfg, version)
            except ValueError as e:
                raise ConversionError(f"{archive.path}: tokenizer '{name}': {e}") from None
            writer.add(_key(name, "tokens"), tokens)
            writer.add(_key(name, "kind"), kind)
            sizes[name] = len(tokens)
        else:
            sizes[name] = nemo_ipa.tokenizer_size(name, cfg, nemo_version=version)
            byt5 = _target(cfg) in ("AutoTokenizer", "T5Tokenizer") and sizes[name] == nemo_ipa.BYT5_VOCAB_SIZE
            writer.add(_key(name, "kind"), BYT5 if byt5 else SIZED)
            if sizes[name] is None:
                unknown.append(name)
        writer.add(_key(name, "config"), json.dumps(cfg, ensure_ascii=False, sort_keys=True))
        offset += sizes[name] or 0
    if len(unknown) > 1:
        raise ConversionError(f"{archive.path}: cannot tell the vocabulary sizes of tokenizers {', '.join(unknown)}")
    if unknown:  # the one tokenizer of unknown size takes what the embedding has left
        sizes[unknown[0]] = n_tokens - offset
    if sum(s or 0 for s in sizes.values()) != n_tokens or any((s or 0) <= 0 for s in sizes.values()):
        raise ConversionError(
            f"{archive.path}: the tokenizers' vocabularies ({', '.join(f'{n} {sizes[n]}' for n in names)}) do not add "
            f"up to the text embedding's {n_tokens} tokens"
        )
    writer.add(K.TOKENIZERS, names)
    offset = 0
    for name in names:
        writer.add(_key(name, "offset"), offset)
        writer.add(_key(name, "size"), int(sizes[name] or 0))
        offset += int(sizes[name] or 0)
    mapping = archive.config.get("language_to_tokenizer_mapping") or {}
    writer.add(K.LANGUAGES, [f"{lang}={tok}" for lang, tok in mapping.items() if tok in names])
