"""The talker's prompt, as qwen-tts's ``Qwen3TTSForConditionalGeneration.generate`` builds it (and llama.cpp's
``mtmd-helper-gen`` in the non-streaming form).

Rows, each the sum of a text row (projected text embedding) and a codec row:

- ``<|im_start|>assistant\\n`` (text only);
- ``tts_pad`` over the codec tags: ``think, think_bos, language, think_eos`` (``nothink, think_bos, think_eos``
  for language ``auto``), then the speaker (a CustomVoice speaker's codec row, or a cloned voice's x-vector);
- ``tts_bos`` over ``codec_pad``;
- non-streaming (upstream's default for preset and designed voices): every text token, then ``tts_eos``, over
  ``codec_pad``, and ``tts_pad`` over ``codec_bos``; each generated frame then adds ``tts_pad``;
- streaming (upstream's ``non_streaming_mode=False``): the first text token over ``codec_bos``; the rest of the
  text and ``tts_eos`` are added to the generated frames' inputs one per frame, then ``tts_pad``.

A cloned voice's in-context prompt (upstream's ICL mode) replaces the text part: the recording's text ids then the
new text's, then ``tts_eos``, against ``codec_bos`` then the recording's frames (each the sum of its 16 codes'
embeddings: the talker's table for the first, the code predictor's for the others). Streaming, the two run side
by side (text over frames) as far as the shorter goes; text left over is added to the generated frames' inputs,
frames left over take ``tts_pad``. Non-streaming, all the text over ``codec_pad``, then the frames over
``tts_pad``.

A VoiceDesign instruction (``<|im_start|>user\\n{instruct}<|im_end|>\\n``, text only) goes first. A Chinese (or
``auto``) prompt for a dialect speaker takes the dialect's language tag, as upstream.
"""

from __future__ import annotations

import torch

from ggtts.errors import InputError
from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.models.qwen3tts.model import Talker

ROLE = "<|im_start|>assistant\n"
AUTO = "auto"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


def language_id(talker: Talker, language: str, speaker: str | None) -> int | None:
    """The codec's language tag for ``language`` (None for ``auto``), a dialect speaker's in Chinese."""
    cfg = talker.cfg
    lang = language.lower()
    if lang != AUTO and lang not in cfg.languages:
        known = ", ".join(sorted([AUTO, *(n for n in cfg.languages if "dialect" not in n)]))
        raise InputError(f"unknown language '{language}'; this model speaks {known}")
    if lang in ("chinese", AUTO) and speaker is not None and speaker in cfg.dialects:
        return cfg.languages[cfg.dialects[speaker]]
    return None if lang == AUTO else cfg.languages[lang]


def _codec(talker: Talker, codes: list[int]) -> torch.Tensor:
    ids = torch.tensor([[c + talker.codec_offset for c in codes]], device=talker.output_norm.weight.device)
    return talker.token_embd(ids)


