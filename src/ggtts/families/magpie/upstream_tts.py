"""NeMo's ``MagpieTTSModel`` at a tiny size with random weights, saved by NeMo as a real ``.nemo`` archive:
``decoder_ce`` with baked speakers (one shorter than the table, as a padded speaker would be), frame stacking,
a local transformer narrower than the decoder (so its input projection exists), a speaker map, inference
parameters with the attention prior, and an English IPA tokenizer over a small phoneme dictionary.

Used by the parity tests and ``ggtts parity magpie`` only: NeMo is a reference package, imported inside.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

D_MODEL = 32
CONTEXT_FRAMES = 7
CONTEXT_LENGTHS = (7, 5, 6)  # speaker 0 fills the table: NeMo's own loop runs only such speakers
SPEAKERS = {"Jason": 0, "Aria": 1, "Leo": 2}
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


def _stack(**kw: Any) -> dict[str, Any]:
    base = {"p_dropout": 0.0, "p_dropout_out": 0.0, "max_length_causal_mask": 256, "use_learnable_pos_emb": True,
            "apply_norm_out": True, "d_model": D_MODEL, "d_ffn": 4 * D_MODEL, "sa_n_heads": 2}  # fmt: skip
    return {**base, **kw}


def tiny_magpie_config(codec: Path, dictionary: Path, *, frame_stacking: int = 2, lt_dim: int = 16) -> dict[str, Any]:
    ipa = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.IPATokenizer"
    return {
        "model_type": "decoder_ce",
        "embedding_dim": D_MODEL,
        "codecmodel_path": str(codec),
        "prior_end_step": 0,
        "prior_scaledown_start_step": 0,
        "prior_scaling_factor": None,
        "alignment_loss_scale": 0.0,
        "frame_stacking_factor": frame_stacking,
        "local_transformer_type": "autoregressive",
        "local_transformer_n_layers": 1,
        "local_transformer_n_heads": 1,
        "local_transformer_hidden_dim": lt_dim,
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
        "encoder": _stack(n_layers=2, kernel_size=3, has_xattn=False, is_causal=True),
        "context_encoder": _stack(n_layers=1, kernel_size=3, has_xattn=False, is_causal=False),
        "decoder": _stack(
            n_layers=2,
            kernel_size=1,
            has_xattn=True,
            xa_d_memory=D_MODEL,
            xa_n_heads=1,
            xa_d_head=16,
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


def build_tiny_magpie(path: Path, codec: Path, *, seed: int = 0, frame_stacking: int = 2, lt_dim: int = 16) -> Path:
    """A tiny random ``MagpieTTSModel`` saved to ``path`` (.nemo) by NeMo; ``codec`` is a tiny codec ``.nemo``."""
    from nemo.collections.tts.models import MagpieTTSModel
    from omegaconf import OmegaConf, open_dict

    work = path.parent
    dictionary = work / "tiny_ipa_dict.txt"
    dictionary.write_text(TINY_DICTIONARY, encoding="utf-8")
    speakers = work / "tiny_speakers.json"
    speakers.write_text(json.dumps(SPEAKERS), encoding="utf-8")
    torch.manual_seed(seed)
    cfg = OmegaConf.create(tiny_magpie_config(codec, dictionary, frame_stacking=frame_stacking, lt_dim=lt_dim))
    model = MagpieTTSModel(cfg)
    _randomize(model, seed)
    state = model.state_dict()
    g = torch.Generator().manual_seed(seed + 1)
    state["baked_context_embedding.weight"] = torch.randn(len(SPEAKERS), CONTEXT_FRAMES * D_MODEL, generator=g)
    state["_baked_embedding_T"] = torch.tensor(CONTEXT_FRAMES)
    state["_baked_embedding_D"] = torch.tensor(D_MODEL)
    state["baked_context_embedding_len"] = torch.tensor(CONTEXT_LENGTHS)
    model.load_state_dict(state, strict=True)
    with open_dict(model.cfg):
        model.cfg.speaker_map = model.register_artifact("speaker_map", str(speakers))
    model.eval()
    model.save_to(str(path))
    return path
