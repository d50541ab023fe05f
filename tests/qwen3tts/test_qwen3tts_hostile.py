"""Damaged and hostile Qwen3-TTS files: a tiny Base model written by the real converter (talker file, mmproj file)
and a cloned voice beside it, then one of them changed in one place (a metadata value of any type, a key left out,
a tensor poisoned, left out or of another shape), is a model that speaks finite audio or refused with one line
naming the file; nothing else escapes ``ggtts.load`` or the first sentence. Hypothesis draws the damage
(derandomized: the same cases on every run)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from _qwen3tts_tiny import Built, need_qwen_tts
from hypothesis import given
from hypothesis import strategies as st

import ggtts
from ggtts.errors import GGUFError, InputError
from ggtts.families.qwen3tts.voices import create_voice
from ggtts.gguf import GGUFFile
from ggtts.measure.qwen3tts.upstream import voice_like
from gguf_variant import poison, variant
from hostile_files import damage, fuzz, values
from time_limit import time_limit

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world!"
SECONDS_PER_CASE = 60
FUZZ = fuzz(90)
FILES = ("tiny.gguf", "mmproj-tiny.gguf", "anna.gguf")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_qwen_tts()
    built = Built(tmp_path_factory.mktemp("qwen3tts-hostile"), "base")
    soundfile.write(built.work / "ref.wav", voice_like(2.0, 4), 24_000)
    create_voice(built.path, built.work / "ref.wav", built.work / "anna.gguf", text="Some words.")  # in context
    return built.work


def _copy(model_dir: Path, dst: Path, which: str, change: dict[str, Any]) -> Path:
    """The three files in ``dst``, the one named ``which`` changed."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if name == which:
            variant(model_dir / name, dst / name, **change)
        else:
            shutil.copy(model_dir / name, dst / name)
    return dst / "tiny.gguf"


VALUES = values(["", "../../etc/passwd", "base", "voice_design", "custom_voice", "qwen3tts_gen", "\x00"])


def file_damage(layouts: dict[str, tuple[list[str], list[str]]]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """One of the three files, and one change to it."""
    return st.sampled_from(FILES).flatmap(lambda f: damage(*layouts[f], VALUES).map(lambda d: (f, d)))


def _speak_or_refuse(path: Path) -> str:
    """'spoke', 'refused at load' or 'refused' (the request); fails on anything else."""
    folder = str(path.parent)
    try:
        with time_limit(SECONDS_PER_CASE):
            model = ggtts.load(path, device="cpu")
    except (GGUFError, InputError) as error:
        message = str(error)
        assert message.startswith(folder) and "\n" not in message, message
        return "refused at load"
    try:
        with time_limit(SECONDS_PER_CASE):
            voice = "anna" if "anna" in model.voices else None
            audio = model.synthesize(TEXT, voice=voice, max_frames=3, seed=1)
    except (InputError, GGUFError) as error:
        assert "\n" not in str(error), str(error)
        return "refused"
    samples = np.asarray(audio.samples)
    assert np.isfinite(samples).all(), "a model that loaded spoke non-finite audio"
    return "spoke"


def test_the_undamaged_copy_speaks(model_dir: Path, tmp_path: Path) -> None:
    """The control: the rewrite alone changes nothing, so each case below fails (or not) for its one change."""
    for which in FILES:
        assert _speak_or_refuse(_copy(model_dir, tmp_path / which, which, {})) == "spoke"


def test_any_damage_speaks_or_is_one_line(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    layouts = {}
    for name in FILES:
        g = GGUFFile(model_dir / name)
        skip = ("general.", "GGUF.", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")
        keys = sorted(k for k in g.metadata if not k.startswith(skip))
        layouts[name] = (keys, sorted(g.names()))
    seen: dict[str, int] = {}

    @FUZZ
    @given(change=file_damage(layouts))
    def check(change: tuple[str, dict[str, Any]]) -> None:
        which, what = change
        outcome = _speak_or_refuse(_copy(model_dir, tmp_path_factory.mktemp("case"), which, what))
        seen[outcome] = seen.get(outcome, 0) + 1

    check()
    print("outcomes:", seen)
    assert seen.get("refused at load", 0) > 0 and seen.get("spoke", 0) > 0, seen


def test_weights_that_overflow_are_refused_when_speaking(model_dir: Path, tmp_path: Path) -> None:
    """A norm of 1e30 (finite, so it loads) makes the logits overflow: the first sentence is one line (it was
    torch.multinomial's RuntimeError, found by the fuzzing above)."""
    path = _copy(model_dir, tmp_path / "huge", "tiny.gguf", {"tensors": {"blk.1.ffn_norm.weight": poison(1e30)}})
    model = ggtts.load(path, device="cpu")
    with pytest.raises(GGUFError, match="logits are not finite numbers"):
        model.synthesize(TEXT, voice="anna", max_frames=3, seed=1)
