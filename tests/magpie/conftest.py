"""A tiny random NeMo nano codec, saved by NeMo as a real ``.nemo`` and converted by our converter."""

from __future__ import annotations

import pytest
from _nanocodec_tiny import TinyCodec


@pytest.fixture(scope="module")
def tiny_codec(tmp_path_factory: pytest.TempPathFactory) -> TinyCodec:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference codec")
    from ggtts.convert.nanocodec_nemo import convert_nanocodec_nemo
    from ggtts.measure.magpie.upstream import build_tiny_codec

    d = tmp_path_factory.mktemp("nanocodec")
    nemo = build_tiny_codec(d / "tiny-nano-codec.nemo", seed=0)
    return TinyCodec(nemo, convert_nanocodec_nemo(nemo, d / "tiny-nano-codec-f32.gguf", "f32"))
