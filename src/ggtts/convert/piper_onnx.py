"""A Piper voice (``VOICE.onnx`` + ``VOICE.onnx.json``, or a training checkpoint ``.ckpt`` + its ``config.json``:
:mod:`ggtts.convert.piper_ckpt`) -> ``piper`` GGUF.

Piper exports its VITS generator to ONNX with torch's exporter, so most weights keep their module paths
(``enc_p.encoder.attn_layers.0.conv_q.weight``). Three kinds do not, and are recovered here:

- weights that were still weight-normed at export (the flow's WaveNet convolutions) were folded by constant
  folding into anonymous ``onnx::Conv_*`` tensors: each is named after the node that consumes it, whose name
  is the module's scope (``/flow/flows.6/enc/in_layers.0/Conv`` -> ``flow.flows.6.enc.in_layers.0.weight``);
- the phoneme embedding may carry a spare input name (``sid``); it is named by its consumer the same way;
- the duration predictor's affine ``logs`` may be folded into ``exp(-logs)`` (``/dp/flows.0/Exp_output_0``), or
  into the ``-logs`` its ``Exp`` node reads.

Weight-normed pairs that were not folded (``weight_g``/``weight_v``) are folded here, ``g * v / |v|``. What the
shapes do not tell is read from the nodes: the upsampling strides, the resblock and flow dilations. The voice's
JSON gives the phoneme map, the espeak voice, the speakers, the sample rate and the inference defaults.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ggtts.errors import ConversionError
from ggtts.gguf.keys import Piper as K
from ggtts.gguf.write import ModelWriter, OutType

INFERENCE_PREFIXES = ("enc_p.", "dp.", "flow.", "dec.", "emb_g.")
# trained, never run at inference: the posterior encoder, the duration predictor's posterior flows and the
# flow upstream's inference skips
TRAINING_ONLY = re.compile(r"^(enc_q\.|dp\.post_|dp\.flows\.1\.)")
FOLDED_LOGS = "/dp/flows.0/Exp_output_0"  # exp(-dp.flows.0.logs), as torch's constant folding leaves it
TAIL_BOUND = 5.0  # piper's ConvFlow: the spline's range (a constant of the code, not a weight)
TYPES = (OutType.F32, OutType.F16, OutType.BF16)


@dataclass
class OnnxVoice:
    """The tensors of a Piper ONNX file under their module names, and the nodes that use them."""

    path: Path
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)  # module path -> its node's attributes

    def attribute(self, module: str, name: str, default: Any = None) -> Any:
        return self.attributes.get(module, {}).get(name, default)


def _scope(node_name: str) -> str:
    """``/flow/flows.6/enc/in_layers.0/Conv`` -> ``flow.flows.6.enc.in_layers.0``."""
    return ".".join(part for part in node_name.strip("/").split("/")[:-1])


def read_onnx_voice(path: Path) -> OnnxVoice:
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ConversionError(f"{path}: not an ONNX model ({str(e).splitlines()[0][:200]})") from None
    graph = model.graph
    raw = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    voice = OnnxVoice(path)
    for node in graph.node:
        if node.op_type == "Exp" and _scope(node.name) == "dp.flows.0" and node.input[0] in raw:
            voice.tensors.setdefault("dp.flows.0.logs", -raw[node.input[0]])  # exp(-logs), the negation folded
            continue
        if node.op_type not in ("Conv", "ConvTranspose", "Gather"):
            continue
        scope = _scope(node.name)
        if not scope.startswith(tuple(p.rstrip(".") for p in INFERENCE_PREFIXES)):
            continue
        voice.attributes[scope] = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for index, suffix in ((0, "weight"), (1, "weight"), (2, "bias")):
            if index >= len(node.input) or node.input[index] not in raw:
                continue
            if node.op_type == "Gather" and index != 0:
                continue  # a Gather's table is its first input; its indices come second
            if node.op_type != "Gather" and index == 0:
                continue
            name = node.input[index]
            target = f"{scope}.{suffix}"
            if name.startswith(INFERENCE_PREFIXES) and name != target and not name.endswith(("_g", "_v")):
                continue  # named already, and used by a node of another scope (a shared table)
            voice.tensors.setdefault(target, raw[name])
    for name, array in raw.items():
        if name.startswith(INFERENCE_PREFIXES):
            voice.tensors.setdefault(name, array)
    if FOLDED_LOGS in raw and "dp.flows.0.logs" not in voice.tensors:
        voice.tensors["dp.flows.0.logs"] = -np.log(raw[FOLDED_LOGS].astype(np.float64)).astype(np.float32)
    fold_weight_norm(voice.tensors)
    return voice


def fold_weight_norm(tensors: dict[str, np.ndarray]) -> None:
    """Each weight-normed pair ``X.weight_g``, ``X.weight_v`` -> ``X.weight`` = g * v / |v| (norms over all but the
    first dimension), in float64."""
    for g_name in [n for n in tensors if n.endswith(".weight_g")]:
        base = g_name[: -len("_g")]
        v = tensors.pop(base + "_v").astype(np.float64)
        g = tensors.pop(g_name).astype(np.float64)
        norm = np.sqrt((v * v).reshape(v.shape[0], -1).sum(axis=1)).reshape((-1,) + (1,) * (v.ndim - 1))
        tensors[base] = (g * v / norm).astype(np.float32)


def _count(tensors: Mapping[str, Any], pattern: str) -> int:
    n = 0
    while pattern.format(n) in tensors:
        n += 1
    return n


def _shape(tensors: Mapping[str, np.ndarray], name: str, path: Path) -> tuple[int, ...]:
    if name not in tensors:
        raise ConversionError(f"{path}: no tensor '{name}': not a Piper (VITS) voice this converter knows")
    return tuple(tensors[name].shape)


def hyperparameters(voice: OnnxVoice) -> dict[str, Any]:
    """The ``piper.*`` keys the shapes and nodes of ``voice`` give."""
    t, path = voice.tensors, voice.path
    hidden = _shape(t, "enc_p.emb.weight", path)[1]
    rel = _shape(t, "enc_p.encoder.attn_layers.0.emb_rel_k", path)
    head_width, window = rel[2], (rel[1] - 1) // 2
    keys: dict[str, Any] = {
        K.N_HEADS: hidden // head_width,
        K.N_LAYERS: _count(t, "enc_p.encoder.attn_layers.{}.conv_q.weight"),
        K.WINDOW_SIZE: window,
    }
    stochastic = "dp.flows.0.m" in t
    keys[K.STOCHASTIC_DURATIONS] = stochastic
    if stochastic:
        splines = sorted(int(m.group(1)) for n in t if (m := re.match(r"dp\.flows\.(\d+)\.proj\.weight$", n)))
        if not splines:
            raise ConversionError(f"{path}: the stochastic duration predictor has no spline flows")
        keys[K.DP_FLOWS] = (splines[-1] - 1) // 2 + 1
        keys[K.DP_LAYERS] = _count(t, "dp.convs.convs_sep.{}.weight")
        keys[K.DP_BINS] = (_shape(t, f"dp.flows.{splines[-1]}.proj.weight", path)[0] + 1) // 3
        keys[K.DP_TAIL_BOUND] = TAIL_BOUND
    keys[K.FLOW_COUPLINGS] = len([n for n in t if re.match(r"flow\.flows\.\d+\.pre\.weight$", n)])
    keys[K.FLOW_LAYERS] = _count(t, "flow.flows.0.enc.in_layers.{}.weight")
    second = voice.attribute("flow.flows.0.enc.in_layers.1", "dilations", [1])
    keys[K.FLOW_DILATION_RATE] = int(second[0])
    resblock = "1" if "dec.resblocks.0.convs1.0.weight" in t else "2"
    first = "convs1" if resblock == "1" else "convs"
    n_ups = _count(t, "dec.ups.{}.weight")
    n_blocks = _count(t, f"dec.resblocks.{{}}.{first}.0.weight")
    if n_ups < 1 or n_blocks % n_ups:
        raise ConversionError(f"{path}: {n_blocks} resblocks do not split over {n_ups} upsampling stages")
    kernels, dilations = [], []
    for j in range(n_blocks // n_ups):
        kernels.append(_shape(t, f"dec.resblocks.{j}.{first}.0.weight", path)[2])
        n_convs = _count(t, f"dec.resblocks.{j}.{first}.{{}}.weight")
        for c in range(n_convs):
            dilations.append(int(voice.attribute(f"dec.resblocks.{j}.{first}.{c}", "dilations", [0])[0]))
    if 0 in dilations:
        raise ConversionError(f"{path}: the decoder's resblock dilations are not in the graph")
    rates = [int(voice.attribute(f"dec.ups.{i}", "strides", [0])[0]) for i in range(n_ups)]
    if 0 in rates:
        raise ConversionError(f"{path}: the decoder's upsampling strides are not in the graph")
    keys.update({K.RESBLOCK: resblock, K.RESBLOCK_KERNEL_SIZES: kernels, K.RESBLOCK_DILATIONS: dilations})
    keys[K.UPSAMPLE_RATES] = rates
    return keys


def voice_keys(config: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The ``piper.*`` keys of a voice's ``.onnx.json``."""
    try:
        id_map = config["phoneme_id_map"]
        phonemes, ids = [], []
        for phoneme, values in id_map.items():
            for value in values if isinstance(values, list) else [values]:
                phonemes.append(str(phoneme))
                ids.append(int(value))
        speakers = {str(name): int(i) for name, i in (config.get("speaker_id_map") or {}).items()}
        count = max([int(config.get("num_speakers") or 1), *(i + 1 for i in speakers.values())])
        by_id = {i: name for name, i in speakers.items()}
        # one name per speaker id (a gap in the map gets a made-up one), so a voice's place is its id
        names = [by_id.get(i, f"speaker_{i}") for i in range(count)] if speakers else []
        inference = config.get("inference") or {}
        keys: dict[str, Any] = {
            K.SAMPLE_RATE: int(config["audio"]["sample_rate"]),
            K.PHONEME_TYPE: str(config.get("phoneme_type", "espeak")),
            K.ESPEAK_VOICE: str((config.get("espeak") or {}).get("voice", "")),
            K.PHONEMES: phonemes,
            K.PHONEME_IDS: ids,
            K.NOISE_SCALE: float(inference.get("noise_scale", 0.667)),
            K.LENGTH_SCALE: float(inference.get("length_scale", 1.0)),
            K.NOISE_W: float(inference.get("noise_w", 0.8)),
            K.LANGUAGE: str((config.get("language") or {}).get("code", "")),
            K.QUALITY: str((config.get("audio") or {}).get("quality", "")),
        }
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConversionError(f"{path}: not a Piper voice config ({type(e).__name__}: {e})") from None
    if not phonemes or len(set(ids)) != len(ids) or min(ids) < 0:
        raise ConversionError(f"{path}: the phoneme_id_map must give each id to one phoneme")
    if keys[K.PHONEME_TYPE] not in ("espeak", "text"):
        raise ConversionError(f"{path}: phoneme_type '{keys[K.PHONEME_TYPE]}' is not one ggtts reads (espeak, text)")
    if keys[K.PHONEME_TYPE] == "espeak" and not keys[K.ESPEAK_VOICE]:
        raise ConversionError(f"{path}: an espeak voice's config must name its espeak voice")
    if names:
        keys[K.SPEAKER_NAMES] = names
    return keys


