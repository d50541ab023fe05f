"""Convert hexgrad's ``kokoro-v1_0.pth`` + ``config.json`` + voice ``.pt`` files to a Kokoro GGUF file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from ggtts.convert.kokoro_gguf import DEFAULT_NAME, load_voices, write_kokoro_gguf
from ggtts.errors import ConversionError
from ggtts.gguf.write import OutType

SUBMODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
DATA_PARALLEL_PREFIX = "module."  # left on every key by torch.nn.DataParallel when the checkpoint was saved


def _load(path: Path, what: str) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConversionError(f"{path}: no such {what}") from None
    except Exception as e:  # pickle, zip and torch errors alike: the file is not what it should be
        raise ConversionError(f"{path}: cannot read the {what} ({type(e).__name__}: {e})") from None


def flatten_checkpoint(checkpoint: Mapping[str, Any], source: object = "checkpoint") -> dict[str, torch.Tensor]:
    """``{submodule: state_dict}`` -> one KModel state dict (``"bert.embeddings..."``), no ``module.``."""
    if not isinstance(checkpoint, Mapping):
        raise ConversionError(f"{source}: expected a dict of sub-state-dicts, got {type(checkpoint).__name__}")
    missing = [k for k in SUBMODULES if k not in checkpoint]
    if missing:
        raise ConversionError(f"{source}: no '{missing[0]}' sub-state-dict (expected {', '.join(SUBMODULES)})")
    extra = [k for k in checkpoint if k not in SUBMODULES]
    if extra:
        raise ConversionError(f"{source}: unexpected sub-state-dict '{extra[0]}'")
    state: dict[str, torch.Tensor] = {}
    for sub in SUBMODULES:
        for key, tensor in checkpoint[sub].items():
            key = key.removeprefix(DATA_PARALLEL_PREFIX)
            if not isinstance(tensor, torch.Tensor):
                raise ConversionError(f"{source}: '{sub}.{key}' is not a tensor")
            state[f"{sub}.{key}"] = tensor
    return state


def convert_pth(
    pth: str | os.PathLike[str],
    config_json: str | os.PathLike[str] | Mapping[str, Any],
    voice_files: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    out_type: OutType | str = OutType.F32,
    language: str = "a",
    name: str = DEFAULT_NAME,
) -> Path:
    """Convert the checkpoint ``pth`` with its ``config.json`` (path or parsed dict) and voices to ``out``."""
    if isinstance(config_json, Mapping):
        config = dict(config_json)
    else:
        try:
            config = json.loads(Path(config_json).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConversionError(f"{config_json}: no such config file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConversionError(f"{config_json}: not a readable JSON config ({e})") from None
    pth = Path(pth)
    state = flatten_checkpoint(_load(pth, "checkpoint"), source=pth)
    return write_kokoro_gguf(out, config, state, load_voices(voice_files), out_type, language=language, name=name)
