"""The thinker's hyper-parameters, read from llama.cpp's ``qwen3omnimoe.*`` (or ``qwen3moe.*``) metadata."""

from __future__ import annotations

from dataclasses import dataclass

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniThinker as K
from ggtts.models.layers import validate as V

DEFAULT_ROPE_THETA = 1_000_000.0  # transformers' default for the Qwen3-Omni text model
DEFAULT_RMS_EPS = 1e-6
ROPE_THETA = V.Bounds(1.0, 1e12, "a RoPE base frequency")


@dataclass(frozen=True)
class ThinkerConfig:
    arch: str  # the file's architecture name: qwen3omnimoe, or qwen3moe for mainline llama.cpp
    n_vocab: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int  # explicit in Qwen3: not dim / n_heads
    n_ff: int  # the dense layers' width (unused when every layer is MoE)
    n_ff_exp: int
    n_expert: int
    n_expert_used: int
    context_length: int
    norm_topk_prob: bool = True
    mlp_only_layers: tuple[int, ...] = ()  # layers with a dense feed-forward instead of experts
    rms_eps: float = DEFAULT_RMS_EPS
    rope_theta: float = DEFAULT_ROPE_THETA
    rope_sections: tuple[int, ...] = ()  # M-RoPE sections; text-only positions make them irrelevant
    tied_output: bool = False  # no separate "output" tensor: logits use token_embd

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise GGUFError(f"{self.arch}: {self.n_heads} heads do not share {self.n_kv_heads} KV heads evenly")
        if self.head_dim % 2:
            raise GGUFError(f"{self.arch}: head size {self.head_dim} is odd; rotary embeddings need an even size")
        if not 0 < self.n_expert_used <= self.n_expert:
            raise GGUFError(f"{self.arch}: {self.n_expert_used} experts used per token out of {self.n_expert}")
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.n_layers]
        if bad:
            raise GGUFError(f"{self.arch}: dense layer {bad[0]} is not one of the {self.n_layers} layers")
        if self.rope_sections and sum(self.rope_sections) != self.head_dim // 2:
            raise GGUFError(
                f"{self.arch}: M-RoPE sections {list(self.rope_sections)} do not add up to half the head size "
                f"({self.head_dim // 2})"
            )

    def is_moe(self, layer: int) -> bool:
        return layer not in self.mlp_only_layers

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> ThinkerConfig:
        arch, path = gguf.architecture, gguf.path
        if arch not in K.ARCHS:
            raise GGUFError(f"{path}: architecture is '{arch}', expected one of {', '.join(K.ARCHS)}")

        def key(template: str) -> str:
            return K.key(template, arch)

        scaling = gguf.get(key(K.ROPE_SCALING_TYPE))
        if scaling not in (None, "none"):
            raise GGUFError(f"{path}: RoPE scaling '{scaling}' is not supported for {arch}")
        embd = gguf.info(K.TOKEN_EMBD + ".weight")
        if len(embd.shape) != 2:
            raise GGUFError(f"{path}: tensor '{embd.name}' has shape {list(embd.shape)}; it must be 2-D")
        n_layers = V.LAYER_COUNT.check(path, key(K.BLOCK_COUNT), gguf.get_int(key(K.BLOCK_COUNT)))
        dim = V.SIZE.check(path, key(K.EMBEDDING_LENGTH), gguf.get_int(key(K.EMBEDDING_LENGTH)))
        n_heads = V.HEAD_COUNT.check(path, key(K.HEAD_COUNT), gguf.get_int(key(K.HEAD_COUNT)))
        head_dim = V.SIZE.check(path, key(K.KEY_LENGTH), gguf.get_int(key(K.KEY_LENGTH), dim // n_heads))
        value_length = gguf.get_int(key(K.VALUE_LENGTH), head_dim)
        if value_length != head_dim:
            raise GGUFError(f"{path}: value length {value_length} differs from key length {head_dim}; unsupported")
        dense = tuple(int(i) for i in gguf.get_list(key(K.MLP_ONLY_LAYERS), []))
        sections = tuple(int(s) for s in gguf.get_list(key(K.ROPE_SECTIONS), []))
        return cls(
            arch=arch,
            n_vocab=embd.shape[0],
            dim=dim,
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv_heads=V.HEAD_COUNT.check(path, key(K.HEAD_COUNT_KV), gguf.get_int(key(K.HEAD_COUNT_KV), n_heads)),
            head_dim=head_dim,
            n_ff=V.SIZE.check(path, key(K.FEED_FORWARD_LENGTH), gguf.get_int(key(K.FEED_FORWARD_LENGTH), 1)),
            n_ff_exp=V.SIZE.check(
                path, key(K.EXPERT_FEED_FORWARD_LENGTH), gguf.get_int(key(K.EXPERT_FEED_FORWARD_LENGTH))
            ),
            n_expert=V.SIZE.check(path, key(K.EXPERT_COUNT), gguf.get_int(key(K.EXPERT_COUNT))),
            n_expert_used=V.SIZE.check(path, key(K.EXPERT_USED_COUNT), gguf.get_int(key(K.EXPERT_USED_COUNT))),
            context_length=V.CONTEXT_LENGTH.check(path, key(K.CONTEXT_LENGTH), gguf.get_int(key(K.CONTEXT_LENGTH))),
            norm_topk_prob=bool(gguf.get(key(K.EXPERT_WEIGHTS_NORM), True)),
            mlp_only_layers=dense,
            rms_eps=V.NORM_EPSILON.check(path, key(K.RMS_EPS), gguf.get_float(key(K.RMS_EPS), DEFAULT_RMS_EPS)),
            rope_theta=ROPE_THETA.check(
                path, key(K.ROPE_FREQ_BASE), gguf.get_float(key(K.ROPE_FREQ_BASE), DEFAULT_ROPE_THETA)
            ),
            rope_sections=sections,
            tied_output=(K.OUTPUT + ".weight") not in gguf,
        )
