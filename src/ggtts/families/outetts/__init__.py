"""OuteTTS (a Qwen2 that writes WavTokenizer codes): the family record.

Its files are llama.cpp's: a ``qwen2`` language model whose vocabulary has the audio-code tokens ``<|0|>``,
``<|1|>``, ... and a ``wavtokenizer-dec`` vocoder. Pipeline: :mod:`ggtts.families.outetts.pipeline`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ggtts.families.base import (
    Capabilities,
    Companion,
    Family,
    LoadOptions,
    check_flag,
    check_seed,
    option,
    precision_load_option,
)
from ggtts.gguf.keys import Qwen2, WavTokenizerDec
from ggtts.gguf.keys import Tokenizer as TK

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile

MAX_CHARS = 2000
CODE_TOKEN = re.compile(r"<\|(\d+)\|>")  # an audio code in the LM's vocabulary
MIN_CODE_TOKENS = 2  # a vocabulary with fewer <|N|> tokens writes no audio


@dataclass(frozen=True)
class OuteTTSOptions:
    version: str | None = option(None, "prompt format: '0.2' or '0.3' (default: from the chat template)")
    max_new_tokens: int | None = option(None, "most tokens to generate (default 4096)")
    guide_tokens: bool = option(False, "force each word's first token (llama-tts's guide tokens)")
    temperature: float | None = option(None, "sampling temperature (default 1.0)")
    top_k: int | None = option(None, "sample from the k most likely tokens (default 4)")
    top_p: float | None = option(None, "nucleus sampling threshold")
    min_p: float | None = option(None, "minimum probability relative to the most likely token")
    repetition_penalty: float | None = option(None, "penalty for repeated tokens")
    repetition_window: int | None = option(None, "how many recent tokens the penalty looks at")
    seed: int = option(0, "seed for sampling (default 0)", flag="--seed", check=check_seed)
    progress: bool = option(False, "show a progress bar", flag="--progress")
    vocoder: str | None = option(None, "the vocoder GGUF (wavtokenizer-dec)", flag="--vocoder")
    silence_start_s: float | None = option(None, "seconds zeroed at the start (a click; default 0.25)")
    chunk_codes: int | None = option(None, "codes decoded per streamed chunk")
    left_context: int | None = option(None, "codes of left context per streamed chunk")
    lookahead: int | None = option(None, "codes of lookahead per streamed chunk")


@dataclass(frozen=True)
class OuteTTSLoadOptions(LoadOptions):
    precision: str = precision_load_option("the language model (on CUDA)")
    compile: bool = option(
        False,
        "on CUDA: compile the language model's decode step with torch.compile before it is captured as a CUDA graph "
        "(its small kernels fused; tens of seconds at the first synthesis, faster after)",
        flag="--compile",
        check=check_flag("compile"),
    )


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


FAMILY = Family(
    name="outetts",
    description="OuteTTS: a Qwen2 language model writing WavTokenizer audio codes (llama.cpp's TTS files)",
    architectures=(Qwen2.ARCH,),
    pipeline="ggtts.families.outetts.pipeline:OuteTTS",
    options=OuteTTSOptions,
    load_options=OuteTTSLoadOptions,
    capabilities=Capabilities(speed=(1.0, 1.0), max_input_chars=MAX_CHARS),
    recognize=recognize,
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
)
