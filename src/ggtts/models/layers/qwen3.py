"""Qwen3 decoder blocks shared by Qwen3-Omni's thinker (MoE), talker (MoE with a shared expert) and code
predictor (dense).

A :class:`Block` is pre-norm attention then a feed-forward, each with a residual: ``attn_norm``, an
:class:`Attention` (grouped-query, no biases, an RMS norm over each query and key head before NEOX rotary
embeddings, an explicit head size that need not be ``dim / heads``), ``ffn_norm``, and a feed-forward: a
:class:`DenseFFN` (SwiGLU) or a :class:`SparseMoE` (softmax router, top-k experts, an optional sigmoid-gated shared
expert). Leaf names are llama.cpp's GGUF names (``qwen3moe`` / ``qwen2moe``); the block keeps its two parts as
submodules ``attn`` and ``ffn``, which :func:`gguf_name` drops: ``blk.3.attn.attn_q.weight`` is the file's
``blk.3.attn_q.weight``. :func:`load_weights` fills a model of these blocks from a file, running the weights the
file stores as F16, BF16 or blocks (Q8_0, ...) as stored.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.gguf_state import load_module_from_gguf
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.transformer import RMSNorm, RotaryEmbedding, StaticPosition, cached_attention
from ggtts.ops.device_weights import use_device_experts
from ggtts.ops.stored_experts import Experts, use_stored_experts
from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights, use_stored_weights

__all__ = [
    "Attention",
    "Block",
    "DenseFFN",
    "Experts",
    "RMSNorm",
    "RotaryEmbedding",
    "SparseMoE",
    "gguf_name",
    "load_weights",
]

_PART = re.compile(r"(blk\.\d+)\.(?:attn|ffn)\.")


def gguf_name(module_name: str) -> str:
    """The file's name of a module parameter: a block's ``attn.`` / ``ffn.`` part is dropped."""
    return _PART.sub(r"\1.", module_name)


class Attention(nn.Module):
    """Grouped-query self-attention with per-head q/k RMS norms (``attn_q_norm``, ``attn_k_norm``)."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int, rms_eps: float) -> None:
        super().__init__()
        if n_heads % n_kv_heads:
            raise ValueError(f"{n_heads} query heads do not share {n_kv_heads} key/value heads evenly")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.attn_q = nn.Linear(dim, n_heads * head_dim, bias=False)
        self.attn_k = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.attn_v = nn.Linear(dim, n_kv_heads * head_dim, bias=False)
        self.attn_output = nn.Linear(n_heads * head_dim, dim, bias=False)
        self.attn_q_norm = RMSNorm(head_dim, rms_eps)
        self.attn_k_norm = RMSNorm(head_dim, rms_eps)

    def forward(
        self, x: torch.Tensor, rope: RotaryEmbedding, cache: KVCache, layer: int, start: int | StaticPosition
    ) -> torch.Tensor:
        """``x (B, T, dim)`` at positions ``start..start+T`` (or one position read from tensors); writes layer
        ``layer``'s keys and values there."""
        b, t, _ = x.shape
        q = self.attn_q_norm(self.attn_q(x).view(b, t, self.n_heads, self.head_dim)).transpose(1, 2)  # (B, H, T, D)
        k = self.attn_k_norm(self.attn_k(x).view(b, t, self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.attn_v(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        out = cached_attention(rope(q, start), rope(k, start), v, cache, layer, start)  # (B, H, T, D)
        return self.attn_output(out.transpose(1, 2).reshape(b, t, -1))


class DenseFFN(nn.Module):
    """SwiGLU feed-forward: ``ffn_down(silu(ffn_gate(x)) * ffn_up(x))``."""

    def __init__(self, dim: int, n_ff: int) -> None:
        super().__init__()
        self.ffn_gate = nn.Linear(dim, n_ff, bias=False)
        self.ffn_up = nn.Linear(dim, n_ff, bias=False)
        self.ffn_down = nn.Linear(n_ff, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn_down(F.silu(self.ffn_gate(x)) * self.ffn_up(x))


class SparseMoE(nn.Module):
    """Top-``n_used`` of ``n_expert`` SwiGLU experts per token, weighted by the router's softmax probabilities
    (renormalised over the picked experts when ``norm_topk_prob``), plus, when ``n_ff_shexp`` > 0, a shared SwiGLU
    expert scaled by ``sigmoid(ffn_gate_inp_shexp(x))``.

    Experts are stacks in llama.cpp's layout: ``ffn_gate_exps``/``ffn_up_exps`` ``(E, n_ff_exp, dim)``,
    ``ffn_down_exps`` ``(E, dim, n_ff_exp)``; the router is ``ffn_gate_inp`` ``(E, dim)``; the shared expert is
    ``ffn_{gate,up,down}_shexp`` and its gate ``ffn_gate_inp_shexp`` ``(1, dim)`` (qwen2moe's names)."""

    def __init__(
        self, dim: int, n_expert: int, n_used: int, n_ff_exp: int, norm_topk_prob: bool, n_ff_shexp: int = 0
    ) -> None:
        super().__init__()
        if not 0 < n_used <= n_expert:
            raise ValueError(f"{n_used} experts used per token out of {n_expert}")
        self.n_used, self.norm_topk_prob = n_used, norm_topk_prob
        self.ffn_gate_inp = nn.Linear(dim, n_expert, bias=False)
        self.ffn_gate_exps: Experts | nn.Module = Experts(n_expert, n_ff_exp, dim)
        self.ffn_up_exps: Experts | nn.Module = Experts(n_expert, n_ff_exp, dim)
        self.ffn_down_exps: Experts | nn.Module = Experts(n_expert, dim, n_ff_exp)
        self.n_ff_shexp = n_ff_shexp
        if n_ff_shexp:
            self.ffn_gate_inp_shexp = nn.Linear(dim, 1, bias=False)
            self.ffn_gate_shexp = nn.Linear(dim, n_ff_shexp, bias=False)
            self.ffn_up_shexp = nn.Linear(dim, n_ff_shexp, bias=False)
            self.ffn_down_shexp = nn.Linear(n_ff_shexp, dim, bias=False)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``x (N, dim)`` -> the picked experts' weights ``(N, k)`` (float32) and ids ``(N, k)``."""
        probs = torch.softmax(self.ffn_gate_inp(x).float(), dim=-1)  # (N, E)
        weights, ids = torch.topk(probs, self.n_used, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])  # (N, dim)
        weights, ids = self.route(h)
        rows = h.unsqueeze(1)  # (N, 1, dim): every pick of a row reads the same input
        act = F.silu(self.ffn_gate_exps(rows, ids)) * self.ffn_up_exps(rows, ids)  # (N, k, n_ff_exp)
        out = (self.ffn_down_exps(act, ids) * weights.unsqueeze(-1).to(h.dtype)).sum(dim=1)  # (N, dim)
        if self.n_ff_shexp:
            shared = self.ffn_down_shexp(F.silu(self.ffn_gate_shexp(h)) * self.ffn_up_shexp(h))
            out = out + torch.sigmoid(self.ffn_gate_inp_shexp(h)) * shared
        return out.reshape(shape)


class Block(nn.Module):
    """Pre-norm attention and feed-forward, each with a residual."""

    def __init__(self, dim: int, rms_eps: float, attn: Attention, ffn: nn.Module) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(dim, rms_eps)
        self.attn = attn
        self.ffn_norm = RMSNorm(dim, rms_eps)
        self.ffn = ffn

    def forward(
        self, x: torch.Tensor, rope: RotaryEmbedding, cache: KVCache, layer: int, start: int | StaticPosition
    ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rope, cache, layer, start)
        return x + self.ffn(self.ffn_norm(x))


def load_weights(
    model: nn.Module,
    gguf: GGUFFile,
    *,
    device: str | torch.device = "cpu",
    stored_weights: bool = True,
    optional: tuple[str, ...] = (),
    ignore_prefixes: tuple[str, ...] = (),
) -> tuple[set[str], str | None]:
    """Fill ``model`` (built on the ``meta`` device, or not) from ``gguf``, strictly, under :func:`gguf_name`.

    Where ggml's kernels run (CPU, ``stored_weights``), linear layers, embeddings and expert stacks the file stores as
    F16, BF16 or blocks stay so (memory-mapped; expert stacks read only the picked experts); on a GPU, Q8_0 and Q4_0
    ones stay so there, widened per product (:mod:`ggtts.ops.device_weights`); the rest is widened to float. Returns the
    missing ``optional`` names and, when weights were widened, why."""
    plan = stored_weights_plan(device, stored_weights)
    consumed: set[str] = set()
    if plan.stored:
        consumed |= use_stored_experts(model, gguf, gguf_name=gguf_name)
        consumed |= use_stored_weights(model, gguf, gguf_name=gguf_name)
    elif plan.on_device:
        consumed |= use_device_experts(model, gguf, gguf_name=gguf_name, device=plan.device)
        consumed |= use_planned_weights(plan, model, gguf, gguf_name=gguf_name)
    absent = load_module_from_gguf(
        model,
        gguf,
        gguf_name=gguf_name,
        optional=optional,
        ignore=consumed,
        ignore_prefixes=ignore_prefixes,
        device=device,
    )
    return absent, plan.reason
