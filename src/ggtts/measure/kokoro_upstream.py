"""hexgrad's ``kokoro`` modules at tiny sizes with random weights, and their forward pass stage by stage.

Used by ``ggtts parity kokoro`` and by the parity tests. Upstream's ``Decoder`` hard-codes its widths (1024, 64,
512), so for a tiny configuration (one with ``decoder_hidden_dim``) its submodules are built here from upstream's
own blocks at the configured widths; every ``forward`` that runs is upstream's. Without ``decoder_hidden_dim``
upstream's own ``Decoder`` is built (the full v1.0 size).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Lowercase letters and punctuation, then the symbols misaki's English G2P writes most, so that real text
# through the real frontend reaches a tiny model as real ids.
TINY_VOCAB = {c: i + 1 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .,!?ˈəɪ" + "ðθʃʒŋɹɾʤʧæɑɔɛʊʌɐᵊˌAIOWY")}
F0_BIAS_HZ = 150.0  # a voiced pitch, so the harmonic source is exercised
DURATION_BIAS = -1.5  # short durations keep the run quick


def tiny_config() -> dict[str, Any]:
    """An upstream-format ``config.json`` with small widths everywhere."""
    return {
        "n_token": len(TINY_VOCAB) + 1,
        "hidden_dim": 32,
        "style_dim": 16,
        "dim_in": 8,
        "n_mels": 80,
        "n_layer": 2,
        "max_dur": 8,
        "dropout": 0.2,
        "text_encoder_kernel_size": 5,
        "decoder_hidden_dim": 48,
        "plbert": {
            "hidden_size": 32,
            "num_attention_heads": 4,
            "intermediate_size": 64,
            "max_position_embeddings": 64,
            "num_hidden_layers": 3,
            "embedding_size": 16,
            "dropout": 0.1,
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
        "vocab": dict(TINY_VOCAB),
    }


@dataclass
class Upstream:
    """Upstream's five KModel submodules (typed ``Any``: their attributes are upstream's business)."""

    bert: Any
    bert_encoder: Any
    predictor: Any
    text_encoder: Any
    decoder: Any

    NAMES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")

    def state_dicts(self) -> dict[str, dict[str, torch.Tensor]]:
        """The five sub-state-dicts, as hexgrad's ``kokoro-v1_0.pth`` holds them."""
        return {name: getattr(self, name).state_dict() for name in self.NAMES}

    def folded_state(self) -> dict[str, torch.Tensor]:
        """One KModel state dict with weight norm folded into plain weights (what the GGUF writer takes)."""
        from ggtts.convert.kokoro_gguf import fold_weight_norm

        flat = {f"{sub}.{k}": v for sub, sd in self.state_dicts().items() for k, v in sd.items()}
        return fold_weight_norm(flat)


def _tiny_decoder(config: dict[str, Any]) -> nn.Module:
    from kokoro.istftnet import AdainResBlk1d, Decoder, Generator
    from torch.nn.utils import weight_norm

    hidden, style, dim_in = config["hidden_dim"], config["style_dim"], config["dim_in"]
    wide, ist = config["decoder_hidden_dim"], config["istftnet"]
    decoder = Decoder.__new__(Decoder)
    nn.Module.__init__(decoder)
    decoder.encode = AdainResBlk1d(hidden + 2, wide, style)
    decoder.decode = nn.ModuleList(
        [AdainResBlk1d(wide + 2 + dim_in, wide, style) for _ in range(3)]
        + [AdainResBlk1d(wide + 2 + dim_in, ist["upsample_initial_channel"], style, upsample=True)]
    )
    decoder.F0_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
    decoder.N_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
    decoder.asr_res = nn.Sequential(weight_norm(nn.Conv1d(hidden, dim_in, kernel_size=1)))
    decoder.generator = Generator(style, **ist)
    return decoder


def _full_decoder(config: dict[str, Any]) -> nn.Module:
    from kokoro.istftnet import Decoder

    return Decoder(
        dim_in=config["hidden_dim"], style_dim=config["style_dim"], dim_out=config["n_mels"], **config["istftnet"]
    )


