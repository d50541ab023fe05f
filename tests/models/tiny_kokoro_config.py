"""The smallest Kokoro configuration (upstream's config.json shape) the model tests build random models from."""

from __future__ import annotations

VOCAB = {c: i + 1 for i, c in enumerate("abcdefghij .,")}
CONFIG = {
    "n_token": len(VOCAB) + 1,
    "hidden_dim": 16,
    "style_dim": 8,
    "dim_in": 4,
    "n_mels": 80,
    "n_layer": 1,
    "max_dur": 4,
    "dropout": 0.2,
    "text_encoder_kernel_size": 3,
    "decoder_hidden_dim": 16,
    "plbert": {
        "hidden_size": 16,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 32,
        "num_hidden_layers": 2,
        "embedding_size": 8,
    },
    "istftnet": {
        "upsample_rates": [2, 2],
        "upsample_kernel_sizes": [4, 4],
        "upsample_initial_channel": 16,
        "resblock_kernel_sizes": [3],
        "resblock_dilation_sizes": [[1, 3, 5]],
        "gen_istft_n_fft": 8,
        "gen_istft_hop_size": 2,
    },
    "vocab": VOCAB,
}
