"""Qwen3-Omni's talker (a Qwen3 MoE transformer writing each frame's first codebook) and its code predictor (a
small dense transformer writing the frame's other codebooks, one after another).

Module names are the file's (:class:`ggtts.gguf.keys.Qwen3OmniTalker`; a block's ``attn.``/``ffn.`` parts are
dropped by :func:`ggtts.models.layers.qwen3.gguf_name`). Positions are plain NEOX rotary positions: the talker's
M-RoPE gives the same angles when its three position streams are equal, as they are for text-only prompts.

The code predictor follows transformers' ``code_predictor.generate``: a two-row prefill (the talker's final,
normed hidden state and the embedding of the frame's first code) gives codebook 1 through ``output.0``; each
code drawn is embedded by its own table ``codec_embd.{j}`` and fed back for the next head. The talker's next
input is the sum of the frame's code embeddings.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.qwen3 import Attention, Block, DenseFFN, RMSNorm, RotaryEmbedding, SparseMoE, load_weights
from ggtts.models.layers.transformer import new_kv_cache
from ggtts.models.qwen3omni_talker.config import StackConfig, TalkerConfig


def _blocks(cfg: StackConfig) -> nn.ModuleList:
    def ffn() -> nn.Module:
        if cfg.n_expert:
            return SparseMoE(cfg.dim, cfg.n_expert, cfg.n_expert_used, cfg.n_ff_exp, cfg.norm_topk_prob, cfg.n_ff_shexp)
        return DenseFFN(cfg.dim, cfg.n_ff)

    return nn.ModuleList(
        Block(cfg.dim, cfg.rms_eps, Attention(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps), ffn())
        for _ in range(cfg.n_layers)
    )


class ResizeMLP(nn.Module):
    """``fc2(silu(fc1(x)))``: the thinker's width to the talker's (``text_proj``, ``hidden_proj``)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(x)))


def _run(blocks: nn.ModuleList, rope: RotaryEmbedding, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    start = cache.length
    for i, block in enumerate(blocks):
        x = block(x, rope, cache, i, start)
    cache.advance(x.shape[1])
    return x


class CodePredictor(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        s = cfg.code_predictor
        self.cfg = cfg
        self.blk = _blocks(s)
        self.output_norm = RMSNorm(s.dim, s.rms_eps)
        n = cfg.n_codebooks - 1
        self.codec_embd = nn.ModuleList(nn.Embedding(cfg.cp_vocab, s.dim) for _ in range(n))
        self.output = nn.ModuleList(nn.Linear(s.dim, cfg.cp_vocab, bias=False) for _ in range(n))
        self.rope = RotaryEmbedding(s.head_dim, s.rope_theta, cfg.n_codebooks + 1)

    def new_cache(self) -> KVCache:
        """A cache for one frame (reset and reused frame after frame)."""
        c = self.cfg.code_predictor
        return new_kv_cache(
            c.n_layers, c.n_kv_heads, c.head_dim, self.cfg.n_codebooks + 1, self.rope, self.output_norm.weight
        )

    def frame(
        self, hidden: torch.Tensor, first: torch.Tensor, choose: Callable[[int, torch.Tensor], int], cache: KVCache
    ) -> tuple[list[int], torch.Tensor]:
        """Codebooks 1.. of one frame from the talker's hidden state and the first code's embedding (each
        ``(1, 1, dim)``); ``choose(j, logits)`` picks codebook ``j + 1``. Returns the codes and the sum of their
        embeddings ``(1, 1, dim)``."""
        cache.length = 0
        x = torch.cat((hidden, first), dim=1)  # (1, 2, dim)
        codes: list[int] = []
        total = torch.zeros_like(first)
        for j in range(self.cfg.n_codebooks - 1):
            h = self.output_norm(_run(self.blk, self.rope, x, cache)[:, -1:])
            code = choose(j, self.output[j](h)[0, -1])
            codes.append(code)
            x = self.codec_embd[j](torch.tensor([[code]], device=h.device)).to(h.dtype)  # (1, 1, dim)
            total = total + x
        return codes, total


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig, max_len: int | None = None) -> None:
        super().__init__()
        s = cfg.talker
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.codec_vocab, s.dim)
        self.blk = _blocks(s)
        self.output_norm = RMSNorm(s.dim, s.rms_eps)
        self.output = nn.Linear(s.dim, cfg.codec_vocab, bias=False)
        self.text_proj = ResizeMLP(cfg.thinker_dim, cfg.proj_dim, s.dim)  # thinker embeddings -> talker
        self.hidden_proj = ResizeMLP(cfg.thinker_dim, cfg.proj_dim, s.dim)  # thinker hidden states (multimodal)
        self.rope = RotaryEmbedding(s.head_dim, s.rope_theta, max_len or cfg.context_length)
        self.cp = CodePredictor(cfg)
        self.weights_note: str | None = None

    @classmethod
    def from_gguf(
        cls, gguf: GGUFFile, device: str | torch.device = "cpu", *, stored_weights: bool = True, max_len: int = 8192
    ) -> Talker:
        """The talker and code predictor of a ``qwen3omni-talker`` file (its code2wav tensors are left for
        :mod:`ggtts.models.qwen3omni_code2wav`)."""
        from ggtts.gguf.keys import Qwen3OmniCode2Wav

        cfg = TalkerConfig.from_gguf(gguf)
        max_len = min(max_len, cfg.context_length)
        with torch.device("meta"):
            model = cls(cfg, max_len)
        _, model.weights_note = load_weights(
            model, gguf, device=device, stored_weights=stored_weights, ignore_prefixes=(Qwen3OmniCode2Wav.PREFIX,)
        )
        s, c = cfg.talker, cfg.code_predictor
        model.rope = RotaryEmbedding(s.head_dim, s.rope_theta, max_len).to(device)
        model.cp.rope = RotaryEmbedding(c.head_dim, c.rope_theta, cfg.n_codebooks + 1).to(device)
        return model.eval()

    @property
    def max_len(self) -> int:
        return self.rope.max_len

    def new_cache(self, max_len: int) -> KVCache:
        c = self.cfg.talker
        return new_kv_cache(c.n_layers, c.n_kv_heads, c.head_dim, max_len, self.rope, self.output_norm.weight)

    def embed_codes(self, code: int) -> torch.Tensor:
        """The first codebook's embedding of ``code``, ``(1, 1, dim)``."""
        return self.token_embd(torch.tensor([[code]], device=self.output_norm.weight.device))

    def step(self, x: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Input embeddings ``(1, T, dim)`` at ``cache.length..`` -> the last row's normed hidden state
        ``(1, 1, dim)`` and its first-codebook logits ``(V,)``."""
        h = self.output_norm(_run(self.blk, self.rope, x, cache)[:, -1:])
        return h, self.output(h)[0, -1]
