"""The talker's generation loop, as transformers' ``Qwen3OmniMoeTalkerForConditionalGeneration.generate`` runs it.

Each step: the talker's logits for the frame's first code go through the repetition penalty (over the first codes
drawn so far), the suppressed ids (the codec vocabulary's tail but EOS), then temperature, top-k and top-p, and a
draw (or argmax when greedy); the code predictor fills the frame's other codebooks from the talker's hidden state
(top-k 50, top-p 0.8 at its own temperature, or argmax: it follows the talker's greedy setting, as upstream); the
sum of the frame's code embeddings plus the next text row is the talker's next input. A first code equal to codec
EOS ends the audio; so does the frame budget (upstream's ``max_new_tokens`` is one more than the frames it
returns: the last code drawn never gets its other codebooks; ggtts does not draw it).

On CUDA the talker's step is a replayed CUDA graph (:meth:`TalkerStack.use_static_steps`), and so is the code
predictor's whole frame (:class:`GraphedFrame`): its codes are chosen on the GPU (:class:`DevicePick`), so a frame
costs two host round trips, the talker's logits (its first code is chosen on the host, over the codes drawn so far)
and the frame's codes (which the stream needs).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ggtts.errors import GGUFError
from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.models.qwen3omni_talker.config import Sampling
from ggtts.models.qwen3omni_talker.model import CodePredictor, TalkerStack
from ggtts.ops.compile import CompiledOrEager
from ggtts.ops.step_graph import StepGraph
from ggtts.runtime.frames import decode_frames
from ggtts.runtime.sampling import apply_repetition_penalty, filter_top_k, filter_top_p

# draws one id from probabilities (V,): torch.multinomial with the run's generator; tests swap in a fixed rule
Draw = Callable[[torch.Tensor, torch.Generator], int]


def multinomial(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass(frozen=True)
class TalkerSampling:
    greedy: bool
    talker: Sampling
    code_predictor: Sampling
    max_frames: int
    seed: int = 0


class HFSampler:
    """transformers' logits processors in their order: repetition penalty, suppressed ids, then (sampling only)
    temperature, top-k, top-p, softmax and a draw."""

    def __init__(self, params: Sampling, greedy: bool, generator: torch.Generator, draw: Draw = multinomial) -> None:
        self.params, self.greedy, self.generator, self.draw = params, greedy, generator, draw

    def scores(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The logits ``(V,)`` after the processors (on the CPU, in float32): what the draw or argmax reads."""
        p = self.params
        scores = apply_repetition_penalty(logits.float().cpu(), history, p.repetition_penalty)
        if suppressed is not None:
            scores = scores.index_fill(0, suppressed, float("-inf"))
        if self.greedy:
            return scores
        return filter_top_p(filter_top_k(scores / p.temperature, p.top_k), p.top_p)

    def __call__(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> int:
        logits = logits.float().cpu()  # one wait for a GPU, the check after it on the host's copy
        if not bool(torch.isfinite(logits).all()):
            raise GGUFError("the model's logits are not finite numbers (inf or NaN): are its weights damaged?")
        scores = self.scores(logits, history, suppressed)
        if self.greedy:
            return int(torch.argmax(scores))
        return self.draw(torch.softmax(scores, dim=-1), self.generator)


class Pick(Protocol):
    """Logits ``(V,)`` (with the codes drawn so far and the ids to suppress) -> the code chosen."""

    def __call__(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> int: ...


# the code predictor's part of a frame: (the talker's hidden state, the first code's embedding) -> (its codes, the
# sum of their embeddings)
RestOfFrame = Callable[[torch.Tensor, torch.Tensor], tuple[list[int], torch.Tensor]]


class DevicePick:
    """:class:`HFSampler`'s choice for the code predictor (no history, nothing suppressed) made on the logits'
    device, as tensors only (no host round trip): argmax when greedy; otherwise temperature, top-k and top-p, then
    a draw by the exponential race (the argmax of the probabilities over ``noise[j]``, a row of Exp(1) draws, is a
    draw from them: gpt-fast's way to sample without a sync). ``noise`` ``(n_codebooks - 1, V)`` is refilled
    before each frame; for ``R`` frames at once it is ``(R, n_codebooks - 1, V)`` and the logits ``(R, V)``, each
    row its own draw."""

    def __init__(self, params: Sampling, greedy: bool, noise: torch.Tensor) -> None:
        self.params, self.greedy, self.noise = params, greedy, noise

    def __call__(self, j: int, logits: torch.Tensor) -> torch.Tensor:
        """Codebook ``j + 1``'s code of each row: ``(R,)`` (``(1,)`` for logits ``(V,)``)."""
        scores = logits.float()
        if self.greedy:
            return scores.argmax(-1).view(-1)
        p = self.params
        k = p.top_k if 0 < p.top_k < scores.shape[-1] else scores.shape[-1]
        # the k best, in order: top-k's survivors (ties at the k-th aside), and top-p's order among them
        best, ids = torch.topk(scores / p.temperature, k)
        probs = torch.softmax(best, dim=-1)
        if p.top_p < 1.0:  # a token stays while the mass before it is short of top_p (the first always does)
            probs = probs * ((probs.cumsum(-1) - probs) < p.top_p)
        # the race over the survivors, each with its own token's noise (unnormalised: the argmax is the same)
        # (as tensors: an index read on the host would wait for the GPU, and a CUDA graph cannot hold that)
        race = probs / self.noise[..., j, :].gather(-1, ids)
        return ids.gather(-1, race.argmax(-1, keepdim=True)).view(-1)


class GraphedFrame:
    """The code predictor's whole frame (15 sequential steps and picks) as one CUDA graph replayed per frame
    (eagerly off CUDA or with ``capture=False``: the CPU tests run the code the graph holds). Its draws come from
    its own generator seeded by ``seed``: on the GPU, so not the CPU loop's sequence.

    With ``rows`` > 1 it makes up to that many frames at once (several utterances' lanes: :meth:`many`), each row
    its own frame and its draws from its own generator; the graph runs every row, whichever take part."""

    def __init__(
        self, cp: CodePredictor, params: Sampling, greedy: bool, seed: int, capture: bool = True, compile: bool = False,
        rows: int = 1,
    ) -> None:  # fmt: skip
        if rows < 1:
            raise ValueError("a graphed frame makes at least one row")
        weight = cp.output_norm.weight
        device, dim = weight.device, cp.embed_dim  # the talker's width (proj_in's input)
        self.greedy, self.rows, self.device = greedy, rows, device
        self.hidden = torch.zeros(rows, 1, dim, dtype=weight.dtype, device=device)
        self.first = torch.zeros_like(self.hidden)
        # each row's noise is its own block, as one frame's: a row draws what a frame alone draws from its generator
        self.noise = torch.ones(rows, cp.cfg.n_codebooks - 1, cp.cfg.cp_vocab, device=device)
        self.generator = torch.Generator(device).manual_seed(seed)
        cache, pick = cp.new_cache(rows), DevicePick(params, greedy, self.noise)

        def frame() -> tuple[torch.Tensor, torch.Tensor]:
            return cp.frame_on_device(self.hidden, self.first, pick, cache)

        step: Callable[[], tuple[torch.Tensor, torch.Tensor]] = frame
        if compile:
            step = CompiledOrEager(frame, "the code predictor's frame", device, dynamic=False)
        self.graph = StepGraph(step, device, capture)

    def reseed(self, seed: int) -> GraphedFrame:
        self.generator.manual_seed(seed)
        return self

    def __call__(self, hidden: torch.Tensor, first: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        return self.many([hidden], [first], [self.generator])[0]

    def many(
        self, hiddens: Sequence[torch.Tensor], firsts: Sequence[torch.Tensor], generators: Sequence[torch.Generator]
    ) -> list[tuple[list[int], torch.Tensor]]:
        """Up to ``rows`` frames in one replay: frame ``i`` from ``hiddens[i]`` and ``firsts[i]`` (``(1, 1, dim)``),
        its draws from ``generators[i]`` -> each one's codes and the sum of their embeddings ``(1, 1, dim)``."""
        n = len(hiddens)
        if not 0 < n <= self.rows or len(firsts) != n or len(generators) != n:
            raise ValueError(f"{n} frames ({len(firsts)} first codes, {len(generators)} generators) for a graphed "
                             f"frame of {self.rows} rows")  # fmt: skip
        self.hidden[:n].copy_(torch.cat(list(hiddens)) if n > 1 else hiddens[0])
        self.first[:n].copy_(torch.cat(list(firsts)) if n > 1 else firsts[0])
        if not self.greedy:
            for row, generator in zip(self.noise, generators, strict=False):
                row.exponential_(generator=generator)
        codes, total = self.graph()
        chosen = codes[:n].tolist()  # (one host read for every row)
        return [(chosen[i], total[i : i + 1].clone()) for i in range(n)]


class LaneFrame:
    """One utterance's code-predictor frames in a talker's lanes on the GPU (:meth:`TalkerStack.use_static_lanes`):
    the talker's :class:`GraphedFrame` of several rows for these sampling settings, and this utterance's own
    generator (on the GPU, seeded by its seed). The lanes make the frames of all their utterances that share
    ``frames`` in one replay (:mod:`ggtts.families.qwen3omni.lanes`); called, it makes its frame alone."""

    def __init__(self, frames: GraphedFrame, seed: int) -> None:
        self.frames = frames
        self.generator = torch.Generator(frames.device).manual_seed(seed)

    def __call__(self, hidden: torch.Tensor, first: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        return self.frames.many([hidden], [first], [self.generator])[0]


class TalkerDecoder:
    """One utterance's frames as a :class:`~ggtts.runtime.frames.FrameDecoder`: the talker's first code (ending
    the audio at codec EOS, before the code predictor runs), then the code predictor's (``rest``); the next input
    is the sum of the frame's code embeddings plus the next text row."""

    def __init__(
        self, talker: TalkerStack, inputs: TalkerInputs, max_frames: int, first: Pick, rest: RestOfFrame,
        min_frames: int = 0,
    ) -> None:  # fmt: skip
        self.talker, self.inputs, self.first, self.rest = talker, inputs, first, rest
        self.suppressed = torch.tensor(talker.cfg.suppressed_ids, dtype=torch.long)
        # the first min_frames draws may not end the audio (transformers' min_new_tokens)
        self.suppressed_early = torch.tensor([*talker.cfg.suppressed_ids, talker.cfg.codec_eos], dtype=torch.long)
        self.min_frames, self.max_frames = min_frames, max_frames
        self.cache = talker.new_cache(inputs.prefill.shape[1] + max_frames + 1)
        self.drawn: list[int] = []
        self.hidden = self.logits = self.next_input = self.embedded = torch.empty(0)

    def prefill(self) -> None:
        self.hidden, self.logits = self.talker.step(self.inputs.prefill, self.cache)

    def draw(self, step: int) -> list[int] | None:
        code = self.first_code(step)
        if code is None:
            return None
        return self.complete(step, code, *self.rest(self.hidden, self.embedded))

    def first_code(self, step: int) -> int | None:
        """The frame's first code from the talker's logits (None: codec EOS, the end); its embedding is kept for
        the code predictor (:attr:`embedded`)."""
        code = self.first(self.logits, self.drawn, self.suppressed_early if step < self.min_frames else self.suppressed)
        if code == self.talker.cfg.codec_eos:
            return None
        self.drawn.append(code)
        self.embedded = self.talker.embed_codes(code)
        return code

    def complete(self, step: int, code: int, codes: list[int], total: torch.Tensor) -> list[int]:
        """The frame, once the code predictor gave its other ``codes`` (and the sum of their embeddings); the
        talker's next input is made from them."""
        trailing = self.inputs.trailing
        text = trailing[:, step : step + 1] if step < trailing.shape[1] else self.inputs.pad
        self.next_input = self.embedded + total + text
        return [code, *codes]

    def is_last(self, frame: list[int]) -> bool:
        return False  # the talker ends the audio with codec EOS, a draw of None

    def feed(self, frame: list[int]) -> None:
        self.hidden, self.logits = self.talker.step(self.next_input, self.cache)


# each talker's graphed code-predictor frames, by sampling settings and rows: captured once, not once per utterance
_Graphed = dict[tuple[Sampling, bool, int], GraphedFrame]
_GRAPHED: weakref.WeakKeyDictionary[TalkerStack, _Graphed] = weakref.WeakKeyDictionary()


def _graphed(talker: TalkerStack, params: Sampling, greedy: bool, seed: int, rows: int) -> GraphedFrame:
    frames = _GRAPHED.setdefault(talker, {})
    if (params, greedy, rows) not in frames:
        frames[params, greedy, rows] = GraphedFrame(talker.cp, params, greedy, seed, capture=talker.static_capture,
                                                    compile=talker.static_compile, rows=rows)  # fmt: skip
    return frames[params, greedy, rows]


def graphed_frame(talker: TalkerStack, params: Sampling, greedy: bool, seed: int) -> GraphedFrame:
    """The talker's :class:`GraphedFrame` for these settings, made (and captured) the first time, its draws
    reseeded by ``seed``. One generation at a time per talker, as its step graphs already require."""
    return _graphed(talker, params, greedy, seed, 1).reseed(seed)


def lane_frame(talker: TalkerStack, params: Sampling, greedy: bool, seed: int) -> LaneFrame:
    """An utterance's :class:`LaneFrame` in the talker's static lanes: their :class:`GraphedFrame` of as many rows
    as lanes for these settings (made the first time), and a generator of its own seeded by ``seed``."""
    assert talker.lanes is not None
    return LaneFrame(_graphed(talker, params, greedy, seed, talker.lanes.slots), seed)


class HostFrames:
    """The code predictor's frame with each code chosen on the host by ``pick`` (the CPU's way), on a cache of its
    own; frames of several utterances run together through their :attr:`pick` and :attr:`cache`
    (:mod:`ggtts.families.qwen3omni.lanes`)."""

    def __init__(self, cp: CodePredictor, pick: Pick) -> None:
        self.cp, self.pick, self.cache = cp, pick, cp.new_cache()

    def choose(self, _j: int, logits: torch.Tensor) -> int:
        return self.pick(logits)

    def __call__(self, hidden: torch.Tensor, first: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        return self.cp.frame(hidden, first, self.choose, self.cache)


def talker_decoder(
    talker: TalkerStack,
    inputs: TalkerInputs,
    params: TalkerSampling,
    draw: Draw = multinomial,
    pickers: tuple[Pick, Pick] | None = None,
    min_frames: int = 0,
) -> TalkerDecoder:
    """One utterance's :class:`TalkerDecoder` for ``params``. ``pickers``: the talker's and the code predictor's
    choice of a code from logits (default: :class:`HFSampler` by ``params``, both drawing from one generator
    seeded by ``params.seed``; on CUDA, or wherever the talker's steps are static, the code predictor's frame is a
    :class:`GraphedFrame`, and where the talker has static lanes a :class:`LaneFrame`, made with the other
    lanes')."""
    generator = torch.Generator().manual_seed(params.seed)
    first: Pick
    rest: RestOfFrame
    if pickers is not None:
        first, rest = pickers[0], HostFrames(talker.cp, pickers[1])
    else:
        first = HFSampler(params.talker, params.greedy, generator, draw)
        if talker.lanes is not None and draw is multinomial:
            rest = lane_frame(talker, params.code_predictor, params.greedy, params.seed)
        elif (talker.static is not None or talker.output_norm.weight.device.type == "cuda") and draw is multinomial:
            rest = graphed_frame(talker, params.code_predictor, params.greedy, params.seed)
        else:
            rest = HostFrames(talker.cp, HFSampler(params.code_predictor, params.greedy, generator, draw))
    with torch.inference_mode():  # (its cache)
        return TalkerDecoder(talker, inputs, params.max_frames, first, rest, min_frames)


def generate_frames(
    talker: TalkerStack, inputs: TalkerInputs, params: TalkerSampling, **options: Any
) -> Iterator[list[int]]:
    """Frames of codes (``n_codebooks`` each), one at a time, until codec EOS (not drawn in the first
    ``min_frames``) or ``max_frames``; ``options``: :func:`talker_decoder`'s (``draw``, ``pickers``,
    ``min_frames``)."""
    yield from decoded_frames(talker_decoder(talker, inputs, params, **options))


@torch.inference_mode()  # around each step only: the caller's code between frames runs in its own mode
def decoded_frames(decoder: TalkerDecoder) -> Iterator[list[int]]:
    """The frames of one utterance decoded alone."""
    yield from decode_frames(decoder, decoder.max_frames)
