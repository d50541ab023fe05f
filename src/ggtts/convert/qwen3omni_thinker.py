"""Qwen3-Omni's thinker text model (a Hugging Face ``Qwen3OmniMoeForConditionalGeneration`` checkpoint) -> a
llama.cpp ``qwen3omnimoe`` GGUF (or, with ``thinker_arch="qwen3moe"``, the same file under the architecture
mainline llama.cpp loads).

Only the text model is converted: the audio tower (``audio_tower.*``) and the vision encoder (``visual.*``) are
skipped, as are the talker and code2wav (their own file). Expert weights are merged into llama.cpp's stacks
``ffn_{gate,up}_exps (E, F, D)`` and ``ffn_down_exps (E, D, F)`` from either layout a checkpoint may hold: one tensor
per expert (``mlp.experts.7.gate_proj.weight``, as published) or transformers 5's fused
``mlp.experts.gate_up_proj (E, 2F, D)`` and ``mlp.experts.down_proj (E, D, F)``. The tokenizer is written as the
OuteTTS converter writes Qwen2's (``tokenizer.ggml.*``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.convert.outetts_hf import vocabulary, write_bpe_tokenizer
from ggtts.errors import ConversionError
from ggtts.gguf.keys import Qwen3OmniThinker as K
from ggtts.gguf.write import Deferred, ModelWriter, OutType, deferred, shape_of

__all__ = ["ThinkerShape", "merge_experts", "write_thinker"]

TEXT_PREFIXES = ("model.language_model.", "model.")  # transformers 5's in-memory names, then the published ones
SKIPPED_PREFIXES = ("audio_tower.", "visual.", "model.audio_tower.", "model.visual.")  # not the text model
DEFAULT_MROPE_SECTION = (24, 20, 20)
ROPE_SECTION_SLOTS = 4  # llama.cpp's rope.dimension_sections holds 4 entries (t, h, w, and an unused one)

# per-layer Hugging Face names -> llama.cpp's (gguf-py's templates)
LAYER_NAMES = {
    "input_layernorm.weight": K.ATTN_NORM,
    "self_attn.q_proj.weight": K.ATTN_Q,
    "self_attn.k_proj.weight": K.ATTN_K,
    "self_attn.v_proj.weight": K.ATTN_V,
    "self_attn.o_proj.weight": K.ATTN_OUT,
    "self_attn.q_norm.weight": K.ATTN_Q_NORM,
    "self_attn.k_norm.weight": K.ATTN_K_NORM,
    "post_attention_layernorm.weight": K.FFN_NORM,
}
MOE_NAMES = {"mlp.gate.weight": K.FFN_GATE_INP}
DENSE_NAMES = {"mlp.gate_proj.weight": K.FFN_GATE, "mlp.up_proj.weight": K.FFN_UP, "mlp.down_proj.weight": K.FFN_DOWN}
EXPERT_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ThinkerShape:
    """What the converter needs of a ``thinker_config`` (its ``text_config``)."""

    n_vocab: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_ff: int
    n_ff_exp: int
    n_expert: int
    n_expert_used: int
    context_length: int
    rms_eps: float
    rope_theta: float
    rope_sections: tuple[int, ...]
    norm_topk_prob: bool
    mlp_only_layers: tuple[int, ...]
    tied: bool

    @classmethod
    def from_config(cls, thinker_config: dict[str, Any]) -> ThinkerShape:
        text = thinker_config.get("text_config")
        if not isinstance(text, dict):
            raise ConversionError("thinker_config has no text_config")
        try:
            n_layers = int(text["num_hidden_layers"])
            n_heads = int(text["num_attention_heads"])
            dim = int(text["hidden_size"])
            n_expert = int(text.get("num_experts", 0))
            step = int(text.get("decoder_sparse_step", 1))
            listed = {int(i) for i in text.get("mlp_only_layers") or []}
            dense = tuple(
                i for i in range(n_layers) if i in listed or not (n_expert > 0 and step > 0 and (i + 1) % step == 0)
            )
            return cls(
                n_vocab=int(text["vocab_size"]),
                dim=dim,
                n_layers=n_layers,
                n_heads=n_heads,
                n_kv_heads=int(text.get("num_key_value_heads", n_heads)),
                head_dim=int(text.get("head_dim") or dim // n_heads),
                n_ff=int(text["intermediate_size"]),
                n_ff_exp=int(text["moe_intermediate_size"]),
                n_expert=n_expert,
                n_expert_used=int(text["num_experts_per_tok"]),
                context_length=int(text["max_position_embeddings"]),
                rms_eps=float(text.get("rms_norm_eps", 1e-6)),
                rope_theta=_rope_theta(text),
                rope_sections=_rope_sections(text),
                norm_topk_prob=bool(text.get("norm_topk_prob", True)),
                mlp_only_layers=dense,
                tied=bool(thinker_config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            )
        except KeyError as e:
            raise ConversionError(f"thinker_config.text_config has no '{e.args[0]}'") from None

    def is_moe(self, layer: int) -> bool:
        return layer not in self.mlp_only_layers


def _rope(text: dict[str, Any]) -> dict[str, Any]:
    return dict(text.get("rope_parameters") or text.get("rope_scaling") or {})


def _rope_theta(text: dict[str, Any]) -> float:
    rope = _rope(text)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", None):
        raise ConversionError(f"thinker_config: RoPE type '{kind}' is not supported")
    theta = text.get("rope_theta", rope.get("rope_theta"))
    if theta is None:
        raise ConversionError("thinker_config.text_config has no rope_theta")
    return float(theta)


def _rope_sections(text: dict[str, Any]) -> tuple[int, ...]:
    sections = [int(s) for s in _rope(text).get("mrope_section", DEFAULT_MROPE_SECTION)]
    return tuple(sections + [0] * max(0, ROPE_SECTION_SLOTS - len(sections)))


def _stacker(tensors: Any, names: list[str]) -> Callable[[], torch.Tensor]:
    """What stacks ``names`` of ``tensors`` when the file is written (read then, not before)."""
    return lambda: torch.stack([tensors[n] for n in names])


def merge_experts(
    tensors: Mapping[str, torch.Tensor], prefix: str, n_expert: int, n_ff: int, dim: int
) -> dict[str, Deferred]:
    """One layer's experts under ``prefix`` (``...layers.3.mlp.experts.``) as llama.cpp's stacks:
    ``{"gate": (E, F, D), "up": (E, F, D), "down": (E, D, F)}``, from per-expert tensors or fused 3-D ones. Names
    and shapes are checked now; each stack is read and stacked when the file is written."""
    fused_gate_up, fused_down = prefix + "gate_up_proj", prefix + "down_proj"
    if fused_gate_up in tensors:
        if fused_down not in tensors:
            raise ConversionError(f"the checkpoint has '{fused_gate_up}' but no '{fused_down}'")
        _expect(tensors, fused_gate_up, (n_expert, 2 * n_ff, dim))
        _expect(tensors, fused_down, (n_expert, dim, n_ff))
        return {
            "gate": Deferred((n_expert, n_ff, dim), lambda: tensors[fused_gate_up][:, :n_ff]),
            "up": Deferred((n_expert, n_ff, dim), lambda: tensors[fused_gate_up][:, n_ff:]),
            "down": deferred(tensors, fused_down),
        }
    stacks: dict[str, Deferred] = {}
    for proj, want in zip(EXPERT_PROJECTIONS, ((n_ff, dim), (n_ff, dim), (dim, n_ff)), strict=True):
        names = [f"{prefix}{e}.{proj}.weight" for e in range(n_expert)]
        for name in names:
            if name not in tensors:
                raise ConversionError(f"the checkpoint has no '{name}' (nor fused '{fused_gate_up}')")
            _expect(tensors, name, want)
        stacks[proj.removesuffix("_proj")] = Deferred((n_expert, *want), _stacker(tensors, names))
    return stacks


def _expect(tensors: Mapping[str, torch.Tensor], name: str, shape: tuple[int, ...]) -> None:
    found = shape_of(tensors, name)
    if found != shape:
        raise ConversionError(f"'{name}' has shape {list(found)}, expected {list(shape)}")


def _text_names(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The text model's checkpoint names, keyed by their name without the ``thinker.`` and model prefixes
    (``layers.0.self_attn.q_proj.weight``, ``embed_tokens.weight``, ``norm.weight``, ``lm_head.weight``)."""
    names = list(tensors.keys())
    scoped = any(n.startswith("thinker.") for n in names)
    out: dict[str, str] = {}
    for name in names:
        if scoped:
            if not name.startswith("thinker."):
                continue  # talker, code2wav: not the thinker
            short = name.removeprefix("thinker.")
        else:
            short = name
        if short.startswith(SKIPPED_PREFIXES) or short.endswith("rotary_emb.inv_freq"):
            continue
        for p in TEXT_PREFIXES:
            if short.startswith(p):
                short = short.removeprefix(p)
                break
        out[short] = name
    return out


