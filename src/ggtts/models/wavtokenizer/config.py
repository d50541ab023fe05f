"""WavTokenizer decoder hyper-parameters, read from llama.cpp's ``wavtokenizer-dec`` metadata."""

from __future__ import annotations

from dataclasses import dataclass

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import WavTokenizerDec as K
from ggtts.models.layers import validate as V

# llama.cpp's files carry neither of these; WavTokenizer "75 tokens/s" (the OuteTTS vocoder) uses these
# values.
DEFAULT_HOP_LENGTH = 320  # samples per code
DEFAULT_SAMPLE_RATE = 24_000  # Hz
# The decoder's posnet has this fixed layout upstream (2 ResNet blocks, attention, 2 ResNet blocks, final
# norm).
POSNET_LAYOUT = ("resnet", "resnet", "attn", "resnet", "resnet", "norm")
CONV1D_KERNEL = 7  # the input ("embed") convolution
CONVNEXT_KERNEL = 7  # depthwise convolution in each ConvNeXt block
POSNET_KERNEL = 3  # convolutions in the posnet ResNet blocks
GROUP_COUNT = V.Bounds(1, 1 << 16, "a group count")


@dataclass(frozen=True)
class WavTokenizerConfig:
    n_vocab: int  # codebook size
    n_features: int  # codebook dimension
    posnet_dim: int
    posnet_layers: int
    convnext_dim: int
    convnext_layers: int
    n_ff: int
    n_out: int  # head output per frame: n_fft + 2 (log-magnitudes, then phases)
    layer_norm_eps: float
    group_norm_eps: float
    group_norm_groups: int
    hop_length: int = DEFAULT_HOP_LENGTH
    sample_rate: int = DEFAULT_SAMPLE_RATE

    @property
    def n_fft(self) -> int:
        return self.n_out - 2

    def __post_init__(self) -> None:
        if self.posnet_layers != len(POSNET_LAYOUT):
            raise GGUFError(
                f"wavtokenizer-dec: posnet has {self.posnet_layers} blocks; only the upstream layout of "
                f"{len(POSNET_LAYOUT)} is supported"
            )
        if self.posnet_dim != self.convnext_dim:
            raise GGUFError("wavtokenizer-dec: posnet and convnext widths differ; the decoder needs them equal")
        if self.n_out % 2 or self.n_fft < self.hop_length or (self.n_fft - self.hop_length) % 2:
            raise GGUFError(
                f"wavtokenizer-dec: output width {self.n_out} does not give a usable n_fft for hop {self.hop_length}"
            )
        if self.posnet_dim % self.group_norm_groups:
            raise GGUFError(
                f"wavtokenizer-dec: width {self.posnet_dim} is not divisible by {self.group_norm_groups} groups"
            )

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> WavTokenizerConfig:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")
        path = gguf.path

        def size(key: str) -> int:
            return V.SIZE.check(path, key, gguf.get_int(key))

        return cls(
            n_vocab=size(K.VOCAB_SIZE),
            n_features=size(K.FEATURES_LENGTH),
            posnet_dim=size(K.POSNET_EMBEDDING_LENGTH),
            posnet_layers=V.LAYER_COUNT.check(path, K.POSNET_BLOCK_COUNT, gguf.get_int(K.POSNET_BLOCK_COUNT)),
            convnext_dim=size(K.CONVNEXT_EMBEDDING_LENGTH),
            convnext_layers=V.LAYER_COUNT.check(path, K.CONVNEXT_BLOCK_COUNT, gguf.get_int(K.CONVNEXT_BLOCK_COUNT)),
            n_ff=size(K.FEED_FORWARD_LENGTH),
            n_out=size(K.EMBEDDING_LENGTH),
            layer_norm_eps=V.NORM_EPSILON.check(path, K.LAYER_NORM_EPS, gguf.get_float(K.LAYER_NORM_EPS)),
            group_norm_eps=V.NORM_EPSILON.check(path, K.GROUP_NORM_EPS, gguf.get_float(K.GROUP_NORM_EPS)),
            group_norm_groups=GROUP_COUNT.check(path, K.GROUP_NORM_GROUPS, gguf.get_int(K.GROUP_NORM_GROUPS)),
            hop_length=V.HOP_LENGTH.check(path, K.HOP_LENGTH, gguf.get_int(K.HOP_LENGTH, DEFAULT_HOP_LENGTH)),
            sample_rate=V.SAMPLE_RATE.check(path, K.SAMPLE_RATE, gguf.get_int(K.SAMPLE_RATE, DEFAULT_SAMPLE_RATE)),
        )
