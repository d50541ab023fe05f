"""Kokoro hyper-parameters: a frozen dataclass read from GGUF metadata or from an upstream ``config.json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

import numpy as np

from ggtts.errors import ConversionError, GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Kokoro as K
from ggtts.models.layers import validate as V

SAMPLE_RATE = 24000  # Hz; upstream hard-codes it in the harmonic source
DECODER_HIDDEN_DIM = 1024  # upstream hard-codes the decoder's AdaIN stack width
HARMONIC_NUM = 8  # overtones above F0 in upstream's SourceModuleHnNSF
VOICED_THRESHOLD = 10.0  # Hz
ALBERT_ACTIVATION = "gelu_new"  # the tanh approximation of GELU, the only one ported
BOS_EOS_ID = 0  # upstream wraps every utterance as [0, *ids, 0]
TOKEN_ID_FIELDS = frozenset({"bos_eos_id"})

# What a file may claim, per field (inclusive); every other integer field is a size (V.SIZE). Upsampling rates
# and dilations set strides and paddings no tensor shape checks, so they get ranges of their own.
_BOUNDS: dict[str, V.Bounds] = {
    "sample_rate": V.SAMPLE_RATE,
    "n_layer": V.LAYER_COUNT,
    "plbert_layers": V.LAYER_COUNT,
    "plbert_heads": V.HEAD_COUNT,
    "plbert_layer_norm_eps": V.NORM_EPSILON,
    "hop_length": V.HOP_LENGTH,
    "upsample_rates": V.Bounds(1, 1024, "an upsampling rate"),
    "resblock_dilation_sizes": V.Bounds(1, 1024, "a dilation"),
    "harmonic_num": V.Bounds(1, 256, "a harmonic count"),
    "voiced_threshold": V.Bounds(0.0, V.SAMPLE_RATE.high / 2, "a voicing threshold", " Hz"),
}


def _as_float32(value: Any) -> float:
    """GGUF stores these as float32: round now, so a config survives a round trip through a file."""
    return float(np.float32(value))


def _meta(key: str, upstream: str, default: Any = None) -> Any:
    """A config field: its GGUF metadata key, its path in upstream's config.json (``"plbert.hidden_size"``), and
    the value upstream assumes when config.json leaves it out (``None``: required)."""
    return field(metadata={"key": key, "upstream": upstream, "default": default})


@dataclass(frozen=True)
class KokoroConfig:
    """Each field names its metadata key and its config.json path once: ``from_gguf``, ``to_metadata`` and
    ``from_upstream`` all walk the fields."""

    n_token: int = _meta(K.N_TOKEN, "n_token")
    hidden_dim: int = _meta(K.HIDDEN_DIM, "hidden_dim")
    style_dim: int = _meta(K.STYLE_DIM, "style_dim")
    dim_in: int = _meta(K.DIM_IN, "dim_in", 64)  # channels of the decoder's asr_res shortcut
    n_mels: int = _meta(K.N_MELS, "n_mels", 80)
    n_layer: int = _meta(K.N_LAYER, "n_layer")
    max_dur: int = _meta(K.MAX_DUR, "max_dur")
    text_encoder_kernel_size: int = _meta(K.TEXT_ENCODER_KERNEL_SIZE, "text_encoder_kernel_size")
    sample_rate: int = _meta(K.SAMPLE_RATE, "sample_rate", SAMPLE_RATE)
    # tokens per utterance, BOS and EOS included
    context_length: int = _meta(K.CONTEXT_LENGTH, "plbert.max_position_embeddings")

    plbert_hidden_size: int = _meta(K.PLBERT_HIDDEN_SIZE, "plbert.hidden_size")
    plbert_embedding_size: int = _meta(K.PLBERT_EMBEDDING_SIZE, "plbert.embedding_size", 128)
    plbert_heads: int = _meta(K.PLBERT_HEADS, "plbert.num_attention_heads")
    plbert_intermediate_size: int = _meta(K.PLBERT_INTERMEDIATE_SIZE, "plbert.intermediate_size")
    plbert_max_positions: int = _meta(K.PLBERT_MAX_POSITIONS, "plbert.max_position_embeddings")
    plbert_layers: int = _meta(K.PLBERT_LAYERS, "plbert.num_hidden_layers")
    plbert_type_vocab_size: int = _meta(K.PLBERT_TYPE_VOCAB_SIZE, "plbert.type_vocab_size", 2)
    plbert_layer_norm_eps: float = _meta(K.PLBERT_LAYER_NORM_EPS, "plbert.layer_norm_eps", 1e-12)

    decoder_hidden_dim: int = _meta(K.DECODER_HIDDEN_DIM, "decoder_hidden_dim", DECODER_HIDDEN_DIM)

    upsample_rates: tuple[int, ...] = _meta(K.UPSAMPLE_RATES, "istftnet.upsample_rates")
    upsample_kernel_sizes: tuple[int, ...] = _meta(K.UPSAMPLE_KERNEL_SIZES, "istftnet.upsample_kernel_sizes")
    upsample_initial_channel: int = _meta(K.UPSAMPLE_INITIAL_CHANNEL, "istftnet.upsample_initial_channel")
    resblock_kernel_sizes: tuple[int, ...] = _meta(K.RESBLOCK_KERNEL_SIZES, "istftnet.resblock_kernel_sizes")
    # stored flattened in the file (len(kernels) x per kernel)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = _meta(
        K.RESBLOCK_DILATION_SIZES, "istftnet.resblock_dilation_sizes"
    )
    n_fft: int = _meta(K.ISTFT_N_FFT, "istftnet.gen_istft_n_fft")
    hop_length: int = _meta(K.ISTFT_HOP, "istftnet.gen_istft_hop_size")
    harmonic_num: int = _meta(K.HARMONIC_NUM, "harmonic_num", HARMONIC_NUM)
    voiced_threshold: float = _meta(K.VOICED_THRESHOLD, "voiced_threshold", VOICED_THRESHOLD)
    # the id upstream wraps every utterance in, [BOS, *ids, EOS]; files written before it was stored have 0
    bos_eos_id: int = _meta(K.BOS_EOS_ID, "bos_eos_id", BOS_EOS_ID)

    vocab: Mapping[str, int] = field(default_factory=dict, repr=False)
    language: str = "a"

    @property
    def max_phonemes(self) -> int:
        """Phonemes per utterance once BOS and EOS are added."""
        return self.context_length - 2

    @property
    def upsample_factor(self) -> int:
        """Audio samples per F0 frame: the generator's upsampling times the iSTFT hop."""
        factor = self.hop_length
        for rate in self.upsample_rates:
            factor *= rate
        return factor

    @staticmethod
    def _fields() -> list[Field[Any]]:
        return [f for f in fields(KokoroConfig) if "key" in f.metadata]

    # ---- GGUF ----------------------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> KokoroConfig:
        values: dict[str, Any] = {}
        for f in cls._fields():
            key = f.metadata["key"]
            bounds = _BOUNDS.get(f.name, V.SIZE)
            if f.name in TOKEN_ID_FIELDS:  # an id, not a size: 0 is valid, and older files lack the key
                values[f.name] = gguf.get_int(key, f.metadata["default"])
            elif f.type in ("int", int):
                values[f.name] = bounds.check(gguf.path, key, _positive_integer(gguf, key))
            elif f.type in ("float", float):
                values[f.name] = bounds.check(gguf.path, key, gguf.get_float(key))
            else:  # tuples of integers
                values[f.name] = bounds.check_each(gguf.path, key, _integers(gguf, key))
        token_id = V.Bounds(0, values["n_token"] - 1, "a token id")
        for name in TOKEN_ID_FIELDS:
            token_id.check(gguf.path, cls.__dataclass_fields__[name].metadata["key"], values[name])
        kernels, flat = values["resblock_kernel_sizes"], values["resblock_dilation_sizes"]
        if len(flat) % len(kernels):
            raise GGUFError(
                f"{gguf.path}: metadata '{K.RESBLOCK_DILATION_SIZES}' has {len(flat)} values, "
                f"not a multiple of the {len(kernels)} resblock kernels"
            )
        per = len(flat) // len(kernels)
        values["resblock_dilation_sizes"] = tuple(flat[i * per : (i + 1) * per] for i in range(len(kernels)))
        symbols = gguf.require(K.VOCAB_SYMBOLS)
        ids = gguf.require(K.VOCAB_IDS)
        if not isinstance(symbols, list) or not isinstance(ids, list) or len(symbols) != len(ids):
            raise GGUFError(
                f"{gguf.path}: metadata '{K.VOCAB_SYMBOLS}' and '{K.VOCAB_IDS}' must be lists of equal length"
            )
        config = cls(
            **values,
            vocab={str(s): int(i) for s, i in zip(symbols, ids, strict=True)},
            language=str(gguf.get(K.LANGUAGE, "a")),
        )
        try:
            config.validate()
        except ValueError as e:
            raise GGUFError(f"{gguf.path}: {e}") from None
        return config

    def to_metadata(self) -> dict[str, Any]:
        """Metadata key -> value, as :meth:`from_gguf` reads it back."""
        meta: dict[str, Any] = {}
        for f in self._fields():
            value = getattr(self, f.name)
            if f.name == "resblock_dilation_sizes":
                value = [d for group in value for d in group]
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, float):
                value = float(value)
            meta[f.metadata["key"]] = value
        meta[K.VOCAB_SYMBOLS] = list(self.vocab)
        meta[K.VOCAB_IDS] = list(self.vocab.values())
        meta[K.LANGUAGE] = self.language
        return meta

    # ---- upstream config.json ------------------------------------------------------------------------------
    @classmethod
    def from_upstream(cls, config: Mapping[str, Any], language: str = "a") -> KokoroConfig:
        """From hexgrad's ``config.json`` (a dict with ``plbert``, ``istftnet`` and ``vocab``)."""
        try:
            plbert = config["plbert"]
            act = plbert.get("hidden_act", ALBERT_ACTIVATION)
            if act != ALBERT_ACTIVATION:
                raise ConversionError(f"config.json: plbert.hidden_act '{act}' is not supported, only 'gelu_new'")
            for key in ("num_hidden_groups", "inner_group_num"):
                if plbert.get(key, 1) != 1:
                    raise ConversionError(f"config.json: plbert.{key} must be 1 (one shared ALBERT layer)")
            values = {f.name: _convert(f, _upstream_value(config, f)) for f in cls._fields()}
            result = cls(**values, vocab={str(k): int(v) for k, v in config["vocab"].items()}, language=language)
        except KeyError as e:
            raise ConversionError(f"config.json: missing key {e}") from None
        except (TypeError, ValueError) as e:
            raise ConversionError(f"config.json: bad value ({e})") from None
        try:
            result.validate()
        except ValueError as e:
            raise ConversionError(f"config.json: {e}") from None
        return result

    def validate(self) -> None:
        """Raise ValueError when sizes contradict each other."""
        if self.plbert_hidden_size % self.plbert_heads:
            raise ValueError(
                f"ALBERT hidden size {self.plbert_hidden_size} is not divisible by {self.plbert_heads} heads"
            )
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ValueError("istftnet upsample_rates and upsample_kernel_sizes differ in length")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("istftnet resblock_kernel_sizes and resblock_dilation_sizes differ in length")
        if self.context_length > self.plbert_max_positions:
            raise ValueError(
                f"context length {self.context_length} exceeds ALBERT's {self.plbert_max_positions} positions"
            )
        if self.upsample_initial_channel % (2 ** len(self.upsample_rates)):
            raise ValueError("istftnet upsample_initial_channel must halve evenly at every upsampling stage")
        bad = [i for i in self.vocab.values() if not 0 <= i < self.n_token]
        if bad:
            raise ValueError(f"vocab ids {bad[:5]} are outside 0..{self.n_token - 1}")
        if self.hop_length > self.n_fft:
            raise ValueError(f"the iSTFT hop {self.hop_length} is longer than its window n_fft {self.n_fft}")


