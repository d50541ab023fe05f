"""Magpie's generation loop, as NeMo's ``MagpieTTSModel.infer_batch`` runs it for one utterance.

Each decoder step takes one *stack* of ``S`` codec frames (``frame_stacking``) and gives the next:

1. the decoder runs over the new row (the first step: the speaker's baked context and the BOS stack) with its
   self-attention cache; the text memory's keys and values are computed once;
2. with classifier-free guidance a second batch row runs with the text zeroed (its cross-attention output is
   exactly zero: NeMo's null memory gives zero keys and values) and a zero speaker context; logits combine as
   ``scale * cond + (1 - scale) * uncond`` in both heads;
3. the local transformer draws the ``C * S`` codes one after another (top-k, temperature, forbidden special
   tokens, EOS forbidden before ``min_generated_frames``); the parallel head's argmax is the second EOS stream;
4. EOS (``argmax_or_multinomial_any`` by default): the first frame of the stack where any codebook says EOS in
   either stream ends the utterance; that frame and the rest are dropped;
5. the attention prior (when on) reads the step's cross-attention probabilities of the alignment layers, finds
   the attended text position in a lookahead window, and builds the next step's prior: 1 around it, epsilon
   elsewhere, with NeMo's attention-sink rules.

``cached=False`` recomputes every step from scratch over the whole sequence (each row with the prior it had when
it was new), the reference the cached path must equal: both match NeMo's ``infer_batch`` with its KV cache
(``use_kv_cache_for_inference``, which NeMo's batch inference runner turns on). NeMo's uncached loop, the one
``do_tts`` runs, instead recomputes every row at every step under the newest prior: with the prior on, its codes
differ from its own cached loop's after a few frames. ``prior_rows="latest"`` (with ``cached=False``) does that
too, code for code, at a cost that grows with the square of the length.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.magpie.model import LayerInputs, MagpieTTS, new_cache
from ggtts.models.magpie.static_steps import StaticDecoder, compiled
from ggtts.models.magpie.step_graph import DecoderGraph, DecoderPart, StepResult, TextMemory, text_memory
from ggtts.ops.step_graph import StepGraph
from ggtts.runtime.frames import decode_frames

SINK_SKIP = 8  # NeMo: a text position attended this often is skipped as an attention sink
SINK_PENALTY = 10  # NeMo: positions up to one attended this often get epsilon in the prior
SHORT_TEXT = 5  # NeMo: texts of at most this many tokens get a flat prior
END_MARGIN = 3  # NeMo: the lookahead window ignores the last tokens


@dataclass(frozen=True)
class GenerationParams:
    temperature: float = 0.7  # 0: greedy
    top_k: int = 80
    cfg_scale: float | None = 2.5  # None: no guidance
    prior: bool = True
    prior_epsilon: float = 0.1
    prior_lookahead: int = 5
    prior_layers: tuple[int, ...] = ()  # empty: all decoder layers
    alignment_layers: tuple[int, ...] = ()  # empty: all decoder layers
    prior_start: int = 0
    max_frames: int = 500
    min_frames: int = 4
    eos_method: str = "argmax_or_multinomial_any"
    seed: int | None = 0
    cached: bool = True
    # "own": each decoder row keeps the prior it was computed with (NeMo with its KV cache; cached = uncached);
    # "latest": every step recomputes all rows with the newest prior (NeMo without the cache, as do_tts runs it;
    # needs cached=False: the cost grows with the square of the length)
    prior_rows: str = "own"

    def __post_init__(self) -> None:
        if self.prior_rows not in ("own", "latest"):
            raise ValueError(f"prior_rows must be 'own' or 'latest', got {self.prior_rows!r}")
        if self.prior_rows == "latest" and self.cached:
            raise ValueError("prior_rows='latest' recomputes every row at every step: it needs cached=False")


@dataclass
class _PriorState:
    last: int = 1  # NeMo starts at text position 1
    counts: dict[int, int] = field(default_factory=dict)


def _eos_frame(codes: torch.Tensor, eos: int, method: str) -> int | None:
    """First frame (column) of ``codes`` (C, S) that says EOS under ``method``'s rule ("any", "all", "zero_cb")."""
    hit = codes == eos
    if method.endswith("_all"):
        per_frame = hit.all(dim=0)
    elif method.endswith("_zero_cb"):
        per_frame = hit[0]
    else:
        per_frame = hit.any(dim=0)
    found = per_frame.nonzero()
    return int(found[0]) if len(found) else None


