"""Magpie TTS (NVIDIA NeMo, 357M multilingual): the family record.

Two files make one voice, as in NeMo and m1el/magpie-tts.cpp: the ``magpie`` model (text encoder, decoder, local
transformer, baked speakers, tokenizers) and the ``nano-codec`` decoder (codes -> 22.05 kHz audio), found beside
the model or named with ``codec=``. They stay two files so that the files magpie-tts.cpp's users have load here
and ours load there (its loaders each read every tensor of the file they are given), and one codec serves every
model trained on it. Pipeline: :mod:`ggtts.families.magpie.pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    option,
    parallel_load_option,
    text_normalization_option,
)
from ggtts.gguf.keys import Magpie as K
from ggtts.gguf.keys import NanoCodec as NanoCodecKeys

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.normalize import Normalization

MAX_CHARS = 5000
LANGUAGES = ("en", "es", "de", "fr", "it", "vi", "zh", "hi", "ja", "pt", "ko", "ar")  # what checkpoints may hold
CODEC_ARCH = NanoCodecKeys.ARCH


def _number(name: str, low: float, whole: bool = False) -> Any:
    return check_number(name, low, whole=whole)


@dataclass(frozen=True)
class MagpieOptions:
    lang: str | None = option(
        None, "language of the text (default: en); the file's tokenizers decide which work", flag="--lang"
    )
    temperature: float | None = option(
        None, "sampling temperature; 0 is greedy (default: the file's, NeMo 0.7)", check=_number("temperature", 0)
    )
    top_k: int | None = option(
        None, "sample from the k most likely codes (default: the file's, NeMo 80)", check=_number("top_k", 1, True)
    )
    cfg_scale: float | None = option(
        None, "classifier-free guidance scale (default: the file's, NeMo 2.5)", check=_number("cfg_scale", 0)
    )
    guidance: bool = option(
        True,
        "classifier-free guidance (default on; off halves the work)",
        flag="--guidance",
        check=check_flag("guidance"),
    )
    prior: bool | None = option(None, "the attention prior (default: the file's setting)", check=check_flag("prior"))
    max_frames: int | None = option(
        None,
        "most codec frames per chunk of text (default: the file's, NeMo 500)",
        flag="--max-frames",
        check=_number("max_frames", 1, True),
    )
    seed: int = option(0, "seed for sampling (default 0)", flag="--seed", check=check_seed)
    codec: str | None = option(
        None, "the codec GGUF (nano-codec), chosen at load", flag="--codec", server=False, check=check_path("codec")
    )
    chunk_frames: int | None = option(
        None,
        "codec frames per streamed chunk (default: the first frame alone, then 4, then 12)",
        check=_number("chunk_frames", 1, True),
    )
    normalization: Normalization | bool = text_normalization_option()  # noqa: RUF009 (a field; frozen)


@dataclass(frozen=True)
class MagpieLoadOptions(LoadOptions):
    parallel: int = parallel_load_option("the decoder and the local transformer", devices="CPU only")


def voices(gguf: object) -> list[str]:
    from ggtts.gguf import GGUFFile

    assert isinstance(gguf, GGUFFile)
    n = int(gguf.info(K.BAKED_CONTEXT).shape[0]) if K.BAKED_CONTEXT in gguf else 0
    return list(gguf.get_list(K.SPEAKER_NAMES, [f"speaker{i}" for i in range(n)]))


def _file_languages(gguf: GGUFFile) -> tuple[str, ...]:
    """The languages the file's tokenizers speak (a file holds some of :data:`LANGUAGES`; magpie-tts.cpp's: en)."""
    from ggtts.families.magpie.text import MagpieText

    return MagpieText(gguf, eos_id=0).spoken  # (the end token plays no part in which languages there are)


def refuse_gpu_lanes(options: Mapping[str, Any], device: str) -> None:
    """``parallel`` is for the CPU: on a GPU each utterance's steps are CUDA graphs of their own."""
    parallel = options.get("parallel")
    if device.startswith("cuda") and isinstance(parallel, int | float) and parallel > 1:
        raise InputError(
            "Magpie decodes several utterances together on the CPU only (on a GPU each one's steps are graphs "
            "of their own): leave out parallel, and serve several streams with --replicas"
        )


FAMILY = Family(
    name="magpie",
    description="NVIDIA Magpie TTS: an encoder-decoder transformer writing NeMo nano-codec codes (22.05 kHz)",
    architectures=(K.ARCH,),
    pipeline="ggtts.families.magpie.pipeline:MagpieTTSPipeline",
    options=MagpieOptions,
    load_options=MagpieLoadOptions,
    capabilities=Capabilities(
        speed=(1.0, 1.0),
        languages=LANGUAGES,
        speaks=("en",),  # lang's default (Wyoming cannot set lang)
        max_input_chars=MAX_CHARS,
    ),
    voices=voices,  # type: ignore[arg-type]
    file_languages=_file_languages,
    companions=(
        Companion("codec", CODEC_ARCH, "codec GGUF for Magpie (nano-codec); default: the only one beside the model"),
    ),
    converters={
        "magpie": "ggtts.convert.magpie_nemo:convert_magpie",
        "nanocodec": "ggtts.convert.nanocodec_nemo:convert_nanocodec",
    },
    parity="ggtts.measure.magpie.parity:magpie_parity",
    device_check=refuse_gpu_lanes,
)
