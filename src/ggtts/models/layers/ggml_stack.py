"""A stack of Qwen-style decoder blocks run one step at a time as one ggml graph: no torch dispatch per operation,
no thread-pool wake-up per weight.

The same maths as the torch blocks (Qwen2's :class:`~ggtts.models.qwen2.model.Block`, Qwen3's
:class:`~ggtts.models.layers.qwen3.Block` with a dense feed-forward or a mixture of experts), written as ggml
operations the way llama.cpp builds its ``qwen2`` / ``qwen3`` / ``qwen3moe`` graphs: RMS norms, the linear layers on
the weights as stored (the very ggml tensors the torch path's :class:`~ggtts.ops.stored_weights.StoredLinear` and
:class:`~ggtts.ops.stored_experts.StoredExperts` hold; float32 parameters read in place), biases where the layer
has them, the per-head query/key RMS norms where the attention has them, NEOX rotary embeddings, new keys and values
written into the caller's :class:`~ggtts.models.layers.kv_cache.KVCache` (ggml sees its tensors' memory, so the
torch path and this one share a cache), attention over the cache up to a padded length under a mask, SwiGLU (or the
router's softmax, its top-k experts through ``mul_mat_id`` weighted and summed, and a sigmoid-gated shared expert),
the final norm and an output head.

A graph is built once per (cache shape, rows per step, padded cache length, head, all rows or the last) and
reused, for any cache of that shape: a step points the graph at its cache's memory, writes its inputs
(embeddings, positions, cache rows, mask) and runs it on ggml's thread pool. A step of several sequences
(:meth:`StackGraph.step_many`, continuous batching) is one graph too, built per the sequences' shapes: the linear
layers over all of their rows, each sequence's keys and values into its own cache and attention over it alone.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ggtts.ops import ggml_kernels
from ggtts.ops.stored_experts import Experts, StoredExperts
from ggtts.ops.stored_weights import StoredEmbedding, StoredLinear

if TYPE_CHECKING:
    from ggtts.models.layers.kv_cache import KVCache
    from ggtts.models.layers.transformer import RMSNorm

KV_STEP = 256  # attention reads the cache up to the next multiple: a new decoding graph every 256 positions
GRAPHS_KEPT = 4  # (a prompt's graph, the decoding graph of the current and the last length)
COMBINED_GRAPHS_KEPT = 4  # more, for steps of several sequences at once (step_many)
# tensors a layer adds for each sequence of a step beyond the first (14: its q/k/v views and permutes, two cache
# tensors, two writes, two attended views, its attention and a concat; the first's 3 views fit in the slack)
TENSORS_PER_MORE_SEQUENCE = 18
NODES_PER_LAYER = 56  # ops per layer with their views (about 40 with q/k norms and biases), rounded up
NODES_PER_EXPERT_LAYER = 40  # more for a mixture of experts (about 25, and two per expert a row picks)
PARAMS_PER_LAYER = 16  # float tensors a layer may hand ggml: 7 weights (float32 files), 3 biases, 4 norms
ROPE_NEOX = 2  # ggml's GGML_ROPE_TYPE_NEOX: the two halves of each head rotate together (the Qwen layout)
ROPE_BETA_FAST, ROPE_BETA_SLOW = 32.0, 1.0  # YaRN parameters ggml takes; inert with ext_factor 0
MASKED = -math.inf
CACHE_DTYPES = (torch.float32, torch.float16)  # the KV caches a graph reads and writes


@dataclass(frozen=True)
class StackShape:
    """What a graph needs beyond the modules: widths, heads, the norms' epsilon, the rotary base."""

    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    context_length: int  # the rotary table's length (ggml's n_ctx_orig; inert without YaRN)


DENSE = ("ffn_gate", "ffn_up", "ffn_down")
EXPERTS = ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def graphable(block: nn.Module) -> bool:
    """Whether a block is one a graph builds: attention, then a SwiGLU feed-forward or a mixture of SwiGLU experts
    (:class:`~ggtts.models.layers.qwen3.SparseMoE`: a softmax router, top-k, an optional gated shared expert)."""
    ffn = getattr(block, "ffn", block)
    return any(all(isinstance(getattr(ffn, n, None), nn.Module) for n in names) for names in (DENSE, EXPERTS))


