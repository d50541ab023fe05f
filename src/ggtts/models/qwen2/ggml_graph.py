"""Qwen2's forward pass as one ggml graph per step: decoding without torch's per-operation dispatch.

The same maths as :mod:`ggtts.models.qwen2.model`, written as ggml operations the way llama.cpp builds its
``qwen2`` graph: RMS norms, the linear layers on the weights as stored (the very ggml tensors the torch path's
:class:`~ggtts.ops.stored_weights.StoredLinear` layers hold), NEOX rotary embeddings, new keys and values
written into the caller's :class:`~ggtts.models.layers.kv_cache.KVCache` (ggml sees its tensors' memory, so the
torch path and this one share a cache), attention over the cache up to a padded length with a mask, SwiGLU.

A graph is built once per (cache, tokens per step, padded cache length, all or last logits) and reused: a step
only writes its inputs (embeddings, positions, cache rows, mask) and runs it on ggml's thread pool.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ggtts.ops import ggml_kernels
from ggtts.ops.stored_weights import StoredEmbedding, StoredLinear

if TYPE_CHECKING:
    from ggtts.models.layers.kv_cache import KVCache
    from ggtts.models.layers.transformer import RMSNorm
    from ggtts.models.qwen2.model import Block, Qwen2Model

KV_STEP = 256  # attention reads the cache up to the next multiple: a new decoding graph every 256 positions
GRAPHS_KEPT = 4  # (a prompt's graph, the decoding graph of the current and the last length)
NODES_PER_LAYER = 48  # ops per layer with their views (about 35), rounded up
PARAMS_PER_LAYER = 16  # float tensors a layer may hand ggml: 7 weights (float32 files), 3 biases, 2 norms
ROPE_NEOX = 2  # ggml's GGML_ROPE_TYPE_NEOX: the two halves of each head rotate together (Qwen2's layout)
ROPE_BETA_FAST, ROPE_BETA_SLOW = 32.0, 1.0  # YaRN parameters ggml takes; inert with ext_factor 0
MASKED = -math.inf
CACHE_DTYPES = (torch.float32, torch.float16)  # the KV caches a graph reads and writes


class Qwen2Graph:
    """Runs :class:`~ggtts.models.qwen2.model.Qwen2Model` steps as ggml graphs (CPU, float32 activations, a float32
    or float16 cache, one sequence)."""

    def __init__(self, model: Qwen2Model) -> None:
        self.model = model
        self.lib = lib = ggml_kernels.kernels()
        self._keep: list[Any] = []  # torch tensors whose memory ggml tensors point at
        n_params = PARAMS_PER_LAYER * (len(model.blk) + 2)
        self._ctx = ggml_kernels.new_context(self, n_params * lib.ggml_tensor_overhead())
        self._graphs: OrderedDict[tuple[Any, ...], _StepGraph] = OrderedDict()
        self._lock = threading.Lock()  # a step graph's input buffers are filled, then read: one step at a time
        self._floats: dict[tuple[int, tuple[int, ...]], Any] = {}

    def weight(self, module: nn.Module) -> Any:
        """The ggml tensor of a linear layer's weight (stored, or the torch float32 parameter's memory)."""
        if isinstance(module, StoredLinear):
            return module.matmul.tensor
        if isinstance(module, StoredEmbedding):
            return module.as_linear().matmul.tensor
        if isinstance(module, nn.Linear | nn.Embedding):
            return self.float_tensor(module.weight)
        raise TypeError(f"no ggml weight for {type(module).__name__}")

    def float_tensor(self, t: torch.Tensor) -> Any:
        """A ggml F32 tensor on a contiguous float32 CPU torch tensor's memory (1-D or 2-D)."""
        t = t.detach()
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError("ggml graphs take contiguous float32 CPU tensors")
        key = (t.data_ptr(), tuple(t.shape))
        if key in self._floats:  # every step graph shares the one ggml tensor of a parameter
            return self._floats[key]
        self._keep.append(t)
        lib = self.lib
        if t.dim() == 1:
            g = lib.ggml_new_tensor_1d(self._ctx, lib.GGML_TYPE_F32, t.shape[0])
        else:
            g = lib.ggml_new_tensor_2d(self._ctx, lib.GGML_TYPE_F32, t.shape[1], t.shape[0])
        g.contents.data = t.data_ptr()
        self._floats[key] = g
        return g

    @staticmethod
    def takes(tokens: torch.Tensor, cache: KVCache) -> bool:
        """Whether a step fits a graph: one sequence, a contiguous float32 or float16 cache in CPU memory (other
        steps run the torch modules)."""
        k, v = cache.k, cache.v
        return (
            tokens.shape[0] == 1
            and k.dtype in CACHE_DTYPES
            and k.device.type == "cpu"
            and k.is_contiguous()
            and v.is_contiguous()
        )

    def forward(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = False) -> torch.Tensor:
        """Tokens ``(1, T)`` at ``cache.length..`` -> logits ``(1, T, V)`` (``(1, 1, V)`` with last_only)."""
        if not self.takes(tokens, cache):
            raise ValueError("ggml graphs take one sequence and a contiguous float32 or float16 CPU cache")
        n = tokens.shape[1]
        start = cache.length
        end = start + n
        cache.check_fits(end)
        kv_len = min(-(-end // KV_STEP) * KV_STEP, cache.max_len)
        with torch.inference_mode():
            embeddings = self.model.token_embd(tokens[0])  # (T, dim)
        with self._lock:
            logits = self._graph(cache, n, kv_len, last_only).run(embeddings, start)
        cache.advance(n)
        return logits.unsqueeze(0)

    def _graph(self, cache: KVCache, n: int, kv_len: int, last_only: bool) -> _StepGraph:
        # a graph writes into one cache (it keeps that cache's memory alive): a new cache gets graphs of its own
        key = (cache.k.data_ptr(), cache.v.data_ptr(), cache.k.dtype, cache.max_len, n, kv_len, last_only)
        return ggml_kernels.cached(
            self._graphs, key, lambda: _StepGraph(self, cache, n, kv_len, last_only), GRAPHS_KEPT
        )


class _StepGraph:
    """One step's graph: inputs live in numpy buffers ggml reads; intermediates in a ggml-allocated buffer."""

    def __init__(self, owner: Qwen2Graph, cache: KVCache, n_tokens: int, kv_len: int, last_only: bool) -> None:
        model, lib = owner.model, owner.lib
        cfg = model.cfg
        self.lib, self.n_tokens, self.kv_len = lib, n_tokens, kv_len
        self.cache_type = lib.GGML_TYPE_F16 if cache.k.dtype == torch.float16 else lib.GGML_TYPE_F32
        n_nodes = NODES_PER_LAYER * cfg.n_layers + 64
        ctx = ggml_kernels.new_context(
            self, (n_nodes + 16) * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(n_nodes, False)
        )

        self._cache_views: list[torch.Tensor] = []
        # inputs, in buffers of ours
        self.x_buf = np.zeros((n_tokens, cfg.dim), dtype=np.float32)
        self.pos_buf = np.zeros(n_tokens, dtype=np.int32)
        self.rows_buf = np.zeros(n_tokens, dtype=np.int64)
        self.mask_buf = np.zeros((n_tokens, kv_len), dtype=np.float16)
        x = self._input(lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, cfg.dim, n_tokens), self.x_buf)
        pos = self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, n_tokens), self.pos_buf)
        rows = self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I64, n_tokens), self.rows_buf)
        mask = self._input(lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F16, kv_len, n_tokens), self.mask_buf)

        d, hq, hkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        scale = 1.0 / math.sqrt(d)

        def linear(module: nn.Module, h: Any) -> Any:
            out = lib.ggml_mul_mat(ctx, owner.weight(module), h)
            bias = getattr(module, "bias", None)
            return out if bias is None else lib.ggml_add(ctx, out, owner.float_tensor(bias))

        def norm(module: RMSNorm, h: Any) -> Any:
            return lib.ggml_mul(ctx, lib.ggml_rms_norm(ctx, h, cfg.rms_eps), owner.float_tensor(module.weight))

        def rope(h: Any) -> Any:
            return lib.ggml_rope_ext(
                ctx, h, pos, None, d, ROPE_NEOX, cfg.context_length, cfg.rope_theta, 1.0, 0.0, 1.0,
                ROPE_BETA_FAST, ROPE_BETA_SLOW,
            )  # fmt: skip

        h = x  # [dim, T]
        blocks: list[Block] = list(model.blk)  # type: ignore[arg-type]
        for layer, blk in enumerate(blocks):
            cur = norm(blk.attn_norm, h)
            q = rope(lib.ggml_reshape_3d(ctx, linear(blk.attn_q, cur), d, hq, n_tokens))  # [D, Hq, T]
            k = rope(lib.ggml_reshape_3d(ctx, linear(blk.attn_k, cur), d, hkv, n_tokens))
            v = lib.ggml_reshape_3d(ctx, linear(blk.attn_v, cur), d, hkv, n_tokens)
            keys = self._store(ctx, owner, cache.k[layer, 0], k, rows)  # [D, kv_len, Hkv]
            values = self._store(ctx, owner, cache.v[layer, 0], v, rows)
            q = lib.ggml_permute(ctx, q, 0, 2, 1, 3)  # [D, T, Hq]
            att = lib.ggml_flash_attn_ext(ctx, q, keys, values, mask, scale, 0.0, 0.0)  # [D, Hq, T]
            att = lib.ggml_reshape_2d(ctx, att, d * hq, n_tokens)
            h = lib.ggml_add(ctx, h, linear(blk.attn_output, att))
            cur = norm(blk.ffn_norm, h)
            act = lib.ggml_swiglu_split(ctx, linear(blk.ffn_gate, cur), linear(blk.ffn_up, cur))
            h = lib.ggml_add(ctx, h, linear(blk.ffn_down, act))
        h = norm(model.output_norm, h)
        if last_only and n_tokens > 1:
            row_bytes = h.contents.nb[1]
            h = lib.ggml_view_2d(ctx, h, cfg.dim, 1, row_bytes, (n_tokens - 1) * row_bytes)
        head = model.output if model.output is not None else model.token_embd
        self.logits = lib.ggml_mul_mat(ctx, owner.weight(head), h)  # [V, T or 1]
        lib.ggml_set_output(self.logits)
        self.graph = lib.ggml_new_graph_custom(ctx, n_nodes, False)
        lib.ggml_build_forward_expand(self.graph, self.logits)

        self._galloc = lib.ggml_gallocr_new(ggml_kernels.cpu_buffer_type())
        self._free_galloc = weakref.finalize(self, lib.ggml_gallocr_free, self._galloc)
        if not lib.ggml_gallocr_alloc_graph(self._galloc, self.graph):
            raise MemoryError("ggml could not allocate the step's intermediate tensors")
        self.n_out = 1 if last_only else n_tokens
        self.n_vocab = cfg.n_vocab
        self._plans: dict[int, Any] = {}

    def _input(self, tensor: Any, buffer: np.ndarray) -> Any:
        self.lib.ggml_set_input(tensor)
        tensor.contents.data = buffer.ctypes.data
        return tensor

    def _store(self, ctx: Any, owner: Qwen2Graph, cache: torch.Tensor, new: Any, rows: Any) -> Any:
        """Write ``new`` [D, H, T] into ``cache`` (H, max_len, D) at ``rows``; the first kv_len positions, after."""
        lib = self.lib
        n_heads, max_len, d = cache.shape
        whole = lib.ggml_new_tensor_3d(ctx, self.cache_type, d, max_len, n_heads)
        whole.contents.data = cache.data_ptr()
        self._cache_views.append(cache)  # alive as long as this graph, which writes into it
        written = lib.ggml_set_rows(ctx, whole, lib.ggml_permute(ctx, new, 0, 2, 1, 3), rows)  # a view of whole
        nb = written.contents.nb
        return lib.ggml_view_3d(ctx, written, d, self.kv_len, n_heads, nb[1], nb[2], 0)

    def run(self, embeddings: torch.Tensor, start: int) -> torch.Tensor:
        n = self.n_tokens
        self.x_buf[:] = embeddings.detach().to(torch.float32).numpy()
        self.pos_buf[:] = np.arange(start, start + n, dtype=np.int32)
        self.rows_buf[:] = self.pos_buf
        visible = np.arange(self.kv_len)[None, :] <= self.pos_buf[:, None]  # causal: up to each token's position
        self.mask_buf[:] = np.where(visible, 0.0, MASKED)
        ggml_kernels.compute(self.graph, self._plans, torch.get_num_threads())
        data = (ctypes.c_float * (self.n_out * self.n_vocab)).from_address(self.logits.contents.data)
        return torch.from_numpy(np.array(data, dtype=np.float32).reshape(self.n_out, self.n_vocab))
