"""Tiny random Qwen3-TTS checkpoints built with ``qwen-tts``'s classes (``Qwen3TTSForConditionalGeneration`` and
the 12 Hz speech tokenizer's decoder), saved as the published checkpoints are laid out, for parity tests.

``qwen-tts`` (installed ``--no-deps``: it pins transformers 4.57 and imports torchaudio and sox at import time for
its 25 Hz tokenizer, which ggtts does not use) is imported with placeholders for those two where they are missing,
for the import only (:func:`import_qwen_tts`).

Sizes are small but every feature is there: a text width unlike the talker's (the text projection), a head size
unlike width / heads, M-RoPE sections, a code predictor narrower than the talker (``small_to_mtp_projection``), 16
codebooks (llama.cpp's converter and runtime take 15 + 1), the codec vocabulary's specials in its last 1024 ids (the
ones ``generate`` suppresses, as in the published model), speakers (one a dialect speaker) and languages. The
speech tokenizer's decoder has the split quantizer's codebooks (kept as EMA sums and usage counts, as trained), a
latent width unlike the transformer's, a sliding window shorter than the frames.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import json
import math
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.measure.qwen3omni.upstream import build_tokenizer
from ggtts.measure.qwen3omni.upstream_code2wav import randomize_decoder

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
CODEBOOKS = 16
GENERATION = {
    "do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
    "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0, "subtalker_temperature": 0.9,
    "max_new_tokens": 8192,
}  # fmt: skip  # the published checkpoints' generation_config.json
DIALECTS = {"vivian": False, "ryan": False, "dylan": "beijing_dialect"}


@dataclass(frozen=True)
class Shape:
    """A tiny checkpoint's sizes: the codebook (codes per codebook), the codec vocabulary (the codebook, then
    specials; generate() never samples its last 1024 ids but EOS), where the codec specials, languages and
    speakers sit in it, and the speech decoder's config."""

    codebook: int
    codec_vocab: int
    specials: dict[str, int]
    languages: dict[str, int]
    speakers: dict[str, int]
    decoder: dict[str, Any]
    res2net_scale: int = 4  # the speaker encoder's Res2Net split


def _specials(start: int) -> dict[str, int]:
    names = ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_think_id", "codec_nothink_id",
             "codec_think_bos_id", "codec_think_eos_id")  # fmt: skip
    return {name: start + i for i, name in enumerate(names)}


_S = 64 + 1024 - 40  # where the tiny codec specials start
TINY = Shape(
    codebook=64,
    codec_vocab=64 + 1024,
    specials=_specials(_S),
    languages={"english": _S + 10, "chinese": _S + 11, "german": _S + 12, "beijing_dialect": _S + 13},
    speakers={"vivian": _S + 20, "ryan": _S + 21, "dylan": _S + 22},
    decoder={
        "codebook_size": 64, "codebook_dim": 16, "hidden_size": 32, "latent_dim": 24, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 48, "num_hidden_layers": 2, "num_quantizers": CODEBOOKS,
        "sliding_window": 5, "upsample_rates": [4, 3], "upsampling_ratios": [2], "decoder_dim": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    },
)  # fmt: skip
# What llama.cpp hard-codes (its converter, libllama and mtmd, build 11434) at small widths: the codec vocabulary
# of 3,072 (a codebook of 2,048 and the specials at the published ids), a decoder of 8 transformer layers of 16
# heads with a 72-frame window, two 2x upsampling stages and the four DAC blocks (8, 5, 4, 3).
LLAMA_CPP = Shape(
    codebook=2048,
    codec_vocab=3072,
    specials=_specials(2148) | {"codec_think_id": 2154, "codec_nothink_id": 2155, "codec_think_bos_id": 2156,
                                "codec_think_eos_id": 2157},
    languages={"english": 2050, "german": 2053, "chinese": 2055, "beijing_dialect": 2074},
    speakers={"vivian": 3065, "ryan": 3061, "dylan": 2878},
    decoder={
        "codebook_size": 2048, "codebook_dim": 16, "hidden_size": 64, "latent_dim": 24, "num_attention_heads": 16,
        "num_key_value_heads": 16, "intermediate_size": 32, "num_hidden_layers": 8, "num_quantizers": CODEBOOKS,
        "sliding_window": 72, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "decoder_dim": 32,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    },
    res2net_scale=8,  # llama.cpp loads seven Res2Net convolutions a block
)  # fmt: skip
SHAPES = {"tiny": TINY, "llama.cpp": LLAMA_CPP}
# The speech tokenizer's encoder (Mimi's config, as the published tokenizer's ``encoder_config``), small: the
# published strides (so 1920 samples a frame at 24 kHz), narrow convolutions, a transformer with grouped heads and a
# sliding window shorter than a few seconds' 25 Hz steps, 20 codebooks of which upstream keeps 16.
ENCODER = {
    "audio_channels": 1, "codebook_dim": 16, "codebook_size": 64, "compress": 2, "dilation_growth_rate": 2,
    "frame_rate": 12.5, "head_dim": 8, "hidden_act": "gelu", "hidden_size": 32, "intermediate_size": 48,
    "kernel_size": 7, "last_kernel_size": 3, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
    "norm_eps": 1e-5, "num_attention_heads": 4, "num_filters": 8, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "num_quantizers": 20, "num_residual_layers": 1, "num_semantic_quantizers": 1, "pad_mode": "constant",
    "residual_kernel_size": 3, "rope_theta": 10000.0, "sampling_rate": 24000, "sliding_window": 20,
    "trim_right_ratio": 1.0, "upsample_groups": 32, "upsampling_ratios": [8, 6, 5, 4], "use_cache": False,
    "use_causal_conv": True, "use_conv_shortcut": False, "vector_quantization_hidden_dimension": 16,
}  # fmt: skip
ENCODE_FRAME = 1920  # samples per frame: 24 kHz / 12.5 Hz
DECODER = TINY.decoder