def stack_graph(
    blocks: Sequence[nn.Module], output_norm: RMSNorm, shape: StackShape, keep: int = GRAPHS_KEPT
) -> StackGraph | None:
    """The blocks' steps as ggml graphs where they can be: on the CPU, ggml's kernels installed, blocks a graph
    builds (:func:`graphable`) of float32 parameters (weights stored or float32); else None (the torch modules)."""
    weight = output_norm.weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or ggml_kernels.unavailable_reason() is not None:
        return None
    if not all(graphable(b) for b in blocks):
        return None
    return StackGraph(blocks, output_norm, shape, keep)


@dataclass
class StepOutput:
    """A step's results: the normed hidden states ``(n_out, dim)`` and the head's logits ``(n_out, V)``."""

    hidden: torch.Tensor
    logits: torch.Tensor


class GraphParams:
    """The ggml tensors a step graph reads its parameters from: linear weights as stored (the ggml tensors of
    :class:`~ggtts.ops.stored_weights.StoredLinear` and :class:`~ggtts.ops.stored_experts.StoredExperts`) or on the
    memory of float32 torch parameters (one ggml tensor per parameter, shared by every graph of the owner)."""

    def __init__(self, n_params: int) -> None:
        self.lib = lib = ggml_kernels.kernels()
        self._keep: list[Any] = []  # torch tensors whose memory ggml tensors point at
        self._ctx = ggml_kernels.new_context(self, n_params * lib.ggml_tensor_overhead())
        self._tensors: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._sources: list[tuple[torch.Tensor, int]] = []  # each parameter read in place, and where it was

    def weight(self, module: nn.Module) -> Any:
        """The ggml tensor of a linear layer's weight (stored, or the torch float32 parameter's memory)."""
        if isinstance(module, StoredLinear):
            return module.matmul.tensor
        if isinstance(module, StoredEmbedding):
            return module.as_linear().matmul.tensor
        if isinstance(module, nn.Linear | nn.Embedding):
            return self.float_tensor(module.weight)
        raise TypeError(f"no ggml weight for {type(module).__name__}")

    def experts(self, module: nn.Module) -> Any:
        """The ggml tensor of an expert stack ``[n_in, n_out, E]`` (stored, or the float32 parameter's memory)."""
        if isinstance(module, StoredExperts):
            return module.tensor
        if isinstance(module, Experts):
            return self.float_tensor(module.weight)
        raise TypeError(f"no ggml expert stack for {type(module).__name__}")

    def current(self) -> bool:
        """Whether every parameter read in place is still where it was (not replaced out of place: ``p.data =``,
        ``.to()``, ``load_state_dict(assign=True)``): the graphs read the memory they were built on."""
        return all(p.data_ptr() == at for p, at in self._sources)

    def float_tensor(self, t: torch.Tensor, source: torch.Tensor | None = None) -> Any:
        """A ggml F32 tensor on a contiguous float32 CPU torch tensor's memory (1-D to 3-D); ``source``: the
        parameter ``t`` is a view of (for :meth:`current`)."""
        parameter, t = t if source is None else source, t.detach()
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError("ggml graphs take contiguous float32 CPU tensors")
        key = (t.data_ptr(), tuple(t.shape))
        if key in self._tensors:  # every step graph shares the one ggml tensor of a parameter
            return self._tensors[key]
        self._sources.append((parameter, t.data_ptr()))
        self._keep.append(t)
        lib = self.lib
        if t.dim() == 1:
            g = lib.ggml_new_tensor_1d(self._ctx, lib.GGML_TYPE_F32, t.shape[0])
        elif t.dim() == 2:
            g = lib.ggml_new_tensor_2d(self._ctx, lib.GGML_TYPE_F32, t.shape[1], t.shape[0])
        else:
            g = lib.ggml_new_tensor_3d(self._ctx, lib.GGML_TYPE_F32, t.shape[2], t.shape[1], t.shape[0])
        g.contents.data = t.data_ptr()
        self._tensors[key] = g
        return g


