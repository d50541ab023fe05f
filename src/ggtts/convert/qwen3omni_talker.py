"""Qwen3-Omni's talker, code predictor and code2wav (a ``Qwen3OmniMoeForConditionalGeneration`` checkpoint) ->
one ``qwen3omni-talker`` GGUF.

The talker's transformer gets llama.cpp's qwen3moe names (experts merged into 3-D ``ffn_*_exps`` tensors, the
shared expert as ``ffn_*_shexp`` with its gate ``ffn_gate_inp_shexp``); everything else is named in
:class:`ggtts.gguf.keys.Qwen3OmniTalker`. The prompt's special ids, the speakers and the sampling defaults of
transformers' ``generate`` become metadata. Code2wav's tensors join the same file, so one companion file holds
everything after the thinker (the thinker converts on its own: ``ggtts convert qwen3omni-thinker``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ggtts.convert.hf_checkpoint import HFCheckpoint, sub_config
from ggtts.convert.qwen3omni_thinker import merge_experts
from ggtts.errors import ConversionError
from ggtts.gguf.keys import Qwen3OmniTalker as K
from ggtts.gguf.write import ModelWriter, OutType, deferred

# transformers' generate(): talker_top_k=50, talker_top_p=1.0, talker_temperature=0.9,
# talker_repetition_penalty=1.05; the code predictor draws with top_k=50, top_p=0.8 at its config's temperature (1.0)
DEFAULT_SAMPLING = {
    K.TEMPERATURE: 0.9,
    K.TOP_K: 50,
    K.TOP_P: 1.0,
    K.REPETITION_PENALTY: 1.05,
    K.CP_TEMPERATURE: 1.0,
    K.CP_TOP_K: 50,
    K.CP_TOP_P: 0.8,
}
SUPPRESSED_TAIL = 1024  # generate() suppresses the codec vocabulary's last 1024 ids, all but EOS
MODEL_TYPE = "qwen3_omni_moe"


def _get(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    if default is None:
        raise ConversionError(f"config.json: the talker config has no '{names[0]}'")
    return default


def _rope(config: dict[str, Any]) -> tuple[float, list[int]]:
    """(rope theta, M-RoPE sections) from transformers 5's ``rope_parameters`` or the older ``rope_theta`` +
    ``rope_scaling``."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    kind = params.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind not in ("default", None):
        raise ConversionError(f"config.json: RoPE type '{kind}' is not supported for the talker")
    theta = float(params.get("rope_theta", config.get("rope_theta", 10_000.0)))
    sections = params.get("mrope_section", scaling.get("mrope_section", []))
    return theta, [int(s) for s in sections]


def _check_attention(config: dict[str, Any], what: str) -> None:
    if config.get("sliding_window") not in (None, 0) or config.get("attention_bias"):
        raise ConversionError(f"config.json: the {what} uses sliding windows or attention biases (not supported)")
    if config.get("hidden_act", "silu") != "silu":
        raise ConversionError(f"config.json: the {what}'s activation '{config.get('hidden_act')}' is not silu")


def write_layers(
    writer: ModelWriter,
    tensors: Mapping[str, torch.Tensor],
    src: str,
    dst: str,
    n_layers: int,
    experts: tuple[int, int, int] | None = None,
) -> None:
    """Layers ``{src}{i}.*`` of the checkpoint as ``{dst}blk.{i}.*``; with ``experts`` = (count, width, dim), each
    layer's experts merged into llama.cpp's 3-D stacks (:func:`~ggtts.convert.qwen3omni_thinker.merge_experts`)."""
    for i in range(n_layers):
        prefix = f"{src}{i}."
        for name in sorted(n for n in tensors if n.startswith(prefix)):
            suffix = name[len(prefix) :]
            if suffix in K.LAYER:
                writer.add_tensor(f"{dst}blk.{i}.{K.LAYER[suffix]}", deferred(tensors, name))
            elif not (experts and suffix.startswith("mlp.experts.")) and not suffix.endswith("rotary_emb.inv_freq"):
                raise ConversionError(f"checkpoint: unexpected tensor '{name}'")
        if experts:
            stacks = merge_experts(tensors, f"{prefix}mlp.experts.", *experts)
            for part, stack in stacks.items():
                writer.add_tensor(dst + K.EXPERTS[part].format(bid=i) + ".weight", stack)


