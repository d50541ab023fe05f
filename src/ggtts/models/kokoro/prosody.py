"""Text encoder and prosody predictor (durations, F0 and energy), after StyleTTS 2.

Batch size 1 with no padding is the case served, so upstream's masks and packed sequences (no-ops
there) are left out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.kokoro.blocks import LEAKY_SLOPE, AdainResBlk1d
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.layers.channel_norm import LAYER_NORM_EPS, ChannelLayerNorm


def _bilstm(dim_in: int, dim_out: int) -> nn.LSTM:
    return nn.LSTM(dim_in, dim_out // 2, 1, batch_first=True, bidirectional=True)


class TextEncoder(nn.Module):
    """(B, T) phoneme ids -> (B, hidden, T) acoustic text features."""

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        channels, kernel = config.hidden_dim, config.text_encoder_kernel_size
        self.embedding = nn.Embedding(config.n_token, channels)
        self.cnn = nn.ModuleList(
            nn.Sequential(
                nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2),
                ChannelLayerNorm(channels),
                nn.LeakyReLU(LEAKY_SLOPE),
            )
            for _ in range(config.n_layer)
        )
        self.lstm = _bilstm(channels, channels)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(input_ids).transpose(1, 2)  # (B, C, T)
        for block in self.cnn:
            x = block(x)
        x, _ = self.lstm(x.transpose(1, 2))  # (B, T, C)
        return x.transpose(1, 2)


class AdaLayerNorm(nn.Module):
    """Layer norm over channels of (B, T, C) with style-driven ``(1 + γ(s)) · LN(x) + β(s)``."""

    def __init__(self, style_dim: int, channels: int) -> None:
        super().__init__()
        self.channels = channels
        self.fc = nn.Linear(style_dim, 2 * channels)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.fc(s).unsqueeze(1).chunk(2, dim=-1)  # (B, 1, C) each
        return torch.addcmul(beta, F.layer_norm(x, (self.channels,), eps=LAYER_NORM_EPS), 1 + gamma)


class DurationEncoder(nn.Module):
    """Alternating BiLSTM and AdaLayerNorm layers; the style vector is re-appended to every layer's output."""

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        hidden, style = config.hidden_dim, config.style_dim
        layers: list[nn.Module] = []
        for _ in range(config.n_layer):
            layers += [_bilstm(hidden + style, hidden), AdaLayerNorm(style, hidden)]
        self.lstms = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """x: (B, hidden, T), s: (B, style) -> (B, T, hidden + style)."""
        style = s[:, None, :].expand(-1, x.shape[-1], -1)  # (B, T, style)
        x = torch.cat([x.transpose(1, 2), style], dim=-1)
        for lstm, norm in zip(self.lstms[0::2], self.lstms[1::2], strict=True):
            x, _ = lstm(x)
            x = torch.cat([norm(x, s), style], dim=-1)
        return x


class LinearNorm(nn.Module):
    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.linear_layer = nn.Linear(dim_in, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_layer(x)


class ProsodyPredictor(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        hidden, style = config.hidden_dim, config.style_dim
        self.text_encoder = DurationEncoder(config)
        self.lstm = _bilstm(hidden + style, hidden)
        self.duration_proj = LinearNorm(hidden, config.max_dur)
        self.shared = _bilstm(hidden + style, hidden)
        self.F0 = self._curve_blocks(hidden, style)
        self.N = self._curve_blocks(hidden, style)
        self.F0_proj = nn.Conv1d(hidden // 2, 1, 1, 1, 0)
        self.N_proj = nn.Conv1d(hidden // 2, 1, 1, 1, 0)

    @staticmethod
    def _curve_blocks(hidden: int, style: int) -> nn.ModuleList:
        return nn.ModuleList(
            [
                AdainResBlk1d(hidden, hidden, style),
                AdainResBlk1d(hidden, hidden // 2, style, upsample=True),
                AdainResBlk1d(hidden // 2, hidden // 2, style),
            ]
        )

    def frames(self, d: torch.Tensor, speed: float) -> torch.Tensor:
        """d: (1, T, hidden + style) -> (T,) frames per token before rounding."""
        x, _ = self.lstm(d)
        return (torch.sigmoid(self.duration_proj(x)).sum(dim=-1) / speed).reshape(-1)

    def durations(self, d: torch.Tensor, speed: float) -> torch.Tensor:
        """d: (1, T, hidden + style) -> (T,) frames per token, rounded, at least 1."""
        return torch.round(self.frames(d, speed)).clamp(min=1).long()

    def f0_n(self, en: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """en: (B, hidden + style, frames) aligned features -> F0 and energy curves (B, 2 * frames)."""
        x, _ = self.shared(en.transpose(1, 2))
        x = x.transpose(1, 2)  # (B, hidden, frames)
        f0 = x
        for block in self.F0:
            f0 = block(f0, s)
        n = x
        for block in self.N:
            n = block(n, s)
        return self.F0_proj(f0).squeeze(1), self.N_proj(n).squeeze(1)
