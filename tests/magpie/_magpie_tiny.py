"""A tiny random Magpie model and its nano codec, built by NeMo, saved as real ``.nemo`` files and converted by our
converters (the pipeline's tests)."""

from __future__ import annotations

from pathlib import Path

import pytest


def tiny_magpie_files(work: Path, seed: int, kind: str = "f32") -> tuple[Path, Path]:
    """(the model's GGUF of ``kind``, the codec's f32 GGUF), side by side in ``work``."""
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie

    codec = build_tiny_codec(work / "codec.nemo", seed=seed)
    model = build_tiny_magpie(work / "model.nemo", codec, seed=seed)
    return convert_magpie([model], work / "tiny.gguf", kind), convert_nanocodec([codec], work / "codec.gguf", "f32")
