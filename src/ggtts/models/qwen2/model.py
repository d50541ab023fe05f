"""Qwen2 decoder-only transformer with module names equal to llama.cpp's ``qwen2`` tensor names.

RMSNorm, grouped-query attention with biased q/k/v projections, NEOX-style rotary embeddings (llama.cpp stores
Qwen2's q/k weights unpermuted), SwiGLU feed-forward. The output projection is tied to ``token_embd`` when
the file
has no ``output`` tensor. State lives in a :class:`~ggtts.models.layers.kv_cache.KVCache` the caller passes in.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.fused import Fused, current, fuse, swiglu
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.static_steps import StaticCaches, StaticDecode, StaticLanes
from ggtts.models.layers.transformer import (
    RMSNorm,
    RotaryEmbedding,
    StaticPosition,
    cached_attention,
    new_kv_cache,
)
from ggtts.models.qwen2.config import Qwen2Config
from ggtts.ops.device_weights import DeviceStoredEmbedding
from ggtts.ops.stored_weights import StoredEmbedding, stored_weights_plan, use_planned_weights

if TYPE_CHECKING:
    from ggtts.models.qwen2.ggml_graph import Qwen2Graph


class Block(nn.Module):
    """Pre-norm attention and SwiGLU feed-forward; attribute names are the GGUF names under ``blk.N``."""

    def __init__(self, cfg: Qwen2Config) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.attn_norm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.attn_q = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=True)
        self.attn_k = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=True)
        self.attn_v = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=True)
        self.attn_output = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.ffn_gate = nn.Linear(cfg.dim, cfg.n_ff, bias=False)
        self.ffn_up = nn.Linear(cfg.dim, cfg.n_ff, bias=False)
        self.ffn_down = nn.Linear(cfg.n_ff, cfg.dim, bias=False)
        self.qkv: Fused | None = None  # fuse: attn_q/k/v's weights and biases end to end
        self.gate_up: Fused | None = None  # fuse: ffn_gate's and ffn_up's weights end to end

    def fuse(self) -> bool:
        """From now on one product (with its bias) for the queries, keys and values, one rotation for the query
        and key heads together, and one product for the gate and up projections: the same arithmetic, fewer
        kernels, where the layers are plain float ones (their weights become views, no copy:
        :func:`~ggtts.models.layers.fused.fuse_rows`)."""
        qkv = fuse(self, "qkv", [self.attn_q, self.attn_k, self.attn_v])
        return fuse(self, "gate_up", [self.ffn_gate, self.ffn_up]) or qkv

    def attention(
        self, x: torch.Tensor, rope: RotaryEmbedding, cache: KVCache, layer: int, start: int | StaticPosition
    ) -> torch.Tensor:
        b, t, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        fused = current(self, "qkv", [self.attn_q, self.attn_k, self.attn_v])
        if fused is not None:
            qkv = fused(x).view(b, t, h + 2 * hkv, d)
            qk = rope(qkv[:, :, : h + hkv].transpose(1, 2), start)  # (B, H + Hkv, T, D)
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, :, h + hkv :].transpose(1, 2)
        else:
            q = rope(self.attn_q(x).view(b, t, h, d).transpose(1, 2), start)  # (B, H, T, D)
            k = rope(self.attn_k(x).view(b, t, hkv, d).transpose(1, 2), start)  # (B, Hkv, T, D)
            v = self.attn_v(x).view(b, t, hkv, d).transpose(1, 2)
        out = cached_attention(q, k, v, cache, layer, start)  # (B, H, T, D)
        return self.attn_output(out.transpose(1, 2).reshape(b, t, -1))

    def forward(
        self, x: torch.Tensor, rope: RotaryEmbedding, cache: KVCache, layer: int, start: int | StaticPosition
    ) -> torch.Tensor:
        x = x + self.attention(self.attn_norm(x), rope, cache, layer, start)
        gate_up = current(self, "gate_up", [self.ffn_gate, self.ffn_up])
        return x + self.ffn_down(swiglu(self.ffn_norm(x), gate_up, self.ffn_gate, self.ffn_up))


class Qwen2Model(nn.Module):
    def __init__(self, cfg: Qwen2Config, max_len: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.n_vocab, cfg.dim)
        self.blk = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.output_norm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.output = None if cfg.tied_output else nn.Linear(cfg.dim, cfg.n_vocab, bias=False)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, max_len or cfg.context_length)
        self.weights_note: str | None = None  # why weights were widened to float, when they were
        self.graph: Qwen2Graph | None = None  # steps as ggml graphs (from_gguf sets it where ggml runs)
        self.static: StaticCaches[torch.Tensor] | None = None  # one-token steps over fixed caches, by capacity
        self.lanes: StaticLanes[torch.Tensor] | None = None  # several sequences' one-token steps at once (GPU)

    @classmethod
    def from_gguf(
        cls,
        gguf: GGUFFile,
        device: str | torch.device = "cpu",
        *,
        dtype: torch.dtype = torch.float32,
        max_len: int | None = None,
        stored_weights: bool = True,
        graph: bool = True,
        step_graphs: bool = True,
        compile_steps: bool = False,
    ) -> Qwen2Model:
        """The model of a ``qwen2`` file. Weights the file stores as F16, BF16 or blocks (Q8_0, Q4_0, K-quants...)
        stay so and are multiplied by ggml's kernels on CPU; on a GPU, block ones (legacy, K-quants, IQ4) stay so
        there and are widened one product at a time (:mod:`ggtts.ops.device_weights`); ``stored_weights=False``,
        other types on a GPU, or ggml not installed widen them to ``dtype`` at load instead (``weights_note`` says
        why). Where ggml runs, each step is one ggml graph (:class:`~ggtts.models.qwen2.ggml_graph.Qwen2Graph`)
        unless ``graph=False``: the torch modules then run op by op (the same maths, with torch's per-operation
        overhead). On CUDA each one-token step is a captured CUDA graph over a fixed cache
        (:meth:`use_static_steps`) unless ``step_graphs=False``; ``compile_steps`` compiles that step first
        (``torch.compile``: its small kernels fused)."""
        cfg = Qwen2Config.from_gguf(gguf)
        plan = stored_weights_plan(device, stored_weights)
        with empty_modules():  # no memory or random initialisation for weights about to be replaced
            model = cls(cfg, max_len=max_len)
        model.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, max_len or cfg.context_length)
        consumed = use_planned_weights(plan, model, gguf)
        load_module_from_gguf(model, gguf, ignore=consumed)
        model.weights_note = plan.reason
        if stored_weights and not plan.stored and not plan.on_device and torch.device(device).type == "cpu":
            widened = sorted({i.type.name for i in gguf.infos() if i.type.name not in ("F32", "F64")})
            if widened:
                to = str(dtype).removeprefix("torch.")
                warnings.warn(
                    f"{gguf.path}: {plan.reason}: its {'/'.join(widened)} weights are widened to {to} (more memory, "
                    "slower)",
                    stacklevel=2,
                )
        model = model.to(device=device, dtype=dtype).eval()
        if graph and plan.stored and dtype == torch.float32:
            from ggtts.models.qwen2.ggml_graph import Qwen2Graph

            model.graph = Qwen2Graph(model)
        if step_graphs and torch.device(device).type == "cuda":
            model.use_static_steps(compile=compile_steps)
        return model

    def use_static_steps(self, capture: bool = True, compile: bool = False, fuse: bool = True) -> None:
        """From now on, :meth:`new_cache` hands out caches of fixed capacity and each one-token step on one runs as
        a :class:`~ggtts.models.layers.static_steps.StaticDecode` (a CUDA graph replayed, with ``capture`` on
        CUDA; eagerly elsewhere). ``compile``: the step is compiled by ``torch.compile`` (fixed shapes) before it
        is captured. ``fuse``: each block's projections that read one input as one product (:meth:`Block.fuse`),
        in every step from now on."""
        if fuse:
            self.fuse()

        def make(capacity: int) -> StaticDecode[torch.Tensor]:
            token = torch.zeros((1, 1), dtype=torch.long)
            return StaticDecode(self._static_step, self._new_cache(capacity), self.rope, token,
                                "the Qwen2 decode step", capture, compile)  # fmt: skip

        self.static = StaticCaches(make, self.rope.max_len)

    def use_static_lanes(self, slots: int, capture: bool = True, compile: bool = False, fuse: bool = True) -> None:
        """From now on, :meth:`new_cache` hands out rows of fixed caches of ``slots`` rows, and the one-token steps
        of up to ``slots`` sequences on them run together (:meth:`forward_many`) as one
        :class:`~ggtts.models.layers.static_steps.StaticLanes` step: a CUDA graph replayed, with ``capture`` on
        CUDA (eagerly elsewhere). Give each cache back with :meth:`release_cache` when its sequence ends. With every
        row held, a further cache is one of its own, stepped alone (the one-sequence static steps, whose one cache
        serves one generation at a time, are off from now on). ``fuse``: as :meth:`use_static_steps`'."""
        if fuse:
            self.fuse()
        self.static = None
        token = torch.zeros((1, 1), dtype=torch.long)
        self.lanes = StaticLanes(lambda capacity: self._new_cache(capacity, batch=slots), self._static_step,
                                 self.rope, token, slots, self.rope.max_len, "the Qwen2 decode step of several "
                                 "sequences", capture, compile)  # fmt: skip

    def fuse(self) -> int:
        """Each block's :meth:`Block.fuse`; how many fused."""
        return sum(block.fuse() for block in self.blk if isinstance(block, Block))

    def release_cache(self, cache: KVCache) -> None:
        """``cache``'s sequence is over: its row of the static lanes (if it holds one) is free for another."""
        if self.lanes is not None:
            self.lanes.release(cache)

    def new_cache(self, max_len: int, *, batch: int = 1, dtype: torch.dtype | None = None) -> KVCache:
        """A cache for ``max_len`` positions, in the model's dtype unless ``dtype`` says otherwise (``float16``
        halves it and is what llama.cpp keeps by default; keys and values are then rounded to it)."""
        if self.lanes is not None and batch == 1 and dtype is None:
            cache = self.lanes.new_cache(max_len)
            if cache is not None:
                return cache
        if self.static is not None and batch == 1 and dtype is None:
            cache = self.static.new_cache(max_len)
            if cache is not None:
                return cache
        return self._new_cache(max_len, batch=batch, dtype=dtype)

    def _new_cache(self, max_len: int, *, batch: int = 1, dtype: torch.dtype | None = None) -> KVCache:
        c = self.cfg
        return new_kv_cache(
            c.n_layers, c.n_kv_heads, c.head_dim, max_len, self.rope, self.output_norm.weight, batch=batch, dtype=dtype
        )

    def _static_step(self, token: torch.Tensor, position: StaticPosition, cache: KVCache) -> torch.Tensor:
        h = self.token_embd(token)
        for i, block in enumerate(self.blk):
            h = block(h, self.rope, cache, i, position)
        return self.logits(h)  # (1, 1, V)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        h = self.output_norm(h)
        if self.output is not None:
            return self.output(h)
        if isinstance(self.token_embd, StoredEmbedding | DeviceStoredEmbedding):  # tied to a stored table: as stored
            return self.token_embd.as_linear()(h)
        return F.linear(h, self.token_embd.weight)

    def forward_many(
        self, tokens: Sequence[torch.Tensor], caches: Sequence[KVCache], *, last_only: bool = False
    ) -> list[torch.Tensor]:
        """Several sequences' steps: tokens ``(1, T_i)`` at each cache's length -> each one's logits, as
        :meth:`forward` gives them. Where ggml runs the steps they are one graph (each weight read once for every
        sequence's rows: :meth:`~ggtts.models.layers.ggml_stack.StackGraph.step_many`); elsewhere one step each."""
        if len(tokens) != len(caches):
            raise ValueError(f"{len(tokens)} token rows for {len(caches)} caches")
        if self.lanes is not None:
            return self._lanes_many(self.lanes, tokens, caches, last_only)
        graph, pairs = self.graph, list(zip(tokens, caches, strict=True))
        if graph is None or len(pairs) == 1 or not graph.takes_all(tokens, caches):
            return [self(t, c, last_only=last_only) for t, c in pairs]
        return graph.forward_many(tokens, caches, last_only=last_only)

    def _lanes_many(
        self, lanes: StaticLanes[torch.Tensor], tokens: Sequence[torch.Tensor], caches: Sequence[KVCache],
        last_only: bool,
    ) -> list[torch.Tensor]:  # fmt: skip
        """Prompts (several tokens) one by one, then every one-token step on a lanes row in one lanes step."""
        out: dict[int, torch.Tensor] = {}
        steps = [i for i, (t, c) in enumerate(zip(tokens, caches, strict=True)) if t.shape == (1, 1) and lanes.holds(c)]
        for i in sorted(set(range(len(tokens))) - set(steps)):
            out[i] = self(tokens[i], caches[i], last_only=last_only)
        if steps:
            out.update(zip(steps, lanes.step([tokens[i] for i in steps], [caches[i] for i in steps]), strict=True))
        return [out[i] for i in range(len(tokens))]

    def forward(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = False) -> torch.Tensor:
        """Tokens ``(B, T)`` at ``cache.length..`` -> logits ``(B, T, V)`` (``(B, 1, V)`` with last_only).

        Commits the ``T`` new positions to the cache.
        """
        if self.graph is not None and self.graph.takes(cache, rows=tokens.shape[0]):
            return self.graph.forward(tokens, cache, last_only=last_only)
        if self.lanes is not None and tokens.shape == (1, 1) and self.lanes.holds(cache):
            return self.lanes.step([tokens], [cache])[0]
        static = self.static.owner(cache) if self.static is not None else None
        if static is not None and tokens.shape[1] == 1:
            return static.step(tokens, cache)
        start = cache.length
        h = self.token_embd(tokens)
        for i, block in enumerate(self.blk):
            h = block(h, self.rope, cache, i, start)
        cache.advance(tokens.shape[1])
        if last_only:
            h = h[:, -1:]
        return self.logits(h)
