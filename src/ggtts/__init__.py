"""ggtts: local, fast text-to-speech with open models stored as GGUF files."""

from ggtts.api import TTSModel, load
from ggtts.audio import Audio
from ggtts.errors import GGTTSError, GGUFError, InputError, UnsupportedArchitectureError

__version__ = "0.1.0"


def architectures() -> list[str]:
    """The ``general.architecture`` values ggtts can load."""
    from ggtts.models.registry import supported_architectures

    return supported_architectures()


__all__ = [
    "Audio",
    "GGTTSError",
    "GGUFError",
    "InputError",
    "TTSModel",
    "UnsupportedArchitectureError",
    "__version__",
    "architectures",
    "load",
]
