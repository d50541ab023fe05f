"""Magpie's cached decoder step over fixed tensors, captured once as a CUDA graph and replayed (the GPU's way past
the launch cost of a step's few hundred small kernels; :class:`~ggtts.ops.step_graph.StepGraph`).

A :class:`StaticDecoder` holds, for one batch size (guidance's two rows, or one) and one capacity, everything a step
reads: the new rows, the position as a tensor (:class:`~ggtts.models.magpie.model.FixedPosition`), the rows' key
masks, the self-attention cache, each layer's cross-attention keys and values of the text padded to a fixed number
of positions (the padding masked), and each layer's attention prior over them (ones where a layer takes none: the
renormalisation then changes nothing but rounding). A step writes its inputs there and replays the graph: the
model's own modules run in it (:meth:`MagpieTTS.decode` on a fixed position), so the CPU runs the very code the
graph holds, eagerly. The first step of an utterance is another graph (:meth:`StaticDecoder.prefill`): the text
encoder over the text padded to the fixed size (the encoder is causal: the padding changes none of the text's
outputs, up to the rounding of products of another shape), each layer's cross-attention keys and values written
into the fixed ones, and the speaker's context with the BOS stack through the decoder into the same cache.

One utterance at a time per decoder (a model serves one request at a time): :meth:`StaticDecoder.begin` makes an
utterance the current one, and a step of another is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import torch

from ggtts.errors import InputError
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.magpie.model import FixedPosition, LayerInputs, MagpieTTS, new_cache
from ggtts.models.magpie.step_graph import check_position
from ggtts.ops.step_graph import StepGraph

T = TypeVar("T")
MIN_TEXT = 256  # text positions a graph holds at least (rounded up to a power of two past it): a few sentences


def compiled(step: Callable[[], T], compile: bool, what: str, device: torch.device) -> Callable[[], T]:
    """``step``, compiled by ``torch.compile`` for its fixed shapes where ``compile`` (else as it is)."""
    if not compile:
        return step
    from ggtts.ops.compile import CompiledOrEager

    return cast(Callable[[], T], CompiledOrEager(step, what, device, dynamic=False))


def fixed_size(n: int, least: int) -> int:
    """``n`` rounded up to a power of two, at least ``least``: one graph serves every length up to it."""
    return max(least, 1 << (n - 1).bit_length())


@dataclass
class DecoderStep:
    """What a step gives: the new rows' hidden states (rows, D), their parallel-head logits (rows, tables, V), and
    each layer's cross-attention probabilities of the first row (1, H, 1, text capacity); the graph's own tensors,
    overwritten by its next replay."""

    hidden: torch.Tensor
    logits: torch.Tensor
    probs: list[torch.Tensor | None]


class StaticDecoder:
    """The decoder's one-stack steps for ``rows`` batch rows over ``capacity`` positions and a text of up to
    ``text_capacity`` tokens, a CUDA graph where the model is on CUDA and ``capture`` (else eager)."""

    def __init__(
        self, model: MagpieTTS, rows: int, capacity: int, text_capacity: int, capture: bool = True,
        compile: bool = False,
    ) -> None:  # fmt: skip
        cfg, weight = model.cfg, model.text_embedding.weight
        device, dtype = weight.device, weight.dtype
        dec = cfg.decoder
        self.model, self.rows, self.capacity, self.text_capacity = model, rows, capacity, text_capacity
        self.cache = new_cache(dec, capacity, rows, device)
        self.x = torch.zeros(rows, 1, cfg.d_model, dtype=dtype, device=device)
        self.index = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.arange(capacity, device=device)
        self.key_valid = torch.ones(rows, capacity, dtype=torch.bool, device=device)
        shape = (1, dec.xa_n_heads, text_capacity, dec.xa_d_head)
        self.memory = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                       for _ in range(dec.n_layers)]  # fmt: skip
        self.memory_valid = torch.zeros(1, text_capacity, dtype=torch.bool, device=device)
        self.priors = torch.ones(dec.n_layers, 1, 1, text_capacity, dtype=dtype, device=device)
        self.graph = StepGraph(compiled(self._step, compile, "Magpie's decoder step", device), device, capture)
        self.owner: object | None = None
        # the prefill's inputs: the text's ids (padded), the speaker's context, the BOS stack's embedding
        self.text = torch.zeros(1, text_capacity, dtype=torch.long, device=device)
        self.context = torch.zeros(cfg.context_frames, cfg.d_model, dtype=dtype, device=device)
        bos = torch.full((1, cfg.num_codebooks, cfg.frame_stacking), cfg.audio_bos_id, device=device)
        with torch.inference_mode():
            self.bos = model.embed_frames(bos)  # (1, 1, D): the same every utterance
            model.null_context_kv()  # computed before any capture: the prefill's null row reads it
        self.prefill_graph = StepGraph(self._prefill, device, capture)  # not compiled: once an utterance

    def _step(self) -> DecoderStep:
        m = self.model
        visible = self.key_valid[:, None, None, :] & (self.positions <= self.index)
        inputs = LayerInputs(
            cache=self.cache, start=FixedPosition(self.index, visible), memory=self.memory,
            memory_valid=self.memory_valid, cross_rows=1, priors=list(self.priors),
        )  # fmt: skip
        hidden, probs = m.decode(self.x, inputs)
        hidden = hidden[:, -1]
        return DecoderStep(hidden, m.logits(hidden), probs)

    def _prefill(self) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        m = self.model
        memory = m.memory_kv(m.encode_text(self.text))  # the padding's keys and values: masked by memory_valid
        for (k, v), (fixed_k, fixed_v) in zip(memory, self.memory, strict=True):
            fixed_k.copy_(k)
            fixed_v.copy_(v)
        return m.prefill(self.context, self.bos, self.cache, self.key_valid, self.memory, self.memory_valid)

    def begin(self, owner: object, text: list[int]) -> KVCache:
        """Make ``owner``'s utterance the current one: its text's ids copied in (:meth:`prefill` encodes them), the
        priors reset, the key masks all true (the caller masks the context's padding). Returns the cache (full
        capacity, empty) its prefill writes into."""
        s = len(text)
        assert s <= self.text_capacity, "StaticDecoders.get sizes the text capacity from the text"
        self.text[0, :s] = torch.tensor(text, dtype=torch.long)
        self.memory_valid.zero_()
        self.memory_valid[:, :s] = True
        self.priors.fill_(1.0)
        self.key_valid.fill_(True)
        self.cache.length = 0
        self.owner = owner
        return self.cache

    def prefill(self, owner: object, context: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """The utterance's first step (:meth:`MagpieTTS.prefill` over the text :meth:`begin` took and the speaker's
        ``context`` (Tc, D)) -> the last rows' hidden states and the first row's cross-attention probabilities
        (the graph's own tensors)."""
        if owner is not self.owner:
            raise RuntimeError("this decoder's fixed cache was taken by a newer utterance (one at a time per model)")
        self.context.copy_(context)
        return self.prefill_graph()

    def set_priors(self, prior: torch.Tensor, layers: list[bool]) -> None:
        """The next steps' prior ``(S,)`` on the layers marked in ``layers`` (the others keep the ones
        :meth:`begin` set)."""
        for i, takes in enumerate(layers):
            if takes:
                self.priors[i, 0, 0, : prior.shape[0]] = prior

    def step(self, owner: object, x: torch.Tensor, position: int) -> DecoderStep:
        """The rows ``x`` (rows, 1, D) at ``position`` (their keys and values written there) -> the step."""
        if owner is not self.owner:
            raise RuntimeError("this decoder's fixed cache was taken by a newer utterance (one at a time per model)")
        check_position(position, self.model.cfg.decoder.max_positions, "decoder")  # CUDA would assert on the device
        self.cache.check_fits(position + 1)
        self.x.copy_(x)
        self.index.fill_(position)
        return self.graph()


class StaticDecoders:
    """A model's :class:`StaticDecoder` per (rows, capacity, text capacity), made on first use."""

    def __init__(self, model: MagpieTTS, capture: bool = True, compile: bool = False) -> None:
        self.model, self.capture, self.compile = model, capture, compile
        self.decoders: dict[tuple[int, int, int], StaticDecoder] = {}

    def get(self, rows: int, text: int) -> StaticDecoder:
        """The decoder for ``rows`` rows and ``text`` tokens. Its cache holds every learned position (a step past
        them is refused), whatever an utterance's frame limit: one graph, captured by a server's warm-up, serves
        every request (attending to the whole cache under a mask costs a GPU next to nothing)."""
        cfg = self.model.cfg
        if text < 1:
            raise InputError("no text tokens to speak (an utterance's ids end with the text's EOS)")
        check_position(text - 1, cfg.encoder.max_positions, "encoder")  # CUDA would assert inside the prefill graph
        key = (rows, cfg.decoder.max_positions, min(fixed_size(text, MIN_TEXT), cfg.encoder.max_positions))
        if key not in self.decoders:
            self.decoders[key] = StaticDecoder(self.model, *key, capture=self.capture, compile=self.compile)
        return self.decoders[key]

    @property
    def captured(self) -> bool:
        return any(d.graph.captured for d in self.decoders.values())
