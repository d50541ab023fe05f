"""A stand-in TTSModel for server tests that need to control timing and failures.

One chunk per word: a sine tone whose pitch is set by the voice and whose length is set by ``speed``.
Text without a letter or digit has nothing to say (``NothingToSay``, as the families' frontends). Special words
make it misbehave: ``FAIL`` raises mid-stream, ``BADINPUT`` raises ``InputError``, ``HEAVY``
makes one chunk that runs torch layers for ``HEAVY_CHUNK_S`` seconds (a chunk only cancellation can stop; it logs
``<first word> heavy-end`` only if it ran to its end). With
``TONE_LOG`` set, every chunk made is logged as ``<first word> <index>``, so a test can see when synthesis
stopped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ggtts.api import TTSModel
from ggtts.audio import Audio
from ggtts.errors import InputError
from ggtts.families.base import NothingToSay

LOG_ENV = "TONE_LOG"
HEAVY_CHUNK_S = 60.0
HEAVY_WIDTH = 256
VOICE_HZ = {"low": 220.0, "high": 440.0}
AMPLITUDE = 0.3


class ToneModel(TTSModel):
    architecture = "test-tone"

    def __init__(self, sample_rate: int = 24000, chunk_s: float = 0.1, delay_s: float = 0.0) -> None:
        self.sample_rate = sample_rate
        self.chunk_s = chunk_s
        self.delay_s = delay_s
        self.heavy = _heavy_layer()  # the model's own torch module: the server makes it cancellable

    @classmethod
    def from_gguf(cls, gguf: Any, device: str = "cpu") -> ToneModel:
        raise NotImplementedError("the tone model is built in code")

    @property
    def voices(self) -> list[str]:
        return list(VOICE_HZ)

    def chunk(self, index: int, voice: object, speed: float) -> Audio:
        n = round(self.chunk_s * self.sample_rate / speed)
        t = (np.arange(n) + index * n) / self.sample_rate
        hz = VOICE_HZ[str(voice) if voice else "low"] * (1 + 0.1 * (index % 3))  # a name, or a VoiceMix of one
        return Audio((AMPLITUDE * np.sin(2 * np.pi * hz * t)).astype(np.float32), self.sample_rate)

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        if not any(ch.isalnum() for ch in text):  # as every family's frontend: no word to read aloud
            raise NothingToSay(text)
        words = text.split()
        log_path = os.environ.get(LOG_ENV)
        for index, word in enumerate(words):
            if word == "FAIL":
                raise RuntimeError("the tone model was told to fail")
            if word == "BADINPUT":
                raise InputError("the tone model cannot say BADINPUT")
            if word == "HEAVY":
                _log(log_path, f"{words[0]} heavy-start")
                _busy_torch(self.heavy, HEAVY_CHUNK_S)
                _log(log_path, f"{words[0]} heavy-end")  # not reached when the chunk is cancelled
            time.sleep(self.delay_s)
            if log_path:
                with open(log_path, "a") as f:
                    f.write(f"{words[0]} {index}\n")
            yield self.chunk(index, voice, speed)

    def expected(self, text: str, voice: str | None = None, speed: float = 1.0) -> np.ndarray:
        return np.concatenate([self.chunk(i, voice, speed).samples for i in range(len(text.split()))])


def _log(path: str | None, line: str) -> None:
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def _heavy_layer() -> Any:
    import torch

    return torch.nn.Linear(HEAVY_WIDTH, HEAVY_WIDTH)


def _busy_torch(layer: Any, seconds: float) -> None:
    """Run the model's small torch layer over and over for ``seconds``: CPU-bound work inside one chunk."""
    import torch

    x = torch.randn(64, HEAVY_WIDTH)
    end = time.monotonic() + seconds
    with torch.inference_mode():
        while time.monotonic() < end:
            x = torch.tanh(layer(x))
