"""OuteTTS (a Qwen2 that writes WavTokenizer codes): the family record.

Its files are llama.cpp's: a ``qwen2`` language model whose vocabulary has the audio-code tokens ``<|0|>``,
``<|1|>``, ... and a ``wavtokenizer-dec`` vocoder. Pipeline: :mod:`ggtts.families.outetts.pipeline`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ggtts.errors import InputError
from ggtts.families.base import (
    Capabilities,
    Companion,
    Family,
    LoadOptions,
    check_flag,
    check_number,
    check_path,
    check_seed,
    markup_option,
    option,
    parallel_load_option,
    precision_load_option,
)
from ggtts.gguf.keys import Qwen2, WavTokenizerDec
from ggtts.gguf.keys import Tokenizer as TK

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.normalize import Normalization

MAX_CHARS = 2000
CODE_TOKEN = re.compile(r"<\|(\d+)\|>")  # an audio code in the LM's vocabulary
MIN_CODE_TOKENS = 2  # a vocabulary with fewer <|N|> tokens writes no audio
VERSIONS = ("0.2", "0.3")  # the prompt formats


def _open_unit(
    name: str, high: float = 1.0, closed_at_one: bool = False, closed_at_zero: bool = False
) -> Callable[[object], None]:
    """A number above 0 (or from 0, ``closed_at_zero``) and below ``high`` (or up to 1, ``closed_at_one``)."""

    def check(value: object) -> None:
        check_number(name, 0, high)(value)
        number = float(value)  # type: ignore[arg-type]
        if (number == 0 and not closed_at_zero) or (number == high and not closed_at_one):
            low_side = "from 0" if closed_at_zero else "above 0"
            high_side = f"up to {high:g}" if closed_at_one else f"below {high:g}"
            raise InputError(f"{name} must be {low_side} and {high_side}, got {value!r}")

    return check


def _version(value: object) -> None:
    if value not in VERSIONS:
        raise InputError(f"version must be one of {', '.join(VERSIONS)}, got {value!r}")


@dataclass(frozen=True)
class OuteTTSOptions:
    version: str | None = option(
        None, "prompt format: '0.2' or '0.3' (default: from the chat template)", check=_version
    )
    max_new_tokens: int = option(
        4096, "most tokens to generate (llama-tts's n_predict)", check=check_number("max_new_tokens", 1, whole=True)
    )
    guide_tokens: bool = option(
        False, "force each word's first token (llama-tts's guide tokens)", check=check_flag("guide_tokens")
    )
    # llama-tts samples from the top 4 tokens at temperature 1 (its only sampler)
    temperature: float = option(1.0, "sampling temperature; 0 is greedy", check=check_number("temperature", 0))
    top_k: int = option(4, "sample from the k most likely tokens (0: all)", check=check_number("top_k", 0, whole=True))
    top_p: float = option(1.0, "nucleus sampling threshold (1: off)", check=_open_unit("top_p", closed_at_one=True))
    min_p: float = option(0.0, "minimum probability relative to the most likely token (0: off)",
                          check=_open_unit("min_p", closed_at_zero=True))  # fmt: skip
    repetition_penalty: float = option(
        1.0, "penalty for repeated tokens (1: off)", check=_open_unit("repetition_penalty", high=math.inf)
    )
    repetition_window: int = option(
        64, "how many recent tokens the penalty looks at", check=check_number("repetition_window", 0, whole=True)
    )
    seed: int = option(0, "seed for sampling (default 0)", flag="--seed", check=check_seed)
    progress: bool = option(False, "show a progress bar", flag="--progress", server=False, check=check_flag("progress"))
    vocoder: str | None = option(
        None,
        "the vocoder GGUF (wavtokenizer-dec): the one loaded",
        flag="--vocoder",
        server=False,
        check=check_path("vocoder"),
    )
    silence_start_s: float = option(
        0.25, "seconds zeroed at the start (a click, as llama-tts)", check=check_number("silence_start_s", 0)
    )
    chunk_codes: int = option(
        40, "codes decoded per streamed chunk", check=check_number("chunk_codes", 1, whole=True), streaming_only=True
    )
    left_context: int = option(
        24, "codes of left context per streamed chunk", check=check_number("left_context", 0, whole=True),
        streaming_only=True,
    )  # fmt: skip
    lookahead: int = option(
        8, "codes of lookahead per streamed chunk", check=check_number("lookahead", 0, whole=True),
        streaming_only=True,
    )  # fmt: skip
    normalization: Normalization | bool = markup_option()  # noqa: RUF009 (a field; frozen)


@dataclass(frozen=True)
class OuteTTSLoadOptions(LoadOptions):
    precision: str = precision_load_option("the language model (on CUDA)")
    speaker: str | None = option(
        None,
        "a speaker profile (.json, OuteTTS's format) to speak with: added to the voices at load, as the default",
        flag="--speaker",
        check=check_path("speaker"),
    )
    parallel: int = parallel_load_option("the language model")
    compile: bool = option(
        False,
        "on CUDA: compile the language model's decode step with torch.compile before it is captured as a CUDA graph "
        "(its small kernels fused; tens of seconds at the first synthesis, faster after)",
        flag="--compile",
        check=check_flag("compile"),
    )


def builtin_voices(gguf: GGUFFile) -> list[str]:
    """The voice every OuteTTS model speaks with (ggtts's built-in speaker profile); ``--speaker`` adds one."""
    from ggtts.families.outetts.default_speaker import DEFAULT_SPEAKER_NAME

    return [DEFAULT_SPEAKER_NAME]


def recognize(gguf: GGUFFile) -> str | None:
    """``None`` for a ``qwen2`` file whose vocabulary has OuteTTS's audio-code tokens; else why it is not one."""
    tokens = gguf.get(TK.TOKENS) or []
    codes = sum(1 for t in tokens if isinstance(t, str) and CODE_TOKEN.fullmatch(t))
    if codes >= MIN_CODE_TOKENS:
        return None
    return (
        f"a '{Qwen2.ARCH}' language model without OuteTTS's audio-code tokens (<|0|>, <|1|>, ...), so not an OuteTTS "
        "model: ggtts speaks with OuteTTS's qwen2 files, not with chat models"
    )


def refuse_cpu_options(options: Mapping[str, Any], device: str) -> None:
    """``compile`` and bfloat16 are for the language model on CUDA: refused on the CPU, where they would change
    nothing that is run."""
    precision = options.get("precision") or "float32"
    if not device.startswith("cuda") and (options.get("compile") or precision != "float32"):
        what = "compile" if options.get("compile") else f"precision {precision}"
        raise InputError(
            f"{what} is for OuteTTS on CUDA; on the CPU each step already runs as one ggml graph on the file's own "
            "weight types"
        )


FAMILY = Family(
    name="outetts",
    description="OuteTTS: a Qwen2 language model writing WavTokenizer audio codes (llama.cpp's TTS files)",
    architectures=(Qwen2.ARCH,),
    pipeline="ggtts.families.outetts.pipeline:OuteTTS",
    options=OuteTTSOptions,
    load_options=OuteTTSLoadOptions,
    capabilities=Capabilities(speed=(1.0, 1.0), speaks=("en",), max_input_chars=MAX_CHARS),  # every version's
    recognize=recognize,
    voices=builtin_voices,
    more_voices_at_load=True,
    companions=(
        Companion(
            "vocoder",
            WavTokenizerDec.ARCH,
            "vocoder GGUF for OuteTTS (wavtokenizer-dec); default: the only one beside the model",
        ),
    ),
    converters={
        "outetts": "ggtts.convert.outetts_hf:convert_outetts",
        "wavtokenizer": "ggtts.convert.wavtokenizer_ckpt:convert_wavtokenizer",
    },
    decoder="ggtts.families.outetts.decode:decode_codes_cli",
    decodes_with=WavTokenizerDec.ARCH,
    device_check=refuse_cpu_options,
)
