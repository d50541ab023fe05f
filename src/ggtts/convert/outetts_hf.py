"""Hugging Face OuteTTS checkpoint (Qwen2: safetensors + config.json + tokenizer.json) -> llama.cpp ``qwen2``
GGUF.

Tensor names, metadata and the vocabulary layout are llama.cpp's (``convert_hf_to_gguf.py``'s Qwen2 path): the
output projection is left out when tied to the embedding, vocabulary holes up to ``vocab_size`` become
``[PAD<id>]`` tokens of type UNUSED, special added tokens become CONTROL and other added tokens USER_DEFINED.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from gguf import GGUFWriter

from ggtts.errors import ConversionError
from ggtts.gguf.keys import Qwen2 as K
from ggtts.gguf.keys import Tokenizer as T
from ggtts.gguf.write import ModelWriter, OutType
from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS


# ---- safetensors ---------------------------------------------------------------------------------------------
def read_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of a ``.safetensors`` file as float32, one at a time (``safetensors.safe_open``)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is no mapping
                yield name, f.get_tensor(name).to(torch.float32)
    except SafetensorError as e:
        raise ConversionError(f"{path}: not a readable safetensors file ({e})") from None


# ---- the checkpoint ----------------------------------------------------------------------------------------
def _files(sources: list[Path]) -> dict[str, Path]:
    paths: list[Path] = []
    for src in sources:
        if src.is_dir():
            paths.extend(p for p in src.iterdir() if p.is_file())
        elif src.exists():
            paths.append(src)
        else:
            raise ConversionError(f"{src}: no such file or directory")
    return {p.name: p for p in paths}


def _json(files: dict[str, Path], name: str, required: bool = True) -> dict[str, Any]:
    if name not in files:
        if required:
            raise ConversionError(f"the OuteTTS checkpoint needs {name}")
        return {}
    return json.loads(files[name].read_text(encoding="utf-8"))


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _pre_tokenizer_name(tokenizer: dict[str, Any]) -> str:
    patterns = re.findall(r'"(?:String|Regex)":\s*"((?:[^"\\]|\\.)*)"', json.dumps(tokenizer.get("pre_tokenizer")))
    for p in patterns:
        regex = json.loads(f'"{p}"')
        for name, known in PRE_TOKENIZERS.items():
            if regex == known:
                return name
    raise ConversionError("tokenizer.json: the pre-tokenizer is not Qwen2's; only the qwen2 pre-tokenizer is supported")


def vocabulary(tokenizer: dict[str, Any], vocab_size: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, llama.cpp token types and merges, with holes up to ``vocab_size`` filled as llama.cpp does."""
    model = tokenizer.get("model", {})
    if model.get("type") != "BPE":
        raise ConversionError(f"tokenizer.json: model type {model.get('type')!r} is not BPE")
    by_id: dict[int, tuple[str, int]] = {i: (t, T.TYPE_NORMAL) for t, i in model["vocab"].items()}
    for added in tokenizer.get("added_tokens", []):
        by_id[int(added["id"])] = (
            added["content"],
            T.TYPE_CONTROL if added.get("special") else T.TYPE_USER_DEFINED,
        )
    size = max(vocab_size, max(by_id) + 1)
    tokens = [by_id.get(i, (f"[PAD{i}]", T.TYPE_UNUSED))[0] for i in range(size)]
    types = [by_id.get(i, (f"[PAD{i}]", T.TYPE_UNUSED))[1] for i in range(size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    theta = config.get("rope_theta", params.get("rope_theta"))
    if theta is None:
        raise ConversionError("config.json: no rope_theta")
    scaling = config.get("rope_scaling") or {}
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise ConversionError(f"config.json: RoPE scaling {scaling} is not supported")
    return float(theta)


def write_bpe_tokenizer(
    m: GGUFWriter,
    tokenizer: dict[str, Any],
    tok_config: dict[str, Any],
    tokens: list[str],
    types: list[int],
    merges: list[str],
    *,
    eos_fallback: Any = None,
    bos_fallback: Any = None,
) -> None:
    """A Qwen byte-level BPE vocabulary (from :func:`vocabulary`) as llama.cpp's ``tokenizer.ggml.*`` keys, with the
    special tokens ``tokenizer_config.json`` names (ids in config.json as fallbacks) and its chat template."""
    token_id = {t: i for i, t in enumerate(tokens)}
    m.add_tokenizer_model("gpt2")
    m.add_tokenizer_pre(_pre_tokenizer_name(tokenizer))
    m.add_token_list(tokens)
    m.add_token_types(types)
    if not merges:  # GGUF cannot hold an empty array, and llama.cpp refuses a gpt2 vocabulary without the key
        warnings.warn(
            "tokenizer.json has no BPE merges: the file has no 'tokenizer.ggml.merges' and llama.cpp will refuse it "
            "(ggtts loads it)",
            stacklevel=2,
        )
    m.add_token_merges(merges)
    specials = {
        "eos": _token_content(tok_config.get("eos_token")),
        "pad": _token_content(tok_config.get("pad_token")),
        "bos": _token_content(tok_config.get("bos_token")),
    }
    eos = token_id.get(specials["eos"] or "", eos_fallback)
    bos = token_id.get(specials["bos"] or "", bos_fallback)
    pad = token_id.get(specials["pad"] or "")
    if isinstance(eos, int):
        m.add_eos_token_id(eos)
    if isinstance(bos, int):
        m.add_bos_token_id(bos)
    if isinstance(pad, int):
        m.add_pad_token_id(pad)
    m.add_add_bos_token(False)
    template = tok_config.get("chat_template")
    if isinstance(template, str):
        m.add_chat_template(template)


def convert_outetts_hf(
    sources: list[Path] | Path,
    out: str | Path,
    out_type: OutType | str = OutType.F16,
    *,
    name: str = "OuteTTS",
) -> Path:
    files = _files([sources] if isinstance(sources, Path) else sources)
    config = _json(files, "config.json")
    if config.get("model_type") not in ("qwen2", None):
        raise ConversionError(f"config.json: model_type '{config.get('model_type')}' is not qwen2")
    tokenizer = _json(files, "tokenizer.json")
    tok_config = _json(files, "tokenizer_config.json", required=False)
    shards = sorted(p for n, p in files.items() if n.endswith(".safetensors"))
    if not shards:
        raise ConversionError("the OuteTTS checkpoint has no .safetensors weights")

    tokens, types, merges = vocabulary(tokenizer, int(config["vocab_size"]))
    n_heads = int(config["num_attention_heads"])

    w = ModelWriter(out, K.ARCH, out_type)
    m = w.meta
    m.add_name(name)
    m.add_block_count(int(config["num_hidden_layers"]))
    m.add_context_length(int(config["max_position_embeddings"]))
    m.add_embedding_length(int(config["hidden_size"]))
    m.add_feed_forward_length(int(config["intermediate_size"]))
    m.add_head_count(n_heads)
    m.add_head_count_kv(int(config.get("num_key_value_heads", n_heads)))
    m.add_rope_freq_base(_rope_theta(config))
    m.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    write_bpe_tokenizer(
        m,
        tokenizer,
        tok_config,
        tokens,
        types,
        merges,
        eos_fallback=config.get("eos_token_id"),
        bos_fallback=config.get("bos_token_id"),
    )

    tied = bool(config.get("tie_word_embeddings", False))
    names = K.tensor_name_map(int(config["num_hidden_layers"]))  # gguf-py's own HF -> llama.cpp name map
    seen: set[str] = set()
    for shard in shards:
        for hf_name, tensor in read_safetensors(shard):
            target = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if target is None:
                if hf_name.endswith("rotary_emb.inv_freq"):
                    continue
                raise ConversionError(f"{shard.name}: unexpected tensor '{hf_name}' for a Qwen2 model")
            if target == K.OUTPUT + ".weight" and tied:
                continue
            w.add_tensor(target, tensor)
            seen.add(target)
    if K.TOKEN_EMBD + ".weight" not in seen:
        raise ConversionError("the checkpoint has no model.embed_tokens.weight")
    return w.write()


def convert_outetts(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert outetts DIR_OR_FILES -o OUT.gguf``: config.json, tokenizer.json, *.safetensors."""
    return convert_outetts_hf(sources, out, out_type)
