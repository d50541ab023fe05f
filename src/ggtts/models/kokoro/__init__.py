"""Kokoro-82M: config, modules and GGUF loader."""

from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.load import load_kokoro
from ggtts.models.kokoro.model import KokoroModel, Prosody

__all__ = ["KokoroConfig", "KokoroModel", "Prosody", "load_kokoro"]
