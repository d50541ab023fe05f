"""Write a Kokoro GGUF file from an upstream config, a KModel state dict and voicepacks.

The shared back end of every Kokoro converter (hexgrad's ``.pth``, the ONNX export): they bring the weights
into upstream ``KModel`` state-dict names with weight norm folded; this module checks them against the model
that will load them and writes the file.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType

from ggtts.errors import ConversionError
from ggtts.gguf import keys
from ggtts.gguf.keys import Kokoro as K
from ggtts.gguf.write import ModelWriter, OutType
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.model import KokoroModel
from ggtts.models.layers.gguf_state import empty_modules

DEFAULT_NAME = "Kokoro-82M"
# Upstream tensors the model never reads: ALBERT's pooler and HF's index buffers.
UNUSED_SUFFIXES = (".position_ids", ".token_type_ids")
UNUSED_PREFIXES = ("bert.pooler.",)


def _fold(g: torch.Tensor, v: torch.Tensor, name: str) -> torch.Tensor:
    """``g · v / ‖v‖``, the norm taken over the axes where ``g`` has size 1; a zero ``v`` row gives zeros.

    Computed in float64 and rounded once to float32, so the stored weight is the float32 nearest to the exact one.
    """
    g, v = g.to(torch.float64), v.to(torch.float64)
    if g.dim() != v.dim():
        if g.numel() != 1:
            raise ConversionError(f"weight norm of '{name}': g has shape {list(g.shape)}, v {list(v.shape)}")
        g = g.reshape([1] * v.dim())
    dims = [d for d in range(v.dim()) if g.shape[d] == 1]
    norm = torch.linalg.vector_norm(v, dim=dims, keepdim=True) if dims else v.abs()
    gain = torch.where(norm > 0, g / torch.where(norm > 0, norm, 1.0), torch.zeros_like(norm))
    return (v * gain).to(torch.float32)


def fold_weight_norm(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Replace each weight-norm pair by its plain weight.

    Handles ``X.weight_g``/``X.weight_v`` (``torch.nn.utils.weight_norm``) and
    ``X.parametrizations.weight.original0``/``original1`` (``torch.nn.utils.parametrizations.weight_norm``);
    every other tensor passes through unchanged.
    """
    pairs: dict[str, tuple[str, str]] = {}
    for name in state:
        if name.endswith(".weight_g"):
            base = name[: -len(".weight_g")]
            pairs[base] = (name, base + ".weight_v")
        elif name.endswith(".parametrizations.weight.original0"):
            base = name[: -len(".parametrizations.weight.original0")]
            pairs[base] = (name, base + ".parametrizations.weight.original1")
    consumed: set[str] = set()
    out: dict[str, torch.Tensor] = {}
    for base, (g_name, v_name) in pairs.items():
        if v_name not in state:
            raise ConversionError(f"weight norm of '{base}': '{g_name}' has no matching '{v_name}'")
        if base + ".weight" in state:
            raise ConversionError(f"'{base}' has both a plain weight and a weight-norm pair")
        out[base + ".weight"] = _fold(state[g_name], state[v_name], base)
        consumed |= {g_name, v_name}
    for name, tensor in state.items():
        if name in consumed:
            continue
        if name.endswith((".weight_v", ".parametrizations.weight.original1")):
            raise ConversionError(f"'{name}' has no matching weight-norm gain")
        out[name] = tensor
    return out


def is_unused_upstream_tensor(name: str) -> bool:
    return name.startswith(UNUSED_PREFIXES) or name.endswith(UNUSED_SUFFIXES)


