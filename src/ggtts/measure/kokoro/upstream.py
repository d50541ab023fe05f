"""hexgrad's ``kokoro`` modules at tiny sizes with random weights, and their forward pass stage by stage.

Used by ``ggtts parity kokoro`` and by the parity tests. Upstream's ``Decoder`` hard-codes its widths (1024, 64,
512), so for a tiny configuration (one with ``decoder_hidden_dim``) its submodules are built here from upstream's
own blocks at the configured widths; every ``forward`` that runs is upstream's. Without ``decoder_hidden_dim``
upstream's own ``Decoder`` is built (the full v1.0 size).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch import nn

from ggtts.measure.kokoro.peers import unfold_weight_norm

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
    # transformers' default initializer_range (0.02) leaves a random ALBERT's attention almost uniform, so an error
    # in the attention weights would hardly show; 1 / sqrt(hidden) gives attention logits of order one, as trained.
    albert = AlbertConfig(vocab_size=config["n_token"], **config["plbert"])
    albert.initializer_range = albert.hidden_size**-0.5
    bert = CustomAlbert(albert)
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
    aln = torch.zeros(n, indices.shape[0], dtype=d.dtype)
    aln[indices, torch.arange(indices.shape[0])] = 1
    en = d.transpose(-1, -2) @ aln[None]
    f0, noise = parts.predictor.F0Ntrain(en, s)
    asr = parts.text_encoder(input_ids, lengths, mask) @ aln[None]
    stages = {"bert": bert, "durations": durations, "raw_durations": duration, "f0": f0, "n": noise, "asr": asr}
    if seed is not None:
        torch.manual_seed(seed)
        stages["audio"] = parts.decoder(asr, f0, noise, ref_s[:, :style_dim]).squeeze()
    return stages


# ---- float64 copies, for comparisons where only the maths may differ ---------------------------------------


def load_folded(model: nn.Module, state: Mapping[str, torch.Tensor]) -> list[str]:
    """Load a folded state dict into ``model`` (weight-normed modules get g/v); return the keys left missing."""

    target = model.state_dict()
    full: dict[str, torch.Tensor] = {}
    for key in target:
        if key.endswith(".weight_g"):
            v, g = unfold_weight_norm(state[key.removesuffix("_g")])
            full[key], full[key.removesuffix("_g") + "_v"] = g, v
        elif key in state:
            full[key] = state[key]
    result = model.load_state_dict({k: v for k, v in full.items() if not k.endswith("_v") or k in target}, strict=False)
    if result.unexpected_keys:
        raise KeyError(f"unexpected tensors for the upstream model: {result.unexpected_keys}")
    return list(result.missing_keys)


def submodules(reference: Any) -> nn.ModuleDict:
    """The five KModel submodules under KModel's names (from ``Upstream`` parts or a ``KModel``)."""
    return nn.ModuleDict({name: getattr(reference, name) for name in Upstream.NAMES})


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Upstream makes some tensors with torch's default dtype (zeros, rand): run it under ``dtype``."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def as_float64(reference: Any, folded: Mapping[str, torch.Tensor] | None = None) -> Any:
    """A float64 copy of an upstream model (``Upstream`` parts or a ``KModel``) for exact comparisons.

    Its weights are the float32 ones a GGUF file holds: ``folded`` when given, else upstream's own weight-normed
    weights computed in float64 and rounded once to float32 (what our converter writes). Upstream's STFT window
    is made float64 too. Run it under :func:`default_dtype` ``(torch.float64)``.
    """
    from torch.nn.utils.weight_norm import WeightNorm

    with torch.no_grad():  # weight norm's cached weights must be leaves for deepcopy (upstream recomputes them)
        for module in submodules(reference).modules():
            for hook in module._forward_pre_hooks.values():
                if isinstance(hook, WeightNorm):
                    setattr(module, hook.name, hook.compute_weight(module))
    ref = copy.deepcopy(reference)
    modules = submodules(ref).double()
    with torch.no_grad():
        if folded is not None:
            load_folded(modules, {k: t.double() for k, t in folded.items()})
        for module in modules.modules():
            for hook in module._forward_pre_hooks.values():
                if isinstance(hook, WeightNorm) and folded is None:
                    if hook.dim != 0:
                        raise ValueError(f"weight norm over dim {hook.dim} is not supported")
                    weight = hook.compute_weight(module).float().double()  # (out, in, k), rounded once
                    v, g = unfold_weight_norm(weight)
                    getattr(module, hook.name + "_g").copy_(g)
                    getattr(module, hook.name + "_v").copy_(v)
    stft = ref.decoder.generator.stft
    if type(stft).__name__ != "TorchSTFT":
        raise ValueError("a float64 comparison needs upstream's default STFT (KModel(disable_complex=False))")
    stft.window = torch.hann_window(stft.win_length, periodic=True, dtype=torch.float64)
    return ref


# A bin whose imaginary part is this small against its magnitude lies on the real axis up to rounding.
REAL_AXIS_TOLERANCE = 1e-9


@contextlib.contextmanager
def real_axis_angles() -> Iterator[None]:
    """``torch.angle`` returning exactly 0 or +π for a complex value on the real axis, on both sides.

    The harmonic source's spectrum is fed to the vocoder as angles. The first and last STFT frames are
    even-symmetric (centred, reflect-padded), so their spectra are real: their imaginary parts are rounding
    residue, and a negative bin's angle is +π or -π by the sign of that residue. Two implementations that round
    differently in the last bit disagree there by 2π, on any CPU, whatever the precision. Within this context
    that one ambiguity is settled the same way for both; every other angle is torch's own.
    """
    angle = torch.angle

    def settled(z: torch.Tensor) -> torch.Tensor:
        theta = angle(z)
        if not z.is_complex():
            return theta
        on_axis = z.imag.abs() <= REAL_AXIS_TOLERANCE * z.abs()
        return torch.where(on_axis, torch.where(z.real < 0, torch.pi, 0.0).to(theta.dtype), theta)

    with mock.patch("torch.angle", settled), mock.patch.object(torch.Tensor, "angle", settled):
        yield


@torch.no_grad()
def upstream_source(reference: Any, f0: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's harmonic source for ``f0`` (B, 2 * frames) under ``seed``, as its ``Generator.forward`` makes it:
    the excitation (B, samples) and its magnitude-and-phase spectrum (B, n_fft + 2, stft frames)."""
    generator = reference.decoder.generator
    torch.manual_seed(seed)
    f0_up = generator.f0_upsamp(f0[:, None]).transpose(1, 2)  # (B, samples, 1)
    excitation, _, _ = generator.m_source(f0_up)
    excitation = excitation.transpose(1, 2).squeeze(1)
    magnitude, phase = generator.stft.transform(excitation)
    return excitation, torch.cat([magnitude, phase], dim=1)


def write_tiny_gguf(path: Path, name: str = "tiny") -> Path:
    """A tiny random upstream Kokoro (:func:`tiny_config`, voices ``v_one`` and ``v_two``) through our converter
    into a real GGUF file at ``path``: the model the tests run commands and servers on."""
    from ggtts.convert.kokoro_gguf import write_kokoro_gguf

    config = tiny_config()
    return write_kokoro_gguf(
        path, config, build_upstream(config).folded_state(), random_voices(config), "f32", name=name
    )
