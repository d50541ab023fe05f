"""RMSNorm, NEOX-style rotary embeddings and cached causal attention, shared by the Qwen decoders (``qwen2``, the
Qwen3 blocks).

A step's position is an ``int`` (the cache's length: shapes follow it), or a :class:`StaticPosition`: one new
position held in a tensor, with the whole cache attended under a mask, so that every shape and address is the
same at every step and the step can be captured once as a CUDA graph and replayed
(:mod:`ggtts.ops.step_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.kv_cache import KVCache


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, computed in float32 and rounded to the input's dtype, then
    scaled by ``weight`` (transformers' Qwen RMSNorm). Through torch's ``rms_norm``: on the CPU its composite, the
    arithmetic written out (transformers' to the bit, tested); on CUDA one fused kernel where all is float32 (its
    own summation order; a replayed step graph costs about its kernel count)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        return self.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)


@dataclass(frozen=True)
class StaticPosition:
    """One new position, read from tensors: ``index`` (1,) the position, ``mask`` (1, 1, 1, capacity) the attention's
    additive mask over the cache (0 up to the position, -inf after it; made once for every layer, in the queries'
    dtype where it is given: given a boolean mask, attention makes this in each layer), ``cos``/``sin_signed``
    (1, head_dim) its rotation (:class:`RotaryEmbedding`'s tables). Or, for a batch whose rows are sequences each at
    its own position (:meth:`rows`): ``index`` (B,), ``mask`` (B, 1, 1, capacity), ``cos``/``sin_signed`` (B, 1, 1,
    head_dim), and ``write`` (B,): the rows that take part (the others write nothing into their cache)."""

    index: torch.Tensor
    mask: torch.Tensor
    cos: torch.Tensor
    sin_signed: torch.Tensor
    write: torch.Tensor | None = None

    @classmethod
    def at(
        cls, index: torch.Tensor, positions: torch.Tensor, rope: RotaryEmbedding, dtype: torch.dtype | None = None
    ) -> StaticPosition:
        """``index`` (1,) among ``positions`` (capacity,) = ``arange(capacity)``; the mask in ``dtype`` (default:
        the rotary tables')."""
        mask = _additive(positions <= index, dtype or rope.cos.dtype).view(1, 1, 1, -1)
        return cls(index, mask, rope.cos.index_select(0, index), rope.sin_signed.index_select(0, index))

    @classmethod
    def rows(
        cls, index: torch.Tensor, write: torch.Tensor, positions: torch.Tensor, rope: RotaryEmbedding,
        dtype: torch.dtype | None = None,
    ) -> StaticPosition:  # fmt: skip
        """Row ``b`` of a batch at position ``index[b]`` (B,) among ``positions`` (capacity,), written into its
        cache where ``write[b]``; the mask in ``dtype`` (default: the rotary tables')."""
        b = index.shape[0]
        mask = _additive(positions.view(1, -1) <= index.view(-1, 1), dtype or rope.cos.dtype).view(b, 1, 1, -1)
        cos = rope.cos.index_select(0, index).view(b, 1, 1, -1)
        sin = rope.sin_signed.index_select(0, index).view(b, 1, 1, -1)
        return cls(index, mask, cos, sin, write)


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask as attention adds it to the scores: 0 where visible, -inf elsewhere."""
    return torch.where(visible, 0.0, float("-inf")).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class RotaryEmbedding(nn.Module):
    """NEOX-style rotary embedding (the two halves of each head rotate together), cached up to ``max_len``.

    ``x * cos + rotate_half(x) * sin``, with ``rotate_half(x) = [-x2, x1]``, is computed as ``x * cos +
    roll(x, D/2) * sin_signed``: ``sin_signed`` is the sine table with its first half negated, so the rotation is
    one data move and no negation or concatenation (the same products, to the bit; fewer kernels on a GPU)."""

    cos: torch.Tensor
    sin_signed: torch.Tensor

    def __init__(self, head_dim: int, theta: float, max_len: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)  # (max_len, head_dim / 2)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        sin = angles.sin()
        sin[:, : head_dim // 2] = -sin[:, : head_dim // 2]
        self.register_buffer("sin_signed", sin, persistent=False)

    @property
    def max_len(self) -> int:
        return int(self.cos.shape[0])

    def forward(self, x: torch.Tensor, start: int | StaticPosition) -> torch.Tensor:  # x: (B, H, T, D)
        if isinstance(start, StaticPosition):
            cos, sin = start.cos, start.sin_signed
        else:
            t = x.shape[2]
            cos, sin = self.cos[start : start + t], self.sin_signed[start : start + t]
        return x * cos.to(x.dtype) + x.roll(x.shape[-1] // 2, -1) * sin.to(x.dtype)


def cached_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache, layer: int, start: int | StaticPosition
) -> torch.Tensor:
    """Causal grouped-query attention of queries ``q (B, H, T, D)`` at positions ``start..start+T`` over the
    cache's keys and values of ``layer`` after writing ``k, v (B, Hkv, T, D)`` there -> ``(B, H, T, D)``."""
    if isinstance(start, StaticPosition):  # one position; the whole cache, the rest of it masked
        keys, values = cache.k[layer], cache.v[layer]
        if start.write is None:
            keys.index_copy_(2, start.index, k.to(keys.dtype))
            values.index_copy_(2, start.index, v.to(values.dtype))
        else:  # each row at its own position
            _write_rows(keys, start, k)
            _write_rows(values, start, v)
        keys, values = keys.to(q.dtype), values.to(q.dtype)
        return F.scaled_dot_product_attention(
            q, keys, values, attn_mask=start.mask.to(q.dtype), enable_gqa=q.shape[1] != k.shape[1]
        )
    t = q.shape[2]
    keys, values = cache.update(layer, start, k, v)  # (B, Hkv, start + T, D)
    keys, values = keys.to(q.dtype), values.to(q.dtype)  # a float16 cache holds rounded keys and values
    gqa = q.shape[1] != k.shape[1]
    if t == 1:
        return F.scaled_dot_product_attention(q, keys, values, enable_gqa=gqa)
    if start == 0:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=gqa)
    # a chunk after earlier positions: causal within the chunk, everything before it visible
    visible = torch.arange(start + t, device=q.device) <= (start + torch.arange(t, device=q.device))[:, None]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, enable_gqa=gqa)


