"""Audio in: a file or samples -> 16 kHz mono -> the log-mel features Qwen3-Omni's encoder reads.

The features are Whisper's, as transformers' ``WhisperFeatureExtractor`` computes them for Qwen3-Omni's processor
(128 bins, no padding, no truncation): a centred STFT (400-sample periodic Hann window, hop 160, reflected edges),
power spectrum, Slaney-normalised mel filters between 0 and 8 kHz, ``log10`` of at least 1e-10, floored 8 below
the clip's maximum, then ``(x + 4) / 4``. The STFT's last frame is dropped: ``n // 160`` frames, 100 a second.
"""

from __future__ import annotations

import functools
import io
import math
import os
from pathlib import Path

import numpy as np
import torch

from ggtts.audio import resample
from ggtts.errors import InputError
from ggtts.models.qwen3omni_audio.config import SAMPLE_RATE

N_FFT = 400
HOP = 160
F_MAX = 8000.0
MIN_SECONDS = 0.1  # shorter than this, the encoder sees a frame or two: refused
MAX_SECONDS = 40 * 60.0  # Qwen3-Omni's stated limit for one audio input (40 minutes)
SILENCE = 1.0 / 32768  # every sample at most one 16-bit step from zero: digital silence

# Slaney's mel scale: linear (200/3 Hz a mel) below 1 kHz, logarithmic above (27 mels per factor 6.4)
_LOG_HZ, _LOG_MEL, _LOG_STEP = 1000.0, 15.0, math.log(6.4) / 27.0


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    mel = 3.0 * hz / 200.0
    high = hz >= _LOG_HZ
    mel[high] = _LOG_MEL + np.log(hz[high] / _LOG_HZ) / _LOG_STEP
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    hz = 200.0 * mel / 3.0
    high = mel >= _LOG_MEL
    hz[high] = _LOG_HZ * np.exp(_LOG_STEP * (mel[high] - _LOG_MEL))
    return hz


@functools.lru_cache(maxsize=4)
def mel_filters(n_mel: int, n_fft: int = N_FFT, rate: int = SAMPLE_RATE, f_max: float = F_MAX) -> np.ndarray:
    """``(n_fft // 2 + 1, n_mel)`` triangular filters on Slaney's mel scale, each scaled to unit area (float64)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([f_max]))[0], n_mel + 2))
    bins = np.linspace(0, rate // 2, n_fft // 2 + 1)
    width = np.diff(edges)
    offset = edges[None, :] - bins[:, None]  # (bins, n_mel + 2)
    rising = -offset[:, :-2] / width[:-1]
    falling = offset[:, 2:] / width[1:]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    filters *= 2.0 / (edges[2:] - edges[:-2])
    filters.flags.writeable = False
    return filters


def log_mel(samples: np.ndarray | torch.Tensor, n_mel: int) -> torch.Tensor:
    """16 kHz mono samples ``(n,)`` -> features ``(n_mel, n // 160)`` (float32)."""
    x = torch.as_tensor(np.asarray(samples, dtype=np.float32) if not isinstance(samples, torch.Tensor) else samples)
    x = x.to(torch.float32).reshape(-1)
    if x.numel() <= N_FFT // 2:
        raise InputError(f"the audio is too short: at least {N_FFT // 2 + 1} samples at {SAMPLE_RATE} Hz")
    window = torch.hann_window(N_FFT)
    spec = torch.stft(x, N_FFT, HOP, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = (spec[:, :-1].abs() ** 2).contiguous()
    mel = torch.tensor(mel_filters(n_mel), dtype=torch.float32).T @ power
    logs = torch.clamp(mel, min=1e-10).log10()
    logs = torch.maximum(logs, logs.max() - 8.0)
    return (logs + 4.0) / 4.0


def check_samples(samples: np.ndarray, what: str = "the audio") -> np.ndarray:
    """``samples`` (16 kHz mono) if they can be heard: finite, long enough, not too long, not silent."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    seconds = x.size / SAMPLE_RATE
    if seconds < MIN_SECONDS:
        raise InputError(f"{what} is too short ({seconds:.3f} s): at least {MIN_SECONDS:g} s")
    if seconds > MAX_SECONDS:
        raise InputError(f"{what} is too long ({seconds / 60:.1f} min): at most {MAX_SECONDS / 60:g} minutes")
    if not np.isfinite(x).all():
        raise InputError(f"{what} holds values that are not finite numbers")
    if float(np.abs(x).max()) <= SILENCE:
        raise InputError(f"{what} is silent: every sample is zero (or within one 16-bit step of it)")
    return x


def read_audio(source: str | os.PathLike[str] | bytes, what: str | None = None) -> np.ndarray:
    """A sound file (a path, or its bytes: WAV, FLAC, OGG, MP3: what libsndfile reads) as checked 16 kHz mono
    float32 samples (channels averaged, resampled). An unreadable file is one :class:`InputError`."""
    import soundfile

    name = what or (str(source) if not isinstance(source, bytes) else "the audio")
    try:
        if isinstance(source, bytes):
            data, rate = soundfile.read(io.BytesIO(source), dtype="float32", always_2d=True)
        else:
            if not Path(source).is_file():
                raise InputError(f"{name}: no such file")
            data, rate = soundfile.read(str(source), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise InputError(f"{name}: not an audio file that can be decoded ({e})") from None
    if data.shape[0] == 0:
        raise InputError(f"{name}: the file holds no audio")
    return check_samples(resample(data.mean(axis=1), int(rate), SAMPLE_RATE), name)
