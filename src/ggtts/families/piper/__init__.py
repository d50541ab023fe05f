"""Piper voices (VITS, espeak-ng phonemes, 16-22.05 kHz): the family record. Pipeline:
:mod:`ggtts.families.piper.pipeline`; converter: :mod:`ggtts.convert.piper_onnx`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ggtts.families.base import (
    Capabilities,
    Family,
    LoadOptions,
    check_flag,
    check_number,
    check_seed,
    option,
    precision_load_option,
    text_normalization_option,
)
from ggtts.gguf.keys import Piper as K

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.normalize import Normalization

MAX_CHARS = 100_000
MAX_NOISE = 2.0  # piper's voices use 0.3-1; far above, drawn durations run to thousands of frames


@dataclass(frozen=True)
class PiperOptions:
    noise_scale: float | None = option(
        None, "the prior's noise: variation of the voice (default: the voice's, often 0.667)",
        flag="--noise-scale", check=check_number("noise_scale", 0.0, MAX_NOISE),
    )  # fmt: skip
    noise_w: float | None = option(
        None, "the durations' noise: variation of the rhythm (default: the voice's, often 0.8)",
        flag="--noise-w", check=check_number("noise_w", 0.0, MAX_NOISE),
    )  # fmt: skip
    seed: int = option(0, "random seed of the noise (default 0)", flag="--seed", check=check_seed)
    normalize: bool = option(
        True, "scale each sentence to full scale, as piper-tts does (default on)", check=check_flag("normalize")
    )
    normalization: Normalization | bool = text_normalization_option()  # noqa: RUF009 (a field; frozen)


@dataclass(frozen=True)
class PiperLoadOptions(LoadOptions):
    precision: str = precision_load_option("the decoder's upsampling and resblock convolutions")


def voices(gguf: GGUFFile) -> list[str]:
    """A multi-speaker voice's speakers; else the one voice, by the voice's name."""
    names = gguf.get_list(K.SPEAKER_NAMES, [])
    return [str(n) for n in names] if names else [gguf.get_str("general.name", "default") or "default"]


FAMILY = Family(
    name="piper",
    description="Piper voices: VITS over espeak-ng phonemes, the local voices Home Assistant runs",
    architectures=(K.ARCH,),
    pipeline="ggtts.families.piper.pipeline:PiperPipeline",
    options=PiperOptions,
    load_options=PiperLoadOptions,
    capabilities=Capabilities(max_input_chars=MAX_CHARS, timestamps=True),
    voices=voices,
    converters={"piper": "ggtts.convert.piper_onnx:convert_piper"},
    parity="ggtts.measure.piper.parity:piper_parity",
    builtins={"piper-joe": "ggtts.convert.piper_builtin:ensure_joe"},
)