class MagpieGenerator:
    def __init__(self, model: MagpieTTS, params: GenerationParams) -> None:
        self.model, self.params, self.cfg = model, params, model.cfg
        self.generator = torch.Generator(device=model.text_embedding.weight.device)
        if params.seed is not None:
            self.generator.manual_seed(params.seed)

    # ---- sampling --------------------------------------------------------------------------------------------
    def _filter(self, logits: torch.Tensor, forbid_eos: bool) -> torch.Tensor:
        """Forbidden special tokens to -inf, then NeMo's top-k (everything below the k-th value)."""
        logits = logits.clone()
        logits[..., list(self.cfg.forbidden_ids)] = float("-inf")
        if forbid_eos:
            logits[..., self.cfg.audio_eos_id] = float("-inf")
        k = min(self.params.top_k, logits.shape[-1])
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))

    def _draw(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, V) filtered -> (rows,) codes."""
        if self.params.temperature <= 0:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits / self.params.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator)[:, 0]

    def _guided(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, ...) -> (1, ...): guidance over the first two rows, or the only row."""
        scale = self.params.cfg_scale
        if scale is None:
            return logits[:1]
        return scale * logits[:1] + (1.0 - scale) * logits[1:2]

    def local_codes(self, hidden: torch.Tensor, forbid_eos: bool) -> torch.Tensor:
        """The last decoder rows (rows, D) -> codes (C, S) drawn by the local transformer."""
        return local_codes_many([self], [hidden], [forbid_eos])[0]

    def argmax_codes(self, logits: torch.Tensor, forbid_eos: bool) -> torch.Tensor:
        """The parallel head's logits (1, S*C, V) -> its argmax codes (C, S) (NeMo's EOS stream)."""
        best = self._filter(logits[0], forbid_eos).argmax(dim=-1)  # (S*C,)
        return best.reshape(self.cfg.frame_stacking, self.cfg.num_codebooks).T

    # ---- the attention prior ---------------------------------------------------------------------------------
    def _alignment(self, probs: list[torch.Tensor | None]) -> torch.Tensor:
        """Cross-attention probabilities of the last row, averaged over heads then layers -> (S_text,)."""
        chosen = self.params.alignment_layers or tuple(range(len(probs)))
        per_layer = []
        for i in chosen:
            p = probs[i]
            assert p is not None
            per_layer.append(p[:1, :, -1:].mean(dim=1))  # (1, 1, S)
        return torch.stack(per_layer, dim=1).mean(dim=1)[0, -1]

    def _next_prior(self, scores: torch.Tensor, state: _PriorState, text_len: int) -> torch.Tensor:
        last = state.last
        if state.counts.get(last, 0) >= SINK_SKIP:
            last += 1
        end = min(last + self.params.prior_lookahead, text_len - END_MARGIN)
        window = scores[last:end]
        attended = text_len - 1 if window.numel() == 0 else int(window.argmax()) + last
        state.counts[attended] = state.counts.get(attended, 0) + 1
        state.last = attended
        eps = self.params.prior_epsilon
        prior = torch.full((text_len,), eps, device=scores.device)
        if text_len <= SHORT_TEXT:
            prior[:] = 1.0
        else:
            prior[max(1, attended - 1)] = 1.0
            prior[attended] = 1.0
            for d in range(1, self.params.prior_lookahead + 1):
                prior[min(attended + d, text_len - 1)] = 1.0
        for position, count in state.counts.items():
            if count >= SINK_PENALTY:
                prior[: position + 1] = eps
        return prior

    def _layer_priors(self, prior: torch.Tensor | None) -> list[torch.Tensor | None] | None:
        if prior is None:
            return None
        chosen = set(self.params.prior_layers or range(self.cfg.decoder.n_layers))
        return [prior if i in chosen else None for i in range(self.cfg.decoder.n_layers)]

    # ---- the loop ------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def frames(self, text_ids: list[int], speaker: int) -> Iterator[torch.Tensor]:
        """Yield the codes (C, n) of each decoder step (n = S, fewer at the end); stop at EOS or the frame limit."""
        steps = self.steps
        yield from decode_frames(self.utterance(text_ids, speaker), steps)

    @property
    def steps(self) -> int:
        """The most decoder steps an utterance runs (NeMo: max_decoder_steps // frame stacking)."""
        return max(1, self.params.max_frames // self.cfg.frame_stacking)

    def utterance(self, text_ids: list[int], speaker: int) -> Utterance:
        """One utterance's decoding, stepped by :func:`~ggtts.runtime.frames.decode_frames` (:meth:`frames`) or
        beside others' (:mod:`ggtts.families.magpie.lanes`)."""
        return Utterance(self, text_ids, speaker, self.steps)

    def _eos_streams(self, codes: torch.Tensor, argmax: torch.Tensor) -> list[torch.Tensor]:
        if self.params.eos_method.startswith("argmax_or_multinomial"):
            return [codes, argmax]
        return [argmax]

    def _prior_rows(
        self, row_priors: list[torch.Tensor | None], tc: int, text_len: int, device: torch.device
    ) -> torch.Tensor | None:
        """For the uncached pass: (1, Tc + rows, S) priors, each audio row with its own (ones where none)."""
        if all(r is None for r in row_priors):
            return None
        ones = torch.ones(text_len, device=device)
        rows = [ones] * tc + [ones if r is None else r for r in row_priors]
        return torch.stack(rows)[None]


def local_codes_many(
    gens: Sequence[MagpieGenerator], hiddens: Sequence[torch.Tensor], forbid_eos: Sequence[bool]
) -> list[torch.Tensor]:
    """Several utterances' frames drawn by the local transformer together: each one's last decoder rows (rows, D)
    -> its codes (C, S). Their rows run through each table's step as one batch (on the CPU one ggml graph: each
    weight read once for all of them; every frame starts at the first position, so they go in lock step); each
    utterance draws from its own logits with its own generator and settings, in its own order, as it does alone."""
    m, cfg = gens[0].model, gens[0].cfg
    lt = cfg.local_transformer
    sizes = [h.shape[0] for h in hiddens]
    rows, device = sum(sizes), hiddens[0].device
    cache = new_cache(lt, cfg.tables + 1, rows, device)
    # the input projection (torch's, where the widths differ) over each utterance's own rows, as alone: torch may
    # multiply more rows with other kernels, other roundings
    x, start = _joined([m.local_input(h) for h in hiddens]), 0
    codes: list[list[int]] = [[] for _ in gens]
    graph = m.graph()
    graph = graph if graph is not None and graph.takes_rows(cache, rows) else None
    for table in range(cfg.tables):
        if graph is not None:  # the layers and the table's projection as one ggml graph
            logits = graph.local_step(x[:, -1], cache, start, table)
        else:
            logits = m.local_logits(table, m.local_step(x, cache, start))
        start += x.shape[1]
        picked = []
        for i, (gen, part) in enumerate(zip(gens, logits.split(sizes), strict=True)):
            code = gen._draw(gen._filter(gen._guided(part), forbid_eos[i]))  # (1,)
            codes[i].append(int(code))
            picked.append(m.local_code_input(table, code.expand(sizes[i])))
        x = _joined(picked)
    # table index = codebook + frame_in_stack * C
    return [torch.tensor(c, device=device).reshape(cfg.frame_stacking, cfg.num_codebooks).T for c in codes]


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class DeviceFrame:
    """The local transformer's whole frame (each table's step and draw in turn) and the parallel head's filtered
    argmax, on the model's device as tensors only: one CUDA graph replayed per frame where the model is on CUDA
    (eagerly elsewhere: the CPU tests run the code the graph holds). The same filters and guidance as
    :class:`MagpieGenerator`; a draw is the exponential race (the argmax of the probabilities over a row of Exp(1)
    noise, drawn before each frame from this frame's own generator: on the GPU, so not the host loop's sequence).
    Also gives the next decoder input: the mean of the frame's code embeddings."""

    def __init__(
        self, model: MagpieTTS, params: GenerationParams, rows: int, capture: bool = True, compile: bool = False
    ) -> None:
        cfg, weight = model.cfg, model.text_embedding.weight
        device, dtype = weight.device, weight.dtype
        tables, vocab = cfg.tables, cfg.tokens_per_codebook
        self.model, self.params, self.rows = model, params, rows
        self.hidden = torch.zeros(rows, cfg.d_model, dtype=dtype, device=device)
        self.head = torch.zeros(rows, tables, vocab, dtype=dtype, device=device)
        self.forbid_eos = torch.zeros((), dtype=torch.bool, device=device)
        self.noise = torch.ones(tables, vocab, device=device)
        self.blocked = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.blocked[list(cfg.forbidden_ids)] = True
        self.eos = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.eos[cfg.audio_eos_id] = True
        self.cache = new_cache(cfg.local_transformer, tables + 1, rows, device)
        self.generator = torch.Generator(device)
        self.graph = StepGraph(compiled(self._frame, compile, "Magpie's local-transformer frame", device), device,
                               capture)  # fmt: skip

    def _guided(self, logits: torch.Tensor) -> torch.Tensor:
        scale = self.params.cfg_scale
        return logits[:1] if scale is None else scale * logits[:1] + (1.0 - scale) * logits[1:2]

    def _filter(self, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.masked_fill(self.blocked | (self.eos & self.forbid_eos), float("-inf"))
        kth = torch.topk(logits, min(self.params.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))

    def _pick(self, logits: torch.Tensor, table: int) -> torch.Tensor:
        """Filtered logits (1, V) -> the code (1,): the argmax when greedy, else drawn by the race."""
        temperature = self.params.temperature
        if temperature <= 0:
            return logits.argmax(dim=-1)
        return (torch.softmax(logits / temperature, dim=-1) / self.noise[table]).argmax(dim=-1)

    def _frame(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m, cfg = self.model, self.model.cfg
        x, start, codes = m.local_input(self.hidden), 0, []
        for table in range(cfg.tables):
            logits = self._filter(self._guided(m.local_logits(table, m.local_step(x, self.cache, start))))  # (1, V)
            start += x.shape[1]
            code = self._pick(logits, table)
            codes.append(code)
            x = m.local_code_input(table, code.expand(self.rows))
        drawn = torch.cat(codes)  # (tables,): codebook + frame_in_stack * C
        argmax = self._filter(self._guided(self.head)[0]).argmax(dim=-1)
        frame = drawn.reshape(cfg.frame_stacking, cfg.num_codebooks).T
        return drawn, argmax, m.embed_frames(frame[None])  # (tables,), (tables,), (1, 1, D)

    def reseed(self, seed: int | None) -> DeviceFrame:
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        return self

    def __call__(
        self, hidden: torch.Tensor, head: torch.Tensor, forbid_eos: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The decoder's last rows (rows, D) and their head's logits (rows, tables, V) -> the drawn codes and the
        head's argmax (tables,) each, and the frame's embedding (1, 1, D): this frame's graph tensors."""
        self.hidden.copy_(hidden)
        self.head.copy_(head)
        self.forbid_eos.fill_(forbid_eos)
        if self.params.temperature > 0:
            self.noise.exponential_(generator=self.generator)
        return self.graph()


def device_frame(model: MagpieTTS, params: GenerationParams, rows: int) -> DeviceFrame:
    """The model's :class:`DeviceFrame` for these rows and settings (captured and compiled as its static steps
    are), made the first time (kept by the model: captured once, not once per utterance), reseeded by
    ``params.seed``."""
    capture, compile = bool(model.static_capture), model.static_compile
    key = (rows, params.temperature, params.top_k, params.cfg_scale, capture, compile)
    frame = model.device_frames.get(key)
    if not isinstance(frame, DeviceFrame):
        frame = model.device_frames[key] = DeviceFrame(model, params, rows, capture, compile)
    return frame.reseed(params.seed)


class Utterance:
    """One utterance's decoder steps as a :class:`~ggtts.runtime.frames.FrameDecoder`: ``draw`` runs the local
    transformer, the parallel head, the attention prior and the EOS rule on the last decoder output; ``feed``
    embeds the kept stack and runs the decoder over it (cached, or from scratch in the two uncached modes)."""

    def __init__(self, gen: MagpieGenerator, text_ids: list[int], speaker: int, steps: int) -> None:
        m, p, cfg = gen.model, gen.params, gen.cfg
        self.gen, self.m, self.p, self.cfg = gen, m, p, cfg
        self.device = device = m.text_embedding.weight.device
        self.rows = rows = 1 if p.cfg_scale is None else 2
        self.text_len = len(text_ids)
        decoders = m.static_steps() if p.cached else None
        # the steps over fixed tensors: the text's memory is written there by their prefill (one graph with it)
        self.static: StaticDecoder | None = None if decoders is None else decoders.get(rows, self.text_len)
        self.memory = (
            [] if self.static is not None else m.memory_kv(m.encode_text(torch.tensor([text_ids], device=device)))
        )
        self.text: TextMemory | None = None  # the memory as the ggml graphs read it (graph_part)
        context = m.speaker_context(speaker)  # (Tc, D)
        self.tc = tc = context.shape[0]
        max_len = tc + steps + 1
        self.context = context
        # the decoder's input rows: the context's (rows, Tc, D; CFG's null context zeros; only the uncached passes
        # stack them, the cached ones prefill the context itself) and those after it (a static decoder holds its
        # own BOS row)
        self.prefix = context[:0] if p.cached else torch.stack([context, torch.zeros_like(context)])[:rows]
        self.history: list[torch.Tensor] = []
        if self.static is None:
            bos = torch.full((1, cfg.num_codebooks, cfg.frame_stacking), cfg.audio_bos_id, device=device)
            self.history = [m.embed_frames(bos).expand(rows, -1, -1)]
        self.row_priors: list[torch.Tensor | None] = [None]  # the prior each audio row was computed with
        if self.static is not None:  # the steps over fixed tensors: their cache and key masks
            self.cache = self.static.begin(self, text_ids)
            self.key_valid = self.static.key_valid
            self.frame = device_frame(m, p, rows)
            chosen = set(p.prior_layers or range(cfg.decoder.n_layers))
            self.prior_layers = [i in chosen for i in range(cfg.decoder.n_layers)]
            self.next_input = torch.empty(0)
        else:
            self.cache = new_cache(cfg.decoder, max_len, rows, device)
            self.key_valid = torch.ones(rows, max_len, dtype=torch.bool, device=device)
        self.key_valid[0, cfg.context_lengths[speaker] : tc] = False  # a short speaker's padding
        self.prior: torch.Tensor | None = None
        self.state = _PriorState()
        self.step = 0
        self.last = torch.empty(0)  # the decoder's last rows (rows, D)
        self.head: torch.Tensor | None = None  # their parallel-head logits, where the step gave them
        self.probs: list[torch.Tensor | None] = []
        self.ended = False

    def prefill(self) -> None:
        self._decode()

    def _decode(self) -> None:
        """The decoder over this step's input, leaving its last rows and cross-attention probabilities."""
        gen, m, p = self.gen, self.m, self.p
        inputs = LayerInputs(cache=self.cache, key_valid=self.key_valid, memory=self.memory, cross_rows=1)
        if p.cached and self.step == 0:
            if self.static is not None:  # the text encoder and the prefill, one graph
                self.last, self.probs = self.static.prefill(self, self.context)
            else:
                self.last, self.probs = m.prefill(self.context, self.history[0][:1], self.cache, self.key_valid,
                                                  self.memory)  # fmt: skip
            return
        self.head = None
        if self.static is not None:  # its priors are set where the prior changes (draw)
            out = self.static.step(self, self.next_input, self.tc + self.step)
            self.last, self.head, self.probs = out.hidden, out.logits, out.probs
            return
        if p.cached:
            graph = m.graph()
            part = self.graph_part(graph)
            if graph is not None and part is not None:
                self.took(graph.step_many([part])[0])
                return
            inputs.start = self.tc + self.step
            inputs.priors = gen._layer_priors(None if self.prior is None else self.prior[None, None])
            hidden, self.probs = m.decode(self.history[-1], inputs)
        elif p.prior_rows == "latest":
            inputs.priors = gen._layer_priors(None if self.prior is None else self.prior[None, None])
            hidden, self.probs = m.decode(torch.cat([self.prefix, *self.history], dim=1), inputs)
        else:
            priors = gen._prior_rows(self.row_priors, self.tc, self.text_len, self.device)
            inputs.priors = gen._layer_priors(priors)
            hidden, self.probs = m.decode(torch.cat([self.prefix, *self.history], dim=1), inputs)
        self.last = hidden[:, -1]

    def graph_part(self, graph: DecoderGraph | None) -> DecoderPart | None:
        """This step's share of a cached decoder step as the model's ggml ``graph`` runs it (:meth:`DecoderGraph.
        step_many`); None where the graph does not take it (no graph, the steps over fixed tensors, the first
        step's prefill)."""
        if graph is None or self.static is not None or not self.p.cached or self.step == 0:
            return None
        if not graph.takes(self.cache, None, self.rows):
            return None
        priors = self.gen._layer_priors(None if self.prior is None else self.prior[None, None])
        if self.text is None:
            self.text = text_memory(self.memory)  # (laid out for the graphs once)
        return DecoderPart(self.history[-1][:, -1], self.cache, self.tc + self.step, self.key_valid, self.memory,
                           priors, self.text)  # fmt: skip

    def took(self, step: StepResult) -> None:
        """The graph step's result of :meth:`graph_part`'s share."""
        self.last, self.probs = step.hidden, step.probs
        self.head = step.logits.reshape(self.rows, -1, self.cfg.tokens_per_codebook)

    def forbids_eos(self, step: int) -> bool:
        return step * self.cfg.frame_stacking < self.p.min_frames

    def draw(self, step: int, local: torch.Tensor | None = None) -> torch.Tensor | None:
        """Step ``step``'s frame (None: the utterance ends without one); ``local``: the local transformer's codes,
        where they were drawn already (beside other utterances': :func:`draw_many`)."""
        gen, p, cfg = self.gen, self.p, self.cfg
        forbid_eos = self.forbids_eos(step)
        aligning = p.prior and step >= p.prior_start
        frame: torch.Tensor | None = None
        if self.static is not None:
            head = self.m.logits(self.last) if self.head is None else self.head
            drawn, best, self.next_input = self.frame(self.last, head, forbid_eos)
            parts = [drawn.float(), best.float()]
            if aligning:
                parts.append(gen._alignment(self.probs)[: self.text_len].float())
            host = torch.cat(parts).cpu()  # the frame's one wait for the device
            n = cfg.tables
            codes = host[:n].long().reshape(cfg.frame_stacking, cfg.num_codebooks).T
            argmax = host[n : 2 * n].long().reshape(cfg.frame_stacking, cfg.num_codebooks).T
            frame = drawn.reshape(cfg.frame_stacking, cfg.num_codebooks).T
            if aligning:
                self.prior = gen._next_prior(host[2 * n :], self.state, self.text_len).to(self.device)
                self.static.set_priors(self.prior, self.prior_layers)
        else:
            codes = gen.local_codes(self.last, forbid_eos) if local is None else local
            head = self.m.logits(self.last) if self.head is None else self.head
            argmax = gen.argmax_codes(gen._guided(head), forbid_eos)
            if aligning:
                self.prior = gen._next_prior(gen._alignment(self.probs), self.state, self.text_len)
        ends = [_eos_frame(c, cfg.audio_eos_id, p.eos_method) for c in gen._eos_streams(codes, argmax)]
        end = min((e for e in ends if e is not None), default=None)
        frames_left = p.max_frames - step * cfg.frame_stacking
        keep = min(cfg.frame_stacking if end is None else end, frames_left)
        self.ended = end is not None or keep < cfg.frame_stacking
        if keep <= 0:
            return None
        return codes[:, :keep] if frame is None else frame[:, :keep].clone()

    def is_last(self, frame: torch.Tensor) -> bool:
        return self.ended

    def feed(self, frame: torch.Tensor) -> None:
        if self.static is not None:  # the frame's embedding came with its draw; no history kept
            self.next_input = self.next_input.expand(self.rows, -1, -1)
            self.step += 1
            self._decode()
            return
        self.advance(frame)
        self._decode()

    def advance(self, frame: torch.Tensor) -> None:
        """``frame`` kept: the next step's input (the decoder not run yet)."""
        self.history.append(self.m.embed_frames(frame[None]).expand(self.rows, -1, -1))
        self.row_priors.append(self.prior)
        self.step += 1


def draw_many(utterances: Sequence[Utterance], steps: Sequence[int]) -> list[torch.Tensor | None]:
    """Each utterance's :meth:`~Utterance.draw` of its step, their local transformers' frames drawn together
    (:func:`local_codes_many`) where none runs its steps over fixed tensors."""
    if any(u.static is not None for u in utterances):
        return [u.draw(step) for u, step in zip(utterances, steps, strict=True)]
    local = local_codes_many([u.gen for u in utterances], [u.last for u in utterances],
                             [u.forbids_eos(step) for u, step in zip(utterances, steps, strict=True)])  # fmt: skip
    return [u.draw(step, codes) for u, step, codes in zip(utterances, steps, local, strict=True)]


def feed_many(utterances: Sequence[Utterance], frames: Sequence[torch.Tensor]) -> None:
    """Each utterance's :meth:`~Utterance.feed` of its frame, their decoder steps as one ggml graph where the graph
    takes every one of them (:meth:`DecoderGraph.step_many`), else one after another."""
    for u, frame in zip(utterances, frames, strict=True):
        if u.static is not None:
            u.feed(frame)
        else:
            u.advance(frame)
    rest = [u for u in utterances if u.static is None]
    graph = rest[0].m.graph() if rest else None  # (once a step: it checks every parameter is where it was)
    parts = [u.graph_part(graph) for u in rest]
    if graph is not None and all(part is not None for part in parts):
        for u, result in zip(rest, graph.step_many(parts), strict=True):  # type: ignore[arg-type]
            u.took(result)
        return
    for u in rest:
        u._decode()


def generate_codes(model: MagpieTTS, text_ids: list[int], speaker: int, params: GenerationParams) -> torch.Tensor:
    """All codes (C, frames) of one utterance."""
    parts = list(MagpieGenerator(model, params).frames(text_ids, speaker))
    if not parts:
        return torch.zeros(model.cfg.num_codebooks, 0, dtype=torch.long)
    return torch.cat(parts, dim=1)


__all__ = ["GenerationParams", "KVCache", "MagpieGenerator", "generate_codes"]
