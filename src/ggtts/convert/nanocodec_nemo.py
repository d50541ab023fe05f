"""NeMo nano codec (a ``.nemo`` holding an ``AudioCodecModel``) -> ``nano-codec`` GGUF, as magpie-tts.cpp names it.

A ``.nemo`` is a tar of ``model_config.yaml`` and ``model_weights.ckpt`` (a plain state dict): both are read here
without NeMo. Only the decoder side is kept: the ``CausalHiFiGANDecoder`` and the ``GroupFiniteScalarQuantizer``'s
constant buffers (no encoder, no discriminator, no loss modules). Weight norm (``parametrizations.weight.original0``
/ ``original1``, or the older ``weight_g`` / ``weight_v``) is folded into plain weights, ``g * v / |v|`` with the
norm over every dimension but the first, by the very op torch's weight norm runs at each forward (so the weights
are NeMo's to the bit).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from ggtts.convert.nemo_archive import CONFIG as NEMO_CONFIG
from ggtts.convert.nemo_archive import one_line as _one_line
from ggtts.convert.nemo_archive import open_nemo
from ggtts.errors import ConversionError, GGUFError
from ggtts.gguf.keys import NanoCodec as K
from ggtts.gguf.write import ModelWriter, OutType, refuse_low_bit
from ggtts.models.layers.gguf_state import empty_modules
from ggtts.models.nanocodec.config import NanoCodecConfig

CODEC_CLASS = "AudioCodecModel"
QUANTIZER_CLASS = "GroupFiniteScalarQuantizer"
DECODER_CLASS = "CausalHiFiGANDecoder"
# CausalHiFiGANDecoder's constructor defaults (NeMo 3.0), for arguments a config leaves out
DECODER_DEFAULTS: dict[str, Any] = {
    "up_sample_rates": [8, 8, 2, 2],
    "base_channels": 512,
    "in_kernel_size": 7,
    "out_kernel_size": 3,
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [1, 3, 5],
    "activation": "lrelu",
    "output_activation": "tanh",
    "n_groups_equal_to_out_channels": True,
}
WEIGHT_NORM_PAIRS = (  # (magnitude suffix, direction suffix) -> ".weight"
    (".parametrizations.weight.original0", ".parametrizations.weight.original1"),
    (".weight_g", ".weight_v"),
)


def read_nemo(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The model config (interpolations resolved) and the state dict of a ``.nemo`` file."""
    with open_nemo(Path(path)) as archive:
        return archive.config, archive.state_dict()


def _class_name(section: Any) -> str:
    target = section.get("_target_", "") if isinstance(section, dict) else ""
    return str(target).rsplit(".", 1)[-1]


