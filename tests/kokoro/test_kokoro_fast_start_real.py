"""``fast_start=True`` on the real default model: a voice agent's one-word first clause ("Sure,", 1.25 s with its
pauses) starts fast too, its head (up to the quietest frame 0.5-0.9 s in) first, then the exact rest."""

from __future__ import annotations

import numpy as np
import pytest

import ggtts
from ggtts.families.kokoro import pipeline
from ggtts.models.kokoro.model import CROSSFADE_S

pytestmark = [pytest.mark.needs_weights]


def test_a_one_word_first_clause_starts_fast() -> None:
    model = ggtts.load()
    exact = model.synthesize("Sure,")
    assert pipeline.FAST_START_MIN_S <= exact.duration < 1.8  # shorter than the old floor, which rendered it whole
    assert len(list(model.stream("Sure,"))) == 1
    parts = list(model.stream("Sure,", fast_start=True))
    assert len(parts) == 2
    head, rest = parts
    assert pipeline.FAST_START_EARLIEST_S <= head.duration <= pipeline.FAST_START_LATEST_S
    assert len(head.samples) + len(rest.samples) == len(exact.samples)
    fade = round(CROSSFADE_S * model.sample_rate)
    assert np.array_equal(rest.samples[fade:], exact.samples[len(head.samples) + fade :])  # the rest is exact
