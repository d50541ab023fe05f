"""Damaged and hostile Piper files (issue #36): a tiny random voice written by the real converter, then changed in
one place (a metadata value of any type, a key left out, a tensor poisoned, left out or of another shape), is either
a voice that speaks finite audio or refused with one line naming the file; nothing else escapes ``ggtts.load`` or
the first sentence. Hypothesis draws the damage (derandomized: the same cases on every run)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given

import ggtts
from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Piper as K
from ggtts.measure.piper.upstream import PHONEMES, VOICES, build_upstream, write_voice
from gguf_variant import variant
from hostile_files import damage, fuzz, reshaped, values
from time_limit import time_limit

pytest.importorskip("piper.train.vits.models")
pytest.importorskip("onnx")

TEXT = "abc, de."  # the tiny voice's phonemes are letters: phoneme_type "text"
SECONDS_PER_CASE = 60  # a tiny voice loads and speaks in well under a second; a loop on a huge value never ends
FUZZ = fuzz(120)


@pytest.fixture(scope="module")
def voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = VOICES["multi"]  # speakers too, so their names and embedding are in play
    folder = tmp_path_factory.mktemp("piper-hostile")
    return write_voice(build_upstream(tiny), tiny, folder)


@pytest.fixture(scope="module")
def layout(voice: Path) -> tuple[list[str], list[str]]:
    g = GGUFFile(voice)
    return sorted(k for k in g.metadata if k.startswith("piper.")), sorted(g.names())


VALUES = values(["", "../../etc/passwd", "1", "2", "en-us", "zz-nothing", "\x00"])


def _speak_or_refuse(path: Path) -> str:
    """'spoke', 'refused at load' or 'refused' (the text or request); fails on anything else."""
    try:
        with time_limit(SECONDS_PER_CASE):
            model = ggtts.load(path, device="cpu")
    except GGUFError as error:
        message = str(error)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
        return "refused at load"
    try:
        with time_limit(SECONDS_PER_CASE):
            audio = model.synthesize(TEXT, seed=1)
    except (InputError, GGUFError) as error:
        assert "\n" not in str(error), str(error)
        return "refused"
    samples = np.asarray(audio.samples)
    assert samples.size and np.isfinite(samples).all(), "a voice that loaded spoke non-finite audio"
    return "spoke"


def test_the_undamaged_copy_speaks(voice: Path, tmp_path: Path) -> None:
    """The control: the rewrite alone changes nothing, so each case below fails (or not) for its one change."""
    assert _speak_or_refuse(variant(voice, tmp_path / "same.gguf")) == "spoke"


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({K.SAMPLE_RATE: 2**32 - 1}, r"a sample rate must be"),
        ({K.UPSAMPLE_RATES: [8, 8, 1 << 12]}, r"an upsampling rate must be"),
        ({K.N_HEADS: 5}, r"5 heads do not divide"),
        ({K.PHONEME_IDS: [0, 1]}, r"phoneme"),
        ({K.NOISE_SCALE: math.nan}, r"noise_scale' is nan; a noise scale must be"),
        # each of these escaped as another exception before the fuzzing below found it
        ({K.ESPEAK_VOICE: "0"}, r"espeak-ng has no voice '0'"),
        ({K.ESPEAK_VOICE: "../../etc/passwd"}, r"espeak-ng has no voice '\.\./\.\./etc/passwd'"),
        ({K.RESBLOCK_DILATIONS: 1}, r"resblock_dilation_sizes' should be a non-empty array of integers"),
        ({K.PHONEME_IDS: ["a"] * len(PHONEMES)}, r"phoneme_ids' should hold integers"),
        ({K.STOCHASTIC_DURATIONS: "no"}, r"stochastic_durations' should be true or false"),
    ],
    ids=[
        "sample_rate",
        "upsample",
        "heads",
        "phoneme_ids",
        "noise_scale",
        "espeak_voice",
        "voice_path",
        "dilations",
        "id_strings",
        "stochastic",
    ],
)
def test_named_damage_is_one_line(voice: Path, tmp_path: Path, meta: dict[str, Any], message: str) -> None:
    import re

    path = variant(voice, tmp_path / "bad.gguf", meta=meta)
    with pytest.raises(GGUFError) as caught:
        ggtts.load(path, device="cpu")
    assert re.search(message, str(caught.value)) and str(caught.value).startswith(f"{path}: "), str(caught.value)


def test_any_damage_speaks_or_is_one_line(
    voice: Path, layout: tuple[list[str], list[str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    keys, names = layout
    seen: dict[str, int] = {}

    @FUZZ
    @given(change=damage(keys, names, VALUES))
    def check(change: dict[str, Any]) -> None:
        path = variant(voice, tmp_path_factory.mktemp("case") / "voice.gguf", **change)
        outcome = _speak_or_refuse(path)
        seen[outcome] = seen.get(outcome, 0) + 1

    check()
    print("outcomes:", seen)
    assert seen.get("refused at load", 0) > 0 and seen.get("spoke", 0) > 0, seen


def test_a_flattened_weight_is_one_line(voice: Path, tmp_path: Path) -> None:
    path = variant(voice, tmp_path / "flat.gguf", tensors={"dec.ups.0.weight": reshaped("flat")})
    with pytest.raises(GGUFError, match=r"tensor 'dec\.ups\.0\.weight' has shape \[\d+\]; expected 3 dimensions"):
        ggtts.load(path, device="cpu")


def test_durations_that_are_not_finite_are_refused_when_speaking(voice: Path, tmp_path: Path) -> None:
    """A spline range this tiny random voice's duration flows overflow with: it loads, and its first sentence is
    one line (it was an OverflowError)."""
    path = variant(voice, tmp_path / "tail.gguf", meta={K.DP_TAIL_BOUND: 98})
    with pytest.raises(InputError, match="durations that are not finite"):
        ggtts.load(path, device="cpu").synthesize(TEXT, seed=1)
