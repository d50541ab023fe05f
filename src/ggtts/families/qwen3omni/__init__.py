"""Qwen3-Omni (thinker -> talker -> code predictor -> code2wav): the family record.

Two files: the thinker (llama.cpp's ``qwen3omnimoe``: the Qwen3 MoE language model and its tokenizer) is the model
file; the talker (``qwen3omni-talker``: the talker, its code predictor and code2wav) is its companion, found beside
it or named with ``talker=``. They stay two because the thinker is 30B parameters that llama.cpp users already have
as a file of their own, and because speaking a given text needs only the thinker's tokenizer and token embeddings
(``mode="say"``, the default): the thinker's transformer runs only when it is asked to answer (``mode="chat"``).
Pipeline: :mod:`ggtts.families.qwen3omni.pipeline`.
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
from ggtts.gguf.keys import Qwen3OmniAudio as AudioKeys
from ggtts.gguf.keys import Qwen3OmniTalker as TalkerKeys
from ggtts.gguf.keys import Qwen3OmniThinker as ThinkerKeys

if TYPE_CHECKING:
    from ggtts.text.normalize import Normalization

MAX_CHARS = 5000
TALKER_ARCH = TalkerKeys.ARCH
MMPROJ_ARCH = AudioKeys.ARCH  # "clip": llama.cpp's mmproj files
MODES = ("say", "chat")


def _number(name: str, low: float, high: float = math.inf, whole: bool = False) -> Any:
    return check_number(name, low, high, whole)


MIN_TEMPERATURE = 1e-3  # below it (but 0, greedy) the logits overflow when divided


def check_temperature(value: object) -> None:
    _number("temperature", 0)(value)
    if 0 < float(value) < MIN_TEMPERATURE:  # type: ignore[arg-type]
        raise InputError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {value!r}")


def check_top_p(value: object) -> None:
    _number("top_p", 0.0, 1.0)(value)
    if float(value) <= 0:  # type: ignore[arg-type]
        raise InputError(f"top_p must be above 0 and at most 1, got {value!r}")


REPLY_TOKENS = 1024  # the thinker's reply at most, by default (mode=chat)


def _system(value: object) -> None:
    if not isinstance(value, str) or len(value) > MAX_CHARS:
        raise InputError(f"system must be text of at most {MAX_CHARS} characters")


def _mode(value: object) -> None:
    if value not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {value!r}")


@dataclass(frozen=True)
class TalkerSamplingOptions:
    """The talker's sampling, per call (Qwen3-Omni's and Qwen3-TTS's options both start with these)."""

    temperature: float | None = option(
        None, "talker temperature; 0 is greedy throughout (default: the file's, 0.9)", check=check_temperature
    )
    top_k: int | None = option(None, "talker top-k (default: the file's, 50)", check=_number("top_k", 1, whole=True))
    top_p: float | None = option(None, "talker top-p (default: the file's, 1.0)", check=check_top_p)
    repetition_penalty: float | None = option(
        None, "talker repetition penalty (default: the file's, 1.05)", check=_number("repetition_penalty", 0.01, 100)
    )


@dataclass(frozen=True)
class Qwen3OmniOptions(TalkerSamplingOptions):
    mode: str = option(
        "say",
        "say: speak the text as written (the thinker's transformer does not run); chat: the thinker answers the "
        "text and the talker speaks the answer",
        flag="--mode",
        check=_mode,
    )
    system: str | None = option(None, "system prompt for mode=chat", check=_system)
    max_frames: int = option(
        4095,
        "most codec frames per chunk of text (80 ms each; the talker's positions bound it too)",
        flag="--max-frames",
        check=_number("max_frames", 1, 32000, whole=True),
    )
    max_reply_tokens: int = option(
        REPLY_TOKENS,
        "most tokens the thinker writes in mode=chat",
        check=_number("max_reply_tokens", 1, 8192, whole=True),
    )
    seed: int = option(0, "seed for sampling (default 0)", flag="--seed", check=check_seed)
    talker: str | None = option(
        None, "the talker GGUF (qwen3omni-talker)", flag="--talker", server=False, check=check_path("talker")
    )
    mmproj: str | None = option(
        None, "the audio encoder GGUF (an mmproj file, qwen3a) for questions asked as audio", flag="--mmproj",
        server=False, check=check_path("mmproj"),
    )  # fmt: skip
    chunk_frames: int = option(
        12,
        "codec frames per streamed chunk (the first goes out alone, then 4, then this many)",
        check=_number("chunk_frames", 1, 1000, True),
    )
    normalization: Normalization | bool = markup_option(  # noqa: RUF009 (a field; frozen)
        " (mode=say; a chat's question goes to the thinker as written)"
    )


