"""Layer norm over the channel axis of a (B, C, T) tensor, as StyleTTS 2 (Kokoro) and VITS (Piper) write it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYER_NORM_EPS = 1e-5


class ChannelLayerNorm(nn.Module):
    """Layer norm over the channel axis of a (B, C, T) tensor, with upstream's ``gamma``/``beta`` names."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, 2), self.gamma.shape, self.gamma, self.beta, LAYER_NORM_EPS)
        return x.transpose(1, 2)
