"""Decoding helpers shared by the server tests."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf


def decode(data: bytes, fmt: str, sample_rate: int) -> tuple[np.ndarray, int]:
    """Samples and rate of a response body in ``fmt``, read by soundfile (raw ``pcm`` at ``sample_rate``)."""
    if fmt == "pcm":
        raw = {"format": "RAW", "subtype": "PCM_16", "endian": "LITTLE", "channels": 1}
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", samplerate=sample_rate, **raw)
    else:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    return samples, rate
