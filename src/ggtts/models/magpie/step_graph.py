"""Magpie's decoder step as one ggml graph: a new row per batch row (classifier-free guidance's two) through every
decoder layer, the output norm and the parallel head, with no torch dispatch per operation.

The same maths as :class:`~ggtts.models.magpie.model.TransformerLayer` on one new position, written as ggml
operations: the learned position added, bias-free LayerNorms, the fused QKV projection, the new keys and values
written into the caller's :class:`~ggtts.models.layers.kv_cache.KVCache` (ggml sees its memory, so the torch prefill
and these steps share a cache), attention over the cache up to a padded length under the rows' masks (the speaker
context's padding, causality), cross-attention of the first row over the text memory's keys and values (the other
row is guidance's null text, whose cross-attention output is exactly zero), the attention prior multiplied in and
renormalised where a layer takes it, the pointwise feed-forward with tanh-GELU (written out, as torch computes it,
not ggml's table), the final norm and the parallel head. Linear weights are read as stored (F16, BF16, Q8_0 through
ggml's kernels) or in place from the float32 parameters.

A graph is built per (cache shape, padded attended length, text length, which layers take the prior) and reused:
a step points it at its cache and its utterance's text memory, writes the inputs and runs it on ggml's threads.
A step of several utterances (:meth:`DecoderGraph.step_many`, continuous batching) is one graph too, built per
their shapes: the linear layers over all of their rows (each weight read once), each utterance's keys and values
into its own cache, its attention over it alone and its cross-attention over its own text.
Each layer's cross-attention probabilities come back for the prior's alignment. The local transformer's steps (a
code of each codebook in turn) run the same way: its layers (no cross-attention, no output norm) and the output
projection of the table being drawn, a graph per table and batch rows (several utterances' rows together, their
steps in lock step: every frame starts at the local transformer's first position).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from ggtts.errors import InputError
from ggtts.models.layers.ggml_stack import KV_STEP, MASKED, CacheBound, GraphParams, read_floats
from ggtts.ops import ggml_kernels

if TYPE_CHECKING:
    from ggtts.models.layers.kv_cache import KVCache
    from ggtts.models.magpie.model import CausalConv, MagpieTTS, Transformer, TransformerLayer

GRAPHS_KEPT = 8  # per model: (each utterance's text length) x (prior on some layers, or not yet) x (padded length)
LOCAL_GRAPHS_KEPT = 128  # the local transformer's: one per table (up to 16) and batch rows (guidance, utterances)
NODES_PER_LAYER = 96  # about 60 with two rows and the prior, with their views; rounded up
NODES_PER_MORE_PART = 24  # a layer's cross-attention of each utterance beyond the first (about 14), rounded up
PARAMS_PER_LAYER = 12  # float tensors a layer may hand ggml: 6 weights (float32 files), 4 norms
PARAMS_PER_MODEL = 8  # and outside the layers: the position tables, the output norm, the parallel head and its bias
NODES_PER_STEP = 64  # a graph's nodes outside its layers (inputs, positions, output norm, head), rounded up
TENSORS_SPARE = 16  # descriptions of inputs besides the nodes (buffers of ours, the cache's layers)
F32_BYTES = 4
GELU_C = math.sqrt(2.0 / math.pi)  # tanh-GELU: 0.5 x (1 + tanh(c (x + 0.044715 x^3)))
GELU_CUBIC = 0.044715


def graphable(model: MagpieTTS) -> str | None:
    """None when the model's decoder steps can run as graphs here, else why not."""
    cfg = model.cfg.decoder
    if ggml_kernels.unavailable_reason() is not None:
        return "ggml's kernels are not installed"
    if cfg.kernel_size != 1:
        return "the decoder's feed-forward is not pointwise"
    if not cfg.has_xattn:
        return "the decoder has no cross-attention"
    if model.cfg.local_transformer.kernel_size != 1:
        return "the local transformer's feed-forward is not pointwise"
    weight = model.text_embedding.weight
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return "the model's parameters are not float32 on the CPU"
    return None


