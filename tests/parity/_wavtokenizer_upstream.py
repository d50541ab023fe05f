"""Import WavTokenizer's decoder (as shipped in the ``outetts`` package) without its heavy imports.

``outetts/__init__`` pulls in polars and friends, and the decoder's heads import torchaudio (mel helpers for
a head
we do not use) and scipy (an MDCT window we do not use). Neither has a build here, so those two names are
stubbed
for the duration of the import only, and the decoder modules are imported by path.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest


def _outetts_dir() -> Path:
    spec = importlib.util.find_spec("outetts")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the outetts package (pip install outetts==0.4.4 --no-deps)")
    return Path(next(iter(spec.submodule_search_locations)))


def _stub(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def load_upstream_decoder() -> types.SimpleNamespace:
    """``models`` (VocosBackbone), ``heads`` (ISTFTHead), ``spectral_ops`` (ISTFT), ``WavDecoder``."""
    root = _outetts_dir() / "wav_tokenizer"
    stubs: dict[str, types.ModuleType] = {}
    if importlib.util.find_spec("torchaudio") is None:
        unused = lambda *a, **k: None  # noqa: E731 - only referenced by a head we never build
        stubs["torchaudio"] = _stub("torchaudio")
        stubs["torchaudio.functional"] = _stub("torchaudio.functional")
        stubs["torchaudio.functional.functional"] = _stub(
            "torchaudio.functional.functional", _hz_to_mel=unused, _mel_to_hz=unused
        )
    if importlib.util.find_spec("scipy") is None:
        stubs["scipy"] = _stub("scipy", signal=_stub("scipy.signal"))
    # the decoder package's __init__ imports the encoder (einops, ...): register the package without running
    # it
    package = _stub("decoder")
    package.__path__ = [str(root / "decoder")]
    stubs["decoder"] = package
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        models = importlib.import_module("decoder.models")
        heads = importlib.import_module("decoder.heads")
        spectral_ops = importlib.import_module("decoder.spectral_ops")
        spec = importlib.util.spec_from_file_location("_outetts_wav_model", root / "model.py")
        assert spec is not None and spec.loader is not None
        wav_model = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(wav_model)
    finally:
        for sub in ("decoder.models", "decoder.heads", "decoder.spectral_ops", "decoder.modules"):
            sys.modules.pop(sub, None)
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return types.SimpleNamespace(models=models, heads=heads, spectral_ops=spectral_ops, WavDecoder=wav_model.WavDecoder)
