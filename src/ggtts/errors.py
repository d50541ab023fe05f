"""Exceptions whose message is meant for people: one sentence naming what was wrong."""


class GGTTSError(Exception):
    """Base class: the CLI prints ``str(error)`` on one line and exits non-zero, without a traceback."""


class GGUFError(GGTTSError):
    """A GGUF file is missing, malformed, truncated, or does not hold what its architecture needs."""


class UnsupportedArchitectureError(GGUFError):
    """The file's ``general.architecture`` has no model class in ggtts."""


class ConversionError(GGTTSError):
    """An upstream checkpoint could not be converted."""


class InputError(GGTTSError, ValueError):
    """Bad user input: empty or oversized text, unknown voice, speed out of range."""


class DeviceMemoryError(GGTTSError):
    """The GPU's memory ran out (loading a model, capturing its graphs, or speaking a request)."""


class OutputError(GGTTSError, OSError):
    """A file cannot be written: one line naming the path and why (still an ``OSError`` for callers who catch that)."""
