"""Magpie TTS (NVIDIA NeMo ``MagpieTTSModel``, ``decoder_ce``): text encoder, decoder, local transformer.

Module attribute names follow NeMo's state-dict names (``encoder.layers.0.self_attention.qkv_net.weight``); the
GGUF file's names map onto them (:mod:`ggtts.models.magpie.names`). Every stack is NeMo's ``transformer_2501``:
pre-norm layers with bias-free LayerNorms, fused-QKV self-attention (causal in all three stacks, the text
encoder included), optional cross-attention with its own head count and width and its own norms for the query
and the memory, and a feed-forward made of two causal convolutions (kernel 3 in the encoder, 1 elsewhere) with
tanh-GELU between them. Learned absolute positions are added at each stack's input.

The decoder runs over ``[speaker context ; audio frames]`` with a pre-allocated self-attention cache
(:class:`~ggtts.models.layers.kv_cache.KVCache`) and the text memory's keys and values computed once per
utterance. Positions of a speaker context shorter than the baked table are masked out as keys (NeMo's padding
mask) but keep their position numbers. The attention prior (inference-time alignment help) multiplies a
step's cross-attention probabilities and renormalises them, as NeMo does in eval mode.

This module maps tensors to tensors; sampling, guidance and stopping are the pipeline's
(:mod:`ggtts.families.magpie.generate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.magpie.config import MagpieConfig, StackConfig
from ggtts.models.magpie.step_graph import DecoderGraph, graphable

if TYPE_CHECKING:
    from ggtts.models.magpie.static_steps import StaticDecoders

LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which NeMo uses


def _layer_norm(d: int) -> nn.LayerNorm:
    return nn.LayerNorm(d, eps=LAYER_NORM_EPS, bias=False)


class CausalConv(nn.Module):
    """NeMo's ``ConvolutionLayer`` with ``is_causal``: left padding of ``kernel - 1``, no bias.

    It is a sum of ``kernel`` linear maps of shifted inputs (one, for kernel 1); ``stored`` (set at load,
    :func:`store_convolutions`) holds them as ggml multiplies them in a stored type, and the float weight is
    dropped."""

    def __init__(self, d_in: int, d_out: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.conv: nn.Conv1d | None = nn.Conv1d(d_in, d_out, kernel, bias=False)
        self.stored: list[Callable[[torch.Tensor], torch.Tensor]] | None = None  # per kernel tap

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, C, T) -> (B, C_out, T), each output from its input and the ``kernel - 1`` before it."""
        if self.stored is not None:
            t = x.shape[2]
            rows = F.pad(x.transpose(1, 2), (0, 0, self.kernel - 1, 0))  # (B, kernel - 1 + T, C)
            y = self.stored[0](rows[:, :t])
            for tap in range(1, self.kernel):
                y = y + self.stored[tap](rows[:, tap : tap + t])
            return y.transpose(1, 2)
        assert self.conv is not None
        if self.kernel == 1:
            return F.linear(x.transpose(1, 2), self.conv.weight[:, :, 0]).transpose(1, 2)
        return self.conv(F.pad(x, (self.kernel - 1, 0)))


