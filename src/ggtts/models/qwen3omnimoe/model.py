"""Qwen3-Omni's thinker text model: Qwen3 MoE blocks with module names equal to llama.cpp's GGUF names.

Token embedding, ``n_layers`` :class:`~ggtts.models.layers.qwen3.Block` s (per-head q/k norms, grouped-query
attention, a top-k mixture of SwiGLU experts, or a dense SwiGLU in the file's ``mlp_only_layers``), a final RMS
norm and the output projection (tied to ``token_embd`` when the file has no ``output``). Positions are text-only:
transformers' M-RoPE with equal temporal, height and width positions is plain NEOX RoPE. State lives in a
:class:`~ggtts.models.layers.kv_cache.KVCache` the caller passes in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.models.layers.ggml_stack import StackGraph, StackShape, stack_graph
from ggtts.models.layers.gguf_state import empty_modules
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.qwen3 import Attention, Block, DenseFFN, SparseMoE, load_weights
from ggtts.models.layers.transformer import RMSNorm, RotaryEmbedding, new_kv_cache
from ggtts.models.qwen3omnimoe.config import ThinkerConfig
from ggtts.ops.device_weights import DEVICE_TYPES, DeviceStoredEmbedding
from ggtts.ops.stored_weights import StoredEmbedding, stored_weights_plan

MEMINFO = Path("/proc/meminfo")
MEMORY_HEADROOM = 1.1  # weights plus 10 % for activations, the KV cache and the runtime
GIB = 1 << 30


class ThinkerTooLarge(GGUFError):
    """The thinker's weights do not fit in this machine's memory."""


def _ffn(cfg: ThinkerConfig, layer: int) -> nn.Module:
    if cfg.is_moe(layer):
        return SparseMoE(cfg.dim, cfg.n_expert, cfg.n_expert_used, cfg.n_ff_exp, cfg.norm_topk_prob)
    return DenseFFN(cfg.dim, cfg.n_ff)


@dataclass
class ThinkerOutput:
    """Logits ``(B, T, V)`` (``(B, 1, V)`` with last_only), and the hidden states asked for, numbered as
    transformers' ``hidden_states``: 0 is the embeddings, ``k`` the output of layer ``k - 1``, ``n_layers`` the
    final (normed) output."""

    logits: torch.Tensor | None
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)


class Thinker(nn.Module):
    def __init__(self, cfg: ThinkerConfig, max_len: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg.n_vocab, cfg.dim)
        self.blk = nn.ModuleList(
            Block(
                cfg.dim,
                cfg.rms_eps,
                Attention(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps),
                _ffn(cfg, i),
            )
            for i in range(cfg.n_layers)
        )
        self.output_norm = RMSNorm(cfg.dim, cfg.rms_eps)
        self.output = None if cfg.tied_output else nn.Linear(cfg.dim, cfg.n_vocab, bias=False)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, max_len or cfg.context_length)
        self.weights_note: str | None = None  # why weights were widened to float, when they were
        self.graph: StackGraph | None = None  # steps as ggml graphs (from_gguf sets it where ggml runs)

    @classmethod
    def from_gguf(
        cls,
        gguf: GGUFFile,
        device: str | torch.device = "cpu",
        *,
        dtype: torch.dtype = torch.float32,
        max_len: int | None = None,
        stored_weights: bool = True,
        available: int | None = None,
        graph: bool = True,
    ) -> Thinker:
        """The thinker of a ``qwen3omnimoe`` (or ``qwen3moe``) file. Weights the file stores as F16, BF16 or blocks
        (Q8_0, ...) stay so and run through ggml's kernels on CPU (expert stacks read only the picked experts);
        ``stored_weights=False``, a GPU ``device``, or ggml not installed widen them to ``dtype``. A thinker whose
        weights do not fit in memory (``available`` bytes; default: what the system reports) is refused up front
        (:class:`ThinkerTooLarge`). On the CPU in float32, a step that asks for no hidden states is one ggml graph
        (:class:`~ggtts.models.layers.ggml_stack.StackGraph`) unless ``graph=False``."""
        cfg = ThinkerConfig.from_gguf(gguf)
        check_fits(gguf, device=device, dtype=dtype, stored_weights=stored_weights, available=available)
        max_len = min(max_len or cfg.context_length, cfg.context_length)
        with empty_modules():  # no memory or random initialisation for weights about to be replaced
            model = cls(cfg, max_len=max_len)
        model.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta, max_len)
        _, model.weights_note = load_weights(model, gguf, device=device, stored_weights=stored_weights)
        model = model.to(device=device, dtype=dtype).eval()
        if graph:
            shape = StackShape(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps, cfg.rope_theta,
                               max_len)  # fmt: skip
            model.graph = stack_graph(list(model.blk), model.output_norm, shape)
        return model

    def new_cache(self, max_len: int, *, batch: int = 1, dtype: torch.dtype | None = None) -> KVCache:
        """A cache for ``max_len`` positions, in the model's dtype unless ``dtype`` says otherwise."""
        c = self.cfg
        return new_kv_cache(
            c.n_layers, c.n_kv_heads, c.head_dim, max_len, self.rope, self.output_norm.weight, batch=batch, dtype=dtype
        )

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids ``(B, T)`` -> embeddings ``(B, T, dim)`` (what the talker projects)."""
        return self.token_embd(tokens).to(self.output_norm.weight.dtype)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final hidden states (before the output norm) -> logits."""
        h = self.output_norm(h)
        if self.output is not None:
            return self.output(h)
        if isinstance(self.token_embd, StoredEmbedding | DeviceStoredEmbedding):  # tied to a stored table: as stored
            return self.token_embd.as_linear()(h)
        return F.linear(h, self.token_embd.weight)

    def run(
        self,
        tokens: torch.Tensor | None,
        cache: KVCache,
        *,
        embeddings: torch.Tensor | None = None,
        hidden_layers: Collection[int] = (),
        last_only: bool = False,
        logits: bool = True,
    ) -> ThinkerOutput:
        """Tokens ``(B, T)`` (or their ``embeddings`` ``(B, T, dim)``) at ``cache.length..``: logits and the hidden
        states ``hidden_layers`` (see :class:`ThinkerOutput`). Commits the ``T`` new positions to the cache."""
        if (tokens is None) == (embeddings is None):
            raise ValueError("give either tokens or embeddings")
        wanted = set(hidden_layers)
        bad = sorted(k for k in wanted if not 0 <= k <= self.cfg.n_layers)
        if bad:
            raise ValueError(f"hidden state {bad[0]} does not exist: the thinker has 0..{self.cfg.n_layers}")
        h = embeddings if tokens is None else self.embed(tokens)
        assert h is not None
        if self.graph is not None and logits and not wanted and self.graph.takes(cache, rows=h.shape[0]):
            head = self.output if self.output is not None else self.token_embd
            return ThinkerOutput(self.graph.step(h[0], cache, head, last_only=last_only).logits.unsqueeze(0))
        cache.check_fits(cache.length + h.shape[1])
        hidden: dict[int, torch.Tensor] = {0: h} if 0 in wanted else {}
        start = cache.length
        for i, block in enumerate(self.blk):
            h = block(h, self.rope, cache, i, start)
            if i + 1 in wanted and i + 1 < self.cfg.n_layers:
                hidden[i + 1] = h
        cache.advance(h.shape[1])
        if self.cfg.n_layers in wanted:
            hidden[self.cfg.n_layers] = self.output_norm(h)
        if last_only:
            h = h[:, -1:]
        return ThinkerOutput(self.logits(h) if logits else None, hidden)

    def forward(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = False) -> torch.Tensor:
        """Tokens ``(B, T)`` at ``cache.length..`` -> logits ``(B, T, V)`` (``(B, 1, V)`` with last_only)."""
        out = self.run(tokens, cache, last_only=last_only)
        assert out.logits is not None
        return out.logits

    @torch.no_grad()
    def greedy(
        self,
        tokens: Iterable[int],
        max_new: int,
        eos_ids: Collection[int] = (),
        before_step: Callable[[], None] | None = None,
    ) -> list[int]:
        """Greedy continuation of a prompt (one sequence): up to ``max_new`` tokens, stopping after an EOS id.
        ``before_step`` runs before each forward (a caller's cancellation check raises there)."""
        return self.answer(list(tokens), max_new, eos_ids, before_step=before_step)[0]

    @torch.no_grad()
    def answer(
        self,
        prompt: list[int],
        max_new: int,
        eos_ids: Collection[int] = (),
        *,
        embeddings: torch.Tensor | None = None,
        hidden_layers: Collection[int] = (),
        before_step: Callable[[], None] | None = None,
    ) -> tuple[list[int], dict[int, torch.Tensor]]:
        """:meth:`greedy` over ``prompt``, whose rows may be given as ``embeddings`` ``(1, T, dim)`` (audio placed
        among the tokens' embeddings); also returns the prompt's hidden states ``hidden_layers`` (numbered as
        :class:`ThinkerOutput`'s), each ``(T, dim)``."""
        cache = self.new_cache(len(prompt) + max_new)
        device = self.output_norm.weight.device
        if before_step is not None:
            before_step()
        if embeddings is not None:
            if tuple(embeddings.shape[:2]) != (1, len(prompt)):
                raise ValueError(f"embeddings {tuple(embeddings.shape)} do not match a prompt of {len(prompt)}")
            first = self.run(None, cache, embeddings=embeddings, hidden_layers=hidden_layers, last_only=True)
        else:
            tokens = torch.tensor([prompt], device=device)
            first = self.run(tokens, cache, hidden_layers=hidden_layers, last_only=True)
        assert first.logits is not None
        logits, hidden = first.logits, {k: v[0] for k, v in first.hidden.items()}
        out: list[int] = []
        while len(out) < max_new:
            token = int(logits[0, -1].argmax())
            out.append(token)
            if token in eos_ids or len(out) == max_new:
                break
            if before_step is not None:
                before_step()
            logits = self(torch.tensor([[token]], device=device), cache)
        return out, hidden


