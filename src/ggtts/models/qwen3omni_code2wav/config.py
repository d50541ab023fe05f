"""Code2wav hyper-parameters, read from ``qwen3omni-talker.code2wav.*`` GGUF metadata."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniCode2Wav as K
from ggtts.models.layers import validate as V

DEFAULT_SAMPLE_RATE = 24_000  # Hz: Qwen3-Omni's speech output; the checkpoint's code2wav_config does not carry it
RATE = V.Bounds(1, 1 << 12, "an upsampling rate")
CODEBOOK_COUNT = V.Bounds(1, 1024, "a codebook count")
WINDOW = V.Bounds(1, 1 << 20, "a sliding window", " positions")
ROPE_BASE = V.Bounds(1.0, 1e12, "a rotary base")


@dataclass(frozen=True)
class Code2WavConfig:
    codebook_size: int  # codes per codebook
    num_quantizers: int  # codebooks per frame
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    sliding_window: int  # positions a query attends to, itself included
    rope_theta: float
    rms_norm_eps: float
    upsampling_ratios: tuple[int, ...]  # transposed conv (kernel = stride) + ConvNeXt, at the hidden width
    upsample_rates: tuple[int, ...]  # decoder blocks: SnakeBeta + transposed conv (kernel 2 * rate) + 3 residuals
    decoder_dim: int
    sample_rate: int = DEFAULT_SAMPLE_RATE  # Hz

    @property
    def total_upsample(self) -> int:
        """Samples per frame of codes (1920 for the published model: 80 ms at 24 kHz)."""
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    @property
    def frame_rate_hz(self) -> float:
        return self.sample_rate / self.total_upsample

    def decoder_width(self, block: int) -> int:
        """Width at the input of decoder block ``block`` (``len(upsample_rates)``: the output width)."""
        return self.decoder_dim >> block

    def output_length(self, frames: int) -> int:
        """Samples ``forward`` returns for ``frames`` frames: ``frames * total_upsample - lag`` (0 frames: 0)."""
        return max(frames * self.total_upsample - self.trailing_lag, 0)

    @property
    def trailing_lag(self) -> int:
        """Samples short of ``frames * total_upsample``: each decoder block's transposed convolution (kernel
        ``2 * rate``) drops ``rate`` samples at each end, so a block maps ``L`` inputs to ``(L - 1) * rate``.
        For the published rates (8, 5, 4, 3): 555."""
        lag = 0
        for rate in self.upsample_rates:
            lag = lag * rate + rate
        return lag

    def __post_init__(self) -> None:
        where = "code2wav"
        if self.num_attention_heads % self.num_key_value_heads:
            raise GGUFError(
                f"{where}: {self.num_attention_heads} attention heads cannot share {self.num_key_value_heads} "
                "key/value heads evenly"
            )
        if self.head_dim % 2:
            raise GGUFError(f"{where}: head dim {self.head_dim} is odd; rotary embeddings need an even one")
        if self.decoder_width(len(self.upsample_rates)) < 1:
            raise GGUFError(
                f"{where}: decoder dim {self.decoder_dim} cannot be halved {len(self.upsample_rates)} times"
            )

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> Code2WavConfig:
        path = gguf.path
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{path}: architecture is '{gguf.architecture}', expected '{K.ARCH}' (code2wav)")
        if gguf.get(K.NUM_QUANTIZERS) is None:
            raise GGUFError(f"{path}: the file holds no code2wav (no '{K.NUM_QUANTIZERS}' metadata)")

        def integer(key: str, bounds: V.Bounds) -> int:
            return bounds.check(path, key, gguf.get_int(key))

        def integers(key: str) -> tuple[int, ...]:
            values = gguf.get_list(key)
            if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise GGUFError(f"{path}: metadata '{key}' should be a non-empty array of integers")
            return RATE.check_each(path, key, tuple(values))

        heads = integer(K.HEAD_COUNT, V.HEAD_COUNT)
        hidden = integer(K.HIDDEN_SIZE, V.SIZE)
        fields: dict[str, Any] = dict(
            codebook_size=integer(K.CODEBOOK_SIZE, V.SIZE),
            num_quantizers=integer(K.NUM_QUANTIZERS, CODEBOOK_COUNT),
            hidden_size=hidden,
            num_hidden_layers=integer(K.BLOCK_COUNT, V.LAYER_COUNT),
            num_attention_heads=heads,
            num_key_value_heads=integer(K.HEAD_COUNT_KV, V.HEAD_COUNT),
            head_dim=integer(K.KEY_LENGTH, V.SIZE),
            intermediate_size=integer(K.FEED_FORWARD_LENGTH, V.SIZE),
            sliding_window=integer(K.SLIDING_WINDOW, WINDOW),
            rope_theta=ROPE_BASE.check(path, K.ROPE_FREQ_BASE, gguf.get_float(K.ROPE_FREQ_BASE)),
            rms_norm_eps=V.NORM_EPSILON.check(path, K.RMS_EPS, gguf.get_float(K.RMS_EPS)),
            upsampling_ratios=integers(K.UPSAMPLING_RATIOS),
            upsample_rates=integers(K.UPSAMPLE_RATES),
            decoder_dim=integer(K.DECODER_DIM, V.SIZE),
            sample_rate=integer(K.SAMPLE_RATE, V.SAMPLE_RATE),
        )
        try:
            return cls(**fields)
        except GGUFError as e:  # a layout that does not hold together: say which file
            raise GGUFError(f"{path}: {e}") from None