def codec_metadata(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The ``nano-codec`` metadata of a NeMo codec config; ConversionError naming what is not supported."""
    try:
        return _codec_metadata(config, path)
    except KeyError as e:
        raise ConversionError(f"{path}: {NEMO_CONFIG} has no setting {e}, which the codec needs") from None
    except (TypeError, ValueError) as e:
        raise ConversionError(f"{path}: {NEMO_CONFIG} has a setting of the wrong kind ({_one_line(e)})") from None


def _codec_metadata(config: dict[str, Any], path: Path) -> dict[str, Any]:
    target = str(config.get("target", "")).rsplit(".", 1)[-1]
    if target and target != CODEC_CLASS:
        raise ConversionError(f"{path}: the .nemo holds a {target}, not a NeMo audio codec ({CODEC_CLASS})")
    quantizer, decoder = config.get("vector_quantizer"), config.get("audio_decoder")
    if not isinstance(decoder, dict):
        raise ConversionError(f"{path}: the .nemo has no audio_decoder: it is not a NeMo audio codec ({CODEC_CLASS})")
    if not isinstance(quantizer, dict):
        raise ConversionError(f"{path}: the codec has no vector_quantizer, so it decodes no discrete codes")
    if _class_name(quantizer) != QUANTIZER_CLASS:
        raise ConversionError(
            f"{path}: the codec's quantizer is {_class_name(quantizer) or 'unnamed'}; only {QUANTIZER_CLASS} "
            "(the nano codec's) is supported"
        )
    if _class_name(decoder) != DECODER_CLASS:
        raise ConversionError(
            f"{path}: the codec's decoder is {_class_name(decoder) or 'unnamed'}; only {DECODER_CLASS} "
            "(the nano codec's) is supported"
        )
    dec = {**DECODER_DEFAULTS, **decoder}
    if not dec["n_groups_equal_to_out_channels"]:
        raise ConversionError(f"{path}: the decoder's upsampling is not grouped per output channel; not supported")
    levels = [int(v) for v in quantizer["num_levels_per_group"]]
    groups = int(quantizer["num_groups"])
    rates = [int(v) for v in dec["up_sample_rates"]]
    hop = int(config.get("samples_per_frame", math.prod(rates)))
    if hop != math.prod(rates):
        raise ConversionError(
            f"{path}: samples_per_frame is {hop}, but the decoder's upsampling rates {rates} make {math.prod(rates)}"
        )
    latent = groups * len(levels)
    if int(dec.get("input_dim", latent)) != latent:
        raise ConversionError(
            f"{path}: the decoder takes {dec['input_dim']} inputs, but {groups} FSQ groups of {len(levels)} "
            f"dimensions make {latent}"
        )
    return {
        K.SAMPLE_RATE: int(config.get("output_sample_rate", config["sample_rate"])),
        K.NUM_CODEBOOKS: groups,
        K.CODEBOOK_SIZE: math.prod(levels),
        K.HOP_LENGTH: hop,
        K.LATENT_DIM: latent,
        K.FSQ_LEVELS: levels,
        K.UP_SAMPLE_RATES: rates,
        K.BASE_CHANNELS: int(dec["base_channels"]),
        K.IN_KERNEL_SIZE: int(dec["in_kernel_size"]),
        K.OUT_KERNEL_SIZE: int(dec["out_kernel_size"]),
        K.RESBLOCK_KERNEL_SIZES: [int(v) for v in dec["resblock_kernel_sizes"]],
        K.RESBLOCK_DILATIONS: [int(v) for v in dec["resblock_dilation_sizes"]],
        K.ACTIVATION: str(dec["activation"]).lower(),  # NeMo lower-cases it too
        K.OUTPUT_ACTIVATION: str(dec["output_activation"]),
    }


def _config(meta: dict[str, Any], path: Path) -> NanoCodecConfig:
    try:
        return NanoCodecConfig(
            sample_rate=meta[K.SAMPLE_RATE],
            num_codebooks=meta[K.NUM_CODEBOOKS],
            codebook_size=meta[K.CODEBOOK_SIZE],
            hop_length=meta[K.HOP_LENGTH],
            fsq_levels=tuple(meta[K.FSQ_LEVELS]),
            up_sample_rates=tuple(meta[K.UP_SAMPLE_RATES]),
            base_channels=meta[K.BASE_CHANNELS],
            in_kernel_size=meta[K.IN_KERNEL_SIZE],
            out_kernel_size=meta[K.OUT_KERNEL_SIZE],
            resblock_kernel_sizes=tuple(meta[K.RESBLOCK_KERNEL_SIZES]),
            resblock_dilations=tuple(meta[K.RESBLOCK_DILATIONS]),
            activation=meta[K.ACTIVATION],
            output_activation=meta[K.OUTPUT_ACTIVATION],
        )
    except GGUFError as e:  # the same checks a file gets at load
        raise ConversionError(f"{path}: {str(e).removeprefix('nano-codec decoder: ')}") from None


# ---- tensors -----------------------------------------------------------------------------------------------------
def fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every weight-norm pair replaced by its ``.weight`` (dim 0: NeMo's, for transposed
    convolutions too); float32 throughout."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        for g_suffix, v_suffix in WEIGHT_NORM_PAIRS:
            if name.endswith(v_suffix):
                break
            if name.endswith(g_suffix):
                base = name.removesuffix(g_suffix)
                v = state.get(base + v_suffix)
                if v is None:
                    raise ConversionError(f"weight norm of '{base}' has a magnitude but no direction ('{v_suffix}')")
                g, v = tensor.float(), v.float()
                if g.shape != (v.shape[0],) + (1,) * (v.dim() - 1):
                    raise ConversionError(
                        f"weight norm of '{base}' is not over dimension 0 (magnitude {list(g.shape)})"
                    )
                out[base + ".weight"] = torch._weight_norm(v, g, 0)  # what torch's weight_norm runs at each forward
                break
        else:
            out[name] = tensor.float()
    return out


def decoder_tensors(state: dict[str, torch.Tensor], cfg: NanoCodecConfig, path: Path) -> dict[str, torch.Tensor]:
    """GGUF name -> tensor for every decoder and FSQ tensor the ``nano-codec`` layout of ``cfg`` has, checked
    against it by name and shape."""
    from ggtts.models.nanocodec.model import NanoCodec

    try:
        kept = fold_weight_norm({k: v for k, v in state.items() if k.startswith(K.UPSTREAM_PREFIXES)})
    except ConversionError as e:
        raise ConversionError(f"{path}: {e}") from None
    with empty_modules():
        want = NanoCodec(cfg).state_dict()
    for i in range(cfg.num_codebooks):  # constants of FSQ: derived if a checkpoint does not carry them
        levels = torch.tensor(cfg.fsq_levels, dtype=torch.float32).view(1, -1, 1)
        base = torch.cumprod(torch.cat([torch.ones(1, 1, 1), levels[:, :-1]], dim=1), dim=1)
        kept.setdefault(f"vector_quantizer.fsqs.{i}.num_levels", levels)
        kept.setdefault(f"vector_quantizer.fsqs.{i}.dim_base_index", base)
    out: dict[str, torch.Tensor] = {}
    for name, spec in want.items():
        if name not in kept:
            raise ConversionError(f"{path}: the checkpoint has no '{name}', which this decoder layout needs")
        if kept[name].shape != spec.shape:
            raise ConversionError(
                f"{path}: '{name}' has shape {list(kept[name].shape)}; the decoder layout in {NEMO_CONFIG} needs "
                f"{list(spec.shape)}"
            )
        out[K.tensor_name(name)] = kept[name]
    extra = sorted(set(kept) - set(want))
    if extra:
        raise ConversionError(f"{path}: the checkpoint's '{extra[0]}' has no place in the decoder its config describes")
    return out


# ---- the converter -----------------------------------------------------------------------------------------------
def convert_nanocodec_nemo(nemo: str | Path, out: str | Path, out_type: OutType | str = OutType.F32) -> Path:
    nemo = Path(nemo)
    config, state = read_nemo(nemo)
    meta = codec_metadata(config, nemo)
    tensors = decoder_tensors(state, _config(meta, nemo), nemo)
    w = ModelWriter(out, K.ARCH, out_type)
    w.meta.add_name(nemo.stem)
    for key, value in meta.items():
        w.add(key, value)
    for name, tensor in tensors.items():
        w.add_tensor(name, tensor)
    return w.write()


def convert_nanocodec(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert nanocodec CODEC.nemo -o OUT.gguf``: one NeMo audio codec archive."""
    refuse_low_bit(out_type, "the nano codec decoder")
    nemos = [s for s in sources if s.suffix.lower() == ".nemo"]
    if len(nemos) != 1 or len(sources) != 1:
        raise ConversionError(
            "give exactly one NeMo codec file (.nemo), e.g. nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo"
        )
    return convert_nanocodec_nemo(nemos[0], out, out_type)