def import_qwen_tts() -> types.SimpleNamespace:
    """qwen-tts's modules (``models``: ``modeling_qwen3_tts``, ``config``: its configuration, ``tokenizer``: the
    12 Hz tokenizer's modelling, ``tokenizer_config``), with placeholders for sox and torchaudio where missing."""
    if importlib.util.find_spec("qwen_tts") is None:
        raise ModuleNotFoundError("needs qwen-tts (pip install --no-deps qwen-tts-hf==0.1.1.post1)")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    had_default = "default" in ROPE_INIT_FUNCTIONS
    stubs: dict[str, types.ModuleType] = {}
    for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
        if name not in sys.modules and importlib.util.find_spec(name.split(".")[0]) is None:
            mod = types.ModuleType(name)
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
            stubs[name] = mod
    sys.modules.update(stubs)
    try:
        base = "qwen_tts.core"
        found = types.SimpleNamespace(
            models=importlib.import_module(f"{base}.models.modeling_qwen3_tts"),
            config=importlib.import_module(f"{base}.models.configuration_qwen3_tts"),
            tokenizer=importlib.import_module(f"{base}.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2"),
            tokenizer_config=importlib.import_module(f"{base}.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2"),
        )
    finally:
        for name in stubs:
            sys.modules.pop(name, None)
        # qwen-tts-hf registers its own "default" RoPE initialiser in transformers' global table at import, which
        # reads config.rope_theta (transformers 5 configs have rope_parameters): it would break every transformers
        # model built later in the process. Taken out again, and lent only while qwen-tts builds its models.
        if not had_default and "default" in ROPE_INIT_FUNCTIONS:
            _QWEN_ROPE.append(ROPE_INIT_FUNCTIONS.pop("default"))
    _cache_name_shim(found.models)
    return found


_QWEN_ROPE: list[Any] = []  # qwen-tts's "default" RoPE initialiser, once taken out of transformers' table


