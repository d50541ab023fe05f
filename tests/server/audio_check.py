"""Decoding helpers shared by the server tests."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf


def decode(data: bytes, fmt: str, sample_rate: int) -> tuple[np.ndarray, int]:
    """Samples and rate of a response body in ``fmt``, read by soundfile (raw ``pcm`` at ``sample_rate``)."""
    if fmt == "aac":  # libsndfile has no AAC: FFmpeg's decoder, as a player would use
        return decode_aac(data)
    if fmt == "pcm":
        raw = {"format": "RAW", "subtype": "PCM_16", "endian": "LITTLE", "channels": 1}
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", samplerate=sample_rate, **raw)
    else:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    return samples, rate


def decode_aac(data: bytes) -> tuple[np.ndarray, int]:
    """Samples and rate of an ADTS AAC stream (PyAV): the encoder's priming and padding included."""
    import av

    with av.open(io.BytesIO(data), format="adts") as container:
        frames = [f for f in container.decode(audio=0)]
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32)
    return samples, frames[0].sample_rate
