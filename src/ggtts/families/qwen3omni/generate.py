"""The talker's generation loop, as transformers' ``Qwen3OmniMoeTalkerForConditionalGeneration.generate`` runs it.

Each step: the talker's logits for the frame's first code go through the repetition penalty (over the first codes
drawn so far), the suppressed ids (the codec vocabulary's tail but EOS), then temperature, top-k and top-p, and a
draw (or argmax when greedy); the code predictor fills the frame's other codebooks from the talker's hidden state
(top-k 50, top-p 0.8 at its own temperature, or argmax: it follows the talker's greedy setting, as upstream); the
sum of the frame's code embeddings plus the next text row is the talker's next input. A first code equal to codec
EOS ends the audio; so does the frame budget (upstream's ``max_new_tokens`` is one more than the frames it
returns: the last code drawn never gets its other codebooks; ggtts does not draw it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.models.qwen3omni_talker.config import Sampling
from ggtts.models.qwen3omni_talker.model import Talker
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
        scores = self.scores(logits, history, suppressed)
        if self.greedy:
            return int(torch.argmax(scores))
        return self.draw(torch.softmax(scores, dim=-1), self.generator)


class Pick(Protocol):
    """Logits ``(V,)`` (with the codes drawn so far and the ids to suppress) -> the code chosen."""

    def __call__(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> int: ...


class TalkerDecoder:
    """One utterance's frames as a :class:`~ggtts.runtime.frames.FrameDecoder`: the talker's first code (ending
    the audio at codec EOS, before the code predictor runs), then the code predictor's; the next input is the sum
    of the frame's code embeddings plus the next text row."""

    def __init__(self, talker: Talker, inputs: TalkerInputs, max_frames: int, first: Pick, rest: Pick) -> None:
        self.talker, self.inputs, self.first, self.rest = talker, inputs, first, rest
        self.suppressed = torch.tensor(talker.cfg.suppressed_ids, dtype=torch.long)
        self.cache = talker.new_cache(inputs.prefill.shape[1] + max_frames + 1)
        self.cp_cache = talker.cp.new_cache()
        self.drawn: list[int] = []
        self.hidden = self.logits = self.next_input = torch.empty(0)

    def prefill(self) -> None:
        self.hidden, self.logits = self.talker.step(self.inputs.prefill, self.cache)

    def draw(self, step: int) -> list[int] | None:
        code = self.first(self.logits, self.drawn, self.suppressed)
        if code == self.talker.cfg.codec_eos:
            return None
        self.drawn.append(code)
        embedded = self.talker.embed_codes(code)
        codes, total = self.talker.cp.frame(self.hidden, embedded, lambda _j, lg: self.rest(lg), self.cp_cache)
        trailing = self.inputs.trailing
        text = trailing[:, step : step + 1] if step < trailing.shape[1] else self.inputs.pad
        self.next_input = embedded + total + text
        return [code, *codes]

    def is_last(self, frame: list[int]) -> bool:
        return False  # the talker ends the audio with codec EOS, a draw of None

    def feed(self, frame: list[int]) -> None:
        self.hidden, self.logits = self.talker.step(self.next_input, self.cache)


def generate_frames(
    talker: Talker,
    inputs: TalkerInputs,
    params: TalkerSampling,
    draw: Draw = multinomial,
    pickers: tuple[Pick, Pick] | None = None,
) -> Iterator[list[int]]:
    """Frames of codes (``n_codebooks`` each), one at a time, until codec EOS or ``max_frames``. ``pickers``: the
    talker's and the code predictor's choice of a code from logits (default: :class:`HFSampler` by ``params``)."""
    generator = torch.Generator().manual_seed(params.seed)
    first: Pick
    rest: Pick
    first, rest = pickers or (
        HFSampler(params.talker, params.greedy, generator, draw),
        HFSampler(params.code_predictor, params.greedy, generator, draw),
    )
    yield from _frames(talker, inputs, params.max_frames, first, rest)


@torch.inference_mode()  # around each step only: the caller's code between frames runs in its own mode
def _frames(talker: Talker, inputs: TalkerInputs, max_frames: int, first: Pick, rest: Pick) -> Iterator[list[int]]:
    yield from decode_frames(TalkerDecoder(talker, inputs, max_frames, first, rest), max_frames)
