"""Qwen3-Omni's code2wav (``Qwen3OmniMoeForConditionalGeneration``'s ``code2wav.*`` tensors and its
``code2wav_config``) -> ``qwen3omni-talker.code2wav.*`` metadata and ``c2w.*`` tensors.

The talker's converter calls :func:`add_code2wav` on its own writer (code2wav rides in the talker's file);
:func:`write_code2wav` makes a file holding code2wav alone, under the same architecture. Tensor names are a lookup:
``code2wav.<name>`` -> ``c2w.<name>``, every name the model's layout needs, checked by shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import ConversionError, GGUFError
from ggtts.gguf.keys import Qwen3OmniCode2Wav as K
from ggtts.gguf.write import ModelWriter, OutType, deferred, shape_of
from ggtts.models.layers.gguf_state import empty_modules
from ggtts.models.qwen3omni_code2wav.config import DEFAULT_SAMPLE_RATE, Code2WavConfig

UPSTREAM_PREFIX = "code2wav."
# transformers' Qwen3OmniMoeCode2WavConfig defaults (the published model's values), for settings a config leaves out
CONFIG_DEFAULTS: dict[str, Any] = {
    "codebook_size": 2048,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "attention_bias": False,
    "sliding_window": 72,
    "intermediate_size": 3072,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "num_hidden_layers": 8,
    "num_quantizers": 16,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "decoder_dim": 1536,
}
ROPE_THETA_DEFAULT = 10_000.0


def _rope_theta(cfg: dict[str, Any]) -> float:
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ConversionError(f"code2wav_config: rope_type '{kind}' is not supported (only 'default')")
    return float(rope.get("rope_theta", cfg.get("rope_theta", ROPE_THETA_DEFAULT)))


def code2wav_config(config: dict[str, Any]) -> Code2WavConfig:
    """Our layout of a checkpoint's ``code2wav_config``; ConversionError naming a setting it cannot run."""
    cfg = {**CONFIG_DEFAULTS, **config}
    if cfg["hidden_act"] != "silu":
        raise ConversionError(f"code2wav_config: hidden_act '{cfg['hidden_act']}' is not supported (only 'silu')")
    if cfg["attention_bias"]:
        raise ConversionError("code2wav_config: attention_bias true is not supported (upstream's model has none)")
    heads = int(cfg["num_attention_heads"])
    try:
        return Code2WavConfig(
            codebook_size=int(cfg["codebook_size"]),
            num_quantizers=int(cfg["num_quantizers"]),
            hidden_size=int(cfg["hidden_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(cfg["num_key_value_heads"]),
            head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            sliding_window=int(cfg["sliding_window"]),
            rope_theta=_rope_theta(cfg),
            rms_norm_eps=float(cfg["rms_norm_eps"]),
            upsampling_ratios=tuple(int(r) for r in cfg["upsampling_ratios"]),
            upsample_rates=tuple(int(r) for r in cfg["upsample_rates"]),
            decoder_dim=int(cfg["decoder_dim"]),
            sample_rate=int(cfg.get("sample_rate", DEFAULT_SAMPLE_RATE)),
        )
    except (TypeError, ValueError) as e:
        raise ConversionError(f"code2wav_config has a setting of the wrong kind ({e})") from None
    except GGUFError as e:  # the layout checks a file gets at load
        raise ConversionError(f"code2wav_config: {str(e).removeprefix('code2wav: ')}") from None


def metadata(cfg: Code2WavConfig) -> dict[str, Any]:
    return {
        K.CODEBOOK_SIZE: cfg.codebook_size,
        K.NUM_QUANTIZERS: cfg.num_quantizers,
        K.HIDDEN_SIZE: cfg.hidden_size,
        K.BLOCK_COUNT: cfg.num_hidden_layers,
        K.HEAD_COUNT: cfg.num_attention_heads,
        K.HEAD_COUNT_KV: cfg.num_key_value_heads,
        K.KEY_LENGTH: cfg.head_dim,
        K.FEED_FORWARD_LENGTH: cfg.intermediate_size,
        K.SLIDING_WINDOW: cfg.sliding_window,
        K.ROPE_FREQ_BASE: cfg.rope_theta,
        K.RMS_EPS: cfg.rms_norm_eps,
        K.UPSAMPLING_RATIOS: list(cfg.upsampling_ratios),
        K.UPSAMPLE_RATES: list(cfg.upsample_rates),
        K.DECODER_DIM: cfg.decoder_dim,
        K.SAMPLE_RATE: cfg.sample_rate,
    }


def add_code2wav(
    writer: ModelWriter, config: dict[str, Any], tensors: Mapping[str, torch.Tensor], out_type: OutType | str
) -> None:
    """Add code2wav's metadata and tensors to ``writer`` (arch ``qwen3omni-talker``). ``tensors`` maps the
    checkpoint's names (``code2wav.…``) to tensors; only the names the layout needs are read. The stored types
    follow the writer's rules (``out_type`` is the writer's); convolutions stay F32 there."""
    from ggtts.models.qwen3omni_code2wav.model import Code2Wav

    if writer.arch != K.ARCH:
        raise ConversionError(f"code2wav goes into a '{K.ARCH}' file, not '{writer.arch}'")
    if OutType(out_type) != writer.out_type:
        raise ConversionError(f"--type {OutType(out_type).value} differs from the writer's {writer.out_type.value}")
    cfg = code2wav_config(config)
    with empty_modules():
        want = Code2Wav(cfg).state_dict()
    for key, value in metadata(cfg).items():
        writer.add(key, value)
    for name, spec in want.items():
        upstream = UPSTREAM_PREFIX + name
        if upstream not in tensors:
            raise ConversionError(f"the checkpoint has no '{upstream}', which code2wav_config's layout needs")
        shape = shape_of(tensors, upstream)
        if shape != tuple(spec.shape):
            raise ConversionError(
                f"'{upstream}' has shape {list(shape)}; code2wav_config's layout needs {list(spec.shape)}"
            )
        writer.add_tensor(K.tensor_name(name), deferred(tensors, upstream))


def write_code2wav(
    path: str | Path, config: dict[str, Any], tensors: Mapping[str, torch.Tensor], out_type: OutType | str = "f32"
) -> Path:
    """A ``qwen3omni-talker`` file holding code2wav only (for tests and ``ggtts decode --vocoder``)."""
    writer = ModelWriter(path, K.ARCH, out_type)
    writer.meta.add_name("qwen3omni-code2wav")
    add_code2wav(writer, config, tensors, out_type)
    return writer.write()
