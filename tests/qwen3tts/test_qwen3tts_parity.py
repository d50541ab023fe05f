"""Qwen3-TTS against qwen-tts on a tiny random checkpoint built with its classes, through our converter and the two
GGUF files llama.cpp's layout has: the prompt, the talker's logits, greedy codes over every codebook (teacher-forced
past near-ties), the speech decoder's audio, streaming.

Measured (CPU, float32, AMD EPYC Zen 4): the prompt rows ~6e-8 from upstream's (the text projection is folded into
the table at conversion); the talker's logits ~2e-7 of their peak; 44 greedy frames of 16 codebooks equal (no
near-ties); the decoder's audio within ~3e-7, streaming joins ~5e-7 from one-shot decoding (Zen 5, channels-last).

qwen-tts runs on this transformers through a renaming shim (:func:`ggtts.measure.qwen3tts.upstream.import_qwen_tts`);
the greedy codes agreeing frame for frame with ours is also the check that the shim keeps its KV cache working.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from _qwen3tts_tiny import TIE, Built, forced_greedy, need_qwen_tts

from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.measure.forcing import Forcing

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"
FRAMES = 44
LOGITS_REL = 1e-5  # of the logits' peak; measured ~2e-7
PROMPT_ATOL = 1e-5  # measured ~6e-8 (the folded text projection)
AUDIO_ATOL = 1e-4  # the bound; measured 0
STREAM_ATOL = 2e-5  # measured ~2.5e-7


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    return Built(tmp_path_factory.mktemp("qwen3tts"))


@pytest.fixture(scope="module")
def generated(built: Built) -> Iterator[dict[str, Any]]:
    runs = {}
    for key in (("english", "vivian", True), ("chinese", "dylan", False), ("auto", "ryan", True)):
        runs[key] = built.generate(TEXT, *key, FRAMES)
    yield runs


@pytest.mark.parametrize("case", [("english", "vivian", True), ("chinese", "dylan", False), ("auto", "ryan", True)])
def test_prompt_matches_upstream(built: Built, generated: dict[Any, Any], case: tuple[str, str, bool]) -> None:
    """Our prefill and trailing rows are upstream's (non-streaming and streaming, a language tag, a dialect
    speaker's tag in Chinese, no tag for auto)."""
    _, seen = generated[case]
    ours = built.inputs(TEXT, *case)
    assert ours.prefill.shape == seen["inputs_embeds"].shape
    torch.testing.assert_close(ours.prefill, seen["inputs_embeds"], rtol=0, atol=PROMPT_ATOL)
    theirs_trailing = seen["trailing_text_hidden"]
    assert ours.trailing.shape == theirs_trailing.shape
    torch.testing.assert_close(ours.trailing, theirs_trailing, rtol=0, atol=PROMPT_ATOL)
    torch.testing.assert_close(ours.pad, seen["tts_pad_embed"], rtol=0, atol=PROMPT_ATOL)


def test_talker_logits_match_upstream(built: Built, generated: dict[Any, Any]) -> None:
    """The talker's first-codebook logits over upstream's own prefill."""
    _, seen = generated[("english", "vivian", True)]
    prefill = seen["inputs_embeds"]
    with torch.no_grad():
        theirs = built.upstream.talker(inputs_embeds=prefill).logits[0, -1]
        _, ours = built.talker.step(prefill, built.talker.new_cache(prefill.shape[1]))
    assert float((ours - theirs).abs().max()) <= LOGITS_REL * float(theirs.abs().max())


def _forced_codes(built: Built, inputs: TalkerInputs, codes: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    return forced_greedy(built.talker, inputs, codes, FRAMES)


@pytest.mark.parametrize("case", [("english", "vivian", True), ("chinese", "dylan", False)])
def test_greedy_codes_match_upstream(built: Built, generated: dict[Any, Any], case: tuple[str, str, bool]) -> None:
    """Every codebook of 40+ greedy frames, ours teacher-forced along upstream's (repetition penalty over the
    first codes, the suppressed tail, EOS held back for two frames), non-streaming and streaming text."""
    codes, _ = generated[case]
    assert codes.shape[-1] >= 40, "upstream stopped early: the tiny model should run the whole budget"
    ours, ties = _forced_codes(built, built.inputs(TEXT, *case), codes)
    assert not ties, f"near-ties at decisions {ties}"
    assert torch.equal(ours, codes)


def test_forcing_catches_a_broken_talker(built: Built, generated: dict[Any, Any]) -> None:
    """The greedy check can fail: a talker with one layer's attention output scaled by 1.01 picks otherwise."""
    codes, _ = generated[("english", "vivian", True)]
    weight = built.talker.blk[1].attn.attn_output.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(1.01)
        ours, _ = _forced_codes(built, built.inputs(TEXT, "english", "vivian"), codes)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert not torch.equal(ours, codes)


def test_decoder_audio_matches_upstream(built: Built) -> None:
    codes = torch.randint(0, 64, (2, 16, 37), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = built.up_decoder(codes)
    ours = built.decoder(codes)
    assert ours.shape == theirs.shape == (2, 1, 37 * built.decoder.cfg.total_upsample)
    assert float(theirs.std()) > 0.05  # real audio, not silence or clamping
    torch.testing.assert_close(ours, theirs, rtol=0, atol=AUDIO_ATOL)


def test_decoder_streams_exactly(built: Built) -> None:
    """Pushes of 1, 7, 3 and 29 frames join to one-shot decoding's samples (the window is 5 frames)."""
    codes = torch.randint(0, 64, (1, 16, 40), generator=torch.Generator().manual_seed(2))
    whole = built.decoder(codes)
    stream = built.decoder.stream()
    pieces, start = [], 0
    for n in (1, 7, 3, 29):
        pieces.append(stream.push(codes[..., start : start + n]))
        assert pieces[-1].shape[-1] == n * built.decoder.cfg.total_upsample
        start += n
    torch.testing.assert_close(torch.cat(pieces, dim=-1), whole, rtol=0, atol=STREAM_ATOL)


def test_decoder_check_can_fail(built: Built) -> None:
    """A decoder with one folded SnakeBeta off by 1 % is caught by the audio bound."""
    codes = torch.randint(0, 64, (1, 16, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = built.up_decoder(codes)
    snake = built.decoder.dac.blk[0].block[0]
    saved = snake.alpha.detach().clone()
    try:
        with torch.no_grad():
            snake.alpha.mul_(1.01)
        ours = built.decoder(codes)
    finally:
        with torch.no_grad():
            snake.alpha.copy_(saved)
    assert float((ours - theirs).abs().max()) > AUDIO_ATOL


def test_forcing_records_ties() -> None:
    """Sanity of the helper the greedy test leans on: a pick within TIE of the reference's is a near-tie."""
    f = Forcing([1], TIE)
    assert f.pick(torch.tensor([0.0, 1.0, 1.0 + TIE / 2])) == 1
    assert f.near_ties == [0]
