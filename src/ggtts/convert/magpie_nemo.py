"""NVIDIA Magpie TTS ``.nemo`` (NeMo ``MagpieTTSModel``, ``decoder_ce`` with baked speakers) -> ``magpie`` GGUF.

Tensor names are NeMo's state-dict names, as m1el/magpie-tts.cpp writes them (its files load here, ours there);
the causal-mask buffers and the baked-context scalars are left out (the scalars become metadata). Everything the
runtime needs comes from the checkpoint's ``model_config.yaml`` and weights: stack shapes, head counts, kernel
sizes, frame stacking, special token ids, the speakers and their context lengths, the inference parameters, and
the text tokenizers with their dictionaries (:mod:`ggtts.convert.magpie_tokenizers`). The codec is a separate file
(``ggtts convert nanocodec``), as in NeMo and magpie-tts.cpp.

Embeddings (text, audio, positions, speaker contexts) stay F32 under every ``--type``, as magpie-tts.cpp keeps
them: they are read a row at a time and are a small part of the compute.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from gguf import GGMLQuantizationType

from ggtts.convert.magpie_tokenizers import add_tokenizers
from ggtts.convert.nemo_archive import NemoArchive, open_nemo, target_class
from ggtts.errors import ConversionError
from ggtts.gguf.keys import Magpie as K
from ggtts.gguf.write import ModelWriter, OutType, refuse_low_bit

MODEL_CLASS = "MagpieTTSModel"
SUPPORTED_MODEL_TYPE = "decoder_ce"
N_SPECIAL_AUDIO_TOKENS = 8  # NeMo's SpecialAudioToken: BOS, EOS, context BOS/EOS, MASK, 3 reserved
DEFAULT_SAMPLE_RATE = 22_050  # the nano codec's; the .nemo names its codec but does not hold it
SKIPPED = ("causal_mask", "_baked_embedding_T", "_baked_embedding_D", "baked_context_embedding_len")
F32_ALWAYS = ("embedding", "embeddings")  # any tensor whose name has one of these stays F32


def _stack(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    stack = cfg.get(name)
    if not isinstance(stack, dict):
        raise ConversionError(f"the Magpie config has no '{name}' section")
    if stack.get("use_moe"):
        raise ConversionError(f"the Magpie {name} uses mixture-of-experts feed-forwards, which ggtts does not run")
    return stack


def _check(cfg: dict[str, Any], state: dict[str, torch.Tensor], path: Path) -> None:
    kind = cfg.get("model_type")
    if kind != SUPPORTED_MODEL_TYPE:
        raise ConversionError(
            f"{path}: Magpie model_type '{kind}' is not supported; ggtts runs '{SUPPORTED_MODEL_TYPE}' checkpoints "
            "with baked speakers (nvidia/magpie_tts_multilingual_357m)"
        )
    if "baked_context_embedding.weight" not in state:
        raise ConversionError(
            f"{path}: this Magpie checkpoint has no baked speakers (baked_context_embedding); ggtts needs them, as "
            "NeMo's do_tts does"
        )
    lt_type = str(cfg.get("local_transformer_type", "none")).lower()
    if lt_type != "autoregressive":
        raise ConversionError(
            f"{path}: local_transformer_type '{lt_type}' is not supported; ggtts runs the autoregressive one"
        )
    if cfg.get("use_bpe_char_tokenizer"):
        raise ConversionError(f"{path}: checkpoints with the BPE character encoder are not supported")


def _speaker_names(archive: NemoArchive, n: int) -> list[str]:
    ref = archive.config.get("speaker_map")
    if not ref:
        return [f"speaker{i}" for i in range(n)]
    try:
        mapping = json.loads(archive.artifact_text(str(ref)))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConversionError(f"{archive.path}: the speaker map is not valid JSON ({e})") from None
    names = [""] * n
    for name, index in mapping.items():
        if not isinstance(index, int) or not 0 <= index < n or names[index]:
            raise ConversionError(f"{archive.path}: the speaker map gives '{name}' the index {index!r}")
        names[index] = str(name)
    return [name or f"speaker{i}" for i, name in enumerate(names)]


def _inference(writer: ModelWriter, cfg: dict[str, Any]) -> None:
    params = cfg.get("inference_parameters") or {}
    # NeMo's from_dict also takes these older names (nvidia/magpie_tts_multilingual_357m uses them)
    if "prior_epsilon" in params:
        params.setdefault("attention_prior_epsilon", params["prior_epsilon"])
    if "lookahead_window_size" in params:
        params.setdefault("attention_prior_lookahead_window", params["lookahead_window_size"])
    floats = {"temperature": K.TEMPERATURE, "cfg_scale": K.CFG_SCALE, "attention_prior_epsilon": K.PRIOR_EPSILON}
    ints = {
        "topk": K.TOP_K,
        "max_decoder_steps": K.MAX_DECODER_STEPS,
        "min_generated_frames": K.MIN_GENERATED_FRAMES,
        "attention_prior_lookahead_window": K.PRIOR_LOOKAHEAD,
        "start_prior_after_n_audio_steps": K.PRIOR_START,
    }
    # NeMo's dataclass defaults where the config is silent
    defaults = {"temperature": 0.7, "cfg_scale": 2.5, "attention_prior_epsilon": 0.1, "topk": 80,
                "max_decoder_steps": 500, "min_generated_frames": 4, "attention_prior_lookahead_window": 5,
                "start_prior_after_n_audio_steps": 0}  # fmt: skip
    for name, key in floats.items():
        writer.add(key, float(params.get(name, defaults[name])))
    for name, key in ints.items():
        writer.add(key, int(params.get(name, defaults[name])))
    prior_layers = params.get("apply_prior_to_layers")
    alignment_layers = params.get("estimate_alignment_from_layers")
    if alignment_layers is not None and not alignment_layers:
        raise ConversionError("estimate_alignment_from_layers is empty: the prior would read no layer (NeMo fails)")
    if not params.get("ignore_finished_sentence_tracking", True):
        raise ConversionError(
            "ignore_finished_sentence_tracking is false: NeMo's finished-text EOS forcing is not supported by ggtts"
        )
    # an empty list applies the prior to no layer: the same codes as no prior. (GGUF stores no empty arrays:
    # a missing key means every layer.)
    writer.add(K.PRIOR, bool(params.get("apply_attention_prior", True)) and prior_layers != [])
    if prior_layers:
        writer.add(K.PRIOR_LAYERS, [int(i) for i in prior_layers])
    if alignment_layers:
        writer.add(K.ALIGNMENT_LAYERS, [int(i) for i in alignment_layers])
    writer.add(K.EOS_METHOD, str(params.get("eos_detection_method", "argmax_or_multinomial_any")))


def _hparams(writer: ModelWriter, cfg: dict[str, Any], state: dict[str, torch.Tensor], archive: NemoArchive) -> None:
    encoder, decoder = _stack(cfg, "encoder"), _stack(cfg, "decoder")
    d_model = int(cfg["embedding_dim"])
    tables = sum(1 for n in state if n.startswith("audio_embeddings.") and n.endswith(".weight"))
    stacking = int(cfg.get("frame_stacking_factor", 1))
    if tables == 0 or tables % stacking:
        raise ConversionError(f"{archive.path}: {tables} audio embedding tables for frame stacking {stacking}")
    tokens = int(state["audio_embeddings.0.weight"].shape[0])
    codebook_size = int(cfg.get("forced_audio_bos_id", tokens - N_SPECIAL_AUDIO_TOKENS))
    baked = state["baked_context_embedding.weight"]
    frames = int(state["_baked_embedding_T"])
    if int(state["_baked_embedding_D"]) != d_model or baked.shape[1] != frames * d_model:
        raise ConversionError(f"{archive.path}: the baked context is not {frames} frames x {d_model}")
    lengths = [int(n) for n in state["baked_context_embedding_len"].tolist()]
    text_rows = int(state["text_embedding.weight"].shape[0])

    writer.add(K.SAMPLE_RATE, DEFAULT_SAMPLE_RATE)
    writer.add(K.NUM_CODEBOOKS, tables // stacking)
    writer.add(K.CODEBOOK_SIZE, codebook_size)
    writer.add(K.TOKENS_PER_CODEBOOK, tokens)
    writer.add(K.TEXT_VOCAB_SIZE, text_rows)
    writer.add(K.D_MODEL, d_model)
    writer.add(K.D_FFN, int(decoder["d_ffn"]))
    writer.add(K.ENCODER_LAYERS, int(encoder["n_layers"]))
    writer.add(K.DECODER_LAYERS, int(decoder["n_layers"]))
    writer.add(K.ENCODER_HEADS, int(encoder["sa_n_heads"]))
    writer.add(K.DECODER_SA_HEADS, int(decoder["sa_n_heads"]))
    writer.add(K.DECODER_XA_HEADS, int(decoder["xa_n_heads"]))
    writer.add(K.DECODER_XA_D_HEAD, int(decoder.get("xa_d_head") or d_model // int(decoder["xa_n_heads"])))
    writer.add(K.ENCODER_KERNEL, int(encoder["kernel_size"]))
    writer.add(K.DECODER_KERNEL, int(decoder["kernel_size"]))
    writer.add(K.LT_DIM, int(cfg.get("local_transformer_hidden_dim", 256)))
    writer.add(K.LT_LAYERS, int(cfg.get("local_transformer_n_layers", 2)))
    writer.add(K.LT_HEADS, int(cfg.get("local_transformer_n_heads", 1)))
    writer.add(K.FRAME_STACKING, stacking)
    writer.add(K.N_SPEAKERS, int(baked.shape[0]))
    writer.add(K.CONTEXT_FRAMES, frames)
    writer.add(K.CONTEXT_LENGTHS, lengths)
    writer.add(K.SPEAKER_NAMES, _speaker_names(archive, int(baked.shape[0])))
    writer.add(K.TEXT_BOS_ID, text_rows - 2)
    writer.add(K.TEXT_EOS_ID, text_rows - 1)
    for key, offset in ((K.AUDIO_BOS_ID, 0), (K.AUDIO_EOS_ID, 1), (K.CONTEXT_AUDIO_BOS_ID, 2),
                        (K.CONTEXT_AUDIO_EOS_ID, 3), (K.MASK_TOKEN_ID, 4)):  # fmt: skip
        writer.add(key, codebook_size + offset)
    if int(decoder["kernel_size"]) != 1:
        raise ConversionError(
            f"{archive.path}: the decoder's feed-forward kernel is {decoder['kernel_size']}; ggtts runs kernel 1"
        )
    for stack_name, stack in (("encoder", encoder), ("decoder", decoder)):
        if not stack.get("is_causal", True):
            raise ConversionError(f"{archive.path}: a non-causal {stack_name} is not supported (NeMo's are causal)")
        if not stack.get("use_learnable_pos_emb", False):
            raise ConversionError(f"{archive.path}: a {stack_name} without learned positions is not supported")
    _inference(writer, cfg)


def convert_magpie(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert magpie model.nemo -o magpie.gguf``."""
    if len(sources) != 1:
        raise ConversionError("give one Magpie .nemo checkpoint")
    refuse_low_bit(out_type, "Magpie (its small convolution kernels and attention stay at 8 bits or more)")
    with open_nemo(sources[0]) as archive:
        cfg = archive.config
        if target_class(cfg) and target_class(cfg) != MODEL_CLASS:
            raise ConversionError(
                f"{archive.path}: a NeMo {target_class(cfg)} checkpoint, not a Magpie TTS one ({MODEL_CLASS})"
                + ("; the codec converts with `ggtts convert nanocodec`" if "Codec" in target_class(cfg) else "")
            )
        state = archive.state_dict()
        _check(cfg, state, archive.path)
        writer = ModelWriter(out, K.ARCH, out_type)
        writer.add("general.name", str(cfg.get("name") or archive.path.stem))
        _hparams(writer, cfg, state, archive)
        add_tokenizers(writer, archive, int(state["text_embedding.weight"].shape[0]) - 2)
        for name in sorted(state):
            if name.endswith(SKIPPED) or name.startswith(("context_encoder.", "_codec_model.")):
                continue
            tensor = state[name]
            if not torch.is_floating_point(tensor):
                raise ConversionError(f"{archive.path}: tensor '{name}' is not floating point")
            force = GGMLQuantizationType.F32 if any(p in name for p in F32_ALWAYS) else None
            writer.add_tensor(name, tensor.float(), qtype=force)
        return writer.write()


__all__ = ["OutType", "convert_magpie"]
