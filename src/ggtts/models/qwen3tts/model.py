"""Qwen3-TTS's talker (a dense Qwen3 transformer writing each frame's first codebook) and code predictor (the
frame's other codebooks), from llama.cpp's talker and mmproj files.

These are Qwen3-Omni's modules (:class:`~ggtts.models.qwen3omni_talker.model.TalkerStack`, its
:class:`~ggtts.models.qwen3omni_talker.model.CodePredictor`) with dense feed-forwards, so the same generation loop
drives them. The talker's ``token_embd`` holds the projected text embeddings and then the codec's
(:meth:`Talker.embed_text`, :meth:`~TalkerStack.embed_codes`); the talker's M-RoPE is plain NEOX RoPE for a
text-only stream. The code predictor's tables and heads, stacked in the mmproj file, become one module per
codebook (views of the stacks); where it is narrower than the talker its inputs go through ``proj_in``.
"""

from __future__ import annotations

import torch

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.models.layers.gguf_state import empty_modules
from ggtts.models.layers.qwen3 import load_weights
from ggtts.models.layers.validate import check_finite_if_small
from ggtts.models.qwen3omni_talker.model import CodePredictor, TalkerStack
from ggtts.models.qwen3tts.config import Qwen3TTSConfig


class Talker(TalkerStack):
    cfg: Qwen3TTSConfig

    def __init__(self, cfg: Qwen3TTSConfig, max_len: int | None = None) -> None:
        super().__init__(
            cfg, max_len or cfg.context_length, cfg.text_vocab + cfg.codec_vocab, cfg.text_vocab, cfg.talker.dim
        )

    @classmethod
    def from_gguf(
        cls, talker: GGUFFile, mmproj: GGUFFile, device: str | torch.device = "cpu", *, stored_weights: bool = True,
        max_len: int = 8192, step_graphs: bool = True, graph: bool = True,
    ) -> Talker:  # fmt: skip
        """The talker from its file and the code predictor from the mmproj file; weights stored as F16/BF16/blocks
        run as stored on the CPU where ggml's kernels are installed, and each step as one ggml graph there unless
        ``graph=False`` (:meth:`~TalkerStack.loaded`)."""
        cfg = Qwen3TTSConfig.from_gguf(talker, mmproj)
        max_len = min(max_len, cfg.context_length)
        with empty_modules():
            model = cls(cfg, max_len)
        cp = model.cp
        del model.cp  # loaded from the other file
        _, model.weights_note = load_weights(model, talker, device=device, stored_weights=stored_weights)
        model.cp = load_code_predictor(cp, mmproj, device, stored_weights=stored_weights)
        model.loaded(device, max_len, step_graphs, graph)
        return model

    def embed_text(self, ids: list[int]) -> torch.Tensor:
        """Text ids -> their projected embeddings ``(1, T, dim)``."""
        return self.token_embd(torch.tensor([ids], device=self.output_norm.weight.device))


def cp_name(module_name: str) -> str:
    """The mmproj's name of a code predictor parameter (but the stacked tables and heads)."""
    if module_name.startswith("blk."):
        _, layer, rest = module_name.split(".", 2)
        part, leaf = rest.removeprefix("attn.").removeprefix("ffn.").rsplit(".", 1)
        return f"{K.CP}.blk.{layer}.{K.CP_LAYER[part]}.{leaf}"
    if module_name.startswith("proj_in."):
        return f"{K.CP_PROJ_IN}.{module_name.removeprefix('proj_in.')}"
    if module_name == "output_norm.weight":
        return K.CP_OUTPUT_NORM
    raise KeyError(module_name)


def _stored_name(module_name: str) -> str:
    try:
        return cp_name(module_name)
    except KeyError:
        return ""  # the stacked tables and heads: not swapped


def _stored_stacks(cp: CodePredictor, mmproj: GGUFFile) -> None:
    """The heads and the tables as stored, each a slice of its stacked tensor's rows, where the stack has the
    expected shape: the heads where ggml multiplies the stored type (read once a frame each, they were the frame's
    largest float32 reads), the tables where it is not F32 (looked-up rows are widened; widened whole, the tables
    took 126 MB at the 0.6B shape)."""
    import numpy as np
    from gguf import GGMLQuantizationType

    from ggtts.ops.ggml_kernels import multiplies
    from ggtts.ops.stored_weights import StoredEmbedding, StoredLinear

    for name, modules in ((K.CP_HEAD, cp.output), (K.CP_EMBD, cp.codec_embd)):
        info, first = mmproj.info(name), modules[0]
        want = (len(modules), *first.weight.shape) if isinstance(first, torch.nn.Linear | torch.nn.Embedding) else None
        if want is None or tuple(info.shape) != want or mmproj.byte_order != "<":
            continue
        n, rows, width = want
        raw = mmproj.raw(name).view(np.uint8).reshape(n * rows, -1)
        for j in range(n):
            part = raw[j * rows : (j + 1) * rows]
            if name == K.CP_HEAD and multiplies(info.type):
                modules[j] = StoredLinear(part, info.type, rows, width, bias=False)
            elif name == K.CP_EMBD and info.type != GGMLQuantizationType.F32:
                modules[j] = StoredEmbedding(part, info.type, rows, width)


def load_code_predictor(
    cp: CodePredictor, mmproj: GGUFFile, device: str | torch.device, *, stored_weights: bool = True
) -> CodePredictor:
    """Fill ``cp`` (built on the meta device) from the mmproj file, strictly: every ``a.gen.code.*`` tensor has
    its place. Its blocks', ``proj_in``'s, the stacked heads' and the stacked tables' weights stay as stored
    where ggml's kernels do (:func:`use_stored_weights`, :func:`_stored_stacks`)."""
    from ggtts.ops.stored_weights import stored_weights_plan, use_stored_weights

    n = cp.cfg.n_codebooks - 1
    plan = stored_weights_plan(device, stored_weights)
    consumed = use_stored_weights(cp, mmproj, gguf_name=_stored_name) if plan.stored else set()
    if plan.stored:
        _stored_stacks(cp, mmproj)
    state = cp.state_dict()
    embd = mmproj.tensor(K.CP_EMBD) if any(n.startswith("codec_embd.") for n in state) else None
    head = mmproj.tensor(K.CP_HEAD) if any(n.startswith("output.") for n in state) else None
    values: dict[str, torch.Tensor] = {}
    used = {K.CP_EMBD, K.CP_HEAD, K.CP_OUT_EMBD, *consumed}  # out_embd: the talker's codec table, the talker has
    for name, want in state.items():
        if name.startswith("codec_embd."):
            assert embd is not None
            value = embd[int(name.split(".")[1])]
        elif name.startswith("output."):
            assert head is not None
            value = head[int(name.split(".")[1])]
        else:
            file_name = cp_name(name)
            if file_name not in mmproj:
                raise GGUFError(f"{mmproj.path}: missing tensor '{file_name}'")
            used.add(file_name)
            value = mmproj.tensor(file_name)
            check_finite_if_small(mmproj.path, file_name, value)
        if value.shape != want.shape:
            raise GGUFError(f"{mmproj.path}: the code predictor's '{name}' has shape {list(value.shape)}, expected "
                            f"{list(want.shape)} ({n} codebooks after the first)")  # fmt: skip
        values[name] = value.to(device)
    extra = sorted(t for t in mmproj.names() if t.startswith(K.CP + ".") and t not in used)
    if extra:
        raise GGUFError(f"{mmproj.path}: unexpected tensor '{extra[0]}' for this code predictor")
    cp.load_state_dict(values, strict=True, assign=True)
    return cp
