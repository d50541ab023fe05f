"""The speaker encoder of a Base checkpoint (ECAPA-TDNN over upstream's mel features) against qwen-tts's
``extract_speaker_embedding``, through our converter and the mmproj file in llama.cpp's layout.

Measured (CPU, float32, AMD EPYC Zen 4): the x-vector (entries up to ~39) within 7.6e-6 of upstream's, 2e-7 of its
peak; the bound is the issue's 1e-5, of the peak (float32 rounding of entries that large is ~5e-6 already).
"""

from __future__ import annotations

import pytest
import torch
from _qwen3tts_tiny import Built, need_qwen_tts

from ggtts.errors import GGUFError, InputError
from ggtts.measure.qwen3tts.upstream import voice_like
from ggtts.models.qwen3tts.speaker import SAMPLE_RATE, SpeakerEncoder, log_mel

pytestmark = pytest.mark.needs_reference

REL = 1e-5  # of the embedding's largest entry


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    return Built(tmp_path_factory.mktemp("qwen3tts_base"), "base")


@pytest.mark.parametrize(("seconds", "seed"), [(1.7, 0), (3.1, 1)])
def test_speaker_embedding_matches_upstream(base: Built, seconds: float, seed: int) -> None:
    audio = voice_like(seconds, seed)
    theirs = base.upstream.extract_speaker_embedding(audio, SAMPLE_RATE)
    encoder = SpeakerEncoder.from_gguf(base.mmproj_file)
    ours = encoder.embed(torch.from_numpy(audio))
    assert ours.shape == theirs.shape == (base.talker.cfg.talker.dim,)
    assert float(theirs.abs().max()) > 0.1  # a real embedding
    assert float((ours - theirs).abs().max()) <= REL * float(theirs.abs().max())


def test_the_check_can_fail(base: Built) -> None:
    """One Res2Net convolution's weight off by 1 % moves the embedding past the bound."""
    audio = voice_like(1.7, 0)
    theirs = base.upstream.extract_speaker_embedding(audio, SAMPLE_RATE)
    encoder = SpeakerEncoder.from_gguf(base.mmproj_file)
    with torch.no_grad():
        encoder.blocks[1].res2[0].conv.weight.mul_(1.01)
    assert float((encoder.embed(torch.from_numpy(audio)) - theirs).abs().max()) > REL * float(theirs.abs().max())


def test_only_a_base_mmproj_has_one(base: Built, tmp_path_factory: pytest.TempPathFactory) -> None:
    custom = Built(tmp_path_factory.mktemp("qwen3tts_custom_for_speaker"))
    with pytest.raises(GGUFError, match=r"no speaker encoder .* cannot clone a voice"):
        SpeakerEncoder.from_gguf(custom.mmproj_file)
    with pytest.raises(InputError, match="too short"):
        log_mel(torch.zeros(100))
