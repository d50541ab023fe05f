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
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.fused import Fused, current, fuse, swiglu
from ggtts.models.layers.gguf_state import load_module_from_gguf
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.transformer import RMSNorm, RotaryEmbedding, StaticPosition, cached_attention
from ggtts.ops.device_weights import use_device_experts
from ggtts.ops.stored_experts import Experts, check_expert_inputs, expert_products, use_stored_experts
from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights, use_stored_weights

__all__ = [
    "Attention",
    "Block",
    "DenseFFN",
    "Experts",
    "RMSNorm",
    "RotaryEmbedding",
    "SparseMoE",
    "fuse_projections",
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
        self.qkv: Fused | None = None  # attn_q/k/v's weights end to end (fuse)

    def fuse(self) -> bool:
        """From now on one product for the queries, keys and values, and one rotation for the query and key heads
        together (the same arithmetic; the rotation 5 kernels where it was 8 apart), where the three projections
        are plain float layers (:func:`~ggtts.models.layers.fused.fuse_rows`: their weights become views, no copy)."""
        return fuse(self, "qkv", [self.attn_q, self.attn_k, self.attn_v])

    def forward(
        self, x: torch.Tensor, rope: RotaryEmbedding, cache: KVCache, layer: int, start: int | StaticPosition
    ) -> torch.Tensor:
        """``x (B, T, dim)`` at positions ``start..start+T`` (or one position read from tensors); writes layer
        ``layer``'s keys and values there."""
        b, t, _ = x.shape
        h, hkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        fused = current(self, "qkv", [self.attn_q, self.attn_k, self.attn_v])
        if fused is not None:
            qkv = fused(x).view(b, t, h + 2 * hkv, d)
            q, k = self.attn_q_norm(qkv[:, :, :h]), self.attn_k_norm(qkv[:, :, h : h + hkv])
            qk = rope(torch.cat((q, k), dim=2).transpose(1, 2), start)  # (B, H + Hkv, T, D)
            q, k, v = qk[:, :h], qk[:, h:], qkv[:, :, h + hkv :].transpose(1, 2)
        else:
            q = rope(self.attn_q_norm(self.attn_q(x).view(b, t, h, d)).transpose(1, 2), start)  # (B, H, T, D)
            k = rope(self.attn_k_norm(self.attn_k(x).view(b, t, hkv, d)).transpose(1, 2), start)
            v = self.attn_v(x).view(b, t, hkv, d).transpose(1, 2)  # (B, Hkv, T, D)
        out = cached_attention(q, k, v, cache, layer, start)  # (B, H, T, D)
        return self.attn_output(out.transpose(1, 2).reshape(b, t, -1))


class DenseFFN(nn.Module):
    """SwiGLU feed-forward: ``ffn_down(silu(ffn_gate(x)) * ffn_up(x))``."""

    def __init__(self, dim: int, n_ff: int) -> None:
        super().__init__()
        self.ffn_gate = nn.Linear(dim, n_ff, bias=False)
        self.ffn_up = nn.Linear(dim, n_ff, bias=False)
        self.ffn_down = nn.Linear(n_ff, dim, bias=False)
        self.gate_up: Fused | None = None  # ffn_gate's and ffn_up's weights end to end (fuse)

    def fuse(self) -> bool:
        """From now on one product for the gate and the up projection (their weights become views, no copy)."""
        return fuse(self, "gate_up", [self.ffn_gate, self.ffn_up])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = current(self, "gate_up", [self.ffn_gate, self.ffn_up])
        return self.ffn_down(swiglu(x, gate_up, self.ffn_gate, self.ffn_up))


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
        # fused weights (fuse): the experts' gate and up stacks, the router and the shared expert's gate, the
        # shared expert's gate and up projections
        self.gate_up_exps: Fused | None = None
        self.router: Fused | None = None
        self.gate_up_shexp: Fused | None = None

    def _routers(self) -> list[nn.Module]:
        return [self.ffn_gate_inp, self.ffn_gate_inp_shexp] if self.n_ff_shexp else [self.ffn_gate_inp]

    def fuse(self) -> bool:
        """From now on one product (and one gather of the picked experts) for the experts' gate and up stacks, one
        for the router and the shared expert's gate, one for the shared expert's gate and up: the same arithmetic,
        fewer kernels (the weights become views of their fused tensors, no copy; layers that are not plain float
        ones stay as they are)."""
        gate, up = self.ffn_gate_exps, self.ffn_up_exps
        same = isinstance(gate, Experts) and isinstance(up, Experts) and gate.n_out == up.n_out  # split in halves
        if same:
            fuse(self, "gate_up_exps", [gate, up], dim=1)
        if self.n_ff_shexp:
            fuse(self, "router", self._routers())
            fuse(self, "gate_up_shexp", [self.ffn_gate_shexp, self.ffn_up_shexp])
        return any(w is not None for w in (self.gate_up_exps, self.router, self.gate_up_shexp))

    def route(self, x: torch.Tensor, logits: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``x (N, dim)`` (or their router ``logits``) -> the picked experts' weights ``(N, k)`` (float32)
        and ids ``(N, k)``."""
        probs = torch.softmax((self.ffn_gate_inp(x) if logits is None else logits).float(), dim=-1)  # (N, E)
        weights, ids = torch.topk(probs, self.n_used, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids

    def _gate_up(self, rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` of each row's picked experts, ``rows (N, 1, dim)`` -> ``(N, k, n_ff_exp)``."""
        gate, up = self.ffn_gate_exps, self.ffn_up_exps
        stacks = current(self, "gate_up_exps", [gate, up], dim=1)
        if stacks is None:
            return F.silu(gate(rows, ids)) * up(rows, ids)
        assert isinstance(gate, Experts)
        fused = stacks.weight  # (E, 2 n_ff_exp, dim)
        check_expert_inputs(rows, ids, gate.n_in)
        n = gate.n_out
        both = expert_products(rows, ids, gate.n_expert, 2 * n, lambda a, b: fused[a:b],
                               lambda picked: fused.index_select(0, picked), gate.gather or rows.device.type != "cpu",
                               gate.dense, gate.n_expert)  # fmt: skip
        return F.silu(both[..., :n]) * both[..., n:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])  # (N, dim)
        shared_gate = None
        router = current(self, "router", self._routers())
        if router is not None:
            both = router(h)  # (N, E + 1)
            weights, ids = self.route(h, both[:, :-1])
            shared_gate = both[:, -1:]
        else:
            weights, ids = self.route(h)
        act = self._gate_up(h.unsqueeze(1), ids)  # (N, k, n_ff_exp); every pick of a row reads the same input
        out = (self.ffn_down_exps(act, ids) * weights.unsqueeze(-1).to(h.dtype)).sum(dim=1)  # (N, dim)
        if self.n_ff_shexp:
            if shared_gate is None:
                shared_gate = self.ffn_gate_inp_shexp(h)
            gate_up = current(self, "gate_up_shexp", [self.ffn_gate_shexp, self.ffn_up_shexp])
            shared = self.ffn_down_shexp(swiglu(h, gate_up, self.ffn_gate_shexp, self.ffn_up_shexp))
            out = out + torch.sigmoid(shared_gate) * shared
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
    F16, BF16 or blocks stay so (memory-mapped; expert stacks read only the picked experts); on a GPU, block ones
    (:data:`~ggtts.ops.device_weights.DEVICE_TYPES`) stay so there, widened per product; the rest is widened to
    float. Returns the missing ``optional`` names and, when weights were widened, why."""
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


def fuse_projections(blocks: Iterable[nn.Module]) -> int:
    """Each block's :meth:`Attention.fuse` and its feed-forward's ``fuse``: what a GPU step graph holds (fewer,
    larger products). Returns how many parts were fused."""
    fused = 0
    for block in blocks:
        for part in (block.attn, block.ffn):
            fuse_part = getattr(part, "fuse", None)
            if fuse_part is not None and fuse_part():
                fused += 1
    return fused
