"""A pre-allocated key/value cache for decoder-only transformers (gpt-fast style).

The cache is allocated once for ``max_len`` positions; each layer writes its new keys and values at the
current
position and reads back everything up to it. The caller owns the cache and passes it to the model's step
function.
"""

from __future__ import annotations

import torch


class KVCacheFullError(RuntimeError):
    """More positions were written than the cache was allocated for."""


class KVCache:
    """Keys and values for every layer, shape ``(n_layers, batch, n_kv_heads, max_len, head_dim)``."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0  # positions filled and committed

    def check_fits(self, end: int) -> None:
        """KVCacheFullError unless positions up to ``end`` (exclusive) fit."""
        if end > self.max_len:
            raise KVCacheFullError(f"the KV cache holds {self.max_len} positions; position {end - 1} does not fit")

    def update(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` ``(B, H, T, D)`` at ``start..start+T``; return the keys/values of ``0..start+T``."""
        end = start + k.shape[2]
        self.check_fits(end)
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def rows(self, start: int, end: int) -> KVCache:
        """The batch rows ``start..end`` of this cache, sharing its storage (a step that runs some rows alone)."""
        view = KVCache.__new__(KVCache)
        view.k, view.v = self.k[:, start:end], self.v[:, start:end]
        view.max_len, view.length = self.max_len, self.length
        return view

    def advance(self, n: int) -> None:
        """Commit ``n`` positions written by the last step (called once per step, after all layers)."""
        self.length += n


class CrossAttentionCache:
    """Each decoder layer's cross-attention keys and values of the encoder's output (Magpie's text encoder):
    computed once, on the first step or before generation, and only read after."""

    def __init__(self, n_layers: int) -> None:
        self._kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layers

    def filled(self, layer: int) -> bool:
        return self._kv[layer] is not None

    def fill(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store layer ``layer``'s keys and values ``(B, H, S, D)``; a layer is filled once."""
        if self._kv[layer] is not None:
            raise ValueError(f"the cross-attention cache of layer {layer} is filled already")
        self._kv[layer] = (k, v)

    def get(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self._kv[layer]
        if kv is None:
            raise ValueError(f"the cross-attention cache of layer {layer} is empty: fill it first")
        return kv


class EncoderDecoderCache:
    """The state of an encoder-decoder backbone: a growing self-attention cache and a fixed cross-attention one."""

    def __init__(self, self_attention: KVCache, cross_attention: CrossAttentionCache) -> None:
        self.self_attention, self.cross_attention = self_attention, cross_attention

    @property
    def length(self) -> int:
        return self.self_attention.length

    @property
    def max_len(self) -> int:
        return self.self_attention.max_len