@dataclass
class StepResult:
    """A step's last rows ``(rows, D)``, each layer's cross-attention probabilities of the first row
    ``(1, H, 1, S)`` and the parallel head's logits ``(rows, S * C, V)``."""

    hidden: torch.Tensor
    probs: list[torch.Tensor | None]
    logits: torch.Tensor


class DecoderGraph(GraphParams):
    """Runs the decoder's and the local transformer's cached steps of a
    :class:`~ggtts.models.magpie.model.MagpieTTS` as ggml graphs."""

    def __init__(self, model: MagpieTTS, keep: int = GRAPHS_KEPT) -> None:
        reason = graphable(model)
        if reason is not None:
            raise ValueError(f"Magpie's decoder steps cannot run as ggml graphs: {reason}")
        layers = model.decoder.cfg.n_layers + model.local_transformer.cfg.n_layers
        super().__init__(PARAMS_PER_LAYER * layers + PARAMS_PER_MODEL + 2 * model.cfg.tables)
        self.model, self.keep = model, keep
        self._graphs: OrderedDict[tuple[Any, ...], _StackStep] = OrderedDict()
        self._local: OrderedDict[tuple[Any, ...], _StackStep] = OrderedDict()
        self._lock = threading.Lock()  # a graph's input buffers are filled, then read: one step at a time

    def conv_weight(self, conv: CausalConv) -> Any:
        """A kernel-1 causal convolution's weight: the stored matrix, or the float32 parameter as a matrix."""
        if conv.stored is not None:
            return cast(Any, conv.stored[0]).tensor  # a ggml MatMul
        assert conv.conv is not None
        return self.float_tensor(conv.conv.weight[:, :, 0], source=conv.conv.weight)

    @staticmethod
    def takes(cache: KVCache, memory_valid: torch.Tensor | None, rows: int) -> bool:
        """Whether a decoder step fits a graph: one new row per batch row (one or two), a float32 contiguous CPU
        cache, and a text memory without padding (one utterance)."""
        return memory_valid is None and rows in (1, 2) and DecoderGraph.takes_rows(cache, rows)

    @staticmethod
    def takes_rows(cache: KVCache, rows: int) -> bool:
        """Whether a step of ``rows`` new rows (the local transformer's: any number) fits a graph over ``cache``."""
        k = cache.k
        return (
            k.shape[1] == rows
            and k.dtype == torch.float32
            and k.device.type == "cpu"
            and k.is_contiguous()
            and cache.v.is_contiguous()
        )

    def step(
        self,
        x: torch.Tensor,
        cache: KVCache,
        start: int,
        key_valid: torch.Tensor,
        memory: list[tuple[torch.Tensor, torch.Tensor]],
        priors: list[torch.Tensor | None] | None,
    ) -> StepResult:
        """New rows ``x (rows, D)`` at position ``start`` (their keys and values written there) -> the step's
        result. ``key_valid (rows, >= start + 1)``: positions each row may attend to; ``memory``: each layer's
        cross-attention keys and values ``(1, H, S, Dh)``; ``priors``: per layer the one prior ``(..., S)`` or
        None."""
        return self.step_many([DecoderPart(x, cache, start, key_valid, memory, priors)])[0]

    def step_many(self, parts: Sequence[DecoderPart]) -> list[StepResult]:
        """A decoder step of several utterances (each as :meth:`step` takes it; each utterance's cache its own) as
        one graph -> each one's result."""
        if not parts:
            raise ValueError("a step of no utterances")
        shapes, laid = [], []
        for part in parts:
            start, cache = part.start, part.cache
            cache.check_fits(start + 1)
            check_position(start, self.model.decoder.cfg.max_positions, "decoder")
            priors = part.priors
            prior_layers = () if priors is None else tuple(i for i, p in enumerate(priors) if p is not None)
            if prior_layers and any(priors[i] is not priors[prior_layers[0]] for i in prior_layers):  # type: ignore[index]
                raise ValueError("a graph step takes one prior for every layer that takes one (as the generator gives)")
            if part.layout is None:
                if part.memory is None:
                    raise ValueError("a decoder step cross-attends its text: give each utterance's memory")
                part = dataclasses.replace(part, layout=text_memory(part.memory))
            assert part.layout is not None
            check_text(part.layout, self.model)
            laid.append(part)
            kv_len = min(-(-(start + 1) // KV_STEP) * KV_STEP, cache.max_len)
            shapes.append(_Part(part.x.shape[0], kv_len, part.layout.length, prior_layers))
        key = tuple((tuple(part.cache.k.shape), shape) for part, shape in zip(parts, shapes, strict=True))
        m = self.model
        with self._lock:
            graph = ggml_kernels.cached(
                self._graphs, key,
                lambda: _StackStep(self, m.decoder, m.final_proj, [p.cache for p in laid], shapes,
                                   [p.layout for p in laid]),
                self.keep,
            )  # fmt: skip
            return graph.run(laid)

    def local_step(self, x: torch.Tensor, cache: KVCache, start: int, table: int) -> torch.Tensor:
        """The local transformer's new rows ``x (rows, D_lt)`` at ``start`` of its ``cache`` -> the logits
        ``(rows, V)`` of ``table``'s output projection."""
        m, rows = self.model, x.shape[0]
        cache.check_fits(start + 1)
        check_position(start, m.local_transformer.cfg.max_positions, "local transformer")
        key = (tuple(cache.k.shape), table)
        with self._lock:
            graph = ggml_kernels.cached(
                self._local, key,
                lambda: _StackStep(self, m.local_transformer, m.local_transformer_out_projections[table], [cache],
                                   [_Part(rows, cache.max_len)]),
                LOCAL_GRAPHS_KEPT,
            )  # fmt: skip
            return graph.run([DecoderPart(x, cache, start)])[0].logits


@dataclass
class DecoderPart:
    """One utterance's share of a step (:meth:`DecoderGraph.step_many`): its new rows ``x (rows, D)`` at position
    ``start`` of its ``cache``; for the decoder, ``key_valid``, its text ``memory`` and ``priors`` (see
    :meth:`DecoderGraph.step`)."""

    x: torch.Tensor
    cache: KVCache
    start: int
    key_valid: torch.Tensor | None = None
    memory: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    priors: list[torch.Tensor | None] | None = None
    layout: TextMemory | None = None  # ``memory`` as the graph reads it (made from it where None)


@dataclass(frozen=True)
class TextMemory:
    """An utterance's text memory laid out as a decoder graph reads it, made once per utterance (:func:`text_memory`):
    each layer's cross-attention keys ``(L, H, S, Dh)`` and values transposed ``(L, H, Dh, S)``, float32, contiguous.
    A graph points its tensors at the memory of the utterances it steps (it keeps none of it)."""

    keys: np.ndarray
    values_t: np.ndarray

    @property
    def length(self) -> int:
        return int(self.keys.shape[2])


def text_memory(memory: list[tuple[torch.Tensor, torch.Tensor]]) -> TextMemory:
    """Each layer's keys and values ``(1, H, S, Dh)`` as a :class:`TextMemory`."""
    keys = np.stack([k[0].detach().to(torch.float32).numpy() for k, _ in memory])
    values_t = np.stack([v[0].detach().to(torch.float32).transpose(1, 2).numpy() for _, v in memory])
    return TextMemory(np.ascontiguousarray(keys), np.ascontiguousarray(values_t))


@dataclass(frozen=True)
class _Part:
    """What a graph is built for of one utterance's share: its rows, the cache positions it attends, its text's
    length (0: no cross-attention) and the layers that take its prior."""

    rows: int
    kv_len: int
    text_len: int = 0
    prior_layers: tuple[int, ...] = ()


class _StackStep(CacheBound):
    """One step of a stack (the decoder, or the local transformer without cross-attention) and a head as a graph,
    over one or more utterances (``parts``, each on its own cache): inputs in numpy buffers ggml reads,
    intermediates in a ggml-allocated buffer."""

    def __init__(
        self, owner: DecoderGraph, stack: Transformer, head: nn.Module, caches: Sequence[KVCache],
        parts: Sequence[_Part], texts: Sequence[TextMemory | None] = (),
    ) -> None:  # fmt: skip
        lib = owner.lib
        cfg = stack.cfg
        self.lib, self.parts = lib, tuple(parts)
        self.rows = rows = sum(p.rows for p in parts)
        self.kv_len = max(p.kv_len for p in parts)
        self.firsts = firsts = [int(i) for i in np.cumsum([0] + [p.rows for p in parts])[:-1]]  # each one's first row
        cross = parts[0].text_len > 0  # the decoder's cross-attention over the text memory
        n_layers, d = cfg.n_layers, cfg.d_model
        h_self, dh_self = cfg.n_heads, cfg.d_model // cfg.n_heads
        h_x = cfg.xa_n_heads
        n_parts = len(parts)
        n_nodes = NODES_PER_STEP + (NODES_PER_LAYER * rows + NODES_PER_MORE_PART * (n_parts - 1)) * n_layers
        ctx = ggml_kernels.new_context(
            self, (n_nodes + (4 * n_layers + 8) * n_parts + TENSORS_SPARE) * lib.ggml_tensor_overhead()
            + lib.ggml_graph_overhead_custom(n_nodes, False),
        )  # fmt: skip
        f32, f16 = lib.GGML_TYPE_F32, lib.GGML_TYPE_F16

        # inputs, in buffers of ours
        self.x_buf = np.zeros((rows, d), dtype=np.float32)
        self.pos_buf = np.zeros(rows, dtype=np.int32)  # each row's position (its utterance's)
        self.row_bufs = [np.zeros(1, dtype=np.int64) for _ in parts]
        self.mask_bufs = [np.zeros((p.rows, 1, p.kv_len), dtype=np.float16) for p in parts]
        self.prior_bufs = [np.ones(p.text_len, dtype=np.float32) for p in parts]
        # each utterance's text memory: keys (H, S, Dh) and values transposed (H, Dh, S), per layer, copied in once
        # per utterance and layer, the tensors on its text memory's keys and values (pointed at each step's own)
        self._texts: list[list[tuple[Any, Any]]] = [[] for _ in parts]
        self._building = texts  # (the first step's: where those tensors point while the graph is built)
        x = self._input(lib.ggml_new_tensor_2d(ctx, f32, d, rows), self.x_buf)
        pos = self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I32, rows), self.pos_buf)
        new_rows = [self._input(lib.ggml_new_tensor_1d(ctx, lib.GGML_TYPE_I64, 1), buf) for buf in self.row_bufs]
        masks = [
            [self._input(lib.ggml_new_tensor_2d(ctx, f16, p.kv_len, 1), buf[r]) for r in range(p.rows)]
            for p, buf in zip(parts, self.mask_bufs, strict=True)
        ]
        priors = [
            self._input(lib.ggml_new_tensor_3d(ctx, f32, p.text_len, 1, 1), buf) if cross else None
            for p, buf in zip(parts, self.prior_bufs, strict=True)
        ]

        def linear(module: nn.Module, h: Any) -> Any:
            out = lib.ggml_mul_mat(ctx, owner.weight(module), h)
            bias = getattr(module, "bias", None)
            return out if bias is None else lib.ggml_add(ctx, out, owner.float_tensor(bias))

        def layer_norm(module: nn.LayerNorm, h: Any) -> Any:
            return _layer_norm(ctx, owner, module, h)

        def gelu_tanh(a: Any) -> Any:
            cubic = lib.ggml_mul(ctx, lib.ggml_mul(ctx, a, a), a)
            inner = lib.ggml_scale(ctx, lib.ggml_add(ctx, a, lib.ggml_scale(ctx, cubic, GELU_CUBIC)), GELU_C)
            return lib.ggml_mul(ctx, a, lib.ggml_scale_bias(ctx, lib.ggml_tanh(ctx, inner), 0.5, 0.5))

        row_bytes = F32_BYTES * d
        positions = owner.float_tensor(stack.position_embeddings.weight)
        h = lib.ggml_add(ctx, x, lib.ggml_get_rows(ctx, positions, pos))  # [D, rows]
        self._on_cache: list[tuple[Any, int]] = []  # each tensor on a cache's memory, and which (2 i, 2 i + 1)
        self.probs: list[list[Any]] = [[] for _ in parts]  # each utterance's, per layer
        layers = cast("list[TransformerLayer]", list(stack.layers))
        for index, layer in enumerate(layers):
            # self-attention, a batch row at a time over its own cache rows
            cur = layer_norm(layer.norm_self, h)
            qkv = linear(layer.self_attention.qkv_net, cur)  # [3D, rows]: q, k, v of each row
            qkv_bytes = qkv.contents.nb[1]
            outs = []
            for i, (part, cache) in enumerate(zip(parts, caches, strict=True)):
                for r in range(part.rows):
                    at = (firsts[i] + r) * qkv_bytes

                    def piece(j: int, at: int = at, qkv: Any = qkv, qkv_bytes: int = qkv_bytes) -> Any:  # [Dh, 1, H]
                        view = lib.ggml_view_3d(ctx, qkv, dh_self, h_self, 1, F32_BYTES * dh_self, qkv_bytes,
                                                at + j * row_bytes)  # fmt: skip
                        return lib.ggml_cont(ctx, lib.ggml_permute(ctx, view, 0, 2, 1, 3))

                    # [Dh, kv_len, H]
                    keys, on_keys = self._store(ctx, cache.k[index, r], piece(1), new_rows[i], f32, part.kv_len)
                    values, on_values = self._store(ctx, cache.v[index, r], piece(2), new_rows[i], f32, part.kv_len)
                    self._on_cache += [(t, 2 * i) for t in on_keys] + [(t, 2 * i + 1) for t in on_values]
                    att = lib.ggml_flash_attn_ext(ctx, piece(0), keys, values, masks[i][r], dh_self**-0.5, 0.0, 0.0)
                    outs.append(lib.ggml_reshape_2d(ctx, att, d, 1))  # [Dh, H, 1] -> [D, 1]
            att = outs[0]
            for out in outs[1:]:
                att = lib.ggml_concat(ctx, att, out, 1)
            h = lib.ggml_add(ctx, h, linear(layer.self_attention.o_net, att))
            h = self._cross_attention(ctx, owner, layer, h, index, priors) if cross else h
            # the pointwise feed-forward
            cur = layer_norm(layer.norm_pos_ff, h)
            ffn = gelu_tanh(lib.ggml_mul_mat(ctx, owner.conv_weight(layer.pos_ff.proj), cur))
            h = lib.ggml_add(ctx, h, lib.ggml_mul_mat(ctx, owner.conv_weight(layer.pos_ff.o_net), ffn))
        norm_out = stack.norm_out
        self.hidden = layer_norm(norm_out, h) if isinstance(norm_out, nn.LayerNorm) else h  # [D, rows]
        self.logits = linear(head, self.hidden)  # [V, rows]
        lib.ggml_set_output(self.hidden)
        lib.ggml_set_output(self.logits)
        self.graph = lib.ggml_new_graph_custom(ctx, n_nodes, False)
        lib.ggml_build_forward_expand(self.graph, self.logits)
        for probs in self.probs:
            for p in probs:
                lib.ggml_build_forward_expand(self.graph, p)

        self._galloc = lib.ggml_gallocr_new(ggml_kernels.cpu_buffer_type())
        self._free_galloc = weakref.finalize(self, lib.ggml_gallocr_free, self._galloc)
        if not lib.ggml_gallocr_alloc_graph(self._galloc, self.graph):
            raise MemoryError("ggml could not allocate the step's intermediate tensors")
        self._at = tuple(ptr for c in caches for ptr in (c.k.data_ptr(), c.v.data_ptr()))
        self._on_cache_at = [(t.contents, kind, t.contents.data - self._at[kind]) for t, kind in self._on_cache]
        self.d, self.n_logits, self.h_x = d, int(self.logits.contents.ne[0]), h_x
        self._plans: dict[int, Any] = {}
        self._building = ()  # (each step points the text tensors at its own utterances' memory: none kept here)

    def _cross_attention(
        self, ctx: Any, owner: DecoderGraph, layer: TransformerLayer, h: Any, index: int, priors: list[Any]
    ) -> Any:
        """``h`` [D, rows] after the cross-attention of each utterance's first row over its text memory (its other
        row is guidance's null text, whose cross-attention output is exactly zero); keeps each one's probabilities
        as an output."""
        lib, d = self.lib, h.contents.ne[0]
        xa = layer.cross_attention
        h_x, dh_x = xa.n_heads, xa.d_head
        normed = _layer_norm(ctx, owner, layer.norm_xattn_query, h)
        ys = []
        for i, part in enumerate(self.parts):
            # the query of its first row alone, one column as an utterance stepped alone has it: ggml multiplies one
            # column with other kernels than several (for float weights other roundings), and a lane's numbers
            # are to be its numbers alone (the weight read once per utterance: a small one, d x d)
            first = lib.ggml_view_2d(ctx, normed, d, 1, F32_BYTES * d, F32_BYTES * d * self.firsts[i])
            q = lib.ggml_reshape_3d(ctx, lib.ggml_mul_mat(ctx, owner.weight(xa.q_net), first), dh_x, h_x, 1)
            q = lib.ggml_cont(ctx, lib.ggml_permute(ctx, q, 0, 2, 1, 3))  # [Dh, 1, H]
            text = self._building[i]
            assert text is not None and text.length == part.text_len
            mem_k = self._on(ctx, text.keys[index], dh_x, part.text_len, h_x)
            mem_vt = self._on(ctx, text.values_t[index], part.text_len, dh_x, h_x)
            self._texts[i].append((mem_k, mem_vt))
            prob = lib.ggml_soft_max_ext(ctx, lib.ggml_mul_mat(ctx, mem_k, q), None, dh_x**-0.5, 0.0)  # [S, 1, H]
            if index in part.prior_layers:  # times (prior + tiny), renormalised
                prob = lib.ggml_mul(ctx, prob, priors[i])
                prob = lib.ggml_div(ctx, prob, lib.ggml_sum_rows(ctx, prob))
            lib.ggml_set_output(prob)
            self.probs[i].append(prob)
            y = lib.ggml_reshape_2d(ctx, lib.ggml_mul_mat(ctx, mem_vt, prob), dh_x * h_x, 1)  # heads in order
            ys.append(y if part.rows == 1 else lib.ggml_pad(ctx, y, 0, part.rows - 1, 0, 0))  # null rows: zeros
        y = ys[0]
        for more in ys[1:]:
            y = lib.ggml_concat(ctx, y, more, 1)  # [H Dh, rows]
        return lib.ggml_add(ctx, h, lib.ggml_mul_mat(ctx, owner.weight(xa.o_net), y))  # (bias-free: zeros stay)

    def _on(self, ctx: Any, buffer: np.ndarray, *ne: int) -> Any:
        """A 3-D F32 ggml tensor ``[ne0, ne1, ne2]`` on a buffer of ours."""
        lib = self.lib
        return self._input(lib.ggml_new_tensor_3d(ctx, lib.GGML_TYPE_F32, *ne), buffer)

    def run(self, parts: Sequence[DecoderPart]) -> list[StepResult]:
        """Each utterance's step (``key_valid`` None: every position up to its ``start`` may be attended to;
        ``memory`` and ``priors`` for the decoder's cross-attention) -> each one's result."""
        self._point_at(*(part.cache for part in parts))
        for i, (part, shape) in enumerate(zip(parts, self.parts, strict=True)):
            first, start = self.firsts[i], part.start
            if self._texts[i]:  # its text's keys and values, where its graph tensors read them
                if part.layout is None:
                    raise ValueError("a decoder step cross-attends its text: give each utterance's laid-out memory")
                for index, (keys, values_t) in enumerate(self._texts[i]):
                    keys.contents.data = part.layout.keys[index].ctypes.data
                    values_t.contents.data = part.layout.values_t[index].ctypes.data
            self.x_buf[first : first + shape.rows] = part.x.detach().to(torch.float32).numpy()
            self.pos_buf[first : first + shape.rows] = self.row_bufs[i][0] = start
            allowed = np.arange(shape.kv_len)[None, :] <= start  # causal
            if part.key_valid is not None:
                valid = np.zeros((shape.rows, shape.kv_len), dtype=bool)
                valid[:, : min(shape.kv_len, part.key_valid.shape[1])] = part.key_valid[:, : shape.kv_len].numpy()
                allowed = allowed & valid
            self.mask_bufs[i][:, 0] = np.where(allowed, 0.0, MASKED)
            chosen = next((p for p in part.priors or () if p is not None), None)
            if chosen is not None:
                self.prior_bufs[i][:] = (chosen.reshape(-1) + torch.finfo(chosen.dtype).tiny).numpy()
        ggml_kernels.compute(self.graph, self._plans, torch.get_num_threads())
        hidden = read_floats(self.hidden, self.rows * self.d).reshape(self.rows, self.d)
        logits = read_floats(self.logits, self.rows * self.n_logits).reshape(self.rows, self.n_logits)
        out = []
        for i, shape in enumerate(self.parts):
            rows = slice(self.firsts[i], self.firsts[i] + shape.rows)
            probs: list[torch.Tensor | None] = [
                read_floats(p, self.h_x * shape.text_len).reshape(1, self.h_x, 1, shape.text_len) for p in self.probs[i]
            ]
            out.append(StepResult(hidden[rows], probs, logits[rows]))
        return out


