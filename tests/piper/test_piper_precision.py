"""``precision="bfloat16"`` for Piper: the decoder's upsampling and resblock convolutions in bfloat16 (float32 back),
``conv_pre``/``conv_post`` and everything before the decoder float32. On a tiny random voice through the real
converter; where this CPU has no native bfloat16, torch emulates it (slower, the same rounding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import ggtts
from ggtts.errors import InputError
from ggtts.families.piper.pipeline import PiperPipeline
from ggtts.measure.piper.upstream import VOICES, build_upstream, write_voice
from ggtts.models.layers.bfloat16 import BFloat16Conv1d
from ggtts.models.layers.channels_last import ChannelsLastConv1d, ChannelsLastConvTranspose1d

pytest.importorskip("piper.train.vits.models")
pytest.importorskip("onnx")

TEXT = "abc, de fgh."


@pytest.fixture(scope="module")
def voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tiny = VOICES["high"]  # resblock 1: two convolutions per dilation, four upsampling stages
    folder = tmp_path_factory.mktemp("piper-bf16")
    return write_voice(build_upstream(tiny), tiny, folder)


def _load(path: Path, bfloat16: bool = False) -> PiperPipeline:
    model = ggtts.load(path, device="cpu")
    assert isinstance(model, PiperPipeline)
    if bfloat16:
        model.model.dec.use_bfloat16()
    return model


def test_only_the_upsampling_and_resblock_convolutions_change(voice: Path) -> None:
    model = _load(voice)
    dec = model.model.dec
    assert dec.channels_last  # on a CPU the stages run channels-last, in float32 until asked otherwise
    count = dec.use_bfloat16()
    bf16 = torch.bfloat16
    ups = [m for m in dec.ups if type(m) is ChannelsLastConvTranspose1d and m.compute_dtype == bf16]
    blocks = [m for m in dec.resblocks.modules() if type(m) is ChannelsLastConv1d and m.compute_dtype == bf16]
    assert count == len(ups) + len(blocks) and len(ups) == len(dec.ups) == 4 and blocks
    assert type(dec.conv_pre) is nn.Conv1d and type(dec.conv_post) is nn.Conv1d
    others = [m for name, m in model.model.named_modules() if not name.startswith("dec.")]
    assert not any(isinstance(m, BFloat16Conv1d | ChannelsLastConv1d) for m in others)
    assert "bf16" not in "".join(model.model.state_dict())  # the file's tensors, under their names


def test_a_voice_loaded_in_inference_mode_speaks(voice: Path) -> None:
    """Weights loaded under ``torch.inference_mode`` (inference tensors: no version counter) still make the
    channels-last copies, in float32 and bfloat16."""
    with torch.inference_mode():
        model = _load(voice)
        f32 = model.synthesize(TEXT, noise_scale=0.0, noise_w=0.0).samples
        model.model.dec.use_bfloat16()
        bf16 = model.synthesize(TEXT, noise_scale=0.0, noise_w=0.0).samples
    assert len(f32) == len(bf16) > 0 and np.isfinite(bf16).all()


def test_bfloat16_audio_is_close_to_float32_but_not_equal(voice: Path) -> None:
    """Noise off: the same durations, so the same length; the audio differs by bfloat16's rounding only (1.2 %
    measured, relative L2; the bound is 2.5 times that)."""
    f32 = _load(voice).synthesize(TEXT, noise_scale=0.0, noise_w=0.0).samples
    bf16 = _load(voice, bfloat16=True).synthesize(TEXT, noise_scale=0.0, noise_w=0.0).samples
    assert len(f32) == len(bf16)
    relative = float(np.linalg.norm(bf16 - f32) / np.linalg.norm(f32))
    print(f"relative L2 difference {relative:.4f}")
    assert 0 < relative < 0.03, relative


def test_precision_is_a_load_option_refused_where_not_native(voice: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="unknown precision 'int4'; use one of float32, bfloat16"):
        ggtts.load(voice, precision="int4")
    with pytest.raises(InputError, match="piper has no load option 'compile'; it takes device, lexicon, precision"):
        ggtts.load(voice, compile=True)
    from ggtts.ops import precision as ops_precision  # where the load-time check asks

    monkeypatch.setattr(ops_precision, "bfloat16_supported", lambda device="cpu": True)
    model = ggtts.load(voice, precision="bfloat16")
    up = model.model.dec.ups[0]
    assert isinstance(model, PiperPipeline) and type(up) is ChannelsLastConvTranspose1d
    assert up.compute_dtype == torch.bfloat16
    monkeypatch.setattr(ops_precision, "bfloat16_supported", lambda device="cpu": False)
    with pytest.raises(InputError, match="no native bfloat16"):
        ggtts.load(voice, precision="bfloat16")
