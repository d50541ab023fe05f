"""Qwen3-Omni's talker (a Qwen3 MoE transformer writing each frame's first codebook) and its code predictor (a
small dense transformer writing the frame's other codebooks, one after another).

Module names are the file's (:class:`ggtts.gguf.keys.Qwen3OmniTalker`; a block's ``attn.``/``ffn.`` parts are
dropped by :func:`ggtts.models.layers.qwen3.gguf_name`). Positions are plain NEOX rotary positions: the talker's
M-RoPE gives the same angles when its three position streams are equal, as they are for text-only prompts.

The code predictor follows transformers' ``code_predictor.generate``: a two-row prefill (the talker's final,
normed hidden state and the embedding of the frame's first code) gives codebook 1 through ``output.0``; each
code drawn is embedded by its own table ``codec_embd.{j}`` and fed back for the next head. The talker's next
input is the sum of the frame's code embeddings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.ggml_stack import StackGraph, StackShape, StepPart, stack_graph
from ggtts.models.layers.gguf_state import empty_modules
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.qwen3 import (
    Attention,
    Block,
    DenseFFN,
    RMSNorm,
    RotaryEmbedding,
    SparseMoE,
    fuse_projections,
    load_weights,
)
from ggtts.models.layers.static_steps import StaticCaches, StaticDecode, StaticLanes
from ggtts.models.layers.transformer import StaticPosition, new_kv_cache
from ggtts.models.qwen3omni_talker.config import PredictorShape, StackConfig, TalkerConfig, TalkerShape
from ggtts.ops.stored_experts import DENSE_ROWS, Experts


def _blocks(cfg: StackConfig) -> nn.ModuleList:
    def ffn() -> nn.Module:
        if cfg.n_expert:
            return SparseMoE(cfg.dim, cfg.n_expert, cfg.n_expert_used, cfg.n_ff_exp, cfg.norm_topk_prob, cfg.n_ff_shexp)
        return DenseFFN(cfg.dim, cfg.n_ff)

    return nn.ModuleList(
        Block(cfg.dim, cfg.rms_eps, Attention(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps), ffn())
        for _ in range(cfg.n_layers)
    )


class ResizeMLP(nn.Module):
    """``fc2(silu(fc1(x)))``: the thinker's width to the talker's (``text_proj``, ``hidden_proj``)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(x)))


def _stack_graph(cfg: StackConfig, blocks: nn.ModuleList, norm: RMSNorm, rope_len: int, keep: int) -> StackGraph | None:
    shape = StackShape(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps, cfg.rope_theta, rope_len)
    return stack_graph(list(blocks), norm, shape, keep)


