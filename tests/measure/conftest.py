"""A tiny random Kokoro GGUF (upstream modules through our converter) for the measurement commands."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

PARITY_HELPERS = Path(__file__).parents[1] / "parity"
TINY_LETTERS = "abcdefghijklmnopqrstuvwxyz .,!?"


def tiny_phonemizer(text: str, language: str, max_phonemes: int = 0, vocab: object = None) -> Iterable[str]:
    """The English frontend's stand-in for the tiny vocabulary: letters as phonemes, a chunk per sentence."""
    letters = "".join(c for c in text.lower() if c in TINY_LETTERS)
    return [s.strip() + "." for s in letters.split(".") if s.strip()]


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kokoro")
    pytest.importorskip("transformers")
    sys.path.insert(0, str(PARITY_HELPERS))
    try:
        from _kokoro_upstream import build_upstream, random_voices, tiny_config
    finally:
        sys.path.remove(str(PARITY_HELPERS))
    from ggtts.convert.kokoro_gguf import write_kokoro_gguf

    config = tiny_config()
    path = tmp_path_factory.mktemp("measure") / "tiny-kokoro.gguf"
    return write_kokoro_gguf(path, config, build_upstream(config).folded_state(), random_voices(config), "f32")


@pytest.fixture
def tiny_frontend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text input for the tiny model without the real (English) frontend."""
    import ggtts.pipelines.kokoro as pipeline

    monkeypatch.setattr(pipeline, "_text_frontend", tiny_phonemizer)