class StackGraph(GraphParams):
    """Runs steps of ``blocks`` + ``output_norm`` (+ a head per step) as ggml graphs (CPU, float32 activations, a
    float32 or float16 cache per sequence; one sequence a step, or several with :meth:`step_many`). ``keep``: graphs
    kept (a predictor with a head per step keeps one per head)."""

    def __init__(
        self, blocks: Sequence[nn.Module], output_norm: RMSNorm, shape: StackShape, keep: int = GRAPHS_KEPT
    ) -> None:
        if not all(graphable(b) for b in blocks):
            raise ValueError("ggml step graphs take blocks of attention and a SwiGLU feed-forward or experts only")
        super().__init__(PARAMS_PER_LAYER * (len(blocks) + 2) + 2 * keep)  # + a head per graph
        self.blocks: list[Any] = list(blocks)  # Qwen2's blocks or Qwen3's (attention and ffn parts)
        self.output_norm, self.shape, self.keep = output_norm, shape, keep
        self.combined_keep = max(COMBINED_GRAPHS_KEPT, keep)  # (a predictor's lanes step through every head a frame)
        self._graphs: OrderedDict[tuple[Any, ...], _StepGraph] = OrderedDict()
        self._combined: OrderedDict[tuple[Any, ...], _StepGraph] = OrderedDict()  # graphs of several sequences
        self._lock = threading.Lock()  # a step graph's input buffers are filled, then read: one step at a time

    @staticmethod
    def takes(cache: KVCache, rows: int = 1) -> bool:
        """Whether a step fits a graph: one sequence, a contiguous float32 or float16 cache in CPU memory (other
        steps run the torch modules)."""
        k, v = cache.k, cache.v
        return (
            rows == 1
            and k.shape[1] == 1
            and k.dtype in CACHE_DTYPES
            and k.device.type == "cpu"
            and k.is_contiguous()
            and v.is_contiguous()
        )

    def takes_all(self, xs: Sequence[torch.Tensor], caches: Sequence[KVCache]) -> bool:
        """Whether several sequences' steps (inputs ``(1, T, ...)``) fit one graph: each one's does (:meth:`takes`)."""
        return all(self.takes(c, rows=x.shape[0]) for x, c in zip(xs, caches, strict=True))

    def step(self, x: torch.Tensor, cache: KVCache, head: nn.Module, *, last_only: bool = False) -> StepOutput:
        """Input rows ``x (T, dim)`` at ``cache.length..`` (written there; the cache advances by T) -> the normed
        hidden states and ``head``'s logits of every row, or of the last with ``last_only``."""
        return self.step_many([StepPart(x, cache, last_only)], head)[0]

    def _check(self, part: StepPart) -> None:
        if not self.takes(part.cache):
            raise ValueError("ggml graphs take one sequence and a contiguous float32 or float16 CPU cache")
        if part.x.shape[0] == 0:
            raise ValueError("a step needs at least one row")
        part.cache.check_fits(part.cache.length + part.x.shape[0])

    def step_many(self, parts: Sequence[StepPart], head: nn.Module) -> list[StepOutput]:
        """Several sequences' steps as one graph: each part's rows at its own cache's length (written there; each
        cache advances by its rows), the linear layers over all rows at once, attention over each part's own
        cache. The same maths as a :meth:`step` per part, in one pass over the weights."""
        if not parts:
            raise ValueError("a step needs at least one part")
        if len({id(p.cache) for p in parts}) != len(parts):
            raise ValueError("each part of a step needs a cache of its own")
        for p in parts:
            self._check(p)
        if not self.current():  # its graphs would read the old weights' memory
            raise ValueError(
                "the model's weights were replaced out of place after its step graphs were built: load it again "
                "(or with graph=False)"
            )
        shares = tuple(_Share.of(p) for p in parts)
        caches = [p.cache for p in parts]
        key = (tuple((tuple(c.k.shape), c.k.dtype) for c in caches), shares, id(head))
        graphs, keep = (self._graphs, self.keep) if len(parts) == 1 else (self._combined, self.combined_keep)
        with self._lock:
            graph = ggml_kernels.cached(graphs, key, lambda: _StepGraph(self, caches, shares, head), keep)
            outputs = graph.run([p.x for p in parts], caches)
        for p in parts:
            p.cache.advance(p.x.shape[0])
        return outputs


