"""Qwen2 hyper-parameters, read from llama.cpp's ``qwen2.*`` metadata."""

from __future__ import annotations

from dataclasses import dataclass

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen2 as K
from ggtts.models.layers import validate as V

DEFAULT_ROPE_THETA = 10_000.0  # llama.cpp's default when qwen2.rope.freq_base is absent
DEFAULT_RMS_EPS = 1e-6
ROPE_THETA = V.Bounds(1.0, 1e12, "a RoPE base frequency")


@dataclass(frozen=True)
class Qwen2Config:
    n_vocab: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    n_ff: int
    context_length: int
    rms_eps: float = DEFAULT_RMS_EPS
    rope_theta: float = DEFAULT_ROPE_THETA
    tied_output: bool = True  # no separate "output" tensor: logits use token_embd

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def __post_init__(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise GGUFError(
                f"qwen2: {self.dim} channels, {self.n_heads} heads and {self.n_kv_heads} KV heads do not divide evenly"
            )
        if self.head_dim % 2:
            raise GGUFError(f"qwen2: head size {self.head_dim} is odd; rotary embeddings need an even size")

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> Qwen2Config:
        if gguf.architecture != K.ARCH:
            raise GGUFError(f"{gguf.path}: architecture is '{gguf.architecture}', expected '{K.ARCH}'")
        scaling = gguf.get(K.ROPE_SCALING_TYPE)
        if scaling not in (None, "none"):
            raise GGUFError(f"{gguf.path}: RoPE scaling '{scaling}' is not supported for qwen2")
        embd = gguf.info(K.TOKEN_EMBD + ".weight")
        if len(embd.shape) != 2:
            raise GGUFError(f"{gguf.path}: tensor '{embd.name}' has shape {list(embd.shape)}; it must be 2-D")
        n_vocab = embd.shape[0]
        path = gguf.path
        n_heads = V.HEAD_COUNT.check(path, K.HEAD_COUNT, gguf.get_int(K.HEAD_COUNT))
        return cls(
            n_vocab=n_vocab,
            dim=V.SIZE.check(path, K.EMBEDDING_LENGTH, gguf.get_int(K.EMBEDDING_LENGTH)),
            n_layers=V.LAYER_COUNT.check(path, K.BLOCK_COUNT, gguf.get_int(K.BLOCK_COUNT)),
            n_heads=n_heads,
            n_kv_heads=V.HEAD_COUNT.check(path, K.HEAD_COUNT_KV, gguf.get_int(K.HEAD_COUNT_KV, n_heads)),
            n_ff=V.SIZE.check(path, K.FEED_FORWARD_LENGTH, gguf.get_int(K.FEED_FORWARD_LENGTH)),
            context_length=V.CONTEXT_LENGTH.check(path, K.CONTEXT_LENGTH, gguf.get_int(K.CONTEXT_LENGTH)),
            rms_eps=V.NORM_EPSILON.check(path, K.RMS_EPS, gguf.get_float(K.RMS_EPS, DEFAULT_RMS_EPS)),
            rope_theta=ROPE_THETA.check(path, K.ROPE_FREQ_BASE, gguf.get_float(K.ROPE_FREQ_BASE, DEFAULT_ROPE_THETA)),
            tied_output=(K.OUTPUT + ".weight") not in gguf,
        )
