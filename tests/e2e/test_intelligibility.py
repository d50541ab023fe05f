"""The real default model heard by Whisper base: the built-in sentences come back nearly word for word."""

from __future__ import annotations

import pytest

pytest.importorskip("faster_whisper")

import ggtts
from ggtts.measure.eval import evaluate, print_table
from ggtts.measure.sentences import EVAL_SENTENCES
from ggtts.measure.whisper import load_transcriber

pytestmark = [pytest.mark.needs_weights, pytest.mark.slow]

MAX_WER = 0.05  # overall word error rate, normalized text, Whisper base
MIN_SENTENCES = 20


def test_default_model_is_intelligible(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(EVAL_SENTENCES) >= MIN_SENTENCES
    model = ggtts.load()
    report = evaluate(model, EVAL_SENTENCES, load_transcriber("base"), model_name="kokoro", progress=False)
    with capsys.disabled():  # the per-sentence table is the point of this test: show it even when it passes
        print()
        print_table(report)
    assert not any(r.synth_s <= 0 or r.audio_s <= 0 for r in report.sentences)
    assert report.overall.wer <= MAX_WER, f"overall WER {report.overall.wer:.1%} exceeds {MAX_WER:.0%}"
