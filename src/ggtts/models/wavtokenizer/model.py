"""WavTokenizer decoder: codes -> codebook features -> Vocos backbone (posnet + ConvNeXt) -> iSTFT head.

Attribute names are llama.cpp's ``wavtokenizer-dec`` tensor names, so ``state_dict()`` keys are the GGUF
names.
The AdaLayerNorm of the upstream backbone is stored baked for bandwidth 0 (a plain LayerNorm), as llama.cpp
does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.gguf_state import load_module_from_gguf
from ggtts.models.layers.vocos_istft import ISTFT, log_polar_to_complex
from ggtts.models.wavtokenizer.config import (
    CONV1D_KERNEL,
    CONVNEXT_KERNEL,
    POSNET_KERNEL,
    POSNET_LAYOUT,
    WavTokenizerConfig,
)


class _Weight(nn.Module):
    """A bare per-channel vector stored as ``<name>.weight`` (ConvNeXt's layer scale ``gamma``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class PosNetResBlock(nn.Module):
    """GroupNorm -> swish -> conv3 -> GroupNorm -> swish -> conv3, plus the input."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, dim, eps=eps)
        self.conv1 = nn.Conv1d(dim, dim, POSNET_KERNEL, padding=POSNET_KERNEL // 2)
        self.norm2 = nn.GroupNorm(groups, dim, eps=eps)
        self.conv2 = nn.Conv1d(dim, dim, POSNET_KERNEL, padding=POSNET_KERNEL // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h


class PosNetAttnBlock(nn.Module):
    """Single-head self-attention over time (1x1 convolutions for q, k, v and the output), plus the input."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.attn_norm = nn.GroupNorm(groups, dim, eps=eps)
        self.attn_q = nn.Conv1d(dim, dim, 1)
        self.attn_k = nn.Conv1d(dim, dim, 1)
        self.attn_v = nn.Conv1d(dim, dim, 1)
        self.attn_output = nn.Conv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        h = self.attn_norm(x)
        # (B, C, T) -> (B, 1, T, C): one head whose width is the channel count. Contiguous: over strided views
        # torch's CPU attention takes its plain path, with every (T, T) score in memory (160 GB for 200,000 codes)
        q, k, v = (
            proj(h).transpose(1, 2).unsqueeze(1).contiguous() for proj in (self.attn_q, self.attn_k, self.attn_v)
        )
        h = F.scaled_dot_product_attention(q, k, v).squeeze(1).transpose(1, 2)  # (B, C, T)
        return x + self.attn_output(h)


class PosNetNorm(nn.Module):
    """The final GroupNorm of the posnet (llama.cpp names it ``attn_norm`` too)."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.attn_norm = nn.GroupNorm(groups, dim, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn_norm(x)


class ConvNeXtBlock(nn.Module):
    """Depthwise conv7 -> LayerNorm -> Linear -> GELU -> Linear -> layer scale, plus the input."""

    def __init__(self, dim: int, n_ff: int, eps: float) -> None:
        super().__init__()
        self.dw = nn.Conv1d(dim, dim, CONVNEXT_KERNEL, padding=CONVNEXT_KERNEL // 2, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.pw1 = nn.Linear(dim, n_ff)
        self.pw2 = nn.Linear(n_ff, dim)
        self.gamma = _Weight(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        h = self.dw(x).transpose(1, 2)  # (B, T, C)
        h = self.pw2(F.gelu(self.pw1(self.norm(h))))
        return x + (self.gamma.weight * h).transpose(1, 2)


def _posnet_block(kind: str, cfg: WavTokenizerConfig) -> nn.Module:
    dim, groups, eps = cfg.posnet_dim, cfg.group_norm_groups, cfg.group_norm_eps
    if kind == "resnet":
        return PosNetResBlock(dim, groups, eps)
    if kind == "attn":
        return PosNetAttnBlock(dim, groups, eps)
    return PosNetNorm(dim, groups, eps)


class WavTokenizerDecoder(nn.Module):
    def __init__(self, cfg: WavTokenizerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.n_vocab, cfg.n_features)
        self.conv1d = nn.Conv1d(cfg.n_features, cfg.posnet_dim, CONV1D_KERNEL, padding=CONV1D_KERNEL // 2)
        self.posnet = nn.ModuleList(_posnet_block(kind, cfg) for kind in POSNET_LAYOUT)
        self.token_embd_norm = nn.LayerNorm(cfg.convnext_dim, eps=cfg.layer_norm_eps)
        self.convnext = nn.ModuleList(
            ConvNeXtBlock(cfg.convnext_dim, cfg.n_ff, cfg.layer_norm_eps) for _ in range(cfg.convnext_layers)
        )
        self.output_norm = nn.LayerNorm(cfg.convnext_dim, eps=cfg.layer_norm_eps)
        self.output = nn.Linear(cfg.convnext_dim, cfg.n_out)
        self.istft = ISTFT(cfg.n_fft, cfg.hop_length)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str | torch.device = "cpu") -> WavTokenizerDecoder:
        model = cls(WavTokenizerConfig.from_gguf(gguf))
        load_module_from_gguf(model, gguf)
        return model.to(device).eval()

    def check_codes(self, codes: torch.Tensor) -> None:
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.cfg.n_vocab):
            bad = codes[(codes < 0) | (codes >= self.cfg.n_vocab)].flatten()[0]
            raise ValueError(f"audio code {int(bad)} is out of range: this vocoder has codes 0..{self.cfg.n_vocab - 1}")

    def spectral_frames(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(B, T)`` -> ``(B, n_fft + 2, T)``: log-magnitudes then phases (llama.cpp's embd)."""
        self.check_codes(codes)
        x = self.conv1d(self.token_embd(codes).transpose(1, 2))  # (B, C, T)
        for block in self.posnet:
            x = block(x)
        x = self.token_embd_norm(x.transpose(1, 2)).transpose(1, 2)
        for block in self.convnext:
            x = block(x)
        x = self.output(self.output_norm(x.transpose(1, 2)))  # (B, T, n_fft + 2)
        return x.transpose(1, 2)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(B, T)`` -> waveform ``(B, T * hop_length)``."""
        return self.istft(log_polar_to_complex(self.spectral_frames(codes)))
