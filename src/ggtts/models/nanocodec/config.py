"""Nano codec decoder hyper-parameters, read from ``nano-codec`` GGUF metadata."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import NanoCodec as K
from ggtts.models.layers import validate as V

# What magpie-tts.cpp assumes for every file (its magpie_codec_hparams): the decoder of
# nemo-nano-codec-22khz-1.89kbps-21.5fps. A file from its converter carries only the first five keys.
CPP_DEFAULTS: dict[str, Any] = {
    K.SAMPLE_RATE: 22_050,
    K.NUM_CODEBOOKS: 8,
    K.CODEBOOK_SIZE: 2016,
    K.HOP_LENGTH: 1024,
    K.LATENT_DIM: 32,
    K.FSQ_LEVELS: (8, 7, 6, 6),
    K.UP_SAMPLE_RATES: (8, 8, 4, 2, 2),
    K.BASE_CHANNELS: 864,
    K.IN_KERNEL_SIZE: 7,
    K.OUT_KERNEL_SIZE: 3,
    K.RESBLOCK_KERNEL_SIZES: (3, 7, 11),
    K.RESBLOCK_DILATIONS: (1, 3, 5),
    K.ACTIVATION: "half_snake",
    K.OUTPUT_ACTIVATION: "tanh",
}
ACTIVATIONS = ("half_snake", "snake", "lrelu", "elu")  # NeMo's CodecActivation names
OUTPUT_ACTIVATIONS = ("tanh", "clamp")
FSQ_LEVEL = V.Bounds(2, 1 << 16, "an FSQ level count")  # one level would leave nothing to decode (and divide by 0)
KERNEL = V.Bounds(1, 1 << 12, "a kernel size")
DILATION = V.Bounds(1, 1 << 12, "a dilation")
UP_SAMPLE_RATE = V.Bounds(1, 1 << 12, "an upsampling rate")
CODEBOOK_COUNT = V.Bounds(1, 1024, "a codebook count")


@dataclass(frozen=True)
class NanoCodecConfig:
    sample_rate: int  # Hz
    num_codebooks: int  # FSQ groups
    codebook_size: int  # codes per codebook
    hop_length: int  # samples per frame
    fsq_levels: tuple[int, ...]  # per dimension of one group
    up_sample_rates: tuple[int, ...]
    base_channels: int
    in_kernel_size: int
    out_kernel_size: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilations: tuple[int, ...]
    activation: str = "half_snake"
    output_activation: str = "tanh"

    @property
    def latent_dim(self) -> int:
        return self.num_codebooks * len(self.fsq_levels)

    def channels(self, stage: int) -> int:
        """Width after ``stage`` upsampling stages (0: the pre-convolution's output); NeMo halves it each time."""
        return self.base_channels >> stage

    @property
    def receptive_field_frames(self) -> int:
        """Frames of left context after which one more frame of codes no longer changes an output sample: what
        chunked decoding must prepend for its output to equal decoding everything at once."""
        need = self.out_kernel_size - 1  # samples of the last stage
        branch = max(sum((k - 1) * d + (k - 1) for d in self.resblock_dilations) for k in self.resblock_kernel_sizes)
        for rate in reversed(self.up_sample_rates):
            need += branch  # the residual layer after the transposed convolution
            need = -(-(need + 2 * rate - 1) // rate)  # kernel 2 * rate, stride rate: at most this many inputs
        return need + self.in_kernel_size - 1

    def __post_init__(self) -> None:
        where = "nano-codec decoder"
        if self.codebook_size != math.prod(self.fsq_levels):
            raise GGUFError(
                f"{where}: codebook size {self.codebook_size} is not the product of the FSQ levels "
                f"{list(self.fsq_levels)}"
            )
        if self.hop_length != math.prod(self.up_sample_rates):
            raise GGUFError(
                f"{where}: hop length {self.hop_length} is not the product of the upsampling rates "
                f"{list(self.up_sample_rates)}"
            )
        for stage in range(len(self.up_sample_rates)):
            c_in, c_out = self.channels(stage), self.channels(stage + 1)
            if c_out < 1 or c_in % c_out:
                raise GGUFError(
                    f"{where}: base width {self.base_channels} cannot be halved {len(self.up_sample_rates)} times "
                    "(each upsampling stage groups its input channels by its output channels)"
                )
        if self.activation not in ACTIVATIONS:
            raise GGUFError(f"{where}: activation '{self.activation}' is not one of {', '.join(ACTIVATIONS)}")
        if self.output_activation not in OUTPUT_ACTIVATIONS:
            raise GGUFError(
                f"{where}: output activation '{self.output_activation}' is not one of {', '.join(OUTPUT_ACTIVATIONS)}"
            )

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> NanoCodecConfig:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")
        path = gguf.path

        def integer(key: str, bounds: V.Bounds) -> int:
            return bounds.check(path, key, gguf.get_int(key, CPP_DEFAULTS[key]))

        def integers(key: str, bounds: V.Bounds) -> tuple[int, ...]:
            values = gguf.get_list(key, list(CPP_DEFAULTS[key]))
            if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise GGUFError(f"{path}: metadata '{key}' should be a non-empty array of integers")
            return bounds.check_each(path, key, tuple(values))

        fields: dict[str, Any] = dict(
            sample_rate=integer(K.SAMPLE_RATE, V.SAMPLE_RATE),
            num_codebooks=integer(K.NUM_CODEBOOKS, CODEBOOK_COUNT),
            codebook_size=integer(K.CODEBOOK_SIZE, V.SIZE),
            hop_length=integer(K.HOP_LENGTH, V.HOP_LENGTH),
            fsq_levels=integers(K.FSQ_LEVELS, FSQ_LEVEL),
            up_sample_rates=integers(K.UP_SAMPLE_RATES, UP_SAMPLE_RATE),
            base_channels=integer(K.BASE_CHANNELS, V.SIZE),
            in_kernel_size=integer(K.IN_KERNEL_SIZE, KERNEL),
            out_kernel_size=integer(K.OUT_KERNEL_SIZE, KERNEL),
            resblock_kernel_sizes=integers(K.RESBLOCK_KERNEL_SIZES, KERNEL),
            resblock_dilations=integers(K.RESBLOCK_DILATIONS, DILATION),
            activation=gguf.get_str(K.ACTIVATION, CPP_DEFAULTS[K.ACTIVATION]),
            output_activation=gguf.get_str(K.OUTPUT_ACTIVATION, CPP_DEFAULTS[K.OUTPUT_ACTIVATION]),
        )
        try:
            cfg = cls(**fields)
        except GGUFError as e:  # a layout that does not hold together: say which file
            raise GGUFError(f"{path}: {e}") from None
        latent = integer(K.LATENT_DIM, V.SIZE)
        if latent != cfg.latent_dim:
            raise GGUFError(
                f"{path}: metadata '{K.LATENT_DIM}' is {latent}, but {cfg.num_codebooks} codebooks of "
                f"{len(cfg.fsq_levels)} FSQ dimensions make {cfg.latent_dim}"
            )
        return cfg