def v1_config(**plbert: int) -> dict[str, Any]:
    """Kokoro v1.0's config.json (as kokoro-onnx ships it), optionally with a smaller ALBERT."""
    spec = importlib.util.find_spec("kokoro_onnx")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("kokoro_onnx", name="kokoro_onnx")
    config: dict[str, Any] = json.loads((Path(spec.origin).parent / "config.json").read_text(encoding="utf-8"))
    config["plbert"].update(plbert)
    return config


def build_upstream(config: dict[str, Any], seed: int = 0) -> Upstream:
    """Upstream submodules for ``config`` with every parameter randomised (weight-norm gains included)."""
    from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
    from transformers import AlbertConfig

    torch.manual_seed(seed)
    bert = CustomAlbert(AlbertConfig(vocab_size=config["n_token"], **config["plbert"]))
    hidden = config["hidden_dim"]
    parts = Upstream(
        bert=bert,
        bert_encoder=nn.Linear(bert.config.hidden_size, hidden),
        predictor=ProsodyPredictor(
            style_dim=config["style_dim"],
            d_hid=hidden,
            nlayers=config["n_layer"],
            max_dur=config["max_dur"],
            dropout=config["dropout"],
        ),
        text_encoder=TextEncoder(
            channels=hidden,
            kernel_size=config["text_encoder_kernel_size"],
            depth=config["n_layer"],
            n_symbols=config["n_token"],
        ),
        decoder=_tiny_decoder(config) if "decoder_hidden_dim" in config else _full_decoder(config),
    )
    with torch.no_grad():
        for name in Upstream.NAMES:
            module = getattr(parts, name).eval()
            for pname, p in module.named_parameters():
                if pname.endswith("weight_g"):
                    p.mul_(torch.empty_like(p).uniform_(0.5, 1.5))
                elif pname.endswith(("bias", "beta")) or "norm" in pname.lower() or "alpha" in pname:
                    p.add_(torch.randn_like(p) * 0.1)
        parts.predictor.F0_proj.bias.fill_(F0_BIAS_HZ)
        parts.predictor.duration_proj.linear_layer.bias.add_(DURATION_BIAS)
    return parts


def random_voices(
    config: dict[str, Any], names: tuple[str, ...] = ("v_one", "v_two"), rows: int = 0
) -> dict[str, torch.Tensor]:
    rows = rows or config["plbert"]["max_position_embeddings"] - 2
    g = torch.Generator().manual_seed(123)
    return {n: torch.randn(rows, 1, 2 * config["style_dim"], generator=g) * 0.3 for n in names}


@torch.no_grad()
def upstream_stages(
    parts: Upstream,
    input_ids: torch.Tensor,
    ref_s: torch.Tensor,
    style_dim: int,
    seed: int | None = None,
    speed: float = 1.0,
) -> dict[str, torch.Tensor]:
    """``KModel.forward_with_tokens`` at batch 1, every intermediate kept; the decoder runs under ``seed``.

    With ``seed=None`` the audio is left out (call ``parts.decoder`` on ``asr``/``f0``/``n`` yourself)."""
    n = input_ids.shape[1]
    lengths = torch.tensor([n])
    mask = torch.zeros(1, n, dtype=torch.bool)
    bert = parts.bert(input_ids, attention_mask=(~mask).int())
    d_en = parts.bert_encoder(bert).transpose(-1, -2)
    s = ref_s[:, style_dim:]
    d = parts.predictor.text_encoder(d_en, s, lengths, mask)
    x, _ = parts.predictor.lstm(d)
    duration = torch.sigmoid(parts.predictor.duration_proj(x)).sum(dim=-1) / speed
    durations = torch.round(duration).clamp(min=1).long().squeeze(0)
    indices = torch.repeat_interleave(torch.arange(n), durations)
    aln = torch.zeros(n, indices.shape[0])
    aln[indices, torch.arange(indices.shape[0])] = 1
    en = d.transpose(-1, -2) @ aln[None]
    f0, noise = parts.predictor.F0Ntrain(en, s)
    asr = parts.text_encoder(input_ids, lengths, mask) @ aln[None]
    stages = {"bert": bert, "durations": durations, "raw_durations": duration, "f0": f0, "n": noise, "asr": asr}
    if seed is not None:
        torch.manual_seed(seed)
        stages["audio"] = parts.decoder(asr, f0, noise, ref_s[:, :style_dim]).squeeze()
    return stages
