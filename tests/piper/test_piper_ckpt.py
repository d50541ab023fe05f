"""Piper training checkpoints (``.ckpt``, saved by Lightning as piper's training saves them) through ``ggtts convert
piper``: tiny random voices built with piper-tts's own ``VitsModel``, read back by upstream's own
``VitsModel.load_from_checkpoint``, equal ours stage by stage; checkpoints that are not, or that would run code when
unpickled, are refused with one line."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from ggtts.cli import main
from ggtts.convert.piper_onnx import convert_piper
from ggtts.errors import ConversionError
from ggtts.gguf import GGUFFile
from ggtts.measure.parity import print_table
from ggtts.measure.piper.parity import stages
from ggtts.measure.piper.upstream import TINY_IDS, VOICES, save_checkpoint, write_config
from ggtts.models.piper.load import load_piper

pytest.importorskip("piper.train.vits.lightning")
pytest.importorskip("lightning")

IDS = torch.tensor([TINY_IDS])


@pytest.fixture(scope="module", params=["high", "multi"])
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A voice's training folder: config.json, and its checkpoint two folders down (as Lightning lays them out)."""
    folder = tmp_path_factory.mktemp(f"train-{request.param}")
    write_config(folder / "config.json", VOICES[request.param])
    checkpoints = folder / "lightning_logs" / "checkpoints"
    checkpoints.mkdir(parents=True)
    return request.param, save_checkpoint(VOICES[request.param], checkpoints / "epoch=9-step=90.ckpt")


@pytest.mark.parametrize("noise", ["off", "on"])
def test_a_checkpoint_converts_to_the_voice_upstream_loads(trained: tuple[str, Path], noise: str) -> None:
    from piper.train.vits.lightning import VitsModel

    name, ckpt = trained
    gguf = ckpt.with_suffix(".gguf")
    if not gguf.exists():
        assert main(["convert", "piper", str(ckpt), "-o", str(gguf)]) == 0  # config.json found two folders up
    upstream = VitsModel.load_from_checkpoint(ckpt, map_location="cpu").model_g.eval()
    ours = load_piper(GGUFFile(gguf))
    scales = dict(noise_scale=0.0, noise_w=0.0) if noise == "off" else dict(noise_scale=0.667, noise_w=0.8)
    speaker = 2 if ours.cfg.gin else None
    results = stages(upstream, ours, IDS, speaker=speaker, length_scale=1.0, seed=3, **scales)
    bad = [r.stage for r in results if not r.ok]
    if bad:
        print_table(results)
    assert not bad, f"{name}: stages out of tolerance: {bad}"
    assert ours.cfg.resblock == VOICES[name].resblock and ours.cfg.n_speakers == VOICES[name].n_speakers


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch ran-code",))


def _checkpoint(path: Path, content: Any) -> Path:
    torch.save(content, path)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: _checkpoint(p, {"state_dict": {}, "x": _RunsCode()}), r"will not unpickle: it names posix\.system"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not really") and p, r"not a PyTorch checkpoint"),
        (lambda p: _checkpoint(p, [1, 2]), r"not a Piper training checkpoint \(no state_dict\)"),
        (lambda p: _checkpoint(p, {"state_dict": {"a": torch.zeros(1)}}), r"has no hyper_parameters"),
        (
            lambda p: _checkpoint(p, {"state_dict": {"x.w": torch.zeros(1)}, "hyper_parameters": {}}),
            r"holds no generator \(model_g\) weights",
        ),
        (
            lambda p: _checkpoint(
                p, {"state_dict": {"model_g.x": torch.zeros(1)}, "hyper_parameters": {"upsample_rates": "oops"}}
            ),
            r"hyper-parameter 'upsample_rates' is not a list",
        ),
    ],
    ids=["runs-code", "not-torch", "a-list", "no-hparams", "no-generator", "bad-rates"],
)
def test_a_bad_checkpoint_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    import re

    monkeypatch.chdir(tmp_path)
    ckpt = make(tmp_path / "voice.ckpt")
    write_config(tmp_path / "config.json", VOICES["medium"])
    assert main(["convert", "piper", str(ckpt), "-o", str(tmp_path / "out.gguf")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]) and str(ckpt) in err[0], err
    assert not (tmp_path / "ran-code").exists() and not (tmp_path / "out.gguf").exists()
    with pytest.raises(ConversionError):
        convert_piper([ckpt], tmp_path / "out.gguf", "f32")


def test_a_checkpoint_without_its_config_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b" / "c" / "d"
    folder.mkdir(parents=True)
    ckpt = _checkpoint(folder / "voice.ckpt", {"state_dict": {}})
    (tmp_path / "config.json").write_text("{}")  # four folders up: further than a checkpoint sits from it
    with pytest.raises(ConversionError, match=r"d/config\.json: no such file \(the voice's config\)"):
        convert_piper([ckpt], tmp_path / "out.gguf", "f32")


def test_pickle_refusal_is_torchs_weights_only_load() -> None:
    """The refusal above comes from torch's weights-only unpickler: what it says is what the message reads."""
    import io

    buffer = io.BytesIO()
    torch.save({"x": _RunsCode()}, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"unsupported GLOBAL posix\.system"):
        torch.load(buffer, weights_only=True)