def check_text(text: TextMemory, model: MagpieTTS) -> None:
    """ggml reads a text memory's arrays by the graph's shape: one of another shape or type is refused first."""
    cfg = model.decoder.cfg
    s = text.length
    want = ((cfg.n_layers, cfg.xa_n_heads, s, cfg.xa_d_head), (cfg.n_layers, cfg.xa_n_heads, cfg.xa_d_head, s))
    for array, shape in zip((text.keys, text.values_t), want, strict=True):
        if array.shape != shape or array.dtype != np.float32 or not array.flags.c_contiguous:
            raise ValueError(f"a text memory of shape {array.shape} ({array.dtype}) where the decoder reads {shape}")


def check_position(start: int, limit: int, stack: str) -> None:
    """ggml would stop the process on a position past the learned table: one clear error instead."""
    if not 0 <= start < limit:
        raise InputError(f"position {start} is past the {stack}'s {limit} learned positions")


def _layer_norm(ctx: Any, owner: DecoderGraph, module: nn.LayerNorm, h: Any) -> Any:
    """NeMo's bias-free LayerNorm of ``h`` [D, rows]."""
    lib = owner.lib
    return lib.ggml_mul(ctx, lib.ggml_norm(ctx, h, module.eps), owner.float_tensor(module.weight))