class PositionwiseConvFF(nn.Module):
    def __init__(self, d_model: int, d_ffn: int, kernel: int) -> None:
        super().__init__()
        self.proj = CausalConv(d_model, d_ffn, kernel)
        self.o_net = CausalConv(d_ffn, d_model, kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, T, C), a whole sequence (a kernel wider than 1 needs its neighbours)."""
        h = F.gelu(self.proj(x.transpose(1, 2)), approximate="tanh")
        return self.o_net(h).transpose(1, 2)


@dataclass
class FixedPosition:
    """One new row per batch row at a position read from a tensor, over a cache of fixed capacity (a step replayed
    as a CUDA graph: the same kernels, shapes and addresses at every position): ``index`` (1,) the position,
    ``visible`` (B, 1, 1, capacity) the cache positions each row attends (causality and the context's padding)."""

    index: torch.Tensor
    visible: torch.Tensor


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv_net = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o_net = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None,
        layer: int,
        start: int | FixedPosition,
        key_valid: torch.Tensor | None,
        last: int | None = None,
    ) -> torch.Tensor:
        """``x`` (B, T, C) at positions ``start..start+T``; causal. ``key_valid`` (B, start+T) bool or None.
        ``last``: only the last rows' outputs (every row's keys and values still go to the cache). A
        :class:`FixedPosition`: one row each, over the whole cache under its mask (``key_valid`` is in it)."""
        b, t, _ = x.shape
        qkv = self.qkv_net(x).reshape(b, t, 3, self.n_heads, self.d_head)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, T, Dh)
        if isinstance(start, FixedPosition):
            assert cache is not None and t == 1
            keys, values = cache.k[layer], cache.v[layer]
            keys.index_copy_(2, start.index, k)
            values.index_copy_(2, start.index, v)
            score = torch.matmul(q, keys.transpose(2, 3)) * self.d_head**-0.5  # (B, H, 1, capacity)
            prob = torch.softmax(score.masked_fill(~start.visible, float("-inf")), dim=-1)  # its own row is visible
            return self.o_net(torch.matmul(prob, values).transpose(1, 2).reshape(b, t, -1))
        if cache is not None:
            k, v = cache.update(layer, start, k, v)
        if last is not None:
            q, t = q[:, :, t - last :], last
        s = k.shape[2]
        score = torch.matmul(q, k.transpose(2, 3)) * self.d_head**-0.5  # (B, H, T, S)
        allowed = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)  # causal: key <= query
        mask = allowed[None, None]
        if key_valid is not None:
            mask = mask & key_valid[:, None, None, :s]
        score = score.masked_fill(~mask, float("-inf"))
        prob = torch.softmax(score, dim=-1).nan_to_num(0.0)  # a query with no key (a masked position) -> zeros
        y = torch.matmul(prob, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_net(y)


class CrossAttention(nn.Module):
    def __init__(self, d_model: int, d_memory: int, n_heads: int, d_head: int) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.q_net = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv_net = nn.Linear(d_memory, 2 * n_heads * d_head, bias=False)
        self.o_net = nn.Linear(n_heads * d_head, d_model, bias=False)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (normed) memory ``(B, S, C)`` -> keys and values ``(B, H, S, Dh)``."""
        b, s, _ = memory.shape
        kv = self.kv_net(memory).reshape(b, s, 2, self.n_heads, self.d_head)
        return kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        memory_valid: torch.Tensor | None,
        prior: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (B, T, C); ``prior`` (B, T or 1, S) or None. -> (output, probabilities (B, H, T, S))."""
        b, t, _ = x.shape
        k, v = kv
        q = self.q_net(x).reshape(b, t, self.n_heads, self.d_head).transpose(1, 2)
        score = torch.matmul(q, k.transpose(2, 3)) * self.d_head**-0.5
        if memory_valid is not None:
            score = score.masked_fill(~memory_valid[:, None, None, :], float("-inf"))
        prob = torch.softmax(score, dim=-1)
        if prior is not None:
            prob = prob * (prior[:, None] + torch.finfo(prior.dtype).tiny)
            prob = prob / prob.sum(dim=-1, keepdim=True)
        if memory_valid is not None:
            prob = prob.masked_fill(~memory_valid[:, None, None, :], 0.0)
        y = torch.matmul(prob, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_net(y), prob


@dataclass
class LayerInputs:
    """What one decoder step gives every layer besides ``x``."""

    cache: KVCache | None = None
    start: int | FixedPosition = 0  # position of the first row of x
    key_valid: torch.Tensor | None = None  # (B, >= start+T) bool: positions that may be attended to
    memory: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer: cross-attention keys, values
    memory_valid: torch.Tensor | None = None  # (B, S) bool
    cross_rows: int | None = None  # only the first rows of the batch cross-attend (the rest: CFG's null text)
    priors: list[torch.Tensor | None] | None = None  # per layer: (rows, 1 or T, S) or None
    # the final layer computes only these last rows (the rows before matter only as keys and values: a prefill);
    # for stacks with pointwise feed-forwards
    last_rows: int | None = None


class TransformerLayer(nn.Module):
    def __init__(self, cfg: StackConfig) -> None:
        super().__init__()
        self.has_xattn = cfg.has_xattn
        self.norm_self = _layer_norm(cfg.d_model)
        self.self_attention = SelfAttention(cfg.d_model, cfg.n_heads)
        if cfg.has_xattn:
            self.norm_xattn_query = _layer_norm(cfg.d_model)
            self.cross_attention = CrossAttention(cfg.d_model, cfg.xa_d_memory, cfg.xa_n_heads, cfg.xa_d_head)
            self.norm_xattn_memory = _layer_norm(cfg.xa_d_memory)
        self.norm_pos_ff = _layer_norm(cfg.d_model)
        self.pos_ff = PositionwiseConvFF(cfg.d_model, cfg.d_ffn, cfg.kernel_size)

    def forward(
        self, x: torch.Tensor, index: int, inputs: LayerInputs, last: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``last``: go on with the last rows only after the self-attention has cached every row's keys and values
        (a pointwise feed-forward needs no neighbours)."""
        y = self.self_attention(self.norm_self(x), inputs.cache, index, inputs.start, inputs.key_valid, last)
        x = (x if last is None else x[:, x.shape[1] - last :]) + y
        prob = None
        if self.has_xattn and inputs.memory is not None:
            rows = x.shape[0] if inputs.cross_rows is None else inputs.cross_rows
            prior = inputs.priors[index] if inputs.priors is not None else None
            memory_valid = inputs.memory_valid[:rows] if inputs.memory_valid is not None else None
            y, prob = self.cross_attention(self.norm_xattn_query(x[:rows]), inputs.memory[index], memory_valid, prior)
            # the other rows attend to an all-zero memory (CFG's null text): keys and values 0, output exactly 0
            x = torch.cat([x[:rows] + y, x[rows:]]) if rows < x.shape[0] else x + y
        x = x + self.pos_ff(self.norm_pos_ff(x))
        return x, prob


class Transformer(nn.Module):
    def __init__(self, cfg: StackConfig, apply_norm_out: bool) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.n_layers))
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.norm_out: nn.Module = _layer_norm(cfg.d_model) if apply_norm_out else nn.Identity()

    def memory_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's cross-attention keys and values of ``memory`` (B, S, C), through its own memory norm."""
        layers: list[TransformerLayer] = list(self.layers)  # type: ignore[arg-type]
        return [layer.cross_attention.memory_kv(layer.norm_xattn_memory(memory)) for layer in layers]

    def forward(
        self, x: torch.Tensor, inputs: LayerInputs | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """``x`` (B, T, C) at positions ``inputs.start..`` -> (output (B, T, C), per-layer cross-attn probs)."""
        inputs = inputs if inputs is not None else LayerInputs()
        start = inputs.start
        if isinstance(start, FixedPosition):
            positions = start.index
        else:
            positions = torch.arange(start, start + x.shape[1], device=x.device)
        x = x + self.position_embeddings(positions)[None]
        probs = []
        final = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            x, prob = layer(x, index, inputs, inputs.last_rows if index == final else None)
            probs.append(prob)
        return self.norm_out(x), probs


class MagpieTTS(nn.Module):
    """The weights of a Magpie TTS file, and the three stacks' forward passes (no sampling here)."""

    def __init__(self, cfg: MagpieConfig) -> None:
        super().__init__()
        self.cfg = cfg
        tables = cfg.num_codebooks * cfg.frame_stacking
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.d_model)
        self.audio_embeddings = nn.ModuleList(nn.Embedding(cfg.tokens_per_codebook, cfg.d_model) for _ in range(tables))
        self.encoder = Transformer(cfg.encoder, apply_norm_out=True)
        self.decoder = Transformer(cfg.decoder, apply_norm_out=True)
        self.final_proj = nn.Linear(cfg.d_model, tables * cfg.tokens_per_codebook)
        lt = cfg.local_transformer
        self.local_transformer_in_projection: nn.Module = (
            nn.Linear(cfg.d_model, lt.d_model) if lt.d_model != cfg.d_model else nn.Identity()
        )
        self.local_transformer = Transformer(lt, apply_norm_out=False)
        self.local_transformer_out_projections = nn.ModuleList(
            nn.Linear(lt.d_model, cfg.tokens_per_codebook) for _ in range(tables)
        )
        # (speakers, T * D) as NeMo stores it; rows are reshaped to (T, D) when used
        self.baked_context_embedding = nn.Embedding(cfg.n_speakers, cfg.context_frames * cfg.d_model)
        self._null_kv: tuple[torch.Tensor, torch.Tensor] | None = None
        self.use_graph = False  # the cached steps as ggml graphs where they can be (load_magpie): graph()
        self.step_graph: DecoderGraph | None = None
        self.static_capture: bool | None = None  # the cached steps over fixed tensors: use_static_steps
        self.static_compile = False
        self._static: StaticDecoders | None = None
        # the generation loop's local-transformer frames over fixed tensors, by their settings (made on first use)
        self.device_frames: dict[tuple[object, ...], object] = {}

    def use_static_steps(self, capture: bool = True, compile: bool = False) -> None:
        """From now on the generation loop runs each cached decoder step over fixed tensors
        (:mod:`ggtts.models.magpie.static_steps`), an utterance's first step (the text encoder with the context's
        prefill) and the local transformer's frame likewise (:class:`ggtts.families.magpie.generate.DeviceFrame`),
        each a replayed CUDA graph with ``capture`` on CUDA (eagerly elsewhere: what the CPU tests run).
        ``compile``: the decoder step and the frame are compiled by ``torch.compile`` (fixed shapes: its small
        kernels fused) before they are captured (the prefill, once an utterance, is not)."""
        self.static_capture, self.static_compile, self._static = capture, compile, None

    def static_steps(self) -> StaticDecoders | None:
        """The fixed-tensor decoders, made for this model (a copy makes its own); None unless turned on."""
        from ggtts.models.magpie.static_steps import StaticDecoders

        if self.static_capture is None:
            return None
        if self._static is None:
            self._static = StaticDecoders(self, self.static_capture, self.static_compile)
        return self._static

    def graph(self) -> DecoderGraph | None:
        """The cached steps' ggml graphs, built (again) where they can run on the weights as they are now (a copy of
        the model, or weights replaced out of place, gets new ones); None: the torch modules."""
        g = self.step_graph
        if self.use_graph and (g is None or not g.current()):
            self.step_graph = g = DecoderGraph(self) if graphable(self) is None else None
        return g

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles leave the graphs behind (they hold ggml's pointers): :meth:`graph` builds new ones."""
        state = dict(super().__getstate__())
        state["step_graph"] = None
        state["_static"] = None
        state["device_frames"] = {}
        return state

    # ---- text --------------------------------------------------------------------------------------------
    def encode_text(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) (EOS included) -> the text memory (B, T, D). The encoder is causal."""
        x, _ = self.encoder(self.text_embedding(tokens))
        return x

    # ---- decoder -----------------------------------------------------------------------------------------
    def speaker_context(self, speaker: int) -> torch.Tensor:
        """The baked context of ``speaker``: (T, D), all T rows (a shorter speaker's tail is masked by length)."""
        row = self.baked_context_embedding.weight[speaker]
        return row.reshape(self.cfg.context_frames, self.cfg.d_model)

    def embed_frames(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B, C, S * T) of T stacks of S frames -> (B, T, D): the mean of the C * S tables' embeddings."""
        c, s = self.cfg.num_codebooks, self.cfg.frame_stacking
        total: torch.Tensor | None = None
        for i in range(s):
            for q in range(c):
                e = self.audio_embeddings[q + i * c](codes[:, q, i::s])
                total = e if total is None else total + e
        assert total is not None
        return total / (c * s)

    def memory_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.decoder.memory_kv(memory)

    def null_context_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every decoder layer's self-attention keys and values ``(L, 1, H, T, Dh)`` of classifier-free guidance's
        null row over the context: a zero context and no text (NeMo's null memory gives a cross-attention output of
        exactly zero). The same for every speaker and text: computed once, kept."""
        device = self.text_embedding.weight.device
        if self._null_kv is None or self._null_kv[0].device != device:  # (again after the model moved)
            tc, d = self.cfg.context_frames, self.cfg.d_model
            cache = new_cache(self.cfg.decoder, tc, 1, device)
            with torch.inference_mode():
                self.decoder(torch.zeros(1, tc, d, device=device), LayerInputs(cache=cache))
            self._null_kv = (cache.k.clone(), cache.v.clone())
        return self._null_kv

    def decode(self, x: torch.Tensor, inputs: LayerInputs) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Decoder input rows (B, T, D) -> (hidden (B, T, D), per-layer cross-attention probabilities)."""
        return self.decoder(x, inputs)

    def prefill(
        self, context: torch.Tensor, bos: torch.Tensor, cache: KVCache, key_valid: torch.Tensor,
        memory: list[tuple[torch.Tensor, torch.Tensor]], memory_valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:  # fmt: skip
        """An utterance's first decoder step: the speaker's ``context`` (Tc, D) and the BOS stack ``bos`` (1, 1, D)
        through the decoder, filling ``cache`` (one row, or guidance's two) -> the last rows' hidden states (rows,
        D) and the first row's cross-attention probabilities. ``memory_valid`` (1, S): the text positions of a
        padded ``memory``.

        With guidance the null row's context (zeros, no text) is the same for every utterance: its keys and values
        come from :meth:`null_context_kv`, computed once per model, and only its BOS row runs here."""
        tc = context.shape[0]
        cond = LayerInputs(
            cache=cache.rows(0, 1), key_valid=key_valid[:1], memory=memory, memory_valid=memory_valid, cross_rows=1,
            last_rows=1,
        )  # fmt: skip
        hidden, probs = self.decode(torch.cat([context[None], bos], dim=1), cond)
        if cache.k.shape[1] == 1:
            return hidden[:, -1], probs
        null_k, null_v = self.null_context_kv()
        cache.k[:, 1:2, :, :tc] = null_k
        cache.v[:, 1:2, :, :tc] = null_v
        null = LayerInputs(cache=cache.rows(1, 2), key_valid=key_valid[1:2], start=tc)
        null_hidden, _ = self.decode(bos, null)
        return torch.cat([hidden[:, -1], null_hidden[:, -1]]), probs

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The parallel head: hidden (..., D) -> (..., S * C, V), table order (frame in stack, codebook)."""
        out = self.final_proj(hidden)
        return out.reshape(*hidden.shape[:-1], -1, self.cfg.tokens_per_codebook)

    # ---- local transformer -------------------------------------------------------------------------------
    def local_step(self, x: torch.Tensor, cache: KVCache, start: int) -> torch.Tensor:
        """Local transformer rows (B, T, D_lt) at ``start..`` (cached) -> last row's hidden (B, D_lt)."""
        out, _ = self.local_transformer(x, LayerInputs(cache=cache, start=start))
        return out[:, -1]

    def local_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """Decoder hidden (B, D) -> the local transformer's first row (B, 1, D_lt)."""
        return self.local_transformer_in_projection(hidden[:, None])

    def local_code_input(self, table: int, codes: torch.Tensor) -> torch.Tensor:
        """Codes (B,) drawn for ``table`` -> the next local-transformer row (B, 1, D_lt)."""
        return self.local_transformer_in_projection(self.audio_embeddings[table](codes)[:, None])

    def local_logits(self, table: int, hidden: torch.Tensor) -> torch.Tensor:
        return self.local_transformer_out_projections[table](hidden)


def new_cache(stack: StackConfig, max_len: int, batch: int, device: torch.device | str) -> KVCache:
    return KVCache(stack.n_layers, stack.n_heads, stack.d_model // stack.n_heads, max_len, batch=batch, device=device)


def parameter_count(model: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())


def store_convolutions(model: nn.Module, gguf: GGUFFile) -> set[str]:
    """The feed-forward convolutions multiplied by ggml in a stored type, one matrix per kernel tap: as the file
    stores them where that is F16 or BF16, quantized to Q8_0 at load in a Q8_0 file (GGUF blocks run along the
    kernel axis, so converters, magpie-tts.cpp's too, leave these F32). Returns the file tensor names now held this
    way, for the strict loader to ignore."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType
    from gguf.quants import quantize

    from ggtts.ops.ggml_kernels import MatMul, multiplies

    q8 = GGMLQuantizationType.Q8_0
    halves = (GGMLQuantizationType.F16, GGMLQuantizationType.BF16)
    q8_file = gguf.get("general.file_type") == int(LlamaFileType.MOSTLY_Q8_0) and multiplies(q8)
    consumed: set[str] = set()
    for path, module in model.named_modules():
        name = f"{path}.conv.weight"
        if not isinstance(module, CausalConv) or module.conv is None or name not in gguf or gguf.byte_order != "<":
            continue
        info = gguf.info(name)
        n_out, n_in, kernel = info.shape
        if info.type in halves and multiplies(info.type):
            stored = gguf.raw(name).view(np.uint16).reshape(n_out, n_in, kernel)
            taps = [(np.ascontiguousarray(stored[:, :, i]).view(np.uint8), info.type) for i in range(kernel)]
        elif q8_file and info.type == GGMLQuantizationType.F32 and n_in % GGML_QUANT_SIZES[q8][0] == 0:
            weight = gguf.tensor(name).numpy()
            taps = [(quantize(np.ascontiguousarray(weight[:, :, i]), q8), q8) for i in range(kernel)]
        else:
            continue
        module.stored = [MatMul(raw, qtype, n_out, n_in) for raw, qtype in taps]
        module.conv = None
        consumed.add(name)
    return consumed


def load_magpie(
    gguf: GGUFFile,
    device: str | torch.device = "cpu",
    *,
    stored_weights: bool = True,
    graph: bool = True,
    step_graphs: bool = True,
    compile_steps: bool = False,
) -> MagpieTTS:
    """The model of a ``magpie`` file, strictly loaded (a missing or unexpected tensor is an error naming it).

    Linear maps whose weights the file stores as F16, BF16 or Q8_0 keep them so and are multiplied by ggml's CPU kernels
    (where the ``quant`` extra is installed and the device is the CPU); so are the pointwise feed-forwards of a Q8_0
    file (:func:`store_convolutions`). On a GPU, Q8_0 linear weights stay as stored there, widened one product at a time
    (:mod:`ggtts.ops.device_weights`). Otherwise weights are widened to float32. ``graph``: the decoder's cached steps
    run as ggml graphs where they can (:mod:`ggtts.models.magpie.step_graph`); False: the torch modules. On CUDA each
    cached decoder step and each frame of the local transformer is a replayed CUDA graph
    (:meth:`MagpieTTS.use_static_steps`) unless ``step_graphs=False``; ``compile_steps`` compiles each first."""
    from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights

    cfg = MagpieConfig.from_gguf(gguf)
    with empty_modules():
        model = MagpieTTS(cfg)
    plan = stored_weights_plan(device, stored_weights)
    consumed = use_planned_weights(plan, model, gguf) | (store_convolutions(model, gguf) if plan.stored else set())
    load_module_from_gguf(model, gguf, ignore=consumed, device=device)
    model.use_graph = graph
    model.graph()
    if step_graphs and torch.device(device).type == "cuda":
        model.use_static_steps(compile=compile_steps)
    return model.eval()
