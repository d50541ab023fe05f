"""Our nano codec decoder against NeMo's ``AudioCodecModel.decode`` on a tiny random codec, through our converter
and a real GGUF file: the dequantized latent, every upsampling stage, and the audio.

Measured (CPU, float32): every stage and the audio equal NeMo's to the bit (weight norm is folded by the op torch
runs at each forward, and every layer runs the same torch ops in the same order); the tolerances below leave room
for another machine's kernels, not for a different computation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from _nanocodec_tiny import TinyCodec, random_codes

from ggtts.convert.nanocodec_nemo import convert_nanocodec_nemo
from ggtts.gguf import GGUFFile
from ggtts.models.nanocodec.model import NanoCodec, Snake

pytestmark = pytest.mark.needs_reference

# activations are O(1); measured 1.1e-6 with the upsampling stages channels-last (2-D convolutions over a time-major
# layout: another summation order than NeMo's 1-D ones, which gave 0)
ATOL = 1e-5
STORED_ATOL = {"f16": 2e-3, "q8_0": 0.0}  # measured 2.5e-4; q8_0 stores every tensor of this codec as F32


def _nemo(path: Path) -> Any:
    from nemo.collections.tts.models import AudioCodecModel

    return AudioCodecModel.restore_from(str(path), map_location="cpu").eval()


@pytest.fixture(scope="module")
def nemo_codec(tiny_codec: TinyCodec) -> Any:
    return _nemo(tiny_codec.nemo)


@pytest.fixture(scope="module")
def ours(tiny_codec: TinyCodec) -> NanoCodec:
    return NanoCodec.from_gguf(GGUFFile(tiny_codec.gguf))


def _stages(n_stages: int) -> list[str]:
    """The decoder's submodules whose outputs are compared: the same names in NeMo's model and ours."""
    names = ["audio_decoder.pre_conv"]
    for i in range(n_stages):
        names += [f"audio_decoder.up_sample_conv_layers.{i}", f"audio_decoder.res_layers.{i}"]
    return [*names, "audio_decoder.post_conv"]


@contextmanager
def _captured(model: torch.nn.Module, names: list[str]) -> Iterator[dict[str, torch.Tensor]]:
    outputs: dict[str, torch.Tensor] = {}

    def hook(name: str) -> Any:  # ours' channels-last stages give (B, C, 1, T): the same values as (B, C, T)
        return lambda module, args, out: outputs.__setitem__(name, out.detach().reshape(*out.shape[:2], -1).clone())

    handles = [model.get_submodule(n).register_forward_hook(hook(n)) for n in names]
    try:
        yield outputs
    finally:
        for h in handles:
            h.remove()


def _nemo_decode(model: Any, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        lengths = torch.full((codes.shape[0],), codes.shape[-1])
        return model.decode(tokens=codes, tokens_len=lengths)


def test_dequantized_latent_is_nemo_s(ours: NanoCodec, nemo_codec: Any) -> None:
    codes = random_codes(4, 9, batch=3, seed=1)
    codes[0, :, 0] = 0  # the corners of every group's grid
    codes[0, :, 1] = 2015
    with torch.no_grad():
        want = nemo_codec.dequantize(tokens=codes, tokens_len=torch.full((3,), 9))
    got = ours.dequantize(codes)
    assert torch.equal(got, want)
    assert got.shape == (3, 16, 9) and float(got.min()) == -1.0 and float(got.max()) == 1.0


@pytest.mark.parametrize("frames", [1, 13, 40])
def test_every_stage_matches_nemo(ours: NanoCodec, nemo_codec: Any, frames: int) -> None:
    codes = random_codes(4, frames, batch=2, seed=frames)
    names = _stages(len(ours.cfg.up_sample_rates))
    with _captured(nemo_codec, names) as theirs, _captured(ours, names) as mine:
        want, want_len = _nemo_decode(nemo_codec, codes)
        got = ours.decode(codes)
    for name in names:
        assert mine[name].shape == theirs[name].shape, name
        torch.testing.assert_close(mine[name], theirs[name], rtol=0, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")
    assert got.dtype == torch.float32 and got.shape == want.shape == (2, frames * 64)
    assert want_len.tolist() == [frames * 64] * 2  # NeMo's audio_len: hop * frames, nothing trimmed or padded
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    assert float(want.std()) > 0.1  # audio, not silence or a constant


def test_a_mixed_up_alpha_would_be_caught(ours: NanoCodec, nemo_codec: Any, tiny_codec: TinyCodec) -> None:
    """Negative control: the random alphas matter. With NeMo's initial alphas (all 1) in one layer the audio is
    far outside the tolerance the parity test uses."""
    codes = random_codes(4, 13, batch=1, seed=5)
    want, _ = _nemo_decode(nemo_codec, codes)
    broken = NanoCodec.from_gguf(GGUFFile(tiny_codec.gguf))
    snake = broken.audio_decoder.get_submodule("res_layers.1.res_blocks.1.res_blocks.0.skip_activation.activation")
    assert isinstance(snake.snake_act, Snake)
    with torch.no_grad():
        snake.snake_act.alpha.fill_(1.0)
    assert float((broken.decode(codes) - want).abs().max()) > 1000 * ATOL


@pytest.mark.parametrize(("activation", "output_activation"), [("snake", "clamp"), ("lrelu", "tanh"), ("elu", "tanh")])
def test_other_activations_match_nemo(tmp_path: Path, activation: str, output_activation: str) -> None:
    from ggtts.measure.magpie.upstream import build_tiny_codec

    nemo = build_tiny_codec(
        tmp_path / "c.nemo", seed=3, num_groups=2, activation=activation, output_activation=output_activation
    )
    ours = NanoCodec.from_gguf(GGUFFile(convert_nanocodec_nemo(nemo, tmp_path / "c.gguf", "f32")))
    codes = random_codes(2, 11, batch=2, seed=4)
    want, _ = _nemo_decode(_nemo(nemo), codes)
    torch.testing.assert_close(ours.decode(codes), want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("out_type", ["f16", "q8_0"])
def test_stored_types_stay_close(ours: NanoCodec, tiny_codec: TinyCodec, tmp_path: Path, out_type: str) -> None:
    stored = NanoCodec.from_gguf(GGUFFile(convert_nanocodec_nemo(tiny_codec.nemo, tmp_path / "c.gguf", out_type)))
    codes = random_codes(4, 20, seed=6)
    diff = float((stored.decode(codes) - ours.decode(codes)).abs().max())
    assert diff <= STORED_ATOL[out_type]
