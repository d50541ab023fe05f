"""A tiny random Kokoro GGUF (upstream modules through our converter) for the measurement commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tiny_frontend_support import tiny_phonemizer

PARITY_HELPERS = Path(__file__).parents[1] / "parity"


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
    import ggtts.families.kokoro.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_text_frontend", tiny_phonemizer)