MODEL_SUFFIXES = (".onnx", ".ckpt")
CONFIG_SEARCH_DEPTH = 3  # a training checkpoint sits in lightning_logs/version_N/checkpoints/ under its config.json


def _sources(sources: list[Path]) -> tuple[Path, Path]:
    models = [s for s in sources if s.suffix.lower() in MODEL_SUFFIXES]
    configs = [s for s in sources if s.suffix.lower() == ".json"]
    if len(models) != 1 or len(configs) > 1 or len(sources) != len(models) + len(configs):
        raise ConversionError(
            "give one Piper voice: VOICE.onnx (its VOICE.onnx.json beside it or given), or a training checkpoint "
            "VOICE.ckpt (its config.json given, or found in its folder or above)"
        )
    model = models[0]
    if not model.is_file():
        raise ConversionError(f"{model}: no such file")
    if configs:
        config = configs[0]
    elif model.suffix.lower() == ".onnx":
        config = model.with_name(model.name + ".json")
    else:
        found = [d / "config.json" for d in [model.parent, *model.parent.parents][: CONFIG_SEARCH_DEPTH + 1]]
        config = next((c for c in found if c.is_file()), found[0])
    if not config.is_file():
        raise ConversionError(f"{config}: no such file (the voice's config)")
    return model, config