def voices(gguf: object) -> list[str]:
    """The talker's speakers, from the talker file beside the thinker (none when there is none)."""
    from ggtts.gguf import GGUFFile

    assert isinstance(gguf, GGUFFile)
    if gguf.architecture == TALKER_ARCH:
        return [str(n) for n in gguf.get_list(TalkerKeys.SPEAKER_NAMES, [])]
    talker = find_beside(Path(gguf.path), TALKER_ARCH)
    return voices(GGUFFile(talker)) if talker is not None else []


def audio_encoder_beside(model_path: Path) -> Path | None:
    """The only mmproj GGUF with Qwen3-Omni's audio projector in the model's folder (another model's mmproj beside
    it, Qwen3-TTS's or a vision one, is not its ears)."""
    return find_beside(model_path, MMPROJ_ARCH, is_audio_mmproj)


def is_audio_mmproj(gguf: object) -> bool:
    """An mmproj file with Qwen3-Omni's audio projector (``qwen3a``)."""
    from ggtts.gguf import GGUFFile

    assert isinstance(gguf, GGUFFile)
    return AudioKeys.PROJECTOR in (
        gguf.get(AudioKeys.PROJECTOR_TYPE, None),
        gguf.get(AudioKeys.LEGACY_PROJECTOR_TYPE, None),
    )


# upstream's ten speech output languages (its talker speaks the text's)
SPEAKS = ("en", "zh", "fr", "de", "ru", "it", "es", "pt", "ja", "ko")


@dataclass(frozen=True)
class Qwen3OmniLoadOptions(LoadOptions):
    precision: str = precision_load_option("code2wav's decoder convolutions")
    parallel: int = parallel_load_option("the talker and its code predictor")


FAMILY = Family(
    name="qwen3omni",
    description="Qwen3-Omni: a MoE thinker's text, spoken by its talker and code predictor through code2wav (24 kHz)",
    architectures=(ThinkerKeys.ARCH,),
    pipeline="ggtts.families.qwen3omni.pipeline:Qwen3OmniPipeline",
    options=Qwen3OmniOptions,
    load_options=Qwen3OmniLoadOptions,
    capabilities=Capabilities(speed=(1.0, 1.0), speaks=SPEAKS, max_input_chars=MAX_CHARS, chat=True),
    voices=voices,  # type: ignore[arg-type]
    companions=(
        Companion("talker", TALKER_ARCH, "talker GGUF for Qwen3-Omni (qwen3omni-talker); default: the one beside"),
        Companion(
            "mmproj",
            MMPROJ_ARCH,
            "audio encoder GGUF for Qwen3-Omni (llama.cpp's mmproj, qwen3a); default: the one beside, if any",
            matches=is_audio_mmproj,
        ),
    ),
    converters={
        "qwen3omni-thinker": "ggtts.convert.qwen3omni_thinker:convert_qwen3omni_thinker",
        "qwen3omni-talker": "ggtts.convert.qwen3omni_talker:convert_qwen3omni_talker",
        "qwen3omni-mmproj": "ggtts.convert.qwen3omni_audio:convert_qwen3omni_audio",
    },
    decoder="ggtts.families.qwen3omni.decode:decode_codes_cli",
    decodes_with=TALKER_ARCH,  # the talker file holds code2wav
    parity="ggtts.measure.qwen3omni.parity:qwen3omni_parity",
)
