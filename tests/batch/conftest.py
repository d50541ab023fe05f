"""A tiny random Kokoro GGUF for the batch tests (one per session), by our converter from hexgrad's modules."""

from __future__ import annotations

import pytest
from batch_support import TinyModel

VOICES = ("v_one", "v_two")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    """A tiny random Kokoro GGUF written by the real converter (voices ``v_one``, ``v_two``)."""
    pytest.importorskip("kokoro")
    pytest.importorskip("transformers")
    from ggtts.families import family_for
    from ggtts.gguf import GGUFFile
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("batch-model") / "tiny.gguf")
    gguf = GGUFFile(path)
    assert sorted(family_for(gguf).voices(gguf)) == list(VOICES)
    return TinyModel(path=path, sample_rate=gguf.get_int("kokoro.sample_rate"))
