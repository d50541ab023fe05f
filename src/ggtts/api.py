"""The public model interface every architecture implements, and ``load``."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ggtts.audio import Audio
from ggtts.errors import GGTTSError, InputError
from ggtts.gguf import GGUFFile

MIN_SPEED = 0.5
MAX_SPEED = 2.0
DEFAULT_MODEL = "kokoro"


class TTSModel(ABC):
    """A loaded text-to-speech model.

    ``synthesize`` returns the whole utterance; ``stream`` yields chunks as they are ready, which concatenate to
    the same audio.
    """

    architecture: str = ""
    sample_rate: int

    @classmethod
    @abstractmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> TTSModel: ...

    @property
    @abstractmethod
    def voices(self) -> list[str]: ...

    @property
    def default_voice(self) -> str | None:
        voices = self.voices
        return voices[0] if voices else None

    @abstractmethod
    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]: ...

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Audio:
        parts = list(self.stream(text, voice=voice, speed=speed, **options))
        if not parts:
            return Audio(samples=np.zeros(0, dtype=np.float32), sample_rate=self.sample_rate)
        return Audio.concatenate(parts)

    def info(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "sample_rate": self.sample_rate, "voices": self.voices}


def check_speed(speed: float | str) -> float:
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        raise InputError(f"speed must be a number, got {speed!r}") from None
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise InputError(f"speed {speed} is out of range; use {MIN_SPEED} to {MAX_SPEED}")
    return speed


def check_text(text: str, max_chars: int) -> str:
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError("the text is empty")
    if len(text) > max_chars:
        raise InputError(f"the text is {len(text)} characters long; the limit is {max_chars}")
    return text


def resolve_model_path(path_or_name: str | os.PathLike[str] | None) -> Path:
    """A GGUF path for a file path or a built-in model name (``kokoro``, the default)."""
    name = DEFAULT_MODEL if path_or_name is None else os.fspath(path_or_name)
    if name == DEFAULT_MODEL:
        from ggtts.convert.default_model import ensure_default_model

        return ensure_default_model()
    path = Path(name).expanduser()
    if not path.exists() and not path.suffix:
        raise GGTTSError(f"unknown model '{name}': give a .gguf file or the built-in name '{DEFAULT_MODEL}'")
    return path


def load(path_or_name: str | os.PathLike[str] | None = None, device: str = "cpu", **options: Any) -> TTSModel:
    """Load a model from a GGUF file, or the built-in default (``"kokoro"``, or no argument).

    ``options`` go to the architecture's loader (for example ``vocoder=`` for OuteTTS).
    """
    from ggtts.models.registry import build
    from ggtts.runtime.memory import tune_allocator

    tune_allocator()
    return build(GGUFFile(resolve_model_path(path_or_name)), device=device, **options)
