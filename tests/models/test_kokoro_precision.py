"""``precision="bfloat16"``: the vocoder's resblock and noise-path convolutions in bfloat16, the rest float32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch import nn

import ggtts
from ggtts.errors import InputError
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.models.kokoro import precision
from ggtts.models.kokoro.precision import bfloat16_layers

TEXT = "hˈI ðˈɛɹ, wˈʌn tˈu θɹˈi."


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")


def _audio(path: Path, bfloat16: bool = False, **options: str) -> np.ndarray:
    """The tiny model's audio; ``bfloat16``: with its convolutions converted, whatever this CPU has (where it has
    no native bfloat16, torch emulates it: slower, same rounding)."""
    model = ggtts.load(str(path), **options)
    assert isinstance(model, KokoroTTS)
    if bfloat16:
        precision.use_bfloat16_convolutions(model.model.decoder.generator)
    return model.synthesize(TEXT, voice="v_one", phonemes=True).samples


def test_only_the_resblock_and_noise_convolutions_change(tiny: Path) -> None:
    model = ggtts.load(str(tiny), precision="bfloat16") if precision.bfloat16_supported() else None
    reference = ggtts.load(str(tiny))
    assert isinstance(reference, KokoroTTS)
    count = precision.use_bfloat16_convolutions(reference.model.decoder.generator)
    generator = reference.model.decoder.generator
    converted = bfloat16_layers(generator)
    assert count == len(converted) > 0
    assert type(generator.conv_post) is nn.Conv1d  # its outputs go through exp and sin: float32
    assert not bfloat16_layers(reference.model.decoder.encode) and not bfloat16_layers(generator.ups)
    assert "weight_bf16" not in "".join(generator.state_dict())  # the file's tensors, under the same names
    if model is not None:
        assert isinstance(model, KokoroTTS)
        assert len(bfloat16_layers(model.model)) == count


def test_bfloat16_audio_is_close_to_float32_but_not_equal(tiny: Path) -> None:
    f32, bf16 = _audio(tiny), _audio(tiny, bfloat16=True)
    assert len(f32) == len(bf16)
    relative = np.linalg.norm(bf16 - f32) / np.linalg.norm(f32)
    print(f"relative L2 difference {relative:.4f}")
    assert 0 < relative < 0.05, relative
    assert np.array_equal(_audio(tiny, precision="float32"), f32)  # the default is float32 exactly


def test_bad_precisions_are_refused(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="unknown precision 'int4'; use one of float32, bfloat16"):
        ggtts.load(str(tiny), precision="int4")
    from ggtts.ops import precision as ops_precision  # where the load-time check asks

    monkeypatch.setattr(ops_precision, "bfloat16_supported", lambda device="cpu": False)
    with pytest.raises(InputError, match="no native bfloat16"):
        ggtts.load(str(tiny), precision="bfloat16")


def test_the_bench_peers_load_bfloat16_and_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.measure.kokoro import bench, peers

    asked: list[dict[str, object]] = []
    warmed: list[bool] = []

    class Loaded:
        def warm_up(self) -> None:
            warmed.append(True)

    def load(path: str, **options: object) -> Loaded:
        asked.append(options)
        return Loaded()

    monkeypatch.setattr(ggtts, "load", load)
    for peer in ("bf16", "compiled", "bf16-compiled", "fast", "bf16-compiled-fast"):
        with peers.ENGINES[peer]("model.gguf", "v_one"):
            pass
    assert asked == [
        {"precision": "bfloat16", "compile": False},
        {"precision": "float32", "compile": True},
        {"precision": "bfloat16", "compile": True},
        {"precision": "float32", "compile": False},
        {"precision": "bfloat16", "compile": True},
    ]
    assert warmed == [True, True, True]  # the compiled ones compile while loading, not in the first timed run
    assert bench.parse_peers("onnx,bf16,bf16-compiled") == ["ggtts", "onnx", "bf16", "bf16-compiled"]


def test_weights_changed_after_conversion_are_used(tiny: Path) -> None:
    import torch

    model = ggtts.load(str(tiny))
    assert isinstance(model, KokoroTTS)
    precision.use_bfloat16_convolutions(model.model.decoder.generator)
    before = model.synthesize(TEXT, voice="v_one", phonemes=True).samples
    conv = bfloat16_layers(model.model)[0]
    with torch.no_grad():
        conv.weight.mul_(0.5)
    after = model.synthesize(TEXT, voice="v_one", phonemes=True).samples
    assert not np.array_equal(before, after)
    model.model.float()  # the copies are no buffers: casting the module leaves them alone
    assert np.array_equal(model.synthesize(TEXT, voice="v_one", phonemes=True).samples, after)


def test_the_vocoder_runs_channels_last_with_float32s_results(tiny: Path) -> None:
    """On a CPU the generator's stages run channels-last (2-D convolutions over a time-major layout): the audio is
    float32's to rounding (measured 7.8e-7 of the peak), and a batch of rows renders as each row alone."""
    import torch

    model = ggtts.load(str(tiny))
    assert isinstance(model, KokoroTTS)
    generator = model.model.decoder.generator
    assert generator.channels_last
    fast = model.synthesize(TEXT, voice="v_one", phonemes=True).samples
    generator.channels_last = False  # the same layers over (B, C, T)
    flat = model.synthesize(TEXT, voice="v_one", phonemes=True).samples
    assert len(fast) == len(flat)
    error = float(np.abs(fast - flat).max() / np.abs(flat).max())
    print(f"channels-last vs 1-D: {error:.1e} of the peak")
    assert error < 1e-5
    generator.channels_last = True
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, generator.ups[0].in_channels, 6, generator=g)
    s = torch.randn(2, model.model.decoder.generator.resblocks[0].adain1[0].fc.in_features, generator=g)
    har = torch.randn(2, generator.n_fft + 2, 6 * generator.spectrum_frames_per_frame + 1, generator=g)
    with torch.inference_mode():
        both = generator.body(x, s, har)
        rows = torch.cat([generator.body(x[i : i + 1], s[i : i + 1], har[i : i + 1]) for i in range(2)])
    assert torch.equal(both, rows)
