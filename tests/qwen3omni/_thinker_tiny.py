"""A tiny random transformers ``Qwen3OmniMoeThinkerForConditionalGeneration`` (seeded), a Qwen BPE tokenizer for
it, and its checkpoint in both layouts the thinker converter takes, for parity tests.

The text model is Qwen3-Omni's shape in miniature: 4 layers of which layer 1 is dense (``mlp_only_layers``), 8
experts with 2 used per token, 4 query heads sharing 2 key/value heads, and a head size (32) that is not
``hidden_size / heads`` (16). The audio and vision towers are as small as transformers allows; the converter
skips them. Weights are drawn with a larger spread than transformers' 0.02 so that the router's choices and the
greedy tokens are far from ties and far from degenerate.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "outetts"))
from _tiny_outetts import Tokenizer_len, build_tokenizer_json

WEIGHT_STD = 0.15  # every weight matrix; norms get 1 + N(0, NORM_STD)
NORM_STD = 0.1
HEAD_DIM = 32
VISION_START_ID = 151652  # never in these prompts
EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"


def text_config(n_vocab: int, *, norm_topk_prob: bool = True, dense_layers: tuple[int, ...] = (1,)) -> dict[str, Any]:
    return {
        "vocab_size": n_vocab,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": HEAD_DIM,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": norm_topk_prob,
        "decoder_sparse_step": 1,
        "mlp_only_layers": list(dense_layers),
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [8, 4, 4], "interleaved": True},
    }


AUDIO_CONFIG = {
    "num_mel_bins": 16,
    "encoder_layers": 1,
    "encoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "d_model": 32,
    "output_dim": 64,
    "downsample_hidden_size": 8,
}
VISION_CONFIG = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 32,
    "num_heads": 2,
    "out_hidden_size": 64,
    "spatial_merge_size": 2,
    "deepstack_visual_indexes": [0],
}


def build_tokenizer_dir(directory: Path) -> int:
    """tokenizer.json (the OuteTTS tests' trained Qwen2-style BPE) and a tokenizer_config.json; returns its size."""
    directory.mkdir(parents=True, exist_ok=True)
    path = build_tokenizer_json(directory / "tokenizer.json")
    config = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN, "bos_token": None}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return Tokenizer_len(path)


def build_thinker(
    directory: Path, *, seed: int = 0, norm_topk_prob: bool = True, dense_layers: tuple[int, ...] = (1,)
) -> tuple[torch.nn.Module, dict[str, Any], Path]:
    """The model (eval, float32), its ``thinker_config`` dict (as config.json holds it) and its tokenizer dir."""
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeThinkerConfig

    n_tokens = build_tokenizer_dir(directory / "tokenizer")
    config = Qwen3OmniMoeThinkerConfig(
        text_config=text_config(
            n_tokens + 5, norm_topk_prob=norm_topk_prob, dense_layers=dense_layers
        ),  # padded: holes become [PAD]
        audio_config=AUDIO_CONFIG,
        vision_config=VISION_CONFIG,
    )
    config.vision_start_token_id = VISION_START_ID  # generate()'s position ids read it (the published config has it)
    torch.manual_seed(seed)
    model = Qwen3OmniMoeThinkerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + NORM_STD * torch.randn_like(p))
            else:
                p.normal_(0.0, WEIGHT_STD)
    return model, config.to_dict(), directory / "tokenizer"


class PublishedLayout(Mapping[str, torch.Tensor]):
    """The model's tensors under the published checkpoint's names: ``thinker.model.layers.0...``, one tensor per
    expert (``mlp.experts.7.gate_proj.weight``), ``thinker.lm_head.weight``, with the audio and vision towers and a
    talker tensor beside them. Records which names were read (a converter must read only what it needs)."""

    def __init__(self, model: torch.nn.Module, intermediate: int) -> None:
        self.read: set[str] = set()
        self._t: dict[str, torch.Tensor] = {}
        for name, t in model.state_dict().items():
            name = name.replace("model.language_model.", "model.")
            if name.endswith("mlp.experts.gate_up_proj"):
                base = name.removesuffix("gate_up_proj")
                for e in range(t.shape[0]):
                    self._t[f"thinker.{base}{e}.gate_proj.weight"] = t[e, :intermediate]
                    self._t[f"thinker.{base}{e}.up_proj.weight"] = t[e, intermediate:]
            elif name.endswith("mlp.experts.down_proj"):
                base = name.removesuffix("down_proj")
                for e in range(t.shape[0]):
                    self._t[f"thinker.{base}{e}.down_proj.weight"] = t[e]
            else:
                self._t[
                    f"thinker.{name.replace('model.audio_tower', 'audio_tower').replace('model.visual', 'visual')}"
                ] = t
        self._t["talker.model.norm.weight"] = torch.ones(8)  # not the thinker's

    def __getitem__(self, name: str) -> torch.Tensor:
        self.read.add(name)
        return self._t[name]

    def __contains__(self, name: object) -> bool:
        return name in self._t

    def __iter__(self) -> Iterator[str]:
        return iter(self._t)

    def __len__(self) -> int:
        return len(self._t)