def required_bytes(
    gguf: GGUFFile, *, dtype: torch.dtype = torch.float32, stored_weights: bool = True, device: str = "cpu"
) -> int:
    """Memory the thinker's weights take once loaded: the file's tensor bytes where they run as stored (memory-mapped
    pages), their element count times ``dtype``'s size where they are widened."""
    plan = stored_weights_plan(device, stored_weights)
    item = torch.empty((), dtype=dtype).element_size()
    total = 0
    for info in gguf.infos():
        n = 1
        for s in info.shape:
            n *= int(s)
        kept = plan.stored or (plan.on_device and info.type in DEVICE_TYPES)
        widened = not kept or info.type.name in ("F32", "F64")
        total += n * item if widened else info.n_bytes
    return total


def available_bytes() -> int | None:
    """Memory the system can still give (``MemAvailable``; page cache counts, as mapped weights live there)."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if hasattr(os, "sysconf"):
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError):
            return None
    return None


def check_fits(
    gguf: GGUFFile,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    stored_weights: bool = True,
    available: int | None = None,
) -> None:
    """:class:`ThinkerTooLarge`, with the size needed, unless the thinker's weights fit in ``available`` bytes."""
    if torch.device(device).type != "cpu":
        return  # GPU memory is the device's business: torch reports an out-of-memory there by itself
    need = int(required_bytes(gguf, dtype=dtype, stored_weights=stored_weights) * MEMORY_HEADROOM)
    have = available if available is not None else available_bytes()
    if have is not None and need > have:
        raise ThinkerTooLarge(
            f"{gguf.path}: the thinker needs about {need / GIB:.1f} GiB of memory and {have / GIB:.1f} GiB is "
            "available; use a smaller quantization (e.g. convert with --type q8_0 or q4_0) or a machine with more "
            "memory"
        )
