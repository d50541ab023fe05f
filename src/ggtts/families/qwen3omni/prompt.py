"""The thinker's chat prompt and the talker's inputs, laid out as transformers'
``Qwen3OmniMoeForConditionalGeneration.generate`` lays them out.

Thinker prompt (Qwen's chat template)::

    <|im_start|>system\\n{system}<|im_end|>\\n            (only when a system prompt is given)
    <|im_start|>user\\n{text}<|im_end|>\\n
    <|im_start|>assistant\\n                             -> the reply, ended by <|im_end|>

The talker sees the user turns (their thinker embeddings through ``text_proj``; the system turn is dropped) and
then the assistant turn: its three header rows; four ``tts_pad`` rows and a ``tts_bos`` row carrying the codec ids
nothink, think_bos, think_eos, the speaker and codec pad; the reply's first token with codec BOS. Each later step
adds the next reply token (``trailing``), then ``tts_eos``, then ``tts_pad`` for as long as audio goes on. The
reply's last token (the thinker's ``<|im_end|>``) is never shown to the talker: upstream takes the embeddings from
the thinker's forward passes, and the token that ends generation is never passed forward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from ggtts.errors import InputError
from ggtts.models.qwen3omni_talker.config import TalkerConfig
from ggtts.models.qwen3omni_talker.model import Talker

HEADER_ROWS = 3  # <|im_start|> assistant \n
CODEC_PREFIX_PADS = 4  # tts_pad rows under nothink, think_bos, think_eos, speaker


@dataclass
class TalkerInputs:
    prefill: torch.Tensor  # (1, P, dim)
    trailing: torch.Tensor  # (1, T, dim): one row per step, then tts_pad
    pad: torch.Tensor  # (1, 1, dim)


AUDIO_MARKERS = ("<|audio_start|>", "<|audio_pad|>", "<|audio_end|>")  # Qwen's tokens around and for audio


@dataclass(frozen=True)
class AudioIds:
    """The thinker's ids of :data:`AUDIO_MARKERS`: the audio's start, each placeholder row, its end."""

    start: int
    pad: int
    end: int

    def span(self, rows: int) -> list[int]:
        return [self.start, *[self.pad] * rows, self.end]


def chat_prompt(
    encode: Callable[[str], list[int]],
    cfg: TalkerConfig,
    user_text: str,
    system: str | None = None,
    audio: list[int] | None = None,
) -> list[int]:
    """Token ids of the chat prompt up to the assistant's header (``encode`` tokenizes plain text). ``audio``: the
    ids of an audio part (:meth:`AudioIds.span`), placed before the user's text as Qwen's template places an audio
    content item before a text one."""
    ids: list[int] = []
    if system:
        ids += [cfg.im_start, *encode("system\n" + system), cfg.im_end, *encode("\n")]
    if audio:
        ids += [cfg.im_start, *encode("user\n"), *audio, *(encode(user_text) if user_text else [])]
        ids += [cfg.im_end, *encode("\n")]
    else:
        ids += [cfg.im_start, *encode("user\n" + user_text), cfg.im_end, *encode("\n")]
    ids += [cfg.im_start, *encode("assistant\n")]
    return ids


def user_rows(prompt: Sequence[int], cfg: TalkerConfig) -> list[int]:
    """Positions of ``prompt`` inside user turns: each position belongs to the turn of the latest ``<|im_start|>``
    at or before it, whose role is the token after that ``<|im_start|>`` (upstream's rule)."""
    rows, start = [], 0
    for i, token in enumerate(prompt):
        if token == cfg.im_start:
            start = i
        role = prompt[min(start + 1, len(prompt) - 1)]
        if role == cfg.user:
            rows.append(i)
    return rows


def assistant_start(prompt: Sequence[int], cfg: TalkerConfig) -> int:
    """Index of the last ``<|im_start|>`` followed by the assistant role."""
    for i in range(len(prompt) - 2, -1, -1):
        if prompt[i] == cfg.im_start and prompt[i + 1] == cfg.assistant:
            return i
    raise InputError("the prompt has no assistant turn (<|im_start|>assistant)")


def talker_inputs(
    talker: Talker,
    embed: Callable[[list[int]], torch.Tensor],
    prompt: Sequence[int],
    reply: Sequence[int],
    speaker: int,
    heard: Mapping[int, torch.Tensor] | None = None,
) -> TalkerInputs:
    """The talker's prefill and per-step text rows for ``prompt`` + ``reply`` (the reply as the thinker wrote it,
    with its final ``<|im_end|>``); ``embed`` maps thinker token ids to thinker embeddings ``(N, thinker_dim)``.
    ``heard``: the prompt positions of audio placeholders and the thinker's hidden state there at the talker's
    ``accept_hidden_layer``: upstream gives the talker those through ``hidden_proj`` instead of the token's
    embedding through ``text_proj``."""
    cfg = talker.cfg
    seen = [*prompt, *reply[:-1]]  # what the thinker's forward passes embedded
    a = assistant_start(prompt, cfg)
    if len(seen) - a < HEADER_ROWS + 1:
        raise InputError("nothing to say: the reply is empty")
    users = user_rows(prompt, cfg)
    rows = users + list(range(a, len(seen)))
    projected = talker.text_proj(embed([seen[i] for i in rows]))  # (N, dim)
    if heard:
        at = [k for k, i in enumerate(rows) if i in heard]
        if at:
            states = torch.stack([heard[rows[k]] for k in at]).to(projected.device, projected.dtype)
            projected = projected.clone()
            projected[at] = talker.hidden_proj(states)
    user, assistant = projected[: len(users)], projected[len(users) :]
    special = talker.text_proj(embed([cfg.tts_bos, cfg.tts_eos, cfg.tts_pad]))
    bos, eos, pad = special[0:1], special[1:2], special[2:3]
    text_rows = torch.cat((assistant[:HEADER_ROWS], pad.expand(CODEC_PREFIX_PADS, -1), bos, assistant[3:4]))
    codec_ids = [cfg.codec_nothink, cfg.codec_think_bos, cfg.codec_think_eos, speaker, cfg.codec_pad, cfg.codec_bos]
    codec = talker.token_embd(torch.tensor(codec_ids, device=projected.device)).to(projected.dtype)
    codec_rows = torch.cat((torch.zeros(HEADER_ROWS, codec.shape[1], dtype=codec.dtype, device=codec.device), codec))
    prefill = torch.cat((user, text_rows + codec_rows)).unsqueeze(0)
    trailing = torch.cat((assistant[4:], eos)).unsqueeze(0)
    return TalkerInputs(prefill, trailing, pad.unsqueeze(0))
