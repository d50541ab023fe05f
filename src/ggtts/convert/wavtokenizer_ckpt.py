"""WavTokenizer checkpoint (.ckpt, or OuteTTS's ``decoder_model.pt``) -> llama.cpp ``wavtokenizer-dec`` GGUF.

Only the decoder is kept: the first codebook, the Vocos backbone and the iSTFT head's linear layer. The
backbone's AdaLayerNorms (one scale/shift row per bandwidth) are baked for bandwidth 0, which is what OuteTTS
and
llama.cpp decode with. Per-channel vectors of convolutional layers are stored ``(C, 1)`` as llama.cpp expects.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import ConversionError
from ggtts.gguf.keys import WavTokenizerDec as K
from ggtts.gguf.write import ModelWriter, OutType, refuse_low_bit
from ggtts.models.wavtokenizer.config import DEFAULT_HOP_LENGTH, DEFAULT_SAMPLE_RATE

CODEBOOK = "feature_extractor.encodec.quantizer.vq.layers.0._codebook.embed"
BANDWIDTH_ID = 0  # OuteTTS decodes with bandwidth_id 0; its AdaLayerNorm rows for other bandwidths are dropped
CONTEXT_LENGTH = 8192  # what llama.cpp's converter writes (the decoder itself has no positional limit)
ATTN_HEADS = 1

Transform = Callable[[torch.Tensor], torch.Tensor]


def _column(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, 1)  # (C,) -> (C, 1): llama.cpp's broadcastable layout


def _bandwidth_row(t: torch.Tensor) -> torch.Tensor:
    return t[BANDWIDTH_ID]


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


# upstream regex -> (GGUF name template, transform). {i} is the block index from the match.
_POSNET_RESNET = {
    r"backbone\.pos_net\.(\d+)\.(norm1|norm2|conv1|conv2)\.bias": ("posnet.{i}.{p}.bias", _column),
    r"backbone\.pos_net\.(\d+)\.(norm1|norm2)\.weight": ("posnet.{i}.{p}.weight", _column),
    r"backbone\.pos_net\.(\d+)\.(conv1|conv2)\.weight": ("posnet.{i}.{p}.weight", _same),
}
_POSNET_ATTN = {
    **{
        rf"backbone\.pos_net\.(\d+)\.{up}\.weight": (f"posnet.{{i}}.{ours}.weight", _same)
        for up, ours in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("proj_out", "attn_output"))
    },
    **{
        rf"backbone\.pos_net\.(\d+)\.{up}\.bias": (f"posnet.{{i}}.{ours}.bias", _column)
        for up, ours in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("proj_out", "attn_output"))
    },
    r"backbone\.pos_net\.(\d+)\.norm\.(weight|bias)": ("posnet.{i}.attn_norm.{p}", _column),
}
_RULES: dict[str, tuple[str, Transform]] = {
    re.escape(CODEBOOK): (K.TOKEN_EMBD + ".weight", _same),
    r"backbone\.embed\.weight": (K.CONV1D + ".weight", _same),
    r"backbone\.embed\.bias": (K.CONV1D + ".bias", _column),
    **_POSNET_RESNET,
    **_POSNET_ATTN,
    r"backbone\.pos_net\.(\d+)\.(weight|bias)": ("posnet.{i}.attn_norm.{p}", _column),  # the final GroupNorm
    r"backbone\.norm\.scale\.weight": (K.TOKEN_EMBD_NORM + ".weight", _bandwidth_row),
    r"backbone\.norm\.shift\.weight": (K.TOKEN_EMBD_NORM + ".bias", _bandwidth_row),
    r"backbone\.norm\.(weight|bias)": (K.TOKEN_EMBD_NORM + ".{p}", _same),
    r"backbone\.convnext\.(\d+)\.dwconv\.weight": ("convnext.{i}.dw.weight", _same),
    r"backbone\.convnext\.(\d+)\.dwconv\.bias": ("convnext.{i}.dw.bias", _column),
    r"backbone\.convnext\.(\d+)\.norm\.scale\.weight": ("convnext.{i}.norm.weight", _bandwidth_row),
    r"backbone\.convnext\.(\d+)\.norm\.shift\.weight": ("convnext.{i}.norm.bias", _bandwidth_row),
    r"backbone\.convnext\.(\d+)\.norm\.(weight|bias)": ("convnext.{i}.norm.{p}", _same),
    r"backbone\.convnext\.(\d+)\.pwconv1\.(weight|bias)": ("convnext.{i}.pw1.{p}", _same),
    r"backbone\.convnext\.(\d+)\.pwconv2\.(weight|bias)": ("convnext.{i}.pw2.{p}", _same),
    r"backbone\.convnext\.(\d+)\.gamma": ("convnext.{i}.gamma.weight", _same),
    r"backbone\.final_layer_norm\.(weight|bias)": (K.OUTPUT_NORM + ".{p}", _same),
    r"head\.out\.(weight|bias)": (K.OUTPUT + ".{p}", _same),
}
_COMPILED = [(re.compile(pattern + r"$"), target, fn) for pattern, (target, fn) in _RULES.items()]


def gguf_name(upstream: str) -> tuple[str, Transform] | None:
    """The GGUF name and transform of one upstream decoder tensor; None for tensors outside the decoder."""
    for pattern, target, fn in _COMPILED:
        m = pattern.match(upstream)
        if not m:
            continue
        groups = m.groups()
        index = groups[0] if groups and groups[0].isdigit() else ""
        part = groups[-1] if groups and not groups[-1].isdigit() else ""
        return target.format(i=index, p=part), fn
    return None


def _load(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ConversionError(f"{path}: no such file") from None
    except Exception as e:  # not plain tensors and containers: a full (Lightning) pickle
        if "Weights only load failed" not in str(e):
            raise ConversionError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__})") from None
    warnings.warn(
        f"{path}: the checkpoint holds Python objects besides tensors; loading it as a full pickle",
        stacklevel=3,
    )
    return torch.load(path, map_location="cpu", weights_only=False)


def decoder_tensors(checkpoint: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The upstream-named decoder tensors of a WavTokenizer .ckpt or an OuteTTS ``decoder_model.pt``."""
    if "model_state_dict" in checkpoint:  # OuteTTS's repackaged decoder
        state = dict(checkpoint["model_state_dict"])
        codebook = state.pop("codebook_weights", checkpoint.get("codebook_weights"))
        if codebook is not None:
            state[CODEBOOK] = codebook
        return state
    state = checkpoint.get("state_dict", checkpoint)
    if not isinstance(state, dict):
        raise ConversionError("the checkpoint has no state_dict of tensors")
    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def _iter_mapped(state: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in state.items():
        mapped = gguf_name(name)
        if mapped is None:
            continue
        target, fn = mapped
        yield target, fn(tensor.detach().to(torch.float32))


def convert_wavtokenizer_ckpt(
    ckpt: str | Path,
    out: str | Path,
    out_type: OutType | str = OutType.F16,
    *,
    hop_length: int = DEFAULT_HOP_LENGTH,
    sample_rate: int = DEFAULT_SAMPLE_RATE,
    name: str = "WavTokenizer decoder",
) -> Path:
    state = decoder_tensors(_load(Path(ckpt)))
    if CODEBOOK not in state:
        raise ConversionError(f"{ckpt}: no codebook '{CODEBOOK}': is this a WavTokenizer checkpoint?")
    tensors = dict(_iter_mapped(state))
    needed = ("conv1d.weight", "output.weight", "token_embd_norm.weight", "output_norm.weight")
    for n in needed:
        if n not in tensors:
            raise ConversionError(f"{ckpt}: the decoder tensor for '{n}' is missing")
    n_vocab, n_features = tensors["token_embd.weight"].shape
    dim = tensors["conv1d.weight"].shape[0]
    n_convnext = len({n.split(".")[1] for n in tensors if n.startswith("convnext.")})
    n_posnet = len({n.split(".")[1] for n in tensors if n.startswith("posnet.")})
    n_ff = tensors["convnext.0.pw1.weight"].shape[0]
    n_out = tensors["output.weight"].shape[0]

    w = ModelWriter(out, K.ARCH, out_type)
    m = w.meta
    m.add_name(name)
    m.add_block_count(n_convnext)
    m.add_context_length(CONTEXT_LENGTH)
    m.add_embedding_length(n_out)
    m.add_head_count(ATTN_HEADS)
    m.add_layer_norm_eps(1e-6)
    m.add_vocab_size(n_vocab)
    m.add_features_length(n_features)
    m.add_feed_forward_length(n_ff)
    m.add_group_norm_eps(1e-6)
    m.add_group_norm_groups(_group_norm_groups(state))
    m.add_posnet_embedding_length(dim)
    m.add_posnet_block_count(n_posnet)
    m.add_convnext_embedding_length(dim)
    m.add_convnext_block_count(n_convnext)
    m.add_causal_attention(False)
    m.add_tokenizer_model("none")
    w.add(K.HOP_LENGTH, int(hop_length))
    w.add(K.SAMPLE_RATE, int(sample_rate))
    for tname, tensor in sorted(tensors.items()):
        w.add_tensor(tname, tensor)
    return w.write()


UPSTREAM_GROUP_NORM_GROUPS = 32  # Vocos/WavTokenizer's Normalize(): GroupNorm(num_groups=32)


def _group_norm_groups(state: dict[str, torch.Tensor]) -> int:
    """Upstream hard-codes 32 groups; a checkpoint does not record it."""
    del state
    return UPSTREAM_GROUP_NORM_GROUPS


def convert_wavtokenizer(sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert wavtokenizer CKPT -o OUT.gguf``: one .ckpt (or OuteTTS decoder_model.pt)."""
    refuse_low_bit(out_type, "the WavTokenizer decoder")
    ckpts = [s for s in sources if s.suffix.lower() in (".ckpt", ".pt", ".pth", ".bin")]
    if len(ckpts) != 1:
        raise ConversionError("give exactly one WavTokenizer checkpoint (.ckpt, or OuteTTS's decoder_model.pt)")
    return convert_wavtokenizer_ckpt(ckpts[0], out, out_type)
