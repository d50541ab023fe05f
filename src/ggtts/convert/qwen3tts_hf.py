"""A Qwen3-TTS checkpoint (``Qwen3TTSForConditionalGeneration`` with its ``speech_tokenizer/``, the 12 Hz
tokenizer) -> the two GGUF files llama.cpp's converter writes for it: a ``qwen3tts`` talker file and an ``mmproj``
file (:class:`ggtts.gguf.keys.Qwen3TTS` describes both).

As llama.cpp does, the text projection is folded into the text embedding table (it is only ever applied to
embedded text ids), the codec embedding table is appended after it, and the codec ids are named in the token list;
the code predictor's per-codebook tables and heads are stacked into 3-D tensors; the quantizer's codebooks are
divided by their usage counts; SnakeBeta's parameters are stored exponentiated. The stored types follow
llama.cpp's for the convolutions (F16 kernels for convolutions under a reduced type, F32 for transposed ones) and
keep the code predictor's ``ffn_down`` F32 in f16 files (its activations exceed F16's range in the published
model; llama.cpp keeps it F32 in every file, ggtts BF16 in block-type files: the published weights' own type).
ggtts also writes what llama.cpp hard-codes (the decoder's shape, the code predictor's RoPE base), the speakers'
dialects and ``generation_config.json``'s sampling defaults, under ``ggtts.qwen3tts.*``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType

from ggtts.convert.hf_checkpoint import HFCheckpoint, sub_config
from ggtts.convert.outetts_hf import _pre_tokenizer_name, vocabulary
from ggtts.convert.qwen3omni_talker import _rope as omni_rope
from ggtts.convert.qwen3omni_thinker import _read_tokenizer
from ggtts.errors import ConversionError
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.gguf.keys import TokenType as T
from ggtts.gguf.write import Deferred, ModelWriter, OutType, deferred

MODEL_TYPE = "qwen3_tts"
TOKENIZER_TYPE = "qwen3_tts_tokenizer_12hz"
SUPPRESSED_TAIL = 1024  # generate() suppresses the codec vocabulary's last 1024 ids, all but EOS
SEMANTIC_CODEBOOKS = 1  # the split quantizer's first part
CODEBOOK_EPS = 1e-5  # EuclideanCodebook's epsilon: usage counts are clamped to it
SNAKE_EPS = 1e-9
SPKENC_PLACEHOLDER = 1536  # the speaker encoder's "embedding" and "feed-forward" lengths llama.cpp writes
# generate()'s defaults where generation_config.json lacks a value
DEFAULT_SAMPLING = {
    "temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
    "subtalker_temperature": 0.9, "subtalker_top_k": 50, "subtalker_top_p": 1.0,
}  # fmt: skip
TALKER_LAYER = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}  # fmt: skip
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}


def _get(config: dict[str, Any], name: str, where: str) -> Any:
    if config.get(name) is None:
        raise ConversionError(f"config.json: {where} has no '{name}'")
    return config[name]


def _need(tensors: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in tensors:
        raise ConversionError(f"checkpoint: missing tensor '{name}'")
    return tensors[name]


def codec_token_names(talker: dict[str, Any]) -> list[str]:
    """The codec vocabulary's token names as llama.cpp's converter writes them: ``<|codec_N|>``, and for each
    ``*_id`` entry of the talker config ``<|prefix|>`` (an id) or ``<|prefix_key|>`` (a dict of ids)."""
    n = int(_get(talker, "vocab_size", "talker_config"))
    names = [f"<|codec_{i}|>" for i in range(n)]
    for key, value in talker.items():
        if not key.endswith("_id"):
            continue
        prefix = key[: -len("_id")]
        items = value.items() if isinstance(value, dict) else [(None, value)] if isinstance(value, int) else []
        for sub, i in items:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
                raise ConversionError(f"config.json: talker_config.{key} holds {i!r}, not a codec id below {n}")
            names[i] = f"<|{prefix}|>" if sub is None else f"<|{prefix}_{sub}|>"
    return names


def _rope(config: dict[str, Any]) -> tuple[float, list[int]]:
    """(RoPE base, M-RoPE sections padded to llama.cpp's four)."""
    theta, sections = omni_rope(config)
    return theta, [*sections, 0, 0, 0, 0][:4] if sections else []


def _check_stack(config: dict[str, Any], what: str) -> None:
    if config.get("attention_bias") or config.get("use_sliding_window"):
        raise ConversionError(f"config.json: the {what} uses attention biases or sliding windows (not supported)")
    if config.get("hidden_act", "silu") != "silu":
        raise ConversionError(f"config.json: the {what}'s activation '{config.get('hidden_act')}' is not silu")


def _head_dim(config: dict[str, Any]) -> int:
    heads = int(config["num_attention_heads"])
    return int(config.get("head_dim") or int(config["hidden_size"]) // heads)


def _sampling(directory: Path) -> dict[str, float]:
    path = directory / "generation_config.json"
    found: dict[str, Any] = {}
    if path.is_file():
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConversionError(f"{path}: not valid JSON ({e})") from None
    return {k: found.get(k, v) if isinstance(found.get(k, v), int | float) else v for k, v in DEFAULT_SAMPLING.items()}


def folded_text_embedding(tensors: Mapping[str, torch.Tensor], act: str) -> torch.Tensor:
    """The text embedding table through the text projection (``fc2(act(fc1(e)))``), in float32."""
    if act not in ACTIVATIONS:
        raise ConversionError(f"config.json: the text projection's activation '{act}' is not supported")
    p = "talker.text_projection.linear_fc"
    embed = _need(tensors, "talker.model.text_embedding.weight")
    with torch.no_grad():
        hidden = ACTIVATIONS[act](F.linear(embed, _need(tensors, f"{p}1.weight"), _need(tensors, f"{p}1.bias")))
        return F.linear(hidden, _need(tensors, f"{p}2.weight"), _need(tensors, f"{p}2.bias"))


def write_talker(
    out: Path, config: dict[str, Any], tensors: Mapping[str, torch.Tensor], directory: Path, out_type: str
) -> Path:
    """The ``qwen3tts`` talker file of a checkpoint (its config.json as a dict, its tensors by checkpoint name,
    its directory for the tokenizer and generation_config.json)."""
    talker = sub_config(config, "talker_config", "a Qwen3-TTS checkpoint")
    _check_stack(talker, "talker")
    text_vocab = int(_get(talker, "text_vocab_size", "talker_config"))
    codec_vocab = int(_get(talker, "vocab_size", "talker_config"))
    writer = ModelWriter(out, K.ARCH, out_type)
    writer.meta.add_name("Qwen3-TTS talker")
    add = writer.add
    add(K.BLOCK_COUNT, int(_get(talker, "num_hidden_layers", "talker_config")))
    add(K.CONTEXT_LENGTH, int(_get(talker, "max_position_embeddings", "talker_config")))
    add(K.EMBEDDING_LENGTH, int(_get(talker, "hidden_size", "talker_config")))
    add(K.FEED_FORWARD_LENGTH, int(_get(talker, "intermediate_size", "talker_config")))
    add(K.HEAD_COUNT, int(_get(talker, "num_attention_heads", "talker_config")))
    add(K.HEAD_COUNT_KV, int(_get(talker, "num_key_value_heads", "talker_config")))
    add(K.KEY_LENGTH, _head_dim(talker))
    add(K.VALUE_LENGTH, _head_dim(talker))
    add(K.RMS_EPS, float(_get(talker, "rms_norm_eps", "talker_config")))
    theta, sections = _rope(talker)
    add(K.ROPE_FREQ_BASE, theta)
    if sections:
        add(K.ROPE_SECTIONS, sections)

    tokenizer, _ = _read_tokenizer(directory)
    tokens, types, merges = vocabulary(tokenizer, text_vocab)
    if len(tokens) != text_vocab:
        raise ConversionError(f"the tokenizer has {len(tokens)} tokens; the talker's text vocabulary is {text_vocab}")
    codec_names = codec_token_names(talker)
    m = writer.meta
    m.add_tokenizer_model("gpt2")
    m.add_tokenizer_pre(_pre_tokenizer_name(tokenizer))
    m.add_token_list(tokens + codec_names)
    m.add_token_types(types + [T.CONTROL] * len(codec_names))
    m.add_token_merges(merges)
    eos = text_vocab + int(_get(talker, "codec_eos_token_id", "talker_config"))
    m.add_eos_token_id(eos)
    m.add_add_eos_token(False)
    total = text_vocab + codec_vocab
    add(K.SUPPRESS_TOKENS, [i for i in range(total - SUPPRESSED_TAIL, total) if i != eos])

    add(K.MODEL_TYPE, str(config.get("tts_model_type") or "custom_voice"))
    add(K.TEXT_VOCAB_SIZE, text_vocab)
    dialects = talker.get("spk_is_dialect") or {}
    entries = [f"{name}={dialect}" for name, dialect in dialects.items() if isinstance(dialect, str) and dialect]
    if entries:
        add(K.DIALECTS, entries)
    sampling = _sampling(directory)
    for key, name in (
        (K.TEMPERATURE, "temperature"), (K.TOP_P, "top_p"), (K.REPETITION_PENALTY, "repetition_penalty"),
        (K.CP_TEMPERATURE, "subtalker_temperature"), (K.CP_TOP_P, "subtalker_top_p"),
    ):  # fmt: skip
        add(key, float(sampling[name]))
    add(K.TOP_K, int(sampling["top_k"]))
    add(K.CP_TOP_K, int(sampling["subtalker_top_k"]))
    add(K.GENERAL_TEMPERATURE, float(sampling["temperature"]))  # as llama.cpp's converter writes them
    add(K.GENERAL_TOP_K, int(sampling["top_k"]))
    add(K.GENERAL_TOP_P, float(sampling["top_p"]))
    add(K.GENERAL_REPETITION_PENALTY, float(sampling["repetition_penalty"]))

    text = folded_text_embedding(tensors, str(talker.get("hidden_act", "silu")))
    codec = _need(tensors, "talker.model.codec_embedding.weight")
    if text.shape[0] != text_vocab or codec.shape[0] != codec_vocab:
        raise ConversionError(f"checkpoint: embedding tables of {text.shape[0]} and {codec.shape[0]} rows; the "
                              f"config says {text_vocab} text and {codec_vocab} codec ids")  # fmt: skip
    writer.add_tensor(f"{K.TOKEN_EMBD}.weight", torch.cat([text, codec]))
    writer.add_tensor(f"{K.OUTPUT_NORM}.weight", deferred(tensors, "talker.model.norm.weight"))
    writer.add_tensor(f"{K.OUTPUT}.weight", deferred(tensors, "talker.codec_head.weight"))
    for i in range(int(talker["num_hidden_layers"])):
        for src, dst in TALKER_LAYER.items():
            _need(tensors, f"talker.model.layers.{i}.{src}")
            writer.add_tensor(f"blk.{i}.{dst}", deferred(tensors, f"talker.model.layers.{i}.{src}"))
    return writer.write()


def _stacked(tensors: Mapping[str, torch.Tensor], names: list[str]) -> Deferred:
    for n in names:
        _need(tensors, n)
    shape = (len(names), *tuple(tensors[names[0]].shape))
    return Deferred(shape, lambda: torch.stack([tensors[n] for n in names]))


def _conv_type(name: str, out_type: OutType) -> GGMLQuantizationType | None:
    """llama.cpp's forced types for the decoder's convolutions and the code predictor's ``ffn_down``."""
    if not name.endswith(".weight") or out_type == OutType.F32:
        return None
    if name.startswith(f"{K.CP}.blk.") and name.endswith(".ffn_down.weight"):
        # its input passes F16's range (~1.5e5 in the published model) and ggml casts a matmul's input to the
        # weight's type: F32 in f16 files, as llama.cpp keeps it in every file; elsewhere BF16 (f32's range, and
        # the published weights' own type: upstream runs this matmul in bf16), not a block type (its input's
        # outliers would be quantized by blocks). Read 15 times a frame, it was 40 % of a frame's time in F32 at
        # q4_0 on 2 cores.
        return GGMLQuantizationType.F32 if out_type == OutType.F16 else GGMLQuantizationType.BF16
    if name.endswith(".conv.weight") and (".up.blk." in name or ".dac.blk." in name):
        return GGMLQuantizationType.F32  # transposed convolutions
    conv = name in (f"{K.WAV}.pre_conv.weight", f"{K.WAV}.dac.entry.weight", f"{K.WAV}.dac.post_conv.weight")
    conv = conv or (".up.blk." in name and name.endswith(".dwconv.weight"))
    conv = conv or (".dac.blk." in name and name.endswith((".conv1.weight", ".conv2.weight")))
    return GGMLQuantizationType.F16 if conv else None


def _code_predictor(writer: ModelWriter, talker: dict[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    cp = sub_config(talker, "code_predictor_config", "talker_config")
    _check_stack(cp, "code predictor")
    groups = int(_get(talker, "num_code_groups", "talker_config"))
    if int(cp.get("num_code_groups", groups)) != groups:
        raise ConversionError("config.json: the talker and its code predictor disagree on num_code_groups")
    add = writer.add
    add(K.GEN_PROJECTOR_TYPE, K.GEN_PROJECTOR)
    add(K.HAS_GEN_AUDIO_ENCODER, True)
    add(K.GEN_PROJECTION_DIM, int(talker["hidden_size"]))
    add(K.GEN_EMBEDDING_LENGTH, int(_get(cp, "hidden_size", "code_predictor_config")))
    add(K.GEN_FEED_FORWARD_LENGTH, int(_get(cp, "intermediate_size", "code_predictor_config")))
    add(K.GEN_BLOCK_COUNT, int(_get(cp, "num_hidden_layers", "code_predictor_config")))
    add(K.GEN_HEAD_COUNT, int(_get(cp, "num_attention_heads", "code_predictor_config")))
    add(K.GEN_HEAD_COUNT_KV, int(_get(cp, "num_key_value_heads", "code_predictor_config")))
    add(K.GEN_RMS_EPS, float(_get(cp, "rms_norm_eps", "code_predictor_config")))
    add(K.CP_ROPE_FREQ_BASE, _rope(cp)[0])
    p = "talker.code_predictor."
    for part in ("weight", "bias"):
        if f"{p}small_to_mtp_projection.{part}" in tensors:
            writer.add_tensor(f"{K.CP_PROJ_IN}.{part}", deferred(tensors, f"{p}small_to_mtp_projection.{part}"))
    writer.add_tensor(K.CP_EMBD, _stacked(tensors, [f"{p}model.codec_embedding.{i}.weight" for i in range(groups - 1)]))
    writer.add_tensor(K.CP_HEAD, _stacked(tensors, [f"{p}lm_head.{i}.weight" for i in range(groups - 1)]))
    writer.add_tensor(K.CP_OUT_EMBD, deferred(tensors, "talker.model.codec_embedding.weight"))
    writer.add_tensor(K.CP_OUTPUT_NORM, deferred(tensors, f"{p}model.norm.weight"))
    for i in range(int(cp["num_hidden_layers"])):
        for src, dst in TALKER_LAYER.items():
            name = f"{K.CP}.blk.{i}.{K.CP_LAYER[dst.removesuffix('.weight')]}.weight"
            _need(tensors, f"{p}model.layers.{i}.{src}")
            writer.add_tensor(name, deferred(tensors, f"{p}model.layers.{i}.{src}"),
                              qtype=_conv_type(name, writer.out_type))  # fmt: skip


def _speaker_encoder(
    writer: ModelWriter, config: dict[str, Any], tensors: Mapping[str, torch.Tensor], talker_dim: int
) -> None:
    """The ECAPA-TDNN speaker encoder, named and described as llama.cpp's converter does (its dilations, which
    llama.cpp hard-codes, as a ggtts key)."""
    channels = [int(c) for c in _get(config, "enc_channels", "speaker_encoder_config")]
    if int(config.get("enc_dim", talker_dim)) != talker_dim:
        raise ConversionError("config.json: the speaker embedding is not as wide as the talker")
    add = writer.add
    add(K.HAS_AUDIO_ENCODER, True)
    add(K.AUDIO_PROJECTOR_TYPE, K.SPKENC_PROJECTOR)
    add(K.AUDIO_PROJECTION_DIM, talker_dim)
    add(K.AUDIO_NUM_MEL_BINS, int(config.get("mel_dim", 128)))
    add(K.AUDIO_BLOCK_COUNT, len(channels) - 2)
    add(K.AUDIO_EMBEDDING_LENGTH, SPKENC_PLACEHOLDER)  # llama.cpp's placeholders: ECAPA-TDNN has no attention
    add(K.AUDIO_HEAD_COUNT, 1)
    add(K.AUDIO_FEED_FORWARD_LENGTH, SPKENC_PLACEHOLDER)
    add(K.AUDIO_LAYERNORM_EPS, 1e-5)
    add(K.SPEAKER_DILATIONS, [int(d) for d in _get(config, "enc_dilations", "speaker_encoder_config")])
    names = {"blocks.0.conv": "a.conv1d.0", "mfa.conv": "a.conv_out", "asp.tdnn.conv": "a.asp_tdnn",
             "asp.conv": "a.asp_attn", "fc": "mm.a.fc"}  # fmt: skip
    for i in range(1, len(channels) - 1):
        names |= {f"blocks.{i}.tdnn1.conv": f"a.blk.{i}.conv_pw1", f"blocks.{i}.tdnn2.conv": f"a.blk.{i}.conv_pw2",
                  f"blocks.{i}.se_block.conv1": f"a.blk.{i}.se_conv1",
                  f"blocks.{i}.se_block.conv2": f"a.blk.{i}.se_conv2"}  # fmt: skip
        for x in range(int(config.get("enc_res2net_scale", 8)) - 1):
            names[f"blocks.{i}.res2net_block.blocks.{x}.conv"] = f"a.blk.{i}.res2.{x}"
    for src, dst in names.items():
        for part in ("weight", "bias"):
            writer.add_tensor(f"{dst}.{part}", deferred(tensors, _present(tensors, f"speaker_encoder.{src}.{part}")))
    extra = sorted(n for n in tensors if n.startswith("speaker_encoder.") and
                   n.removeprefix("speaker_encoder.").rsplit(".", 1)[0] not in names)  # fmt: skip
    if extra:
        raise ConversionError(f"checkpoint: unexpected tensor '{extra[0]}'")


def _present(tensors: Mapping[str, torch.Tensor], name: str) -> str:
    _need(tensors, name)
    return name


def _decoder(writer: ModelWriter, decoder: dict[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    """The 12 Hz tokenizer's decoder (``decoder.*`` tensors of ``speech_tokenizer/model.safetensors``)."""
    add = writer.add
    n_q = int(_get(decoder, "num_quantizers", "decoder_config"))
    heads = int(_get(decoder, "num_attention_heads", "decoder_config"))
    add(K.WAV_BLOCK_COUNT, int(_get(decoder, "num_hidden_layers", "decoder_config")))
    add(K.WAV_HEAD_COUNT, heads)
    add(K.WAV_HEAD_COUNT_KV, int(decoder.get("num_key_value_heads") or heads))
    add(K.WAV_RMS_EPS, float(decoder.get("rms_norm_eps", 1e-5)))
    params = decoder.get("rope_parameters") or {}
    add(K.WAV_ROPE_FREQ_BASE, float(params.get("rope_theta", decoder.get("rope_theta", 10_000.0))))
    add(K.WAV_SLIDING_WINDOW, int(_get(decoder, "sliding_window", "decoder_config")))
    add(K.WAV_UPSAMPLING_RATIOS, [int(r) for r in _get(decoder, "upsampling_ratios", "decoder_config")])
    add(K.WAV_UPSAMPLE_RATES, [int(r) for r in _get(decoder, "upsample_rates", "decoder_config")])
    add(K.WAV_SAMPLE_RATE, 24_000)
    if decoder.get("hidden_act", "silu") != "silu" or decoder.get("attention_bias"):
        raise ConversionError("speech_tokenizer/config.json: a decoder with biased attention or a non-silu MLP")

    def put(name: str, tensor: torch.Tensor | Deferred) -> None:
        writer.add_tensor(f"{K.WAV}.{name}", tensor, qtype=_conv_type(f"{K.WAV}.{name}", writer.out_type))

    def plain(name: str) -> Deferred:
        return deferred(tensors, _present(tensors, f"decoder.{name}"))

    def codebooks(prefix: str, n: int) -> torch.Tensor:
        books = []
        for i in range(n):
            book = f"decoder.quantizer.{prefix}.vq.layers.{i}._codebook"
            usage = _need(tensors, f"{book}.cluster_usage").clamp(min=CODEBOOK_EPS)
            books.append(_need(tensors, f"{book}.embedding_sum") / usage[:, None])
        return torch.stack(books) if n > 1 else books[0]

    def snake(name: str, src: str) -> None:
        put(f"{name}.alpha", torch.exp(_need(tensors, f"decoder.{src}.alpha")))
        put(f"{name}.beta", 1.0 / (torch.exp(_need(tensors, f"decoder.{src}.beta")) + SNAKE_EPS))

    for part, count in (("first", SEMANTIC_CODEBOOKS), ("rest", n_q - SEMANTIC_CODEBOOKS)):
        rvq = f"rvq_{part}"
        put(f"quant.{part}.in_proj.weight", _need(tensors, f"decoder.quantizer.{rvq}.input_proj.weight").squeeze(-1))
        put(f"quant.{part}.out_proj.weight", _need(tensors, f"decoder.quantizer.{rvq}.output_proj.weight").squeeze(-1))
        put(f"quant.{part}.codebook.weight", codebooks(rvq, count))
    put("pre_conv.weight", plain("pre_conv.conv.weight"))
    put("pre_conv.bias", plain("pre_conv.conv.bias"))
    for part in ("weight", "bias"):
        put(f"tfm.in_proj.{part}", plain(f"pre_transformer.input_proj.{part}"))
        put(f"tfm.out_proj.{part}", plain(f"pre_transformer.output_proj.{part}"))
    put("tfm.output_norm.weight", plain("pre_transformer.norm.weight"))
    for i in range(int(decoder["num_hidden_layers"])):
        for src, dst in K.WAV_LAYER.items():
            put(f"tfm.blk.{i}.{dst}", plain(f"pre_transformer.layers.{i}.{src}"))
    for i in range(len(decoder["upsampling_ratios"])):
        for src, dst in K.WAV_UPSAMPLE.items():
            put(f"up.blk.{i}.{dst}", plain(f"upsample.{i}.{src}"))
    put("dac.entry.weight", plain("decoder.0.conv.weight"))
    put("dac.entry.bias", plain("decoder.0.conv.bias"))
    n_blocks = len(decoder["upsample_rates"])
    for b in range(n_blocks):
        src = f"decoder.{b + 1}.block"
        snake(f"dac.blk.{b}.snake", f"{src}.0")
        put(f"dac.blk.{b}.conv.weight", plain(f"{src}.1.conv.weight"))
        put(f"dac.blk.{b}.conv.bias", plain(f"{src}.1.conv.bias"))
        for r in range(3):
            unit = f"{src}.{r + 2}"
            snake(f"dac.blk.{b}.res.{r}.act1", f"{unit}.act1")
            snake(f"dac.blk.{b}.res.{r}.act2", f"{unit}.act2")
            for conv in ("conv1", "conv2"):
                put(f"dac.blk.{b}.res.{r}.{conv}.weight", plain(f"{unit}.{conv}.conv.weight"))
                put(f"dac.blk.{b}.res.{r}.{conv}.bias", plain(f"{unit}.{conv}.conv.bias"))
    snake("dac.post_snake", f"decoder.{n_blocks + 1}")
    put("dac.post_conv.weight", plain(f"decoder.{n_blocks + 2}.conv.weight"))
    put("dac.post_conv.bias", plain(f"decoder.{n_blocks + 2}.conv.bias"))


ENC_LAYER = {
    "input_layernorm.weight": "ln1.weight", "input_layernorm.bias": "ln1.bias",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_out.weight",
    "self_attn_layer_scale.scale": "ls1.weight", "post_attention_layernorm.weight": "ln2.weight",
    "post_attention_layernorm.bias": "ln2.bias", "mlp.fc1.weight": "ffn_up.weight", "mlp.fc2.weight": "ffn_down.weight",
    "mlp_layer_scale.scale": "ls2.weight",
}  # fmt: skip
# transformers 5's Mimi nests the encoder's parts one level deeper than 4.57's (the published files' layout)
_MIMI_5 = (("encoder.encoder_seanet.", "encoder."), ("encoder.encoder_transformer.", "encoder_transformer."),
           ("encoder.downsample.", "downsample."))  # fmt: skip


def _encoder_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The speech tokenizer's ``encoder.*`` tensors by Mimi's (transformers 4.57) names, from either layout."""
    found: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if not name.startswith("encoder."):
            continue
        name = name.removeprefix("encoder.")
        for new, old in _MIMI_5:
            if name.startswith(new):
                name = old + name.removeprefix(new)
        found[name] = tensor
    return found


def _speech_encoder(writer: ModelWriter, tokenizer: dict[str, Any], tensors: Mapping[str, torch.Tensor],
                    codebooks: int) -> None:  # fmt: skip
    """A Base checkpoint's speech tokenizer encoder (Mimi's, ``encoder.*`` of ``speech_tokenizer/``), under
    ``a.tok_enc.*`` (:class:`ggtts.gguf.keys.Qwen3TTS`)."""
    cfg = sub_config(tokenizer, "encoder_config", "speech_tokenizer/config.json")
    enc = _encoder_tensors(tensors)
    where = "speech_tokenizer/config.json: the encoder"
    for key, want in (("audio_channels", 1), ("use_causal_conv", True), ("use_conv_shortcut", False),
                      ("pad_mode", "constant"), ("hidden_act", "gelu"), ("attention_bias", False)):  # fmt: skip
        if cfg.get(key, want) != want:
            raise ConversionError(f"{where}'s {key} is {cfg[key]!r}; only {want!r} is supported")
    ratios = [int(r) for r in cfg.get("upsampling_ratios") or (8, 6, 5, 4)]
    residual, hidden = int(cfg.get("num_residual_layers", 1)), int(cfg.get("hidden_size", 512))
    heads = int(cfg.get("num_attention_heads", 8))
    layers = int(cfg.get("num_hidden_layers", 8))
    rate = int(cfg.get("sampling_rate", 24_000))
    stride = int(math.ceil(rate / math.prod(ratios)) / float(cfg.get("frame_rate", 12.5)))
    valid = int(tokenizer.get("encoder_valid_num_quantizers", 16))
    semantic = int(cfg.get("num_semantic_quantizers", 1))
    if valid != codebooks or not semantic < valid <= int(cfg.get("num_quantizers", 32)):
        raise ConversionError(f"{where} keeps {valid} codebooks ({semantic} semantic); the talker speaks {codebooks}")
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10_000.0))
    add = writer.add
    add(K.ENC_RATIOS, ratios)
    add(K.ENC_RESIDUAL_LAYERS, residual)
    add(K.ENC_DILATION_GROWTH, int(cfg.get("dilation_growth_rate", 2)))
    add(K.ENC_BLOCK_COUNT, layers)
    add(K.ENC_HEAD_COUNT, heads)
    add(K.ENC_HEAD_COUNT_KV, int(cfg.get("num_key_value_heads") or heads))
    add(K.ENC_HEAD_DIM, int(cfg.get("head_dim") or hidden // heads))
    add(K.ENC_NORM_EPS, float(cfg.get("norm_eps", 1e-5)))
    add(K.ENC_ROPE_FREQ_BASE, float(theta))
    add(K.ENC_SLIDING_WINDOW, int(cfg.get("sliding_window", 250)))
    add(K.ENC_DOWNSAMPLE, stride)
    add(K.ENC_CODEBOOKS, valid)
    add(K.ENC_SEMANTIC_CODEBOOKS, semantic)
    add(K.ENC_FRAME_SAMPLES, int(tokenizer.get("encode_downsample_rate", 1920)))

    def put(name: str, tensor: torch.Tensor | Deferred) -> None:
        # F32 in every file: its codes are nearest codebook entries, a few 1e-4 apart relatively (F16's rounding
        # could move them), and it runs once per voice
        writer.add_tensor(f"{K.ENC}.{name}", tensor, qtype=GGMLQuantizationType.F32)

    def plain(name: str) -> Deferred:
        return deferred(enc, _present(enc, name))

    def conv(dst: str, src: str) -> None:
        put(f"{dst}.weight", plain(f"{src}.conv.weight"))
        put(f"{dst}.bias", plain(f"{src}.conv.bias"))

    conv("conv_in", "encoder.layers.0")
    index = 1
    for s in range(len(ratios)):
        for j in range(residual):
            conv(f"blk.{s}.res.{j}.conv1", f"encoder.layers.{index}.block.1")
            conv(f"blk.{s}.res.{j}.conv2", f"encoder.layers.{index}.block.3")
            index += 1
        conv(f"blk.{s}.down", f"encoder.layers.{index + 1}")  # after the ELU
        index += 2
    conv("conv_out", f"encoder.layers.{index + 1}")
    for i in range(layers):
        for src, dst in ENC_LAYER.items():
            put(f"tfm.blk.{i}.{dst}", plain(f"encoder_transformer.layers.{i}.{src}"))
    put("downsample.weight", plain("downsample.conv.weight"))
    for part, rvq, count in (("first", "semantic", semantic), ("rest", "acoustic", valid - semantic)):
        p = f"quantizer.{rvq}_residual_vector_quantizer"
        books = []
        for i in range(count):
            usage = _need(enc, f"{p}.layers.{i}.codebook.cluster_usage").clamp(min=CODEBOOK_EPS)
            books.append(_need(enc, f"{p}.layers.{i}.codebook.embed_sum") / usage[:, None])
        put(f"quant.{part}.codebook.weight", torch.stack(books))
        if f"{p}.input_proj.weight" in enc:
            put(f"quant.{part}.in_proj.weight", enc[f"{p}.input_proj.weight"].squeeze(-1))
        else:  # no projection where the quantizer is as wide as the transformer
            put(f"quant.{part}.in_proj.weight", torch.eye(hidden))


def write_mmproj(
    out: Path,
    config: dict[str, Any],
    tensors: Mapping[str, torch.Tensor],
    tokenizer_config: dict[str, Any],
    tokenizer_tensors: Mapping[str, torch.Tensor],
    out_type: str,
) -> Path:
    """The mmproj file: a Base checkpoint's speaker encoder, the code predictor, the speech tokenizer's decoder and
    (a Base checkpoint's, where the tokenizer has it) the speech tokenizer's encoder."""
    talker = sub_config(config, "talker_config", "a Qwen3-TTS checkpoint")
    width = int(_get(talker, "hidden_size", "talker_config"))
    if tokenizer_config.get("model_type", TOKENIZER_TYPE) != TOKENIZER_TYPE:
        raise ConversionError(f"speech_tokenizer: model_type '{tokenizer_config.get('model_type')}' is not the "
                              f"12 Hz tokenizer ({TOKENIZER_TYPE})")  # fmt: skip
    writer = ModelWriter(out, K.CLIP_ARCH, out_type)
    writer.meta.add_name("Qwen3-TTS code predictor and speech decoder")
    if any(n.startswith("speaker_encoder.") for n in tensors):
        _speaker_encoder(writer, sub_config(config, "speaker_encoder_config", "a Base checkpoint"), tensors, width)
    elif config.get("tts_model_type") == "base":
        raise ConversionError("checkpoint: a Base checkpoint without its speaker encoder's tensors")
    _code_predictor(writer, talker, tensors)
    decoder = sub_config(tokenizer_config, "decoder_config", "speech_tokenizer/config.json")
    if int(decoder.get("num_quantizers", 0)) != int(talker["num_code_groups"]):
        raise ConversionError("config.json: the talker's codebooks and the speech decoder's disagree")
    _decoder(writer, decoder, tokenizer_tensors)
    if config.get("tts_model_type") == "base" and any(n.startswith("encoder.") for n in tokenizer_tensors):
        _speech_encoder(writer, tokenizer_config, tokenizer_tensors, int(talker["num_code_groups"]))
    return writer.write()


def mmproj_path(talker: Path) -> Path:
    """``mmproj-NAME.gguf`` beside ``NAME.gguf``, as llama.cpp's files are named."""
    return talker.with_name(f"mmproj-{talker.name}")


def convert_qwen3tts(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert qwen3tts CHECKPOINT_DIR -o NAME.gguf``: the talker file there, the mmproj file beside it."""
    ckpt = HFCheckpoint(sources, "Qwen3-TTS")
    if ckpt.config.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise ConversionError(f"config.json: model_type '{ckpt.config.get('model_type')}' is not {MODEL_TYPE}")
    if ckpt.config.get("tokenizer_type", TOKENIZER_TYPE) != TOKENIZER_TYPE:
        raise ConversionError(f"config.json: tokenizer_type '{ckpt.config.get('tokenizer_type')}' (only the 12 Hz "
                              "tokenizer is supported)")  # fmt: skip
    speech = HFCheckpoint([ckpt.dir / "speech_tokenizer"], "Qwen3-TTS speech tokenizer")
    write_mmproj(mmproj_path(out), ckpt.config, ckpt.tensors, speech.config, speech.tensors, out_type)
    return write_talker(out, ckpt.config, ckpt.tensors, ckpt.dir, out_type)
