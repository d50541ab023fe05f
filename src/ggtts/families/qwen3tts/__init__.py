"""Qwen3-TTS (talker -> code predictor -> 12 Hz speech decoder): the family record.

Two files, as llama.cpp has them: the talker (architecture ``qwen3tts``) is the model file; its mmproj (the code
predictor and the speech decoder) is the companion, found as ``mmproj-NAME.gguf`` beside ``NAME.gguf``, else as
the only Qwen3-TTS mmproj beside it, or named with ``mmproj=`` / ``--mmproj``. CustomVoice checkpoints have
preset speakers (the voices); VoiceDesign ones take a description of the voice (``instructions``, upstream's
``instruct``). Pipeline:
:mod:`ggtts.families.qwen3tts.pipeline`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ggtts.errors import InputError
from ggtts.families.base import (
    Capabilities,
    Companion,
    Family,
    LoadOptions,
    check_number,
    check_path,
    check_seed,
    find_beside,
    markup_option,
    option,
    parallel_load_option,
    precision_load_option,
)
from ggtts.families.qwen3omni import TalkerSamplingOptions
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.gguf.keys import Qwen3TTSVoice as VoiceKeys

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.normalize import Normalization

MAX_CHARS = 5000
MAX_INSTRUCT_CHARS = 1000
# llama.cpp's --tts-lang codes for upstream's language names
LANGUAGE_CODES = {
    "zh": "chinese", "en": "english", "de": "german", "it": "italian", "pt": "portuguese", "es": "spanish",
    "ja": "japanese", "ko": "korean", "fr": "french", "ru": "russian",
}  # fmt: skip
SPEAKS = tuple(LANGUAGE_CODES)  # language auto (the default) speaks the text's, any of upstream's ten


def _number(name: str, low: float, high: float = math.inf, whole: bool = False) -> Any:
    return check_number(name, low, high, whole)


def _language(value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 40:
        raise InputError(f"language must be a language name or code (english, en, auto...), got {value!r}")


def _instructions(value: object) -> None:
    if not isinstance(value, str) or len(value) > MAX_INSTRUCT_CHARS:
        raise InputError(f"instructions must be text of at most {MAX_INSTRUCT_CHARS} characters")


def language_name(value: str) -> str:
    """``en`` -> ``english`` (llama.cpp's codes), names lower-cased (``English`` -> ``english``)."""
    lowered = value.strip().lower()
    return LANGUAGE_CODES.get(lowered, lowered)


@dataclass(frozen=True)
class Qwen3TTSOptions(TalkerSamplingOptions):
    language: str | None = option(
        None,
        "the language spoken: auto (the default), english, chinese, german... or a code (en, zh, de, ...)",
        flag="--language",
        check=_language,
    )
    instructions: str | None = option(
        None,
        "how to speak, in words: the voice described (VoiceDesign models, required) or a style instruction (1.7B "
        "CustomVoice models); upstream's instruct, OpenAI's instructions",
        flag="--instructions",
        check=_instructions,
    )
    max_frames: int = option(
        2048,
        "most codec frames per chunk of text (80 ms each)",
        flag="--max-frames",
        check=_number("max_frames", 1, 32000, whole=True),
    )
    seed: int = option(0, "seed for sampling (default 0)", flag="--seed", check=check_seed)
    mmproj: str | None = option(
        None,
        "the Qwen3-TTS mmproj GGUF (code predictor and speech decoder)",
        flag="--mmproj",
        server=False,
        check=check_path("mmproj"),
    )
    chunk_frames: int = option(
        12,
        "codec frames per streamed chunk (the first goes out alone, then 4, then this many)",
        check=_number("chunk_frames", 1, 1000, True),
    )
    normalization: Normalization | bool = markup_option()  # noqa: RUF009 (a field; frozen)


def is_mmproj(gguf: GGUFFile) -> bool:
    """A Qwen3-TTS mmproj file (its audio-generation projector is ``qwen3tts_gen``)."""
    return gguf.get(K.GEN_PROJECTOR_TYPE, None) == K.GEN_PROJECTOR


def find_mmproj(talker: Path) -> Path | None:
    """``mmproj-NAME.gguf`` beside ``NAME.gguf`` (llama.cpp's naming), else the only Qwen3-TTS mmproj beside it."""
    named = talker.with_name(f"mmproj-{talker.name}")
    return named if named.is_file() else find_beside(talker, K.CLIP_ARCH, is_mmproj)


def voices(gguf: object) -> list[str]:
    """A CustomVoice talker's speakers (its ``<|spk_NAME|>`` tokens), in the file's order; for a model without
    speakers, the voices cloned for it beside it (``ggtts voice create``)."""
    from ggtts.families.qwen3tts.voices import voice_names_beside
    from ggtts.gguf import GGUFFile

    assert isinstance(gguf, GGUFFile)
    prefix = "<|spk_"
    tokens = [str(t) for t in gguf.get_list("tokenizer.ggml.tokens", [])]
    speakers = [t[len(prefix) : -2] for t in tokens if t.startswith(prefix) and t.endswith("|>")]
    if speakers:
        return speakers
    kind = gguf.get(K.MODEL_TYPE, None)
    if kind is None:  # llama.cpp's files do not say: a Base model's mmproj has the speaker encoder's tensors
        mmproj = find_mmproj(Path(gguf.path))
        kind = "base" if mmproj is not None and K.SPEAKER_STEM in GGUFFile(mmproj) else "other"
    return voice_names_beside(Path(gguf.path), gguf.get_int(K.EMBEDDING_LENGTH, 0)) if kind == "base" else []


@dataclass(frozen=True)
class Qwen3TTSLoadOptions(LoadOptions):
    precision: str = precision_load_option("the speech decoder's convolutions")
    parallel: int = parallel_load_option("the talker and its code predictor")


def voice_file(gguf: GGUFFile, voice: str) -> Path | None:
    """The file of the cloned voice ``voice`` beside a Base model (the first of that name, as the model reads)."""
    from ggtts.families.qwen3tts.voices import voice_files_beside

    width = gguf.get_int(K.EMBEDDING_LENGTH, 0)
    return next((path for path, name in voice_files_beside(Path(gguf.path), width) if name == voice), None)


FAMILY = Family(
    name="qwen3tts",
    description="Qwen3-TTS: a talker and code predictor writing 16 codebooks at 12 Hz, decoded to 24 kHz speech",
    architectures=(K.ARCH,),
    pipeline="ggtts.families.qwen3tts.pipeline:Qwen3TTSPipeline",
    options=Qwen3TTSOptions,
    load_options=Qwen3TTSLoadOptions,
    capabilities=Capabilities(speed=(1.0, 1.0), speaks=SPEAKS, max_input_chars=MAX_CHARS),
    voices=voices,  # type: ignore[arg-type]
    companions=(
        Companion(
            "mmproj",
            K.CLIP_ARCH,
            "the Qwen3-TTS mmproj GGUF (code predictor, speech decoder); default: the one beside",
            matches=is_mmproj,
        ),
    ),
    voice_file=voice_file,
    side_files={
        VoiceKeys.ARCH: "a cloned voice for a Base model (ggtts voice create); beside the model, speak it with -v "
        "and its name"
    },
    converters={"qwen3tts": "ggtts.convert.qwen3tts_hf:convert_qwen3tts"},
)
