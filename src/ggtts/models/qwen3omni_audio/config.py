"""The audio encoder's hyper-parameters, read from an mmproj file's ``clip.audio.*`` metadata (llama.cpp's keys;
the chunk and attention-window sizes, which llama.cpp hard-codes, from ggtts's keys or Qwen3-Omni's values)."""

from __future__ import annotations

from dataclasses import dataclass

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniAudio as K
from ggtts.models.layers import validate as V

DEFAULT_N_WINDOW = 50  # half of one convolution chunk: chunks of 100 mel frames (1 s)
DEFAULT_N_WINDOW_INFER = 800  # mel frames one attention window spans (8 s: 104 encoder positions)
DEFAULT_EPS = 1e-5
SAMPLE_RATE = 16_000  # Hz the features are computed at (Whisper's)
N_CONV = 3


def conv_length(frames: int) -> int:
    """Positions one chunk of ``frames`` mel frames leaves after three stride-2 convolutions (kernel 3, padding 1)."""
    for _ in range(N_CONV):
        frames = (frames - 1) // 2 + 1
    return frames


@dataclass(frozen=True)
class AudioConfig:
    n_mel: int
    dim: int
    n_layers: int
    n_heads: int
    n_ff: int
    out_dim: int  # the projector's output: the thinker's hidden size
    conv_channels: int
    positions: int  # rows of the sinusoid table
    eps: float = DEFAULT_EPS
    n_window: int = DEFAULT_N_WINDOW
    n_window_infer: int = DEFAULT_N_WINDOW_INFER

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise GGUFError(f"audio encoder: width {self.dim} is not a multiple of its {self.n_heads} heads")
        if self.n_window_infer < self.chunk or self.n_window_infer % self.chunk:
            raise GGUFError(
                f"audio encoder: attention window {self.n_window_infer} frames is not a multiple of the "
                f"{self.chunk}-frame chunk"
            )
        if conv_length(self.chunk) > self.positions:
            raise GGUFError(f"audio encoder: {self.positions} positions cannot hold a {self.chunk}-frame chunk")

    @property
    def chunk(self) -> int:
        """Mel frames per convolution chunk."""
        return 2 * self.n_window

    @property
    def mel_after_conv(self) -> int:
        bins = self.n_mel
        for _ in range(N_CONV):
            bins = (bins + 1) // 2
        return bins

    def tokens(self, frames: int) -> int:
        """Encoder outputs (the thinker's audio placeholders) for ``frames`` mel frames: 13 per full second-long
        chunk, and the remainder's own count."""
        full, tail = divmod(frames, self.chunk)
        return full * conv_length(self.chunk) + (conv_length(tail) if tail else 0)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> AudioConfig:
        path = gguf.path
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{path}: architecture is '{gguf.architecture}', expected '{K.ARCH}' (an mmproj file)")
        if not gguf.get(K.HAS_AUDIO_ENCODER, False):
            raise GGUFError(f"{path}: this mmproj file has no audio encoder ({K.HAS_AUDIO_ENCODER} is not true)")
        projector = gguf.get(K.PROJECTOR_TYPE, gguf.get(K.LEGACY_PROJECTOR_TYPE))
        if projector != K.PROJECTOR:
            raise GGUFError(
                f"{path}: audio projector '{projector}' is not Qwen3-Omni's '{K.PROJECTOR}' (the only one ggtts runs)"
            )
        conv = gguf.info(K.CONV2D.format(bid=1) + ".weight") if K.CONV2D.format(bid=1) + ".weight" in gguf else None
        if conv is None or len(conv.shape) != 4:
            raise GGUFError(f"{path}: no 4-D tensor '{K.CONV2D.format(bid=1)}.weight'")
        pos = K.POSITION_EMBD + ".weight"
        if pos not in gguf or len(gguf.info(pos).shape) != 2:
            raise GGUFError(f"{path}: no 2-D tensor '{pos}' (the sinusoid positions llama.cpp's converter writes)")
        return cls(
            n_mel=V.SIZE.check(path, K.NUM_MEL_BINS, gguf.get_int(K.NUM_MEL_BINS)),
            dim=V.SIZE.check(path, K.EMBEDDING_LENGTH, gguf.get_int(K.EMBEDDING_LENGTH)),
            n_layers=V.LAYER_COUNT.check(path, K.BLOCK_COUNT, gguf.get_int(K.BLOCK_COUNT)),
            n_heads=V.HEAD_COUNT.check(path, K.HEAD_COUNT, gguf.get_int(K.HEAD_COUNT)),
            n_ff=V.SIZE.check(path, K.FEED_FORWARD_LENGTH, gguf.get_int(K.FEED_FORWARD_LENGTH)),
            out_dim=V.SIZE.check(path, K.PROJECTION_DIM, gguf.get_int(K.PROJECTION_DIM)),
            conv_channels=int(conv.shape[0]),
            positions=int(gguf.info(pos).shape[0]),
            eps=V.NORM_EPSILON.check(path, K.LAYERNORM_EPS, gguf.get_float(K.LAYERNORM_EPS, DEFAULT_EPS)),
            n_window=V.SIZE.check(path, K.N_WINDOW, gguf.get_int(K.N_WINDOW, DEFAULT_N_WINDOW)),
            n_window_infer=V.SIZE.check(path, K.N_WINDOW_INFER, gguf.get_int(K.N_WINDOW_INFER, DEFAULT_N_WINDOW_INFER)),
        )