def _run(blocks: nn.ModuleList, rope: RotaryEmbedding, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
    start = cache.length
    for i, block in enumerate(blocks):
        x = block(x, rope, cache, i, start)
    cache.advance(x.shape[1])
    return x


class CodePredictor(nn.Module):
    """``embed_dim``: the width of the code embeddings and of the talker's hidden state it takes, where it differs
    from its own (Qwen3-TTS's larger talkers): its inputs then go through ``proj_in`` (upstream's
    ``small_to_mtp_projection``), and the sum of embeddings it returns is at that width."""

    def __init__(self, cfg: PredictorShape, embed_dim: int | None = None) -> None:
        super().__init__()
        s = cfg.code_predictor
        self.cfg = cfg
        embed_dim = embed_dim or s.dim
        self.embed_dim = embed_dim
        self.proj_in: nn.Module = nn.Linear(embed_dim, s.dim) if embed_dim != s.dim else nn.Identity()
        self.blk = _blocks(s)
        self.output_norm = RMSNorm(s.dim, s.rms_eps)
        n = cfg.n_codebooks - 1
        self.codec_embd = nn.ModuleList(nn.Embedding(cfg.cp_vocab, embed_dim) for _ in range(n))
        self.output = nn.ModuleList(nn.Linear(s.dim, cfg.cp_vocab, bias=False) for _ in range(n))
        self.rope = RotaryEmbedding(s.head_dim, s.rope_theta, cfg.n_codebooks + 1)
        self.graph: StackGraph | None = None  # each step one ggml graph, head included (CPU; see TalkerStack.loaded)

    def new_cache(self, rows: int = 1) -> KVCache:
        """A cache for one frame (reset and reused frame after frame); ``rows`` frames at once for
        :meth:`frame_on_device`'s batches."""
        c = self.cfg.code_predictor
        return new_kv_cache(
            c.n_layers, c.n_kv_heads, c.head_dim, self.cfg.n_codebooks + 1, self.rope, self.output_norm.weight,
            batch=rows,
        )  # fmt: skip

    def frame(
        self, hidden: torch.Tensor, first: torch.Tensor, choose: Callable[[int, torch.Tensor], int], cache: KVCache
    ) -> tuple[list[int], torch.Tensor]:
        """Codebooks 1.. of one frame from the talker's hidden state and the first code's embedding (each
        ``(1, 1, dim)``); ``choose(j, logits)`` picks codebook ``j + 1``. Returns the codes and the sum of their
        embeddings ``(1, 1, dim)``."""

        return self.frame_many([hidden], [first], [choose], [cache])[0]

    def frame_many(
        self, hiddens: Sequence[torch.Tensor], firsts: Sequence[torch.Tensor],
        chooses: Sequence[Callable[[int, torch.Tensor], int]], caches: Sequence[KVCache],
    ) -> list[tuple[list[int], torch.Tensor]]:  # fmt: skip
        """:meth:`frame` for several frames at once (one per cache: several utterances' lanes), each step of the
        code predictor one call for all of them (on the CPU one ggml graph: each weight read once for every frame);
        each frame's codes are chosen by its own ``chooses[i]``, in codebook order."""
        xs = [torch.cat((hidden, first), dim=1) for hidden, first in zip(hiddens, firsts, strict=True)]  # (1, 2, dim)
        codes: list[list[int]] = [[] for _ in xs]
        totals = [torch.zeros_like(first) for first in firsts]
        for cache in caches:
            cache.length = 0
        for j in range(self.cfg.n_codebooks - 1):
            logits = self._logits_many(j, [self.proj_in(x) for x in xs], caches)
            for i, first in enumerate(firsts):
                code = chooses[i](j, logits[i])
                codes[i].append(code)
                xs[i] = self.codec_embd[j](torch.tensor([[code]], device=logits[i].device)).to(first.dtype)
                totals[i] = totals[i] + xs[i]
        return list(zip(codes, totals, strict=True))

    def frame_on_device(
        self, hidden: torch.Tensor, first: torch.Tensor, pick: Callable[[int, torch.Tensor], torch.Tensor],
        cache: KVCache,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """As :meth:`frame` for ``R`` frames at once (rows ``hidden``, ``first`` ``(R, 1, dim)``, ``cache`` of ``R``
        rows: :meth:`new_cache`), with ``pick(j, logits (R, V))`` giving each row's codebook ``j + 1`` as a tensor
        ``(R,)`` where the logits are: the codes come back as a tensor ``(R, n_codebooks - 1)``, the sums of their
        embeddings ``(R, 1, dim)``. The rows share every position (a frame starts its cache afresh), so with a pick
        that reads nothing from the host every shape and position is the same frame after frame, and the whole
        frame runs as one CUDA graph (:class:`ggtts.families.qwen3omni.generate.GraphedFrame`)."""
        cache.length = 0
        x = torch.cat((hidden, first), dim=1)  # (R, 2, dim)
        codes: list[torch.Tensor] = []
        total = torch.zeros_like(first)
        for j in range(self.cfg.n_codebooks - 1):
            code = pick(j, self._row_logits(j, self.proj_in(x), cache))
            codes.append(code)
            x = self.codec_embd[j](code.view(-1, 1)).to(first.dtype)  # (R, 1, dim)
            total = total + x
        return torch.stack(codes, dim=1), total

    def _logits_many(self, j: int, xs: Sequence[torch.Tensor], caches: Sequence[KVCache]) -> list[torch.Tensor]:
        graph = self.graph
        if graph is None or len(xs) == 1 or not graph.takes_all(xs, caches):
            return [self._logits(j, x, cache) for x, cache in zip(xs, caches, strict=True)]
        parts = [StepPart(x[0], cache, last_only=True) for x, cache in zip(xs, caches, strict=True)]
        return [out.logits[0] for out in graph.step_many(parts, self.output[j])]

    def _logits(self, j: int, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Rows ``x (1, T, dim)`` through the blocks -> head ``j``'s logits ``(V,)`` of the last row."""
        if self.graph is not None and self.graph.takes(cache, rows=x.shape[0]):
            return self.graph.step(x[0], cache, self.output[j], last_only=True).logits[0]
        return self._modules_logits(j, x, cache)[0]

    def _row_logits(self, j: int, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Sequences ``x (R, T, dim)`` (one per cache row) -> head ``j``'s logits ``(R, V)`` of each one's last
        row (one sequence as :meth:`_logits` runs it)."""
        return self._logits(j, x, cache).unsqueeze(0) if x.shape[0] == 1 else self._modules_logits(j, x, cache)

    def _modules_logits(self, j: int, x: torch.Tensor, cache: KVCache) -> torch.Tensor:
        h = self.output_norm(_run(self.blk, self.rope, x, cache)[:, -1:])
        return self.output[j](h)[:, -1]  # (R, V)


class TalkerStack(nn.Module):
    """A talker's transformer over input rows, its first-codebook head and its code predictor: what the generation
    loop (:mod:`ggtts.families.qwen3omni.generate`) drives. ``token_embd`` has ``embedding_rows`` rows, the codec's
    starting at ``codec_offset`` (Qwen3-TTS's table holds the text's first)."""

    def __init__(
        self, cfg: TalkerShape, max_len: int, embedding_rows: int, codec_offset: int = 0,
        cp_embed_dim: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        s = cfg.talker
        self.cfg = cfg
        self.codec_offset = codec_offset
        self.token_embd = nn.Embedding(embedding_rows, s.dim)
        self.blk = _blocks(s)
        self.output_norm = RMSNorm(s.dim, s.rms_eps)
        self.output = nn.Linear(s.dim, cfg.codec_vocab, bias=False)
        self.rope = RotaryEmbedding(s.head_dim, s.rope_theta, max_len)
        self.cp = CodePredictor(cfg, cp_embed_dim)
        self.weights_note: str | None = None
        self.static: StaticCaches[tuple[torch.Tensor, torch.Tensor]] | None = None  # one-row steps, by capacity
        # several sequences' one-row steps at once (GPU lanes: use_static_lanes)
        self.lanes: StaticLanes[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.static_capture = True  # those steps (and the code predictor's graphed frames) captured on CUDA
        self.static_compile = False  # and compiled first
        self.graph: StackGraph | None = None  # each step one ggml graph (CPU; see loaded)

    def loaded(self, device: str | torch.device, max_len: int, step_graphs: bool, graph: bool = True) -> TalkerStack:
        """After the weights are in (built on the meta device): the rotary tables on ``device``, the CUDA step
        graphs where asked for, eval mode. On the CPU with ggml's kernels (and ``graph``), each step of the talker
        (dense or with experts) and of the code predictor runs as one ggml graph
        (:class:`~ggtts.models.layers.ggml_stack.StackGraph`) instead of the torch modules op by op."""
        s, c = self.cfg.talker, self.cfg.code_predictor
        self.rope = RotaryEmbedding(s.head_dim, s.rope_theta, max_len).to(device)
        self.cp.rope = RotaryEmbedding(c.head_dim, c.rope_theta, self.cfg.n_codebooks + 1).to(device)
        if step_graphs and torch.device(device).type == "cuda":
            self.use_static_steps()
        if graph:
            self.graph = _stack_graph(s, self.blk, self.output_norm, max_len, keep=4)
            # a graph per head: the frame's first step (two rows) and each later one
            self.cp.graph = _stack_graph(c, self.cp.blk, self.cp.output_norm, self.cfg.n_codebooks + 1,
                                         keep=self.cfg.n_codebooks)  # fmt: skip
        return self.eval()

    @contextlib.contextmanager
    def modules_only(self) -> Iterator[None]:
        """Inside, every step of the talker and the code predictor runs the torch modules op by op (their hooks
        see each layer: layer-by-layer parity), not the ggml graphs."""
        saved = self.graph, self.cp.graph
        self.graph = self.cp.graph = None
        try:
            yield
        finally:
            self.graph, self.cp.graph = saved

    def use_static_steps(self, capture: bool = True, compile: bool = False, fuse: bool = True) -> None:
        """From now on, :meth:`new_cache` hands out caches of fixed capacity and each one-row step on one runs as
        a :class:`~ggtts.models.layers.static_steps.StaticDecode` (a CUDA graph replayed, with ``capture`` on
        CUDA; eagerly elsewhere). ``compile``: that step, and the code predictor's graphed frame, compiled by
        ``torch.compile`` (fixed shapes) before they are captured. ``fuse``: the projections that read the same
        input multiplied as one (:func:`~ggtts.models.layers.qwen3.fuse_projections`), in every step from now on."""
        self._static_ready(capture, compile, fuse)
        weight = self.output_norm.weight

        def make(capacity: int) -> StaticDecode[tuple[torch.Tensor, torch.Tensor]]:
            row = torch.zeros(1, 1, self.cfg.talker.dim, dtype=weight.dtype)
            return StaticDecode(self._static_step, self._new_cache(capacity), self.rope, row, "the talker's step",
                                capture, compile)  # fmt: skip

        self.static = StaticCaches(make, self.rope.max_len)

    def use_static_lanes(self, slots: int, capture: bool = True, compile: bool = False, fuse: bool = True) -> None:
        """From now on, :meth:`new_cache` hands out rows of fixed caches of ``slots`` rows, and the one-row steps of
        up to ``slots`` sequences on them run together (:meth:`step_many`) as one
        :class:`~ggtts.models.layers.static_steps.StaticLanes` step: a CUDA graph replayed, with ``capture`` on
        CUDA (eagerly elsewhere); the code predictor's frames of those sequences likewise, one graph for all
        (:class:`~ggtts.families.qwen3omni.generate.LaneFrame`). Give each cache back with :meth:`release_cache`
        when its sequence ends. With every row held, a further cache is one of its own, stepped alone (the
        one-sequence static steps are off from now on). ``compile``, ``fuse``: as :meth:`use_static_steps`'."""
        self._static_ready(capture, compile, fuse)
        self.static = None
        row = torch.zeros(1, 1, self.cfg.talker.dim, dtype=self.output_norm.weight.dtype)
        self.lanes = StaticLanes(lambda capacity: self._new_cache(capacity, batch=slots), self._lanes_step, self.rope,
                                 row, slots, self.rope.max_len, "the talker's step of several sequences", capture,
                                 compile)  # fmt: skip

    def _static_ready(self, capture: bool, compile: bool, fuse: bool) -> None:
        """What every step over fixed caches needs: the experts' weights gathered (no host round trip), the
        projections fused where asked."""
        self.static_capture, self.static_compile = capture, compile
        for module in self.modules():
            if isinstance(module, Experts):
                module.gather = True  # what the graph holds, run eagerly too where it is not captured
        # fewer, larger products in every step: a replayed graph costs about its kernel count
        if fuse and fuse_projections([*self.blk, *self.cp.blk]):
            # ggml's CPU graphs take contiguous weights (a fused expert stack's halves are strided views): the
            # modules run every step from now on
            self.graph = self.cp.graph = None

    def release_cache(self, cache: KVCache) -> None:
        """``cache``'s sequence is over: its row of the static lanes (if it holds one) is free for another."""
        if self.lanes is not None:
            self.lanes.release(cache)

    @property
    def max_len(self) -> int:
        return self.rope.max_len

    def new_cache(self, max_len: int) -> KVCache:
        cache = self.lanes.new_cache(max_len) if self.lanes is not None else None
        if cache is None and self.static is not None:
            cache = self.static.new_cache(max_len)
        return cache if cache is not None else self._new_cache(max_len)

    def _new_cache(self, max_len: int, batch: int = 1) -> KVCache:
        c = self.cfg.talker
        return new_kv_cache(c.n_layers, c.n_kv_heads, c.head_dim, max_len, self.rope, self.output_norm.weight,
                            batch=batch)  # fmt: skip

    def embed_codes(self, code: int) -> torch.Tensor:
        """The first codebook's embedding of ``code``, ``(1, 1, dim)``."""
        return self.token_embd(torch.tensor([[code + self.codec_offset]], device=self.output_norm.weight.device))

    def step(self, x: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        """Input embeddings ``(1, T, dim)`` at ``cache.length..`` -> the last row's normed hidden state
        ``(1, 1, dim)`` and its first-codebook logits ``(V,)``."""
        if self.lanes is not None and self.lanes.holds(cache):
            if x.shape[1] == 1:
                hidden, logits = self.lanes.step([x], [cache])[0]
                return hidden, logits[0]
            if self._dense_prompts():  # up to DENSE_ROWS rows at a row's start: one graph
                prefilled = self.lanes.prefill(x, cache, self._static_prefill, DENSE_ROWS)
                if prefilled is not None:
                    return prefilled
        static = self.static.owner(cache) if self.static is not None else None
        if static is not None and x.shape[1] == 1:
            return static.step(x, cache)
        if static is not None and self._dense_prompts():  # up to DENSE_ROWS rows: one graph (no host wait)
            prefilled = static.prefill(x, cache, self._static_prefill, DENSE_ROWS)
            if prefilled is not None:
                return prefilled
        if self.graph is not None and self.graph.takes(cache, rows=x.shape[0]):
            out = self.graph.step(x[0], cache, self.output, last_only=True)
            return out.hidden.view(1, 1, -1), out.logits[0]
        h = self.output_norm(_run(self.blk, self.rope, x, cache)[:, -1:])
        return h, self.output(h)[0, -1]

    def step_many(
        self, xs: Sequence[torch.Tensor], caches: Sequence[KVCache]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`step` for several sequences (each its rows and cache) in one call: on the CPU one ggml graph, each
        weight read once for all of them (:meth:`~ggtts.models.layers.ggml_stack.StackGraph.step_many`); with static
        lanes every one-row step on a row of them in one lanes step (prompts one by one); elsewhere a step each."""
        if len(xs) != len(caches):
            raise ValueError(f"{len(xs)} inputs for {len(caches)} caches")
        if self.lanes is not None:
            return self._lanes_many(self.lanes, xs, caches)
        graph = self.graph
        if graph is None or len(xs) == 1 or not graph.takes_all(xs, caches):
            return [self.step(x, cache) for x, cache in zip(xs, caches, strict=True)]
        outs = graph.step_many([StepPart(x[0], cache, last_only=True) for x, cache in zip(xs, caches, strict=True)],
                               self.output)  # fmt: skip
        return [(out.hidden.view(1, 1, -1), out.logits[0]) for out in outs]

    def _lanes_many(
        self, lanes: StaticLanes[tuple[torch.Tensor, torch.Tensor]], xs: Sequence[torch.Tensor],
        caches: Sequence[KVCache],
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
        out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        steps = [i for i, (x, c) in enumerate(zip(xs, caches, strict=True)) if x.shape[1] == 1 and lanes.holds(c)]
        for i in sorted(set(range(len(xs))) - set(steps)):
            out[i] = self.step(xs[i], caches[i])
        if steps:
            stepped = lanes.step([xs[i] for i in steps], [caches[i] for i in steps])
            out.update((i, (hidden, logits[0])) for i, (hidden, logits) in zip(steps, stepped, strict=True))
        return [out[i] for i in range(len(xs))]

    def _dense_prompts(self) -> bool:
        """Whether a prompt's experts run with no host wait (every row through every expert; not turned off)."""
        return all(getattr(m, "dense", None) is not False for m in self.modules() if hasattr(m, "dense"))

    def _static_prefill(self, x: torch.Tensor, last: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.output_norm(_run(self.blk, self.rope, x, cache).index_select(1, last))
        return h, self.output(h)[0, -1]

    def _static_step(
        self, x: torch.Tensor, position: StaticPosition, cache: KVCache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, logits = self._lanes_step(x, position, cache)
        return h, logits[0]

    def _lanes_step(
        self, x: torch.Tensor, position: StaticPosition, cache: KVCache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows ``x (B, 1, dim)`` (each its cache row's next position) -> normed hidden states ``(B, 1, dim)`` and
        first-codebook logits ``(B, V)``."""
        for i, block in enumerate(self.blk):
            x = block(x, self.rope, cache, i, position)
        h = self.output_norm(x)
        return h, self.output(h)[:, -1]


class Talker(TalkerStack):
    """Qwen3-Omni's talker: its codec embedding table and the projections of the thinker's embeddings and hidden
    states into its width."""

    cfg: TalkerConfig

    def __init__(self, cfg: TalkerConfig, max_len: int | None = None) -> None:
        super().__init__(cfg, max_len or cfg.context_length, cfg.codec_vocab)
        self.text_proj = ResizeMLP(cfg.thinker_dim, cfg.proj_dim, cfg.talker.dim)  # thinker embeddings -> talker
        self.hidden_proj = ResizeMLP(cfg.thinker_dim, cfg.proj_dim, cfg.talker.dim)  # thinker hidden states

    @classmethod
    def from_gguf(
        cls, gguf: GGUFFile, device: str | torch.device = "cpu", *, stored_weights: bool = True, max_len: int = 8192,
        step_graphs: bool = True, graph: bool = True,
    ) -> Talker:  # fmt: skip
        """The talker and code predictor of a ``qwen3omni-talker`` file (its code2wav tensors are left for
        :mod:`ggtts.models.qwen3omni_code2wav`). On CUDA each one-row talker step is a captured CUDA graph over a
        fixed cache (:meth:`use_static_steps`) unless ``step_graphs=False``; on the CPU each step of the talker and
        of the code predictor is one ggml graph unless ``graph=False`` (:meth:`~TalkerStack.loaded`)."""
        from ggtts.gguf.keys import Qwen3OmniCode2Wav

        cfg = TalkerConfig.from_gguf(gguf)
        max_len = min(max_len, cfg.context_length)
        with empty_modules():
            model = cls(cfg, max_len)
        _, model.weights_note = load_weights(
            model, gguf, device=device, stored_weights=stored_weights, ignore_prefixes=(Qwen3OmniCode2Wav.PREFIX,)
        )
        model.loaded(device, max_len, step_graphs, graph)
        return model
