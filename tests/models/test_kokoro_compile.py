"""``compile=True``: Kokoro's vocoder stages through ``torch.compile``, the same audio to float rounding; where it
cannot compile (no C++ compiler, a compiler failure), eagerly, with one warning."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

import ggtts
from ggtts.errors import InputError
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.models.kokoro import precision
from ggtts.ops import compile as ops_compile
from ggtts.ops.compile import CompiledOrEager

TEXT = "hˈI ðˈɛɹ, wˈʌn tˈu θɹˈi."
# another length: the same compiled code (dynamic shapes). Shorter than TEXT: a longer one fails a size bound that the
# first compile guards its convolutions with (torch 2.13, the tiny model: "22 + 176*x.size()[2] <= 20480") and is
# compiled again, which tests no dynamic shape and costs a second compile.
OTHER = "wˈʌn tˈu."
# compiled float32 against eager: measured 8.7e-7 of the peak on the tiny model (2.3e-6 absolute on the real one);
# a wrong stage, weight or order is of the order of the signal
FLOAT32_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")


def _load(path: Path, **options: object) -> KokoroTTS:
    model = ggtts.load(str(path), **options)
    assert isinstance(model, KokoroTTS)
    return model


def _say(model: KokoroTTS, text: str = TEXT) -> np.ndarray:
    return model.synthesize(text, voice="v_one", phonemes=True).samples


def _relative_peak(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_compiled_audio_is_the_eager_audio(tiny: Path) -> None:
    eager = _load(tiny)
    torch._dynamo.reset()
    compiled = _load(tiny, compile=True)
    body = compiled.model.decoder.generator.body
    assert isinstance(body, CompiledOrEager)
    frames_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for text in (TEXT, OTHER):
        got, want = _say(compiled, text), _say(eager, text)
        assert _relative_peak(got, want) < FLOAT32_TOLERANCE
    assert body.active, "compiling failed here: the C++ compiler or inductor is broken on this machine"
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > frames_before  # compiled code really ran


def test_compiled_bfloat16_convolutions_match_eager_bfloat16(tiny: Path) -> None:
    """bfloat16 copies of the weights are read inside the compiled code (emulated where the CPU has no bfloat16)."""
    eager, compiled = _load(tiny), _load(tiny, compile=True)
    for model in (eager, compiled):
        precision.use_bfloat16_convolutions(model.model.decoder.generator)
    got, want = _say(compiled), _say(eager)
    assert compiled.model.decoder.generator.body.active  # type: ignore[attr-defined]
    # bfloat16 rounding where inductor fuses differently: measured 6e-3 relative RMS on the real model
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02


def test_without_a_compiler_it_runs_eagerly_and_says_so(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ops_compile.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    with caplog.at_level(logging.WARNING, logger="ggtts.ops.compile"):
        model = _load(tiny, compile=True)
    assert not model.model.decoder.generator.body.active  # type: ignore[attr-defined]
    assert "runs eagerly: no C++ compiler found" in caplog.text
    assert np.array_equal(_say(model), _say(_load(tiny)))


def test_a_compiler_failure_falls_back_to_eager_once(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from torch._inductor.exc import CppCompileError

    calls = []

    def broken(fn: object, **kwargs: object) -> object:
        def run(*args: object, **kw: object) -> object:
            calls.append(1)
            raise CppCompileError(["g++", "x.cpp"], "x.cpp:1: error")

        return run

    monkeypatch.setattr(ops_compile.torch, "compile", broken)
    model = _load(tiny, compile=True)
    with caplog.at_level(logging.WARNING, logger="ggtts.ops.compile"):
        first = _say(model)
        second = _say(model)
    assert calls == [1]  # tried once, then eager for good
    assert caplog.text.count("torch.compile failed (CppCompileError") == 1
    expected = _say(_load(tiny))
    assert np.array_equal(first, expected) and np.array_equal(second, expected)


def test_an_error_that_is_not_the_compilers_is_raised_and_compiling_stays_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def flaky(fn: object, **kwargs: object) -> object:
        def run(x: int) -> int:
            if x < 0:
                raise MemoryError("out of memory")
            return x + 1

        return run

    monkeypatch.setattr(ops_compile.torch, "compile", flaky)
    wrapped = CompiledOrEager(lambda x: x, "test")
    with pytest.raises(MemoryError):
        wrapped(-1)
    assert wrapped.active and wrapped(1) == 2  # still the compiled function


def test_compile_must_be_a_bool(tiny: Path) -> None:
    with pytest.raises(InputError, match="compile must be true or false"):
        _load(tiny, compile="yes")
