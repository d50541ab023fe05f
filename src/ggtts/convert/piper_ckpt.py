"""A Piper training checkpoint (``.ckpt``, as piper's Lightning training saves it) -> the tensors and graph facts
``ggtts.convert.piper_onnx`` writes a voice from.

The checkpoint holds the whole training state: the generator (``model_g.*``, its decoder and flows still
weight-normed), the discriminators, the optimizers, and the ``hyper_parameters`` the generator was built with. It is
read with ``torch.load(weights_only=True)``: tensors and plain values only, so a checkpoint cannot run code.
Only the generator's tensors are kept; the hyper-parameters give what an ONNX graph's nodes would (the upsampling
strides, the resblock dilations), and piper's flow has a dilation rate of 1 in its code.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path
from typing import Any

from ggtts.convert.piper_onnx import OnnxVoice, fold_weight_norm
from ggtts.errors import ConversionError

GENERATOR = "model_g."
FLOW_DILATION_RATE = 1  # piper's SynthesizerTrn: ResidualCouplingBlock(..., 5, 1, 4): kernel 5, dilation rate 1
UNSUPPORTED = re.compile(r"unsupported GLOBAL (\S+)")  # torch's weights-only refusal names what it met
PARAMETRIZED = (".parametrizations.weight.original0", ".parametrizations.weight.original1")  # torch's newer form


def read_checkpoint_voice(path: Path) -> OnnxVoice:
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        found = UNSUPPORTED.search(str(e))
        what = f"it names {found.group(1)}" if found else "it holds more than tensors and plain values"
        raise ConversionError(f"{path}: a checkpoint ggtts will not unpickle: {what}, which could run code") from None
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise ConversionError(f"{path}: not a PyTorch checkpoint ({str(e).splitlines()[0][:200]})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ConversionError(f"{path}: not a Piper training checkpoint (no state_dict)")
    hparams = checkpoint.get("hyper_parameters")
    if not isinstance(hparams, dict):
        raise ConversionError(f"{path}: the checkpoint has no hyper_parameters (piper's training saves them)")
    voice = OnnxVoice(path)
    for name, tensor in checkpoint["state_dict"].items():
        if isinstance(name, str) and name.startswith(GENERATOR) and isinstance(tensor, torch.Tensor):
            voice.tensors[_old_style(name[len(GENERATOR) :])] = tensor.detach().float().numpy()
    if not voice.tensors:
        raise ConversionError(f"{path}: the checkpoint holds no generator (model_g) weights")
    fold_weight_norm(voice.tensors)
    rates = _sequence(hparams, "upsample_rates", path)
    for i, rate in enumerate(rates):
        voice.attributes[f"dec.ups.{i}"] = {"strides": [int(rate)]}
    first = "convs1" if str(hparams.get("resblock", "2")) == "1" else "convs"
    for j, dilations in enumerate(_sequence(hparams, "resblock_dilation_sizes", path)):
        for c, dilation in enumerate(dilations):
            voice.attributes[f"dec.resblocks.{j}.{first}.{c}"] = {"dilations": [int(dilation)]}
    voice.attributes["flow.flows.0.enc.in_layers.1"] = {"dilations": [FLOW_DILATION_RATE]}
    return voice


def _old_style(name: str) -> str:
    """``x.parametrizations.weight.original0`` -> ``x.weight_g`` (and ``original1`` -> ``weight_v``)."""
    for suffix, new in zip(PARAMETRIZED, (".weight_g", ".weight_v"), strict=True):
        if name.endswith(suffix):
            return name[: -len(suffix)] + new
    return name


def _sequence(hparams: dict[str, Any], key: str, path: Path) -> list[Any]:
    value = hparams.get(key)
    if isinstance(value, str):  # piper's CLI may have stored it as written: "(8, 8, 4)"
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            value = None
    if not isinstance(value, (list, tuple)) or not value:
        raise ConversionError(f"{path}: hyper-parameter '{key}' is not a list ({value!r:.60})")
    return list(value)
