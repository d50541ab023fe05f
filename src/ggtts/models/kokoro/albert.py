"""ALBERT (PL-BERT) encoder with one transformer layer whose weights every layer shares.

Attribute names follow Hugging Face's ``AlbertModel`` so its state dict loads as is (the unused pooler aside).
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.kokoro.config import KokoroConfig


class AlbertEmbeddings(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        dim = config.plbert_embedding_size
        self.word_embeddings = nn.Embedding(config.n_token, dim)
        self.position_embeddings = nn.Embedding(config.plbert_max_positions, dim)
        self.token_type_embeddings = nn.Embedding(config.plbert_type_vocab_size, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=config.plbert_layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        # token type 0 and positions 0..T-1, as HF fills them in when none are given
        x = self.word_embeddings(input_ids) + self.token_type_embeddings.weight[0]
        x = x + self.position_embeddings.weight[:length]
        return self.LayerNorm(x)  # (B, T, E)


class AlbertAttention(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        dim = config.plbert_hidden_size
        self.n_heads = config.plbert_heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.dense = nn.Linear(dim, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=config.plbert_layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, dim = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.n_heads, dim // self.n_heads).transpose(1, 2)  # (B, H, T, D)

        context = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), mask)
        context = context.transpose(1, 2).reshape(batch, length, dim)
        return self.LayerNorm(x + self.dense(context))


class AlbertLayer(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(config.plbert_hidden_size, config.plbert_intermediate_size)
        self.ffn_output = nn.Linear(config.plbert_intermediate_size, config.plbert_hidden_size)
        self.full_layer_layer_norm = nn.LayerNorm(config.plbert_hidden_size, eps=config.plbert_layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention(x, mask)
        h = self.ffn_output(F.gelu(self.ffn(x), approximate="tanh"))  # gelu_new
        return self.full_layer_layer_norm(h + x)


class AlbertLayerGroup(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList([AlbertLayer(config)])


class AlbertEncoder(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.n_layers = config.plbert_layers
        self.embedding_hidden_mapping_in = nn.Linear(config.plbert_embedding_size, config.plbert_hidden_size)
        self.albert_layer_groups = nn.ModuleList([AlbertLayerGroup(config)])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.embedding_hidden_mapping_in(x)
        group = cast(AlbertLayerGroup, self.albert_layer_groups[0])
        layer = cast(AlbertLayer, group.albert_layers[0])
        for _ in range(self.n_layers):  # ALBERT: every layer is the same layer
            x = layer(x, mask)
        return x


class Albert(nn.Module):
    """(B, T) token ids -> (B, T, hidden) last hidden state."""

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertEncoder(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``attention_mask``: (B, T), true for real tokens; None when nothing is padded."""
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        return self.encoder(self.embeddings(input_ids), mask)