@torch.inference_mode()
def talker_inputs(
    talker: Talker,
    role_ids: list[int],
    text_ids: list[int],
    language: str,
    speaker: str | torch.Tensor | None,
    *,
    non_streaming: bool = True,
    instruct_ids: list[int] | None = None,
    reference: tuple[list[int], torch.Tensor] | None = None,
) -> TalkerInputs:
    """The prefill and the rows added to the generated frames. ``role_ids``: ``<|im_start|>assistant\\n``'s ids;
    ``speaker``: a CustomVoice speaker's name, a cloned voice's embedding ``(dim,)``, or None; ``reference``: a
    cloned voice's in-context prompt (its recording's text ids and codes ``(frames, codebooks)``)."""
    cfg = talker.cfg
    if not text_ids:
        raise InputError("nothing to say: the text has no tokens")
    name = speaker if isinstance(speaker, str) else None
    if name is not None and name not in cfg.speakers:
        raise InputError(f"unknown speaker '{name}'; this model has {', '.join(sorted(cfg.speakers)) or 'none'}")
    lang = language_id(talker, language, name)
    bos, eos, pad = talker.embed_text([cfg.tts_bos, cfg.tts_eos, cfg.tts_pad]).split(1, dim=1)
    tags = [cfg.codec_nothink, cfg.codec_think_bos, cfg.codec_think_eos] if lang is None else [
        cfg.codec_think, cfg.codec_think_bos, lang, cfg.codec_think_eos]  # fmt: skip
    codec = [_codec(talker, tags)]
    if name is not None:
        codec.append(_codec(talker, [cfg.speakers[name]]))
    elif isinstance(speaker, torch.Tensor):
        codec.append(speaker.to(pad).view(1, 1, -1))
    codec.append(_codec(talker, [cfg.codec_pad, cfg.codec_bos]))
    codec_rows = torch.cat(codec, dim=1)  # (1, L, dim)
    n = codec_rows.shape[1]
    text_rows = torch.cat([pad.expand(-1, n - 2, -1), bos], dim=1)
    parts = [talker.embed_text(role_ids), text_rows + codec_rows[:, :-1]]
    if instruct_ids:
        parts.insert(0, talker.embed_text(instruct_ids))
    if reference is not None:
        rows, trailing = _in_context(talker, reference, text_ids, codec_rows[:, -1:], eos, pad, non_streaming)
        return TalkerInputs(torch.cat([*parts, rows], dim=1), trailing, pad)
    text = talker.embed_text(text_ids)
    if non_streaming:
        body = torch.cat([text, eos], dim=1) + _codec(talker, [cfg.codec_pad] * (len(text_ids) + 1))
        parts += [body, pad + _codec(talker, [cfg.codec_bos])]
        trailing = pad
    else:
        parts.append(text[:, :1] + codec_rows[:, -1:])
        trailing = torch.cat([text[:, 1:], eos], dim=1)
    return TalkerInputs(torch.cat(parts, dim=1), trailing, pad)


def frame_rows(talker: Talker, codes: torch.Tensor) -> torch.Tensor:
    """Frames of codes ``(frames, codebooks)`` -> the talker's input rows ``(1, frames, dim)``: each the sum of its
    codes' embeddings (the first codebook's in the talker's table, the others' in the code predictor's)."""
    cfg = talker.cfg
    if codes.dim() != 2 or codes.shape[1] != cfg.n_codebooks:
        raise InputError(f"a recording's codes of shape {list(codes.shape)}, not frames of {cfg.n_codebooks} codes")
    if int(codes.min()) < 0 or int(codes.max()) >= cfg.cp_vocab:
        raise InputError(f"a recording's codes run from {int(codes.min())} to {int(codes.max())}, outside this "
                         f"model's codebooks of {cfg.cp_vocab}")  # fmt: skip
    device = talker.output_norm.weight.device
    codes = codes.to(device, torch.long)
    rows = talker.token_embd((codes[:, 0] + talker.codec_offset).unsqueeze(0))
    for j, table in enumerate(talker.cp.codec_embd):
        rows = rows + table(codes[:, j + 1]).unsqueeze(0).to(rows.dtype)
    return rows


def _in_context(
    talker: Talker, reference: tuple[list[int], torch.Tensor], text_ids: list[int], bos_row: torch.Tensor,
    eos: torch.Tensor, pad: torch.Tensor, non_streaming: bool,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Upstream's ``generate_icl_prompt``: (the prompt's last rows, the rows added to the generated frames)."""
    ref_ids, codes = reference
    text = torch.cat([talker.embed_text([*ref_ids, *text_ids]), eos], dim=1)
    codec = torch.cat([bos_row, frame_rows(talker, codes)], dim=1)
    n_text, n_codec = text.shape[1], codec.shape[1]
    if non_streaming:
        pads = _codec(talker, [talker.cfg.codec_pad] * n_text)
        return torch.cat([text + pads, codec + pad], dim=1), pad
    if n_text > n_codec:
        return text[:, :n_codec] + codec, text[:, n_codec:]
    return torch.cat([text, pad.expand(-1, n_codec - n_text, -1)], dim=1) + codec, pad