@dataclass(frozen=True)
class StepPart:
    """One sequence's share of a step: its input rows ``x (T, dim)``, its cache (the rows go at its length), and
    whether only the last row's outputs are wanted."""

    x: torch.Tensor
    cache: KVCache
    last_only: bool = False


@dataclass(frozen=True)
class _Share:
    """What a step graph is built for, per sequence: its rows, the cache positions its attention reads (a multiple
    of KV_STEP, or the whole cache), whether only its last row is output."""

    n_tokens: int
    kv_len: int
    last_only: bool

    @staticmethod
    def of(part: StepPart) -> _Share:
        cache, n = part.cache, part.x.shape[0]
        end = cache.length + n
        return _Share(n, min(-(-end // KV_STEP) * KV_STEP, cache.max_len), part.last_only)

    @property
    def n_out(self) -> int:
        return 1 if self.last_only else self.n_tokens


class CacheBound:
    """What step graphs share: inputs in numpy buffers of theirs, and tensors on KV caches' memory that each run
    points at its own caches (``_on_cache_at``: each tensor, on which memory (2 i on the keys of the i-th cache,
    2 i + 1 on its values), its offset there)."""

    lib: Any
    kv_len: int  # the cache positions attention reads (a multiple of KV_STEP, or the whole cache)
    _at: tuple[int, ...]  # the keys' and values' memory of each cache the graph's tensors are on now
    _on_cache_at: list[tuple[Any, int, int]]

    def _store(
        self, ctx: Any, cache: torch.Tensor, new: Any, rows: Any, cache_type: int, kv_len: int | None = None
    ) -> tuple[Any, list[Any]]:
        """Write ``new`` [D, T, H] into ``cache`` (H, max_len, D) (of ggml type ``cache_type``) at ``rows``; the
        first ``kv_len`` positions (default: the graph's), after. Also returns the tensors on the cache's memory (the
        whole layer first), which each run points at its own cache (:meth:`_point_at`)."""
        lib = self.lib
        n_heads, max_len, d = cache.shape
        whole = lib.ggml_new_tensor_3d(ctx, cache_type, d, max_len, n_heads)
        whole.contents.data = cache.data_ptr()  # the building cache's, until allocation has placed the views
        written = lib.ggml_set_rows(ctx, whole, new, rows)  # a view of whole
        nb = written.contents.nb
        attended = lib.ggml_view_3d(ctx, written, d, self.kv_len if kv_len is None else kv_len, n_heads, nb[1],
                                    nb[2], 0)  # fmt: skip
        return attended, [whole, written, attended]

    def _input(self, tensor: Any, buffer: np.ndarray) -> Any:
        self.lib.ggml_set_input(tensor)
        tensor.contents.data = buffer.ctypes.data
        return tensor

    def _point_at(self, *caches: KVCache) -> None:
        """The graph's tensors on caches, moved onto ``caches``' memory (of the shapes the graph was built for)."""
        at = tuple(ptr for cache in caches for ptr in (cache.k.data_ptr(), cache.v.data_ptr()))
        if at == self._at:
            return
        for tensor, kind, offset in self._on_cache_at:
            tensor.data = at[kind] + offset
        self._at = at


class _StepGraph(CacheBound):
    """One step's graph over one or more sequences, each on its own cache: inputs live in numpy buffers ggml reads;
    intermediates in a ggml-allocated buffer. The linear layers run over every sequence's rows at once; each
    sequence writes its keys and values into its own cache and attends over it alone."""

    def __init__(self, owner: StackGraph, caches: Sequence[KVCache], shares: Sequence[_Share], head: nn.Module) -> None:
        lib, s = owner.lib, owner.shape
        self.lib, self.shares = lib, tuple(shares)
        self.n_tokens = n_tokens = sum(share.n_tokens for share in shares)
        self.kv_len = max(share.kv_len for share in shares)
        self._head = head  # kept alive with the graph that reads its weight
        self.cache_type = lib.GGML_TYPE_F16 if caches[0].k.dtype == torch.float16 else lib.GGML_TYPE_F32
        if any(c.k.dtype != caches[0].k.dtype for c in caches):
            raise ValueError("the caches of one step hold one type")
        n_seq = len(shares)
        n_nodes = 64 + 4 * n_seq + sum(
            NODES_PER_LAYER + TENSORS_PER_MORE_SEQUENCE * (n_seq - 1)
            + (NODES_PER_EXPERT_LAYER + 2 * b.ffn.n_used if hasattr(b, "ffn") and hasattr(b.ffn, "n_used") else 0)
            for b in owner.blocks
        )  # fmt: skip
        ctx = ggml_kernels.new_context(
            self, (n_nodes + 16) * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(n_nodes, False)
        )

        # per layer and sequence, the ggml tensors on the keys' and the values' memory, and the sequence's index
        self._on_cache: list[tuple[int, list[Any], list[Any]]] = []
        # inputs, in buffers of ours
        self.x_buf = np.zeros((n_tokens, s.dim), dtype=np.float32)
        self.pos_buf = np.zeros(n_tokens, dtype=np.int32)
        self.rows_bufs = [np.zeros(share.n_tokens, dtype=np.int64) for share in shares]
        self.mask_bufs = [np.zeros((share.n_tokens, share.kv_len), dtype=np.float16) for share in shares]
        x = self._input(lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, s.dim, n_tokens), self.x_buf)
        pos = self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, n_tokens), self.pos_buf)
        rows = [
            self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I64, share.n_tokens), buf)
            for share, buf in zip(shares, self.rows_bufs, strict=True)
        ]
        masks = [
            self._input(lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F16, share.kv_len, share.n_tokens), buf)
            for share, buf in zip(shares, self.mask_bufs, strict=True)
        ]
        starts = np.cumsum([0] + [share.n_tokens for share in shares])  # each sequence's first row

        d, hq, hkv = s.head_dim, s.n_heads, s.n_kv_heads
        scale = 1.0 / math.sqrt(d)

        def linear(module: nn.Module, h: Any) -> Any:
            out = lib.ggml_mul_mat(ctx, owner.weight(module), h)
            bias = getattr(module, "bias", None)
            return out if bias is None else lib.ggml_add(ctx, out, owner.float_tensor(bias))

        def norm(module: RMSNorm, h: Any) -> Any:
            return lib.ggml_mul(ctx, lib.ggml_rms_norm(ctx, h, module.eps), owner.float_tensor(module.weight))

        def rope(h: Any) -> Any:
            return lib.ggml_rope_ext(
                ctx, h, pos, None, d, ROPE_NEOX, s.context_length, s.rope_theta, 1.0, 0.0, 1.0,
                ROPE_BETA_FAST, ROPE_BETA_SLOW,
            )  # fmt: skip

        def heads(module: nn.Module, h: Any, n_heads: int, head_norm: RMSNorm | None) -> Any:
            h = lib.ggml_reshape_3d(ctx, linear(module, h), d, n_heads, n_tokens)  # [D, H, T]
            return rope(h if head_norm is None else norm(head_norm, h))  # Qwen3 norms each head first

        def rows_of(t: Any, i: int) -> Any:  # [D, H, T] -> the i-th sequence's tokens, permuted to [D, T_i, H]
            if n_seq > 1:
                nb = t.contents.nb
                t = lib.ggml_view_3d(ctx, t, d, t.contents.ne[1], shares[i].n_tokens, nb[1], nb[2],
                                     int(starts[i]) * nb[2])  # fmt: skip
            return lib.ggml_permute(ctx, t, 0, 2, 1, 3)

        def swiglu(ffn: Any, h: Any, part: str = "") -> Any:  # ffn_down{part}(silu(ffn_gate{part}) * ffn_up{part})
            act = lib.ggml_swiglu_split(
                ctx, linear(getattr(ffn, f"ffn_gate{part}"), h), linear(getattr(ffn, f"ffn_up{part}"), h)
            )
            return linear(getattr(ffn, f"ffn_down{part}"), act)

        def experts(moe: Any, h: Any) -> Any:  # llama.cpp's build_moe_ffn, softmax gating
            n_expert, k = moe.ffn_gate_exps.n_expert, moe.n_used
            probs = lib.ggml_soft_max(ctx, linear(moe.ffn_gate_inp, h))  # [E, T]
            picked = lib.ggml_argsort_top_k(ctx, probs, k)  # [k, T]
            weights = lib.ggml_get_rows(ctx, lib.ggml_reshape_3d(ctx, probs, 1, n_expert, n_tokens), picked)
            if moe.norm_topk_prob:  # [1, k, T] over their sum
                flat = lib.ggml_reshape_2d(ctx, weights, k, n_tokens)
                weights = lib.ggml_reshape_3d(
                    ctx, lib.ggml_div(ctx, flat, lib.ggml_sum_rows(ctx, flat)), 1, k, n_tokens
                )
            rows = lib.ggml_reshape_3d(ctx, h, s.dim, 1, n_tokens)  # every pick reads the row
            gate = lib.ggml_mul_mat_id(ctx, owner.experts(moe.ffn_gate_exps), rows, picked)  # [n_ff, k, T]
            up = lib.ggml_mul_mat_id(ctx, owner.experts(moe.ffn_up_exps), rows, picked)
            act = lib.ggml_swiglu_split(ctx, gate, up)
            out = lib.ggml_mul_mat_id(ctx, owner.experts(moe.ffn_down_exps), act, picked)  # [dim, k, T]
            out = lib.ggml_mul(ctx, out, weights)
            nb = out.contents.nb
            total = lib.ggml_view_2d(ctx, out, s.dim, n_tokens, nb[2], 0)
            for j in range(1, k):  # the picks' sum
                total = lib.ggml_add(ctx, total, lib.ggml_view_2d(ctx, out, s.dim, n_tokens, nb[2], j * nb[1]))
            if not moe.n_ff_shexp:
                return total
            gate = lib.ggml_sigmoid(ctx, linear(moe.ffn_gate_inp_shexp, h))  # [1, T]
            return lib.ggml_add(ctx, total, lib.ggml_mul(ctx, swiglu(moe, h, "_shexp"), gate))

        h = x  # [dim, T]
        for layer, blk in enumerate(owner.blocks):
            attn, ffn = getattr(blk, "attn", blk), getattr(blk, "ffn", blk)
            cur = norm(blk.attn_norm, h)
            q = heads(attn.attn_q, cur, hq, getattr(attn, "attn_q_norm", None))
            k = heads(attn.attn_k, cur, hkv, getattr(attn, "attn_k_norm", None))
            v = lib.ggml_reshape_3d(ctx, linear(attn.attn_v, cur), d, hkv, n_tokens)
            att = None
            for i, (cache, share) in enumerate(zip(caches, shares, strict=True)):
                # [D, kv_len, Hkv]
                keys, on_keys = self._store(ctx, cache.k[layer, 0], rows_of(k, i), rows[i], self.cache_type,
                                            share.kv_len)  # fmt: skip
                values, on_values = self._store(ctx, cache.v[layer, 0], rows_of(v, i), rows[i], self.cache_type,
                                                share.kv_len)  # fmt: skip
                self._on_cache.append((i, on_keys, on_values))
                out = lib.ggml_flash_attn_ext(ctx, rows_of(q, i), keys, values, masks[i], scale, 0.0, 0.0)
                att = out if att is None else lib.ggml_concat(ctx, att, out, 2)  # [D, Hq, T]
            att = lib.ggml_reshape_2d(ctx, att, d * hq, n_tokens)
            h = lib.ggml_add(ctx, h, linear(attn.attn_output, att))
            cur = norm(blk.ffn_norm, h)
            h = lib.ggml_add(ctx, h, swiglu(ffn, cur) if hasattr(ffn, "ffn_down") else experts(ffn, cur))
        h = self.hidden = norm(owner.output_norm, h)  # [dim, T]
        self.n_hidden = n_tokens  # the rows of self.hidden; the outputs are its last n_out
        self.n_out = sum(share.n_out for share in shares)
        if self.n_out < n_tokens:
            if n_seq == 1:  # the last row: a view
                row_bytes = h.contents.nb[1]
                h = lib.ggml_view_2d(ctx, h, s.dim, 1, row_bytes, (n_tokens - 1) * row_bytes)
            else:  # each sequence's rows out: the last only, or all
                self.out_buf = np.concatenate([
                    np.arange(start + share.n_tokens - share.n_out, start + share.n_tokens, dtype=np.int32)
                    for start, share in zip(starts, shares, strict=False)
                ])  # fmt: skip
                h = self.hidden = lib.ggml_get_rows(ctx, h, self._input(
                    lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, self.n_out), self.out_buf))  # fmt: skip
                self.n_hidden = self.n_out
        self.logits = lib.ggml_mul_mat(ctx, owner.weight(head), h)  # [V, n_out]
        lib.ggml_set_output(self.hidden)
        lib.ggml_set_output(self.logits)
        self.graph = lib.ggml_new_graph_custom(ctx, n_nodes, False)
        lib.ggml_build_forward_expand(self.graph, self.logits)

        self._galloc = lib.ggml_gallocr_new(ggml_kernels.cpu_buffer_type())
        self._free_galloc = weakref.finalize(self, lib.ggml_gallocr_free, self._galloc)
        if not lib.ggml_gallocr_alloc_graph(self._galloc, self.graph):
            raise MemoryError("ggml could not allocate the step's intermediate tensors")
        # where each tensor on a cache sits in its keys' or values' memory (gallocr placed the views)
        self._at = tuple(ptr for c in caches for ptr in (c.k.data_ptr(), c.v.data_ptr()))
        self._on_cache_at = [
            (t.contents, 2 * i + kind, t.contents.data - self._at[2 * i + kind])
            for i, on_keys, on_values in self._on_cache
            for kind, part in enumerate((on_keys, on_values))
            for t in part
        ]
        self.dim, self.n_vocab = s.dim, int(self.logits.contents.ne[0])
        self._plans: dict[int, Any] = {}

    def run(self, xs: Sequence[torch.Tensor], caches: Sequence[KVCache]) -> list[StepOutput]:
        """Each sequence's rows at its cache's length -> each one's outputs (the caches are not advanced here)."""
        self._point_at(*caches)
        row = 0
        for x, cache, share, rows, mask in zip(xs, caches, self.shares, self.rows_bufs, self.mask_bufs, strict=True):
            n = share.n_tokens
            self.x_buf[row : row + n] = x.detach().to(torch.float32).numpy()
            positions = np.arange(cache.length, cache.length + n, dtype=np.int32)
            self.pos_buf[row : row + n] = positions
            rows[:] = positions
            visible = np.arange(share.kv_len)[None, :] <= positions[:, None]  # causal: up to each token's position
            mask[:] = np.where(visible, 0.0, MASKED)
            row += n
        ggml_kernels.compute(self.graph, self._plans, torch.get_num_threads())
        hidden = read_floats(self.hidden, self.n_hidden * self.dim).reshape(self.n_hidden, self.dim)[-self.n_out :]
        logits = read_floats(self.logits, self.n_out * self.n_vocab).reshape(self.n_out, self.n_vocab)
        outputs, row = [], 0
        for share in self.shares:
            outputs.append(StepOutput(hidden[row : row + share.n_out], logits[row : row + share.n_out]))
            row += share.n_out
        return outputs


def read_floats(tensor: Any, n: int) -> torch.Tensor:
    """The first ``n`` float32 values of a computed ggml tensor, copied into a torch tensor."""
    data = (ctypes.c_float * n).from_address(tensor.contents.data)
    return torch.from_numpy(np.array(data, dtype=np.float32))
