"""Qwen3-Omni's code2wav (the codec decoder of its talker): codes -> 24 kHz audio."""

from ggtts.models.qwen3omni_code2wav.config import Code2WavConfig
from ggtts.models.qwen3omni_code2wav.model import Code2Wav, Code2WavStream

__all__ = ["Code2Wav", "Code2WavConfig", "Code2WavStream"]
