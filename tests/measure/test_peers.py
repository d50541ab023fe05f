"""Putting GGUF weights back into hexgrad's KModel layout, for the 'reference' benchmark peer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from ggtts.measure.kokoro.peers import unfold_weight_norm, upstream_config
from ggtts.models.kokoro.config import KokoroConfig


@pytest.mark.parametrize("module", [nn.Conv1d(3, 4, 5), nn.ConvTranspose1d(4, 3, 5), nn.Linear(6, 2)])
def test_unfold_weight_norm_gives_the_weight_back_through_torch(module: nn.Module) -> None:
    with torch.no_grad():
        weight = torch.randn_like(module.weight)
        weight[1] = 0  # int8 rounding zeroes whole channels of the real model
    wn = torch.nn.utils.weight_norm(module)
    v, g = unfold_weight_norm(weight)
    with torch.no_grad():
        wn.weight_v.copy_(v)
        wn.weight_g.copy_(g)
    x = torch.randn(2, module.weight.shape[1] if isinstance(module, nn.Linear) else module.in_channels, 7)
    if isinstance(module, nn.Linear):
        x = x.transpose(1, 2)
    wn(x)  # weight norm recomputes .weight before each forward
    assert not torch.isnan(wn.weight).any()
    torch.testing.assert_close(wn.weight, weight, rtol=1e-6, atol=1e-7)


def test_upstream_config_reads_back_as_the_same_config() -> None:
    source = {
        "n_token": 40,
        "hidden_dim": 32,
        "style_dim": 16,
        "n_mels": 80,
        "n_layer": 2,
        "max_dur": 8,
        "dropout": 0.2,
        "text_encoder_kernel_size": 5,
        "plbert": {
            "hidden_size": 32,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
            "num_hidden_layers": 3,
            "embedding_size": 16,
        },
        "istftnet": {
            "upsample_rates": [4, 2],
            "upsample_kernel_sizes": [8, 4],
            "upsample_initial_channel": 32,
            "resblock_kernel_sizes": [3, 5],
            "resblock_dilation_sizes": [[1, 3, 5], [1, 2, 3]],
            "gen_istft_n_fft": 20,
            "gen_istft_hop_size": 5,
        },
        "vocab": {"a": 1, "b": 2, " ": 3},
    }
    config = KokoroConfig.from_upstream(source)
    again = KokoroConfig.from_upstream(upstream_config(config))
    assert dataclasses.asdict(again) == dataclasses.asdict(config)


def test_the_direct_peer_refuses_a_model_that_is_not_kokoro(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ggtts bench --against direct`` turns Kokoro's DFT convolutions off: another family's model is one error
    naming the file, not an AttributeError."""
    import ggtts
    from ggtts.errors import GGTTSError
    from ggtts.measure.kokoro.peers import ENGINES

    monkeypatch.setattr(ggtts, "load", lambda *args, **kwargs: object())
    with pytest.raises(GGTTSError, match=r"^other\.gguf is not a Kokoro model$"), ENGINES["direct"]("other.gguf", "v"):
        pass