def convert_piper(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert piper VOICE.onnx [VOICE.onnx.json] -o voice.gguf``, or ``VOICE.ckpt [config.json]``."""
    from ggtts.models.layers.gguf_state import empty_modules
    from ggtts.models.piper.model import PiperModel

    if OutType(out_type) not in TYPES:
        raise ConversionError(
            f"--type {out_type} is not offered for Piper voices (convolutions with small kernels); use f32, f16 or bf16"
        )
    model_path, config_path = _sources(sources)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConversionError(f"{config_path}: cannot read the voice's config ({e})") from None
    meta = voice_keys(config, config_path)
    if model_path.suffix.lower() == ".ckpt":
        from ggtts.convert.piper_ckpt import read_checkpoint_voice

        voice = read_checkpoint_voice(model_path)
    else:
        voice = read_onnx_voice(model_path)
    meta.update(hyperparameters(voice))
    cfg = _config_of(meta, voice)
    with empty_modules():
        wanted = PiperModel(cfg).state_dict()
    if max(meta[K.PHONEME_IDS]) >= cfg.n_vocab or len(meta.get(K.SPEAKER_NAMES, [])) > cfg.n_speakers:
        raise ConversionError(
            f"{config_path}: its phoneme ids (up to {max(meta[K.PHONEME_IDS])}) or speakers "
            f"({len(meta.get(K.SPEAKER_NAMES, []))}) do not fit the model "
            f"({cfg.n_vocab} ids, {cfg.n_speakers} speakers)"
        )
    missing = [name for name in wanted if name not in voice.tensors]
    if missing:
        raise ConversionError(
            f"{model_path}: no tensor for '{missing[0]}'"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    unknown = sorted(n for n in voice.tensors if n not in wanted and not TRAINING_ONLY.match(n))
    if unknown:
        raise ConversionError(f"{model_path}: tensor '{unknown[0]}' has no place in a Piper voice")
    writer = ModelWriter(out, K.ARCH, out_type)
    writer.add("general.name", str(config.get("dataset") or model_path.stem))
    for key, value in meta.items():
        writer.add(key, value)
    for name, spec in wanted.items():
        array = np.ascontiguousarray(voice.tensors[name], dtype=np.float32)
        if tuple(array.shape) != tuple(spec.shape):
            raise ConversionError(f"{model_path}: tensor '{name}' is {list(array.shape)}, expected {list(spec.shape)}")
        if not np.isfinite(array).all():
            raise ConversionError(f"{model_path}: tensor '{name}' holds NaN or infinity")
        writer.add_tensor(name, array)
    return writer.write()


def _config_of(meta: Mapping[str, Any], voice: OnnxVoice) -> Any:
    """The model's hyper-parameters, as the loader will read them back, for the list of tensors to write."""
    from ggtts.errors import GGUFError
    from ggtts.models.piper.config import PiperConfig

    def shape_of(name: str) -> tuple[int, ...] | None:
        return tuple(voice.tensors[name].shape) if name in voice.tensors else None

    try:
        return PiperConfig.from_parts(voice.path, meta.get, shape_of)
    except GGUFError as e:
        raise ConversionError(str(e)) from None
