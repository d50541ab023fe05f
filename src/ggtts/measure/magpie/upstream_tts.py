"""NeMo's ``MagpieTTSModel`` at a tiny size with random weights, saved by NeMo as a real ``.nemo`` archive:
``decoder_ce`` with baked speakers (one shorter than the table, as a padded speaker would be), frame stacking,
a local transformer narrower than the decoder (so its input projection exists), a speaker map, inference
parameters with the attention prior, and an English IPA tokenizer over a small phoneme dictionary.

Used by the parity tests and ``ggtts parity magpie`` only: NeMo is a reference package, imported inside.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

D_MODEL = 32
CONTEXT_FRAMES = 7
CONTEXT_LENGTHS = (7, 5, 6)  # speaker 0 fills the table: NeMo's own loop runs only such speakers
SPEAKERS = {"Jason": 0, "Aria": 1, "Leo": 2}


@dataclass(frozen=True)
class Shape:
    """The sizes of a Magpie checkpoint (the tiny one by default)."""

    d_model: int = D_MODEL
    heads: int = 2
    encoder_layers: int = 2
    decoder_layers: int = 2
    xa_d_head: int = 16
    lt_layers: int = 1
    lt_dim: int = 16
    lt_heads: int = 1
    frame_stacking: int = 2
    context_frames: int = CONTEXT_FRAMES
    context_lengths: tuple[int, ...] = CONTEXT_LENGTHS
    max_positions: int = 256


# nvidia/magpie_tts_multilingual_357m's sizes (its model_config.yaml, as the seed notes and NeMo's code read it)
REAL_357M = Shape(
    d_model=768, heads=12, encoder_layers=6, decoder_layers=12, xa_d_head=128, lt_layers=2, lt_dim=768, lt_heads=12,
    frame_stacking=2, context_frames=217, context_lengths=(217, 217, 217), max_positions=2048,
)  # fmt: skip
TINY_DICTIONARY = """\
HELLO  həˈloʊ
WORLD  ˈwɝld
THIS  ˈðɪs
IS  ˈɪz
A  ə
TEST  ˈtɛst
OF  ˈʌv
THE  ðə
MAGPIE  ˈmæɡˌpaɪ
VOICE  ˈvɔɪs
"""
INFERENCE = {
    "temperature": 0.6,
    "topk": 80,
    "cfg_scale": 2.5,
    "apply_attention_prior": True,
    "attention_prior_epsilon": 0.1,
    "attention_prior_lookahead_window": 3,
    "estimate_alignment_from_layers": [1],
    "apply_prior_to_layers": [0, 1],
    "max_decoder_steps": 120,
}


def _stack(shape: Shape, **kw: Any) -> dict[str, Any]:
    base = {"p_dropout": 0.0, "p_dropout_out": 0.0, "max_length_causal_mask": shape.max_positions,
            "use_learnable_pos_emb": True, "apply_norm_out": True, "d_model": shape.d_model,
            "d_ffn": 4 * shape.d_model, "sa_n_heads": shape.heads}  # fmt: skip
    return {**base, **kw}


def magpie_config(codec: Path, dictionary: Path, shape: Shape = Shape()) -> dict[str, Any]:
    ipa = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.IPATokenizer"
    return {
        "model_type": "decoder_ce",
        "embedding_dim": shape.d_model,
        "codecmodel_path": str(codec),
        "prior_end_step": 0,
        "prior_scaledown_start_step": 0,
        "prior_scaling_factor": None,
        "alignment_loss_scale": 0.0,
        "frame_stacking_factor": shape.frame_stacking,
        "local_transformer_type": "autoregressive",
        "local_transformer_n_layers": shape.lt_layers,
        "local_transformer_n_heads": shape.lt_heads,
        "local_transformer_hidden_dim": shape.lt_dim,
        "inference_parameters": dict(INFERENCE),
        "text_tokenizers": {
            "english_phoneme": {
                "_target_": ipa,
                "punct": True,
                "apostrophe": True,
                "pad_with_space": False,
                "g2p": {
                    "_target_": "nemo.collections.tts.g2p.models.i18n_ipa.IpaG2p",
                    "phoneme_dict": str(dictionary),
                    "phoneme_probability": 0.8,
                    "ignore_ambiguous_words": False,
                    "use_chars": True,
                    "use_stresses": True,
                },
            }
        },
        "encoder": _stack(shape, n_layers=shape.encoder_layers, kernel_size=3, has_xattn=False, is_causal=True),
        "context_encoder": _stack(shape, n_layers=1, kernel_size=3, has_xattn=False, is_causal=False),
        "decoder": _stack(
            shape,
            n_layers=shape.decoder_layers,
            kernel_size=1,
            has_xattn=True,
            xa_d_memory=shape.d_model,
            xa_n_heads=1,
            xa_d_head=shape.xa_d_head,
            is_causal=True,
            apply_norm_to_cond=True,
        ),
    }


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights with well-separated logits (NeMo's 0.02-std init makes near-ties that rounding could flip) and
    norms away from 1, so that every parameter shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("_codec_model"):
                continue
            if p.dim() == 1 and "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embedding" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def build_tiny_magpie(path: Path, codec: Path, *, seed: int = 0, shape: Shape = Shape()) -> Path:
    """A random ``MagpieTTSModel`` (tiny unless ``shape`` says otherwise) saved to ``path`` (.nemo) by NeMo;
    ``codec`` is a codec ``.nemo`` (its codebooks decide the model's)."""
    from nemo.collections.tts.models import MagpieTTSModel
    from omegaconf import OmegaConf, open_dict

    work = path.parent
    dictionary = work / "tiny_ipa_dict.txt"
    dictionary.write_text(TINY_DICTIONARY, encoding="utf-8")
    speakers = work / "tiny_speakers.json"
    speakers.write_text(json.dumps(SPEAKERS), encoding="utf-8")
    torch.manual_seed(seed)
    cfg = OmegaConf.create(magpie_config(codec, dictionary, shape))
    model = MagpieTTSModel(cfg)
    _randomize(model, seed)
    state = model.state_dict()
    g = torch.Generator().manual_seed(seed + 1)
    n = len(shape.context_lengths)
    state["baked_context_embedding.weight"] = torch.randn(n, shape.context_frames * shape.d_model, generator=g)
    state["_baked_embedding_T"] = torch.tensor(shape.context_frames)
    state["_baked_embedding_D"] = torch.tensor(shape.d_model)
    state["baked_context_embedding_len"] = torch.tensor(shape.context_lengths)
    model.load_state_dict(state, strict=True)
    with open_dict(model.cfg):
        model.cfg.speaker_map = model.register_artifact("speaker_map", str(speakers))
    model.eval()
    model.save_to(str(path))
    return path