def _positive_integer(gguf: GGUFFile, key: str) -> int:
    value = gguf.require(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GGUFError(f"{gguf.path}: metadata '{key}' must be a positive integer, got {value!r}")
    return value


def _integers(gguf: GGUFFile, key: str) -> tuple[int, ...]:
    value = gguf.require(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, int) for v in value):
        raise GGUFError(f"{gguf.path}: metadata '{key}' must be a list of integers, got {value!r}")
    return tuple(value)


def _upstream_value(config: Mapping[str, Any], f: Field[Any]) -> Any:
    """The field's value in config.json (``"plbert.hidden_size"`` is ``config["plbert"]["hidden_size"]``)."""
    node: Any = config
    *parents, leaf = f.metadata["upstream"].split(".")
    for part in parents:
        node = node[part]
    if leaf in node:
        return node[leaf]
    if f.metadata["default"] is None:
        raise KeyError(f.metadata["upstream"])
    return f.metadata["default"]


def _convert(f: Field[Any], value: Any) -> Any:
    if f.name == "resblock_dilation_sizes":
        return tuple(tuple(int(d) for d in group) for group in value)
    if f.type in ("float", float):
        return _as_float32(value)
    if f.type in ("int", int):
        return int(value)
    return tuple(int(v) for v in value)
