"""Text frontends, language only: normalization, G2P adapters, chunking, number words.

English for Kokoro: :func:`text_to_phoneme_chunks` (normalize -> offline misaki G2P -> chunks under the
phoneme limit). The names below are imported on first access, so a frontend's optional dependencies (misaki,
spaCy, num2words) load only when that frontend is used, not when a sibling module is.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "text_to_phoneme_chunks": "ggtts.text.frontend",
    "phonemes_to_chunks": "ggtts.text.frontend",
    "filter_phonemes": "ggtts.text.frontend",
    "Chunk": "ggtts.text.chunking",
    "KOKORO_MAX_PHONEMES": "ggtts.text.chunking",
    "iter_chunks": "ggtts.text.chunking",
    "iter_phoneme_chunks": "ggtts.text.chunking",
    "EnglishG2P": "ggtts.text.g2p",
    "get_g2p": "ggtts.text.g2p",
    "resolve_language": "ggtts.text.g2p",
    "normalize": "ggtts.text.normalize",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ggtts.text' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