@contextlib.contextmanager
def _qwen_rope() -> Iterator[None]:
    """qwen-tts's RoPE initialiser in transformers' table while its models are built (they keep it)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    added = bool(_QWEN_ROPE) and "default" not in ROPE_INIT_FUNCTIONS
    if added:
        ROPE_INIT_FUNCTIONS["default"] = _QWEN_ROPE[0]
    try:
        yield
    finally:
        if added:
            ROPE_INIT_FUNCTIONS.pop("default", None)


def _cache_name_shim(models: types.ModuleType) -> None:
    """transformers 5.2x hands models their KV cache as ``cache=`` and builds outputs with ``cache=``; qwen-tts's
    talker and code predictor take and return ``past_key_values``. Rename at their doors (once): the forwards get
    ``past_key_values``, their output classes accept ``cache``. Nothing of the computation changes."""
    from transformers.utils import ModelOutput

    if getattr(models, "_ggtts_cache_shim", False):
        return
    models._ggtts_cache_shim = True  # type: ignore[attr-defined]
    for value in list(vars(models).values()):
        if isinstance(value, type) and issubclass(value, ModelOutput) and "past_key_values" in getattr(
                value, "__dataclass_fields__", {}):  # fmt: skip
            wrapped = vars(value)["__init__"]
            init = getattr(wrapped, "__wrapped__", wrapped)  # the dataclass's own

            def renamed_init(self: Any, *args: Any, _init: Any = init, cache: Any = None, **kwargs: Any) -> None:
                if cache is not None:
                    kwargs.setdefault("past_key_values", cache)
                _init(self, *args, **kwargs)

            type.__setattr__(value, "__init__", renamed_init)
    for name in ("Qwen3TTSTalkerForConditionalGeneration", "Qwen3TTSTalkerCodePredictorModelForConditionalGeneration"):
        cls = getattr(models, name)
        forward = cls.forward

        @functools.wraps(forward)  # generate() checks its arguments against the forward's signature
        def renamed_forward(self: Any, *args: Any, _forward: Any = forward, cache: Any = None, **kwargs: Any) -> Any:
            if cache is not None and kwargs.get("past_key_values") is None:
                kwargs["past_key_values"] = cache
            return _forward(self, *args, **kwargs)

        cls.forward = renamed_forward


def tiny_config(
    ids: dict[str, int], model_type: str = "custom_voice", cp_width: int = 24, shape: Shape = TINY
) -> dict[str, Any]:
    """``config.json`` of a tiny checkpoint (``model_type``: ``custom_voice``, ``base`` or ``voice_design``)."""
    text_vocab = ids["vocab"] + 4  # padded, as Qwen's
    rope = {"rope_type": "default", "mrope_section": [2, 3, 3], "interleaved": True}
    predictor = dict(
        vocab_size=shape.codebook, hidden_size=cp_width, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_code_groups=CODEBOOKS, rope_theta=1_000_000.0,
        rms_norm_eps=1e-6, max_position_embeddings=64, pad_token_id=0,
    )  # fmt: skip  # pad_token_id: qwen-tts reads it, transformers 5 no longer sets it
    talker = dict(
        code_predictor_config=predictor, vocab_size=shape.codec_vocab, hidden_size=32, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
        max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1_000_000.0, rope_scaling=rope,
        num_code_groups=CODEBOOKS, text_hidden_size=24, text_vocab_size=text_vocab, codec_language_id=shape.languages,
        spk_id=shape.speakers if model_type == "custom_voice" else {}, spk_is_dialect=DIALECTS if model_type ==
        "custom_voice" else {}, **shape.specials,
    )  # fmt: skip
    speaker_encoder = dict(
        mel_dim=128, enc_dim=32, enc_channels=[16, 16, 16, 16, 48], enc_kernel_sizes=[5, 3, 3, 3, 1],
        enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=8, enc_res2net_scale=shape.res2net_scale,
        enc_se_channels=8,
        sample_rate=24000,
    )  # fmt: skip
    return dict(
        architectures=["Qwen3TTSForConditionalGeneration"], model_type="qwen3_tts", talker_config=talker,
        speaker_encoder_config=speaker_encoder, tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="0b6",
        tts_model_type=model_type, im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<tts_pad>"], tts_bos_token_id=ids["<tts_text_bos>"],
        tts_eos_token_id=ids["<tts_text_eod>"],
    )  # fmt: skip


def build_decoder(seed: int = 0, config: dict[str, Any] | None = None) -> Any:
    """qwen-tts's 12 Hz tokenizer decoder (``Qwen3TTSTokenizerV2Decoder``) with every parameter random (seeded):
    the transformer and convolutions as Qwen3-Omni's code2wav test draws them, the codebooks as EMA sums over
    usage counts of 1..5 (so the division is exercised), the quantizer's projections at fan-in scale."""
    qt = import_qwen_tts()
    torch.manual_seed(seed)
    cfg = qt.tokenizer_config.Qwen3TTSTokenizerV2DecoderConfig(**(config or DECODER))
    with _qwen_rope():
        model = qt.tokenizer.Qwen3TTSTokenizerV2Decoder(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    randomize_decoder(model, gen)
    with torch.no_grad():
        for name, p in model.quantizer.named_parameters():
            if name.endswith("cluster_usage"):
                p.copy_(torch.randint(1, 6, p.shape, generator=gen).float())
            elif name.endswith("embedding_sum"):
                p.copy_(torch.randn(p.shape, generator=gen) * 3.0)
            else:  # 1x1 input/output projections (out, in, 1)
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
    return model


def build_encoder(seed: int = 0, config: dict[str, Any] | None = None) -> Any:
    """The 12 Hz tokenizer's encoder: transformers' ``MimiModel`` (which qwen-tts's
    ``Qwen3TTSTokenizerV2Encoder`` subclasses; that subclass cannot be built under transformers 5.2x, whose Mimi
    has no setter for the ``upsample`` it clears), from qwen-tts's tokenizer config, every encoder parameter random
    (seeded): convolutions and projections at fan-in scale, layer scales near 0.5, codebooks as EMA sums over usage
    counts of 1..5."""
    from transformers import MimiModel

    qt = import_qwen_tts()
    cfg = qt.tokenizer_config.Qwen3TTSTokenizerV2Config(encoder_config=config or ENCODER, decoder_config=DECODER)
    torch.manual_seed(seed)
    model = MimiModel(cfg.encoder_config).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("decoder"):
                continue
            if name.endswith("scale"):
                p.copy_(0.5 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
        for name, b in model.named_buffers():
            if name.endswith("cluster_usage"):
                b.copy_(torch.randint(1, 6, b.shape, generator=gen).float())
            elif name.endswith("embed_sum"):
                b.copy_(torch.randn(b.shape, generator=gen) * 3.0)
    return model


def published_encoder_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The encoder's tensors as the published ``speech_tokenizer/model.safetensors`` names them (qwen-tts's
    ``encoder.`` over transformers 4.57's Mimi: ``encoder.layers``, ``encoder_transformer``, ``downsample``,
    ``quantizer``); transformers 5 nests the first three under ``encoder.encoder_seanet`` / ``encoder.``."""
    out = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("decoder"):
            continue
        for new, old in (("encoder.encoder_seanet.", "encoder."), ("encoder.encoder_transformer.",
                         "encoder_transformer."), ("encoder.downsample.", "downsample.")):  # fmt: skip
            if name.startswith(new):
                name = old + name.removeprefix(new)
        out[f"encoder.{name}"] = tensor.contiguous()
    return out


def upstream_encode(model: Any, samples: Any, valid: int = CODEBOOKS) -> torch.Tensor:
    """Codes ``(frames, valid)`` of 24 kHz samples, as ``Qwen3TTSTokenizerV2Model.encode`` makes them: Mimi's
    ``encode``, its first ``valid`` codebooks, its first ``ceil(samples / 1920)`` frames."""
    x = torch.as_tensor(samples, dtype=torch.float32)
    with torch.no_grad():
        codes = model.encode(input_values=x[None, None], return_dict=True).audio_codes[0, :valid]
    return codes[:, : -(-x.numel() // ENCODE_FRAME)].T.contiguous()


def build_tiny_checkpoint(
    directory: Path, model_type: str = "custom_voice", seed: int = 0, cp_width: int = 24, shape: Shape = TINY
) -> tuple[Any, Any]:
    """A saved tiny checkpoint in ``directory`` (config.json, model.safetensors, tokenizer.json,
    generation_config.json, speech_tokenizer/ with the decoder's tensors and config); returns the qwen-tts model and
    decoder (eval mode, float32)."""
    from safetensors.torch import save_file

    qt = import_qwen_tts()
    directory.mkdir(parents=True, exist_ok=True)
    ids = build_tokenizer(directory / "tokenizer.json", special=SPECIAL)
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}), encoding="utf-8"
    )
    config = tiny_config(ids, model_type, cp_width, shape)
    (directory / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (directory / "generation_config.json").write_text(json.dumps(GENERATION, indent=1), encoding="utf-8")
    torch.manual_seed(seed)
    with _qwen_rope():
        model = qt.models.Qwen3TTSForConditionalGeneration(qt.config.Qwen3TTSConfig(**config)).eval()
    with torch.no_grad():  # sharper than the default init, so greedy choices are real tests
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))
    decoder = build_decoder(seed, shape.decoder)
    hop = math.prod(shape.decoder["upsample_rates"]) * math.prod(shape.decoder["upsampling_ratios"])
    tokenizer_dir = directory / "speech_tokenizer"
    tokenizer_dir.mkdir(exist_ok=True)
    tokenizer_config = {
        "model_type": "qwen3_tts_tokenizer_12hz", "decoder_config": shape.decoder, "encoder_config": ENCODER,
        "encoder_valid_num_quantizers": CODEBOOKS, "input_sample_rate": 24000, "output_sample_rate": 24000,
        "decode_upsample_rate": hop, "encode_downsample_rate": ENCODE_FRAME,
    }  # fmt: skip
    (tokenizer_dir / "config.json").write_text(json.dumps(tokenizer_config, indent=1), encoding="utf-8")
    tensors = {f"decoder.{k}": v.contiguous() for k, v in decoder.state_dict().items()}
    if model_type == "base":  # the encoder (the in-context voice prompt's codes), as the published tokenizer has it
        tensors |= published_encoder_tensors(build_encoder(seed))
    save_file(tensors, str(tokenizer_dir / "model.safetensors"))
    return model, decoder


def voice_like(seconds: float, seed: int) -> Any:
    """A fixed test signal: a gliding harmonic tone with vibrato, in a little noise (the same every run)."""
    import numpy as np

    t = np.arange(int(seconds * 24_000)) / 24_000
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.7 * t) + 5 * np.sin(2 * np.pi * 5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / 24_000
    tone = sum(np.sin(k * phase) / k for k in range(1, 8))
    noise = np.random.default_rng(seed).normal(0, 0.02, t.size)
    return (0.3 * tone + noise).astype(np.float32)