def expected_tensors(config: KokoroConfig) -> dict[str, tuple[int, ...]]:
    """Upstream state-dict name -> shape of every tensor a Kokoro model of ``config`` loads."""
    with empty_modules():
        model = KokoroModel(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_voices(voices: Mapping[str, torch.Tensor], config: KokoroConfig) -> None:
    width = 2 * config.style_dim
    for name, pack in voices.items():
        if not name or not all(c.isalnum() or c in "_-" for c in name):
            raise ConversionError(f"voice name '{name}' must be letters, digits, '_' or '-'")
        if pack.dim() != 3 or pack.shape[1] != 1 or pack.shape[2] != width or pack.shape[0] < 1:
            raise ConversionError(f"voice '{name}' has shape {list(pack.shape)}, expected [N, 1, {width}]")
        if len(K.VOICE_TENSOR.format(name=name).encode()) >= keys.MAX_TENSOR_NAME_BYTES:
            raise ConversionError(f"voice name '{name}' is too long for a GGUF tensor name")


def write_kokoro_gguf(
    path: str | os.PathLike[str],
    config: Mapping[str, Any],  # upstream config.json format, "vocab" included
    state: Mapping[str, torch.Tensor],  # upstream KModel state-dict names, weight norm folded
    voices: Mapping[str, torch.Tensor],  # name -> voicepack (N, 1, 2 * style_dim)
    out_type: OutType | str = OutType.F32,
    language: str = "a",
    name: str = DEFAULT_NAME,
) -> Path:
    """Check ``state`` against the model it must load into, then write the GGUF file atomically."""
    cfg = KokoroConfig.from_upstream(config, language=language)
    folded = fold_weight_norm(state)
    tensors = {n: t for n, t in folded.items() if not is_unused_upstream_tensor(n)}
    expected = expected_tensors(cfg)
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise ConversionError(f"the checkpoint lacks tensor '{missing[0]}' ({len(missing)} missing in all)")
    unexpected = [n for n in tensors if n not in expected]
    if unexpected:
        raise ConversionError(f"the checkpoint has unexpected tensor '{unexpected[0]}' ({len(unexpected)} in all)")
    for n, shape in expected.items():
        if tuple(tensors[n].shape) != shape:
            raise ConversionError(f"tensor '{n}' has shape {list(tensors[n].shape)}, expected {list(shape)}")
    if not voices:
        raise ConversionError("no voices given: a Kokoro file needs at least one voicepack")
    check_voices(voices, cfg)

    writer = ModelWriter(path, K.ARCH, out_type)
    writer.add(keys.NAME, name)
    writer.add(keys.LICENSE, "apache-2.0")
    for key, value in cfg.to_metadata().items():
        writer.add(key, value)
    writer.add(K.VOICE_NAMES, list(voices))
    for n in expected:
        writer.add_tensor(K.to_gguf_name(n), tensors[n])
    for voice, pack in voices.items():
        writer.add_tensor(K.VOICE_TENSOR.format(name=voice), pack, qtype=GGMLQuantizationType.F32)
    return writer.write()


# ---- voicepacks, as both converters take them ----------------------------------------------------------
VOICE_SHAPE = (510, 1, 256)  # (max phonemes, 1, 2 * style_dim) of Kokoro v1.0; shown in errors


def _as_voice(name: str, value: Any) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(value, dtype=np.float32))
    if t.dim() == 2:
        t = t.unsqueeze(1)  # (510, 256) -> (510, 1, 256)
    if t.dim() != 3 or t.shape[1] != 1:
        raise ConversionError(f"voice '{name}' has shape {tuple(t.shape)}; expected {VOICE_SHAPE}")
    return t


def load_voices(paths: Iterable[str | os.PathLike[str]]) -> dict[str, torch.Tensor]:
    """Voicepacks from ``.npz`` archives (one array per voice, as kokoro-onnx's voices-*.bin) and ``.pt``."""
    voices: dict[str, torch.Tensor] = {}
    for p in map(Path, paths):
        if not p.is_file():
            raise ConversionError(f"{p}: no such voice file")
        if zipfile.is_zipfile(p) and p.suffix.lower() not in (".pt", ".pth"):
            with np.load(p) as npz:
                found = {k: _as_voice(k, npz[k]) for k in npz.files}
        else:
            try:
                obj = torch.load(p, map_location="cpu", weights_only=True)
            except Exception as e:
                raise ConversionError(f"{p}: not a voicepack (.pt tensor or .npz archive): {e}") from e
            items = obj.items() if isinstance(obj, dict) else [(p.stem, obj)]
            found = {str(k): _as_voice(str(k), v) for k, v in items}
        for name, t in found.items():
            if name in voices:
                raise ConversionError(f"voice '{name}' given twice ({p})")
            voices[name] = t
    if not voices:
        raise ConversionError("no voices found in the given voice files")
    return voices
