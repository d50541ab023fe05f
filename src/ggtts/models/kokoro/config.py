"""Kokoro hyper-parameters: a frozen dataclass read from GGUF metadata or from an upstream ``config.json``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ggtts.errors import ConversionError, GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Kokoro as K

SAMPLE_RATE = 24000  # Hz; upstream hard-codes it in the harmonic source
DECODER_HIDDEN_DIM = 1024  # upstream hard-codes the decoder's AdaIN stack width
HARMONIC_NUM = 8  # overtones above F0 in upstream's SourceModuleHnNSF
VOICED_THRESHOLD = 10.0  # Hz
ALBERT_DEFAULTS = {"embedding_size": 128, "type_vocab_size": 2, "layer_norm_eps": 1e-12}
ALBERT_ACTIVATION = "gelu_new"  # the tanh approximation of GELU, the only one ported
BOS_EOS_ID = 0  # upstream wraps every utterance as [0, *ids, 0]


def _as_float32(value: Any) -> float:
    """GGUF stores these as float32: round now, so a config survives a round trip through a file."""
    return float(np.float32(value))


@dataclass(frozen=True)
class KokoroConfig:
    n_token: int
    hidden_dim: int
    style_dim: int
    dim_in: int  # channels of the decoder's asr_res shortcut
    n_mels: int
    n_layer: int
    max_dur: int
    text_encoder_kernel_size: int
    sample_rate: int
    context_length: int  # tokens per utterance, BOS and EOS included

    plbert_hidden_size: int
    plbert_embedding_size: int
    plbert_heads: int
    plbert_intermediate_size: int
    plbert_max_positions: int
    plbert_layers: int
    plbert_type_vocab_size: int
    plbert_layer_norm_eps: float

    decoder_hidden_dim: int

    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    upsample_initial_channel: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    n_fft: int
    hop_length: int
    harmonic_num: int
    voiced_threshold: float

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

    # ---- GGUF ----------------------------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> KokoroConfig:
        def integer(key: str) -> int:
            value = gguf.require(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise GGUFError(f"{gguf.path}: metadata '{key}' must be a positive integer, got {value!r}")
            return value

        def integers(key: str) -> tuple[int, ...]:
            value = gguf.require(key)
            if not isinstance(value, list) or not value or not all(isinstance(v, int) for v in value):
                raise GGUFError(f"{gguf.path}: metadata '{key}' must be a list of integers, got {value!r}")
            return tuple(value)

        def number(key: str) -> float:
            value = gguf.require(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise GGUFError(f"{gguf.path}: metadata '{key}' must be a number, got {value!r}")
            return float(value)

        kernels = integers(K.RESBLOCK_KERNEL_SIZES)
        flat_dilations = integers(K.RESBLOCK_DILATION_SIZES)
        if len(flat_dilations) % len(kernels):
            raise GGUFError(
                f"{gguf.path}: metadata '{K.RESBLOCK_DILATION_SIZES}' has {len(flat_dilations)} values, "
                f"not a multiple of the {len(kernels)} resblock kernels"
            )
        per = len(flat_dilations) // len(kernels)
        dilations = tuple(flat_dilations[i * per : (i + 1) * per] for i in range(len(kernels)))
        symbols = gguf.require(K.VOCAB_SYMBOLS)
        ids = gguf.require(K.VOCAB_IDS)
        if not isinstance(symbols, list) or not isinstance(ids, list) or len(symbols) != len(ids):
            raise GGUFError(
                f"{gguf.path}: metadata '{K.VOCAB_SYMBOLS}' and '{K.VOCAB_IDS}' must be lists of equal length"
            )
        config = cls(
            n_token=integer(K.N_TOKEN),
            hidden_dim=integer(K.HIDDEN_DIM),
            style_dim=integer(K.STYLE_DIM),
            dim_in=integer(K.DIM_IN),
            n_mels=integer(K.N_MELS),
            n_layer=integer(K.N_LAYER),
            max_dur=integer(K.MAX_DUR),
            text_encoder_kernel_size=integer(K.TEXT_ENCODER_KERNEL_SIZE),
            sample_rate=integer(K.SAMPLE_RATE),
            context_length=integer(K.CONTEXT_LENGTH),
            plbert_hidden_size=integer(K.PLBERT_HIDDEN_SIZE),
            plbert_embedding_size=integer(K.PLBERT_EMBEDDING_SIZE),
            plbert_heads=integer(K.PLBERT_HEADS),
            plbert_intermediate_size=integer(K.PLBERT_INTERMEDIATE_SIZE),
            plbert_max_positions=integer(K.PLBERT_MAX_POSITIONS),
            plbert_layers=integer(K.PLBERT_LAYERS),
            plbert_type_vocab_size=integer(K.PLBERT_TYPE_VOCAB_SIZE),
            plbert_layer_norm_eps=number(K.PLBERT_LAYER_NORM_EPS),
            decoder_hidden_dim=integer(K.DECODER_HIDDEN_DIM),
            upsample_rates=integers(K.UPSAMPLE_RATES),
            upsample_kernel_sizes=integers(K.UPSAMPLE_KERNEL_SIZES),
            upsample_initial_channel=integer(K.UPSAMPLE_INITIAL_CHANNEL),
            resblock_kernel_sizes=kernels,
            resblock_dilation_sizes=dilations,
            n_fft=integer(K.ISTFT_N_FFT),
            hop_length=integer(K.ISTFT_HOP),
            harmonic_num=integer(K.HARMONIC_NUM),
            voiced_threshold=number(K.VOICED_THRESHOLD),
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
        return {
            K.N_TOKEN: self.n_token,
            K.HIDDEN_DIM: self.hidden_dim,
            K.STYLE_DIM: self.style_dim,
            K.DIM_IN: self.dim_in,
            K.N_MELS: self.n_mels,
            K.N_LAYER: self.n_layer,
            K.MAX_DUR: self.max_dur,
            K.TEXT_ENCODER_KERNEL_SIZE: self.text_encoder_kernel_size,
            K.SAMPLE_RATE: self.sample_rate,
            K.CONTEXT_LENGTH: self.context_length,
            K.PLBERT_HIDDEN_SIZE: self.plbert_hidden_size,
            K.PLBERT_EMBEDDING_SIZE: self.plbert_embedding_size,
            K.PLBERT_HEADS: self.plbert_heads,
            K.PLBERT_INTERMEDIATE_SIZE: self.plbert_intermediate_size,
            K.PLBERT_MAX_POSITIONS: self.plbert_max_positions,
            K.PLBERT_LAYERS: self.plbert_layers,
            K.PLBERT_TYPE_VOCAB_SIZE: self.plbert_type_vocab_size,
            K.PLBERT_LAYER_NORM_EPS: float(self.plbert_layer_norm_eps),
            K.DECODER_HIDDEN_DIM: self.decoder_hidden_dim,
            K.UPSAMPLE_RATES: list(self.upsample_rates),
            K.UPSAMPLE_KERNEL_SIZES: list(self.upsample_kernel_sizes),
            K.UPSAMPLE_INITIAL_CHANNEL: self.upsample_initial_channel,
            K.RESBLOCK_KERNEL_SIZES: list(self.resblock_kernel_sizes),
            K.RESBLOCK_DILATION_SIZES: [d for group in self.resblock_dilation_sizes for d in group],
            K.ISTFT_N_FFT: self.n_fft,
            K.ISTFT_HOP: self.hop_length,
            K.HARMONIC_NUM: self.harmonic_num,
            K.VOICED_THRESHOLD: float(self.voiced_threshold),
            K.VOCAB_SYMBOLS: list(self.vocab),
            K.VOCAB_IDS: list(self.vocab.values()),
            K.LANGUAGE: self.language,
        }

    # ---- upstream config.json ------------------------------------------------------------------------------
    @classmethod
    def from_upstream(cls, config: Mapping[str, Any], language: str = "a") -> KokoroConfig:
        """From hexgrad's ``config.json`` (a dict with ``plbert``, ``istftnet`` and ``vocab``)."""
        try:
            plbert = {**ALBERT_DEFAULTS, **config["plbert"]}
            istft = config["istftnet"]
            act = plbert.get("hidden_act", ALBERT_ACTIVATION)
            if act != ALBERT_ACTIVATION:
                raise ConversionError(f"config.json: plbert.hidden_act '{act}' is not supported, only 'gelu_new'")
            for key in ("num_hidden_groups", "inner_group_num"):
                if plbert.get(key, 1) != 1:
                    raise ConversionError(f"config.json: plbert.{key} must be 1 (one shared ALBERT layer)")
            result = cls(
                n_token=int(config["n_token"]),
                hidden_dim=int(config["hidden_dim"]),
                style_dim=int(config["style_dim"]),
                dim_in=int(config.get("dim_in", 64)),
                n_mels=int(config.get("n_mels", 80)),
                n_layer=int(config["n_layer"]),
                max_dur=int(config["max_dur"]),
                text_encoder_kernel_size=int(config["text_encoder_kernel_size"]),
                sample_rate=int(config.get("sample_rate", SAMPLE_RATE)),
                context_length=int(plbert["max_position_embeddings"]),
                plbert_hidden_size=int(plbert["hidden_size"]),
                plbert_embedding_size=int(plbert["embedding_size"]),
                plbert_heads=int(plbert["num_attention_heads"]),
                plbert_intermediate_size=int(plbert["intermediate_size"]),
                plbert_max_positions=int(plbert["max_position_embeddings"]),
                plbert_layers=int(plbert["num_hidden_layers"]),
                plbert_type_vocab_size=int(plbert["type_vocab_size"]),
                plbert_layer_norm_eps=_as_float32(plbert["layer_norm_eps"]),
                decoder_hidden_dim=int(config.get("decoder_hidden_dim", DECODER_HIDDEN_DIM)),
                upsample_rates=tuple(int(v) for v in istft["upsample_rates"]),
                upsample_kernel_sizes=tuple(int(v) for v in istft["upsample_kernel_sizes"]),
                upsample_initial_channel=int(istft["upsample_initial_channel"]),
                resblock_kernel_sizes=tuple(int(v) for v in istft["resblock_kernel_sizes"]),
                resblock_dilation_sizes=tuple(
                    tuple(int(d) for d in group) for group in istft["resblock_dilation_sizes"]
                ),
                n_fft=int(istft["gen_istft_n_fft"]),
                hop_length=int(istft["gen_istft_hop_size"]),
                harmonic_num=int(config.get("harmonic_num", HARMONIC_NUM)),
                voiced_threshold=_as_float32(config.get("voiced_threshold", VOICED_THRESHOLD)),
                vocab={str(k): int(v) for k, v in config["vocab"].items()},
                language=language,
            )
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