def _read_tokenizer(tokenizer_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """tokenizer.json (or vocab.json + merges.txt) and tokenizer_config.json as a tokenizer.json-shaped dict."""
    config_path = tokenizer_dir / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    if (tokenizer_dir / "tokenizer.json").exists():
        return json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8")), tok_config
    vocab_path, merges_path = tokenizer_dir / "vocab.json", tokenizer_dir / "merges.txt"
    if not vocab_path.exists() or not merges_path.exists():
        raise ConversionError(f"{tokenizer_dir}: no tokenizer.json, nor vocab.json and merges.txt")
    merges = [
        line
        for line in merges_path.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#version")
    ]
    added = [
        {"id": int(i), "content": t["content"], "special": bool(t.get("special", False))}
        for i, t in (tok_config.get("added_tokens_decoder") or {}).items()
    ]
    from ggtts.models.qwen2.tokenizer import PRE_TOKENIZERS

    tokenizer = {
        "model": {"type": "BPE", "vocab": json.loads(vocab_path.read_text(encoding="utf-8")), "merges": merges},
        "added_tokens": added,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": PRE_TOKENIZERS["qwen2"]}},  # Qwen's, always
    }
    return tokenizer, tok_config


def write_thinker(
    out: Path,
    thinker_config: dict[str, Any],
    tensors: Mapping[str, torch.Tensor],
    tokenizer_dir: Path | None,
    out_type: str,
    *,
    thinker_arch: str = K.ARCH,
    name: str = "Qwen3-Omni thinker",
) -> Path:
    """Write the thinker's text model to ``out``. ``thinker_config`` is config.json's ``thinker_config``;
    ``tensors`` maps checkpoint names to tensors (a lazy mapping is read only for the text model's names).
    ``thinker_arch`` ``"qwen3moe"`` writes the file for mainline llama.cpp (which always renormalises the picked
    experts' weights and has no dense layers: a thinker needing either is refused)."""
    if thinker_arch not in K.ARCHS:
        raise ConversionError(f"thinker_arch '{thinker_arch}' is not one of {', '.join(K.ARCHS)}")
    shape = ThinkerShape.from_config(thinker_config)
    if thinker_arch == K.MAINLINE_ARCH and (shape.mlp_only_layers or not shape.norm_topk_prob):
        raise ConversionError(
            f"llama.cpp's {K.MAINLINE_ARCH} has no dense layers and always renormalises the experts' weights; this "
            f"thinker needs {'dense layers' if shape.mlp_only_layers else 'norm_topk_prob false'}: write it as "
            f"{K.ARCH}"
        )
    names = _text_names(tensors)
    w = ModelWriter(out, thinker_arch, OutType(out_type))
    _write_metadata(w, shape, name)
    if tokenizer_dir is not None:
        tokenizer, tok_config = _read_tokenizer(Path(tokenizer_dir))
        tokens, types, merges = vocabulary(tokenizer, shape.n_vocab)
        if len(tokens) != shape.n_vocab:
            raise ConversionError(
                f"the tokenizer has {len(tokens)} tokens; the thinker's vocabulary is {shape.n_vocab}"
            )
        write_bpe_tokenizer(w.meta, tokenizer, tok_config, tokens, types, merges)

    used: set[str] = set()

    def take(short: str) -> Deferred:
        if short not in names:
            raise ConversionError(f"the checkpoint has no thinker tensor '{short}'")
        used.add(short)
        return deferred(tensors, names[short])

    w.add_tensor(K.TOKEN_EMBD + ".weight", take("embed_tokens.weight"))
    for i in range(shape.n_layers):
        per_layer = {**LAYER_NAMES, **(MOE_NAMES if shape.is_moe(i) else DENSE_NAMES)}
        for hf, gguf in per_layer.items():
            w.add_tensor(gguf.format(bid=i) + ".weight", take(f"layers.{i}.{hf}"))
        if shape.is_moe(i):
            prefix = f"layers.{i}.mlp.experts."
            stacks = merge_experts(_Scoped(names, tensors, used), prefix, shape.n_expert, shape.n_ff_exp, shape.dim)
            w.add_tensor(K.FFN_GATE_EXPS.format(bid=i) + ".weight", stacks["gate"])
            w.add_tensor(K.FFN_UP_EXPS.format(bid=i) + ".weight", stacks["up"])
            w.add_tensor(K.FFN_DOWN_EXPS.format(bid=i) + ".weight", stacks["down"])
    w.add_tensor(K.OUTPUT_NORM + ".weight", take("norm.weight"))
    if not shape.tied:
        w.add_tensor(K.OUTPUT + ".weight", take("lm_head.weight"))
    else:
        used.add("lm_head.weight")
    unexpected = sorted(set(names) - used)
    if unexpected:
        raise ConversionError(f"unexpected thinker tensor '{names[unexpected[0]]}' for this configuration")
    return w.write()


class _Scoped(Mapping[str, torch.Tensor]):
    """The checkpoint seen under the short names of :func:`_text_names`, recording what is asked for."""

    def __init__(self, names: dict[str, str], tensors: Mapping[str, torch.Tensor], used: set[str]) -> None:
        self._names, self._tensors, self._used = names, tensors, used

    def __getitem__(self, short: str) -> torch.Tensor:
        self._used.add(short)
        return self._tensors[self._names[short]]

    def __contains__(self, short: object) -> bool:
        return short in self._names

    def shape(self, short: str) -> tuple[int, ...]:
        self._used.add(short)
        return shape_of(self._tensors, self._names[short])

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _write_metadata(w: ModelWriter, s: ThinkerShape, name: str) -> None:
    m, arch = w.meta, w.arch
    m.add_name(name)
    m.add_block_count(s.n_layers)
    m.add_context_length(s.context_length)
    m.add_embedding_length(s.dim)
    m.add_feed_forward_length(s.n_ff)
    m.add_expert_feed_forward_length(s.n_ff_exp)
    m.add_expert_count(s.n_expert)
    m.add_expert_used_count(s.n_expert_used)
    m.add_expert_weights_norm(s.norm_topk_prob)
    m.add_head_count(s.n_heads)
    m.add_head_count_kv(s.n_kv_heads)
    m.add_key_length(s.head_dim)
    m.add_value_length(s.head_dim)
    m.add_layer_norm_rms_eps(s.rms_eps)
    m.add_rope_freq_base(s.rope_theta)
    m.add_rope_dimension_sections(list(s.rope_sections))
    if s.mlp_only_layers:  # GGUF holds no empty arrays: absent means every layer is MoE
        w.add(K.key(K.MLP_ONLY_LAYERS, arch), list(s.mlp_only_layers))


THINKER_MODEL_TYPES = ("qwen3_omni_moe_thinker", "qwen3_omni_moe_text")


def convert_qwen3omni_thinker(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert qwen3omni-thinker CHECKPOINT_DIR -o thinker.gguf``: the thinker's text model and tokenizer
    of a Qwen3-Omni checkpoint (the whole model's, or a thinker-only one's)."""
    from ggtts.convert.hf_checkpoint import HFCheckpoint

    ckpt = HFCheckpoint(sources, "Qwen3-Omni")
    return write_thinker(out, thinker_config_of(ckpt.config), ckpt.tensors, ckpt.dir, out_type)


def thinker_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The ``thinker_config`` of a Qwen3-Omni checkpoint's config.json (the whole model's, or a thinker-only one's,
    which is the thinker's config itself)."""
    from ggtts.convert.hf_checkpoint import sub_config

    if config.get("model_type") in THINKER_MODEL_TYPES:
        return config
    if config.get("model_type") in (None, "qwen3_omni_moe"):
        return sub_config(config, "thinker_config", "a Qwen3-Omni checkpoint")
    raise ConversionError(f"config.json: model_type '{config.get('model_type')}' is not a Qwen3-Omni model")
