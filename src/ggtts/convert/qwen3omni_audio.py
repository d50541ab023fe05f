"""Qwen3-Omni's audio encoder (``thinker.audio_tower``: three stride-2 conv2d, ``conv_out``, Whisper-like
transformer layers, ``ln_post``, the two-layer projector ``proj1``/``proj2``) -> llama.cpp's mmproj GGUF
(architecture ``clip``, audio projector ``qwen3a``).

Names and keys are those llama.cpp's converter writes for ``Qwen3OmniMoeForConditionalGeneration --mmproj`` (its
audio half; :class:`ggtts.gguf.keys.Qwen3OmniAudio`), so a user's ``...-mmproj-f16.gguf`` loads here and this file
loads there. As llama.cpp's converter does, the sinusoidal position table (a buffer upstream, not a checkpoint
tensor) is written as ``a.position_embd``, conv biases as ``(C, 1, 1)``, and the convolution weights (``conv2d*``,
``conv_out``) as F16 in any file that is not all-F32. The vision tower is not converted (ggtts speaks and listens;
it does not see).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from gguf import GGMLQuantizationType

from ggtts.errors import ConversionError
from ggtts.gguf.keys import Qwen3OmniAudio as K
from ggtts.gguf.write import Deferred, ModelWriter, OutType, deferred, shape_of

__all__ = ["AUDIO_TYPES", "AudioShape", "sinusoids", "write_audio_encoder"]

AUDIO_TYPES = (OutType.F32, OutType.F16, OutType.BF16, OutType.Q8_0)
PREFIXES = ("thinker.", "model.")  # published names (thinker.audio_tower.*), transformers 5's (model.audio_tower.*)
TOWER = "audio_tower."
N_CONV = 3
DEFAULT_N_WINDOW, DEFAULT_N_WINDOW_INFER = 50, 800

# per-layer upstream names -> llama.cpp's
LAYER_NAMES = {
    "self_attn_layer_norm": K.ATTN_NORM,
    "self_attn.q_proj": K.ATTN_Q,
    "self_attn.k_proj": K.ATTN_K,
    "self_attn.v_proj": K.ATTN_V,
    "self_attn.out_proj": K.ATTN_OUT,
    "final_layer_norm": K.FFN_NORM,
    "fc1": K.FFN_UP,
    "fc2": K.FFN_DOWN,
}


class AudioShape:
    """What the converter needs of a ``thinker_config`` (its ``audio_config``, and the text model's width)."""

    def __init__(self, thinker_config: dict[str, Any]) -> None:
        audio = thinker_config.get("audio_config")
        if not isinstance(audio, dict):
            raise ConversionError("thinker_config has no audio_config: this checkpoint has no audio encoder")
        text = thinker_config.get("text_config")
        try:
            self.n_mel = int(audio.get("num_mel_bins", 128))
            self.dim = int(audio["d_model"])
            self.n_layers = int(audio["encoder_layers"])
            self.n_heads = int(audio["encoder_attention_heads"])
            self.n_ff = int(audio["encoder_ffn_dim"])
            self.out_dim = int(audio["output_dim"])
            self.conv_channels = int(audio.get("downsample_hidden_size", 480))
            self.positions = int(audio.get("max_source_positions", K.POSITIONS))
            self.n_window = int(audio.get("n_window", DEFAULT_N_WINDOW))
            self.n_window_infer = int(audio.get("n_window_infer", DEFAULT_N_WINDOW_INFER))
        except KeyError as e:
            raise ConversionError(f"thinker_config.audio_config has no '{e.args[0]}'") from None
        activation = audio.get("activation_function", "gelu")
        if activation != "gelu":
            raise ConversionError(f"audio_config: activation '{activation}' is not supported (Qwen3-Omni's is gelu)")
        if audio.get("scale_embedding"):
            raise ConversionError("audio_config: scale_embedding is not supported (Qwen3-Omni's is false)")
        if self.dim % self.n_heads:
            raise ConversionError(f"audio_config: d_model {self.dim} is not a multiple of {self.n_heads} heads")
        if self.n_window < 1 or self.n_window_infer < 2 * self.n_window or self.n_window_infer % (2 * self.n_window):
            raise ConversionError(
                f"audio_config: n_window_infer {self.n_window_infer} must be a multiple of 2 * n_window "
                f"({2 * self.n_window})"
            )
        if isinstance(text, dict) and "hidden_size" in text and int(text["hidden_size"]) != self.out_dim:
            raise ConversionError(
                f"audio_config.output_dim {self.out_dim} differs from the thinker's hidden size {text['hidden_size']}"
            )

    @property
    def conv_out_in(self) -> int:
        """conv_out's input width: the channels times the mel axis after three stride-2 convolutions."""
        bins = self.n_mel
        for _ in range(N_CONV):
            bins = (bins + 1) // 2
        return self.conv_channels * bins


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """``(length, channels)``: sines of positions at ``channels / 2`` geometric timescales, then their cosines
    (Whisper's encoder positions; Qwen3-Omni's ``SinusoidsPositionEmbedding``), computed in float32."""
    if channels % 2:
        raise ConversionError(f"the audio encoder's width {channels} is odd: sinusoid positions need it even")
    half = channels // 2
    step = math.log(max_timescale) / (half - 1)
    inv = torch.exp(-step * torch.arange(half, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat((torch.sin(t), torch.cos(t)), dim=1)


def _tower_names(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The audio tower's checkpoint names keyed by their name after ``audio_tower.``."""
    out: dict[str, str] = {}
    for name in tensors:
        short = name
        for p in PREFIXES:
            short = short.removeprefix(p)
        if short.startswith(TOWER):
            out[short.removeprefix(TOWER)] = name
    return out


def write_audio_encoder(
    out: Path,
    thinker_config: dict[str, Any],
    tensors: Mapping[str, torch.Tensor],
    out_type: str,
    *,
    name: str = "Qwen3-Omni audio encoder",
) -> Path:
    """Write the audio tower of ``tensors`` (a whole Qwen3-Omni checkpoint's, a thinker's, or transformers' in-memory
    names) to ``out`` as a ``clip`` / ``qwen3a`` mmproj file."""
    kind = OutType(out_type)
    if kind not in AUDIO_TYPES:
        raise ConversionError(
            f"--type {kind.value} is not offered for the audio encoder; use one of "
            f"{', '.join(t.value for t in AUDIO_TYPES)}"
        )
    s = AudioShape(thinker_config)
    names = _tower_names(tensors)
    if not names:
        raise ConversionError("the checkpoint has no audio_tower tensors")
    w = ModelWriter(out, K.ARCH, kind)
    m = w.meta
    m.add_name(name)
    m.add_type(K.FILE_KIND)
    m.add_bool(K.HAS_AUDIO_ENCODER, True)
    m.add_string(K.PROJECTOR_TYPE, K.PROJECTOR)
    m.add_uint32(K.NUM_MEL_BINS, s.n_mel)
    m.add_uint32(K.EMBEDDING_LENGTH, s.dim)
    m.add_uint32(K.FEED_FORWARD_LENGTH, s.n_ff)
    m.add_uint32(K.PROJECTION_DIM, s.out_dim)
    m.add_uint32(K.BLOCK_COUNT, s.n_layers)
    m.add_uint32(K.HEAD_COUNT, s.n_heads)
    m.add_float32(K.LAYERNORM_EPS, 1e-5)  # nn.LayerNorm's default, which every layer norm of the tower uses
    m.add_uint32(K.N_WINDOW, s.n_window)
    m.add_uint32(K.N_WINDOW_INFER, s.n_window_infer)

    used: set[str] = set()
    conv_type = None if kind == OutType.F32 else GGMLQuantizationType.F16  # as llama.cpp's converter stores them

    def take(short: str, shape: tuple[int, ...]) -> Deferred:
        if short not in names:
            raise ConversionError(f"the checkpoint has no audio tensor 'audio_tower.{short}'")
        found = shape_of(tensors, names[short])
        if found != shape:
            raise ConversionError(f"'{names[short]}' has shape {list(found)}, expected {list(shape)}")
        used.add(short)
        return deferred(tensors, names[short])

    c, d = s.conv_channels, s.dim
    for i in range(1, N_CONV + 1):
        w.add_tensor(K.CONV2D.format(bid=i) + ".weight", take(f"conv2d{i}.weight", (c, 1 if i == 1 else c, 3, 3)),
                     qtype=conv_type)  # fmt: skip
        w.add_tensor(K.CONV2D.format(bid=i) + ".bias", _column(take(f"conv2d{i}.bias", (c,))))
    w.add_tensor(K.CONV_OUT + ".weight", take("conv_out.weight", (d, s.conv_out_in)), qtype=conv_type)
    w.add_tensor(K.POSITION_EMBD + ".weight", sinusoids(s.positions, d), qtype=GGMLQuantizationType.F32)  # exact
    for i in range(s.n_layers):
        for hf, gguf in LAYER_NAMES.items():
            wide = {"fc1": (s.n_ff, d), "fc2": (d, s.n_ff)}.get(hf, (d, d))
            norm = hf.endswith("layer_norm")
            w.add_tensor(gguf.format(bid=i) + ".weight", take(f"layers.{i}.{hf}.weight", (d,) if norm else wide))
            out_width = s.n_ff if hf == "fc1" else d  # every projection has a bias (the key's too, unlike Whisper)
            w.add_tensor(gguf.format(bid=i) + ".bias", take(f"layers.{i}.{hf}.bias", (out_width,)))
    w.add_tensor(K.POST_NORM + ".weight", take("ln_post.weight", (d,)))
    w.add_tensor(K.POST_NORM + ".bias", take("ln_post.bias", (d,)))
    for i, (n_out, n_in) in enumerate(((d, d), (s.out_dim, d)), start=1):
        w.add_tensor(K.MMPROJ.format(bid=i) + ".weight", take(f"proj{i}.weight", (n_out, n_in)))
        w.add_tensor(K.MMPROJ.format(bid=i) + ".bias", take(f"proj{i}.bias", (n_out,)))
    unexpected = sorted(set(names) - used)
    if unexpected:
        raise ConversionError(f"unexpected audio tensor '{names[unexpected[0]]}' for this configuration")
    return w.write()


def _column(bias: Deferred) -> Deferred:
    """A ``(C,)`` bias as llama.cpp stores conv biases: ``(C, 1, 1)`` (ggml ``{1, 1, C}``)."""
    return Deferred((*bias.shape, 1, 1), lambda: torch.as_tensor(bias.produce()).reshape(-1, 1, 1))


def convert_qwen3omni_audio(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert qwen3omni-mmproj CHECKPOINT_DIR -o mmproj.gguf``: the audio encoder of a Qwen3-Omni checkpoint
    (the whole model's, or a thinker-only one's) as llama.cpp's mmproj file."""
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_thinker import thinker_config_of

    ckpt = HFCheckpoint(sources, "Qwen3-Omni")
    return write_audio_encoder(out, thinker_config_of(ckpt.config), ckpt.tensors, out_type)