def _write_rows(store: torch.Tensor, at: StaticPosition, new: torch.Tensor) -> None:
    """``new (B, H, 1, D)`` into ``store (B, H, capacity, D)``, row ``b`` at ``at.index[b]`` where ``at.write[b]``
    (elsewhere the value there is written back: no host decision, so the same kernels whichever rows take part)."""
    assert at.write is not None
    b, h, _, d = new.shape
    where = at.index.view(b, 1, 1, 1).expand(b, h, 1, d)
    kept = store.gather(2, where)
    store.scatter_(2, where, torch.where(at.write.view(b, 1, 1, 1), new.to(store.dtype), kept))


def new_kv_cache(
    n_layers: int, n_kv_heads: int, head_dim: int, max_len: int, rope: RotaryEmbedding, like: torch.Tensor,
    *, batch: int = 1, dtype: torch.dtype | None = None,
) -> KVCache:  # fmt: skip
    """A cache for ``max_len`` positions on ``like``'s device, in its dtype unless ``dtype`` says otherwise
    (``float16`` halves it and is what llama.cpp keeps by default; keys and values are then rounded to it)."""
    if max_len > rope.max_len:
        raise ValueError(f"max_len {max_len} exceeds the model's {rope.max_len} rotary positions")
    return KVCache(n_layers, n_kv_heads, head_dim, max_len, batch=batch, dtype=dtype or like.dtype, device=like.device)