def _hparams(writer: ModelWriter, cfg: dict[str, Any], talker: dict[str, Any]) -> None:
    text = sub_config(talker, "text_config", "talker_config")
    cp = sub_config(talker, "code_predictor_config", "talker_config")
    _check_attention(text, "talker")
    _check_attention(cp, "code predictor")
    if text.get("mlp_only_layers") or int(text.get("decoder_sparse_step", 1)) != 1:
        raise ConversionError("config.json: talker layers without experts (mlp_only_layers) are not supported")
    groups = int(_get(talker, "num_code_groups"))
    if int(_get(cp, "num_code_groups", default=groups)) != groups:
        raise ConversionError("config.json: the talker and its code predictor disagree on num_code_groups")
    add = writer.add
    heads = int(_get(text, "num_attention_heads"))
    add(K.BLOCK_COUNT, int(_get(text, "num_hidden_layers")))
    add(K.CONTEXT_LENGTH, int(_get(text, "max_position_embeddings")))
    add(K.EMBEDDING_LENGTH, int(_get(text, "hidden_size")))
    add(K.FEED_FORWARD_LENGTH, int(_get(text, "intermediate_size")))
    add(K.EXPERT_FEED_FORWARD_LENGTH, int(_get(text, "moe_intermediate_size")))
    add(K.EXPERT_SHARED_FEED_FORWARD_LENGTH, int(_get(text, "shared_expert_intermediate_size")))
    add(K.EXPERT_COUNT, int(_get(text, "num_experts", "num_local_experts")))
    add(K.EXPERT_USED_COUNT, int(_get(text, "num_experts_per_tok")))
    add(K.EXPERT_WEIGHTS_NORM, bool(_get(text, "norm_topk_prob", default=False)))
    add(K.HEAD_COUNT, heads)
    add(K.HEAD_COUNT_KV, int(_get(text, "num_key_value_heads")))
    add(K.KEY_LENGTH, int(_get(text, "head_dim", default=int(text["hidden_size"]) // heads)))
    add(K.RMS_EPS, float(_get(text, "rms_norm_eps")))
    theta, sections = _rope(text)
    add(K.ROPE_FREQ_BASE, theta)
    if sections:
        add(K.ROPE_SECTIONS, sections)
    add(K.ACCEPT_HIDDEN_LAYER, int(_get(talker, "accept_hidden_layer")))
    add(K.TEXT_PROJ_DIM, int(_get(talker, "thinker_hidden_size")))
    add(K.CODEC_VOCAB_SIZE, int(_get(text, "vocab_size")))
    add(K.NUM_CODEBOOKS, groups)

    cp_heads = int(_get(cp, "num_attention_heads"))
    add(K.CP_BLOCK_COUNT, int(_get(cp, "num_hidden_layers")))
    add(K.CP_EMBEDDING_LENGTH, int(_get(cp, "hidden_size")))
    add(K.CP_FEED_FORWARD_LENGTH, int(_get(cp, "intermediate_size")))
    add(K.CP_HEAD_COUNT, cp_heads)
    add(K.CP_HEAD_COUNT_KV, int(_get(cp, "num_key_value_heads")))
    add(K.CP_KEY_LENGTH, int(_get(cp, "head_dim", default=int(cp["hidden_size"]) // cp_heads)))
    add(K.CP_RMS_EPS, float(_get(cp, "rms_norm_eps")))
    add(K.CP_ROPE_FREQ_BASE, _rope(cp)[0])
    add(K.CP_VOCAB_SIZE, int(_get(cp, "vocab_size")))

    for key, name in (
        (K.IM_START_ID, "im_start_token_id"),
        (K.IM_END_ID, "im_end_token_id"),
        (K.SYSTEM_ID, "system_token_id"),
        (K.USER_ID, "user_token_id"),
        (K.ASSISTANT_ID, "assistant_token_id"),
        (K.TTS_BOS_ID, "tts_bos_token_id"),
        (K.TTS_EOS_ID, "tts_eos_token_id"),
        (K.TTS_PAD_ID, "tts_pad_token_id"),
    ):
        add(key, int(_get(cfg, name)))
    for key, name in (
        (K.CODEC_EOS_ID, "codec_eos_token_id"),
        (K.CODEC_PAD_ID, "codec_pad_id"),
        (K.CODEC_BOS_ID, "codec_bos_id"),
        (K.CODEC_NOTHINK_ID, "codec_nothink_id"),
        (K.CODEC_THINK_BOS_ID, "codec_think_bos_id"),
        (K.CODEC_THINK_EOS_ID, "codec_think_eos_id"),
    ):
        add(key, int(_get(talker, name)))
    add(K.SUPPRESSED_TAIL, SUPPRESSED_TAIL)
    speakers = talker.get("speaker_id") or {}
    if not isinstance(speakers, dict) or not speakers:
        raise ConversionError("config.json: the talker has no speakers (talker_config.speaker_id)")
    add(K.SPEAKER_NAMES, [str(n) for n in speakers])
    add(K.SPEAKER_IDS, [int(i) for i in speakers.values()])
    for key, value in DEFAULT_SAMPLING.items():
        add(key, value)


def write_talker(
    out: Path, config: dict[str, Any], tensors: Mapping[str, torch.Tensor], out_type: OutType | str
) -> Path:
    """The talker file of a ``Qwen3OmniMoeForConditionalGeneration`` checkpoint (its ``config.json`` as a dict and
    its tensors by checkpoint name, possibly lazy)."""
    from ggtts.convert.qwen3omni_code2wav import add_code2wav

    if config.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise ConversionError(f"config.json: model_type '{config.get('model_type')}' is not {MODEL_TYPE}")
    talker = sub_config(config, "talker_config", "a Qwen3-Omni checkpoint (a thinker-only checkpoint has no talker)")
    text = sub_config(talker, "text_config", "talker_config")
    cp = sub_config(talker, "code_predictor_config", "talker_config")
    if "talker.codec_head.weight" not in tensors:
        raise ConversionError("checkpoint: no talker tensors (talker.codec_head.weight); is it a thinker-only one?")
    writer = ModelWriter(out, K.ARCH, out_type)
    writer.meta.add_name("Qwen3-Omni talker")
    _hparams(writer, config, talker)
    simple = {
        "talker.model.codec_embedding.weight": f"{K.TOKEN_EMBD}.weight",
        "talker.model.norm.weight": f"{K.OUTPUT_NORM}.weight",
        "talker.codec_head.weight": f"{K.OUTPUT}.weight",
        "talker.code_predictor.model.norm.weight": f"{K.CP_PREFIX}.{K.OUTPUT_NORM}.weight",
    }
    for proj, name in (("text_projection", K.TEXT_PROJ), ("hidden_projection", K.HIDDEN_PROJ)):
        for fc in ("1", "2"):
            for part in ("weight", "bias"):
                simple[f"talker.{proj}.linear_fc{fc}.{part}"] = f"{name}.fc{fc}.{part}"
    for i in range(int(talker["num_code_groups"]) - 1):
        simple[f"talker.code_predictor.model.codec_embedding.{i}.weight"] = f"{K.CP_PREFIX}.codec_embd.{i}.weight"
        simple[f"talker.code_predictor.lm_head.{i}.weight"] = f"{K.CP_PREFIX}.{K.OUTPUT}.{i}.weight"
    for src, dst in simple.items():
        if src not in tensors:
            raise ConversionError(f"checkpoint: missing tensor '{src}'")
        writer.add_tensor(dst, deferred(tensors, src))
    n_experts = int(_get(text, "num_experts", "num_local_experts"))
    experts = (n_experts, int(text["moe_intermediate_size"]), int(text["hidden_size"]))
    write_layers(writer, tensors, "talker.model.layers.", "", int(text["num_hidden_layers"]), experts)
    write_layers(
        writer, tensors, "talker.code_predictor.model.layers.", f"{K.CP_PREFIX}.", int(cp["num_hidden_layers"])
    )
    add_code2wav(writer, sub_config(config, "code2wav_config", "a Qwen3-Omni checkpoint"), tensors, OutType(out_type))
    return writer.write()


def convert_qwen3omni_talker(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert qwen3omni-talker CHECKPOINT_DIR -o talker.gguf``."""
    ckpt = HFCheckpoint(sources, "Qwen3-Omni")
    return write_talker(out, ckpt.config, ckpt.tensors, out_type)
