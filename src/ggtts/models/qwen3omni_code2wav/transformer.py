"""Code2wav's pre-transformer: causal sliding-window attention with RoPE on every head, SwiGLU, layer scales.

Names are transformers' (``Qwen3OmniMoeCode2WavTransformerModel``). A query at position ``i`` attends to keys at
``i - sliding_window < j <= i``. For streaming, each attention layer keeps the rotated keys and values of the last
``sliding_window - 1`` positions in the state, so a push of new frames attends exactly as one-shot decoding does.
Over a state of fixed tensors (a push's position given as a tensor: the static streams,
:mod:`ggtts.models.qwen3omni_code2wav.static_stream`) a layer keeps ``sliding_window - 1`` positions from the
stream's start, zeros before it and masked, so every push of a size has the same shapes.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.transformer import RMSNorm, rotate_half
from ggtts.models.qwen3omni_code2wav.layers import StreamState


class TransformerShape(Protocol):
    """What the transformer is built from (Qwen3-Omni's code2wav config and Qwen3-TTS's decoder config)."""

    @property
    def hidden_size(self) -> int: ...
    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_key_value_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def sliding_window(self) -> int: ...
    @property
    def rope_theta(self) -> float: ...
    @property
    def rms_norm_eps(self) -> float: ...


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def rotary(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``(T, head_dim)`` of NeoX-style RoPE (halves rotated) at integer ``positions`` ``(T,)``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    freqs = positions[:, None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:  # (B, H, T, D)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: TransformerShape) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.head_dim = d
        self.groups = cfg.num_attention_heads // cfg.num_key_value_heads
        self.window = cfg.sliding_window

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        state: StreamState | None = None,
        fixed: bool = False,
    ) -> torch.Tensor:
        """``x`` (B, T, hidden); ``mask`` (T, cached + T), True where a query may attend: ``cached`` past keys and
        values come from the state (``fixed``: zeros where it has none yet, a fixed state's first push, all
        masked)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, *rope), _rotate(k, *rope)
        if state is not None:
            past = state.get(self)
            cached = mask.shape[-1] - t
            if past is None and cached and fixed:
                past = k.new_zeros(2, *k.shape[:2], cached, k.shape[3])
            if past is not None:
                k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
            state[self] = torch.stack([k, v])[:, :, :, max(k.shape[2] - (self.window - 1), 0) :]
        if self.groups > 1:
            k, v = k.repeat_interleave(self.groups, dim=1), v.repeat_interleave(self.groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # scale: head_dim ** -0.5
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, cfg: TransformerShape) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: TransformerShape) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = Mlp(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        state: StreamState | None = None,
        fixed: bool = False,
    ) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope, mask, state, fixed))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class TransformerModel(nn.Module):
    def __init__(self, cfg: TransformerShape) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.head_dim, self.theta, self.window = cfg.head_dim, cfg.rope_theta, cfg.sliding_window

    def forward(self, x: torch.Tensor, start: int | torch.Tensor = 0, state: StreamState | None = None) -> torch.Tensor:
        """``x`` (B, T, hidden) at positions ``start .. start + T - 1`` -> (B, T, hidden). With ``state``, the keys
        of the up to ``sliding_window - 1`` positions before ``start`` come from it (and it is updated). ``start``
        as a tensor ``()`` (a fixed state's push): always ``sliding_window - 1`` of them, those before the stream's
        start masked, every shape the same push after push."""
        t = x.shape[1]
        if isinstance(start, torch.Tensor):
            cached = self.window - 1
            q_pos = start + torch.arange(t, device=x.device)
            k_pos = start - cached + torch.arange(cached + t, device=x.device)
        else:
            cached = min(start, self.window - 1) if state is not None else 0
            q_pos = torch.arange(start, start + t, device=x.device)
            k_pos = torch.arange(start - cached, start + t, device=x.device)
        offset = q_pos[:, None] - k_pos[None, :]
        mask = (offset >= 0) & (offset < self.window)  # (T, cached + T)
        if isinstance(start, torch.Tensor):
            mask = mask & (k_pos >= 0)  # (the zeros before the stream's start)
        rope = rotary(q_pos, self.head_dim, self.theta)
        fixed = isinstance(start, torch.Tensor)
        for layer in self.layers:
            x = layer(x, rope, mask, state, fixed)
        return self.norm(x)
