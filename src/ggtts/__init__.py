"""ggtts: local, fast text-to-speech with open models stored as GGUF files."""

from ggtts.api import AudioStream, TTSModel, load
from ggtts.audio import Audio, WordTiming
from ggtts.errors import GGTTSError, GGUFError, InputError, OutputError, UnsupportedArchitectureError

__version__ = "0.1.0"


def list_families() -> list[str]:
    """The model families ggtts speaks with (``kokoro``, ``outetts``, ...): the public names."""
    from ggtts.families import names

    return names()


def architectures() -> list[str]:
    """The ``general.architecture`` values of the GGUF files the families open."""
    from ggtts.families import supported_architectures

    return supported_architectures()


__all__ = [
    "Audio",
    "AudioStream",
    "GGTTSError",
    "GGUFError",
    "InputError",
    "OutputError",
    "TTSModel",
    "UnsupportedArchitectureError",
    "WordTiming",
    "__version__",
    "architectures",
    "list_families",
    "load",
]
