"""Tiny random Piper voices (piper-tts's own VITS code) through piper's ONNX export, our converter and the GGUF
file: every stage equals piper's modules, with the noise off and on, for each quality layout, a multi-speaker
voice and one with the plain duration predictor; a 1 % weight error fails its stage."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from ggtts.gguf import GGUFFile
from ggtts.measure.parity import print_table
from ggtts.measure.piper.parity import stages
from ggtts.measure.piper.upstream import N_VOCAB, TINY_IDS, VOICES, build_upstream, write_voice
from ggtts.models.piper.load import load_piper
from ggtts.models.piper.model import PiperModel

pytest.importorskip("piper.train.vits.models")
onnx = pytest.importorskip("onnx")

IDS = torch.tensor([TINY_IDS])
assert int(IDS.max()) < N_VOCAB


@dataclass
class Built:
    upstream: Any
    ours: PiperModel
    onnx_path: Path
    gguf_path: Path


_BUILT: dict[str, Built] = {}


def _build(name: str, tmp_path_factory: pytest.TempPathFactory) -> Built:
    if name not in _BUILT:
        voice = VOICES[name]
        folder = tmp_path_factory.mktemp(f"piper-{voice.name}")
        upstream = build_upstream(voice)
        gguf_path = write_voice(upstream, voice, folder)
        _BUILT[name] = Built(upstream, load_piper(GGUFFile(gguf_path)), folder / "voice.onnx", gguf_path)
    return _BUILT[name]


@pytest.fixture(scope="module", params=sorted(VOICES))
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def medium(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _build("medium", tmp_path_factory)


def _check(results: list[Any]) -> None:
    bad = [r.stage for r in results if not r.ok]
    if bad:
        print_table(results)
    assert not bad, f"stages out of tolerance: {bad}"


@pytest.mark.parametrize("noise", ["off", "on"])
def test_every_stage_matches_piper(built: Built, noise: str) -> None:
    scales = dict(noise_scale=0.0, noise_w=0.0) if noise == "off" else dict(noise_scale=0.667, noise_w=0.8)
    speaker = 2 if built.ours.cfg.gin else None
    _check(stages(built.upstream, built.ours, IDS, speaker=speaker, length_scale=1.0, seed=3, **scales))


def test_the_export_hid_weights_the_converter_named(built: Built) -> None:
    """The published voices' flow convolutions are unnamed in the ONNX file; so are the tiny exports' (else this
    suite would not test how the converter names them)."""
    names = [i.name for i in onnx.load(str(built.onnx_path)).graph.initializer]
    assert any(n.startswith("onnx::Conv_") for n in names)
    assert not any(n.startswith("flow.flows.0.enc.in_layers.0.weight") for n in names)


@pytest.mark.parametrize(
    ("tensor", "stage"),
    [
        ("enc_p.encoder.attn_layers.0.conv_q.weight", "encoder.mean"),
        ("enc_p.encoder.attn_layers.0.emb_rel_k", "encoder.mean"),
        ("flow.flows.2.enc.in_layers.1.weight", "flow"),
        ("dec.ups.1.weight", "decoder"),
        ("dec.resblocks.4.convs.1.weight", "decoder"),
    ],
)
def test_a_one_percent_weight_error_fails_its_stage(tensor: str, stage: str, medium: Built) -> None:
    broken = copy.deepcopy(medium.ours)
    with torch.no_grad():
        broken.get_parameter(tensor).mul_(1.01)
    results = {r.stage: r for r in stages(medium.upstream, broken, IDS, noise_scale=0.0, noise_w=0.0)}
    assert not results[stage].ok, f"a 1 % error in {tensor} passed {stage}"
    assert not results["end_to_end"].ok


def test_the_durations_check_sees_a_one_percent_error(medium: Built) -> None:
    broken = copy.deepcopy(medium.ours)
    with torch.no_grad():
        broken.get_parameter("dp.flows.3.proj.weight").mul_(1.01)
    results = {r.stage: r for r in stages(medium.upstream, broken, IDS, noise_scale=0.0, noise_w=0.8)}
    assert not results["durations.log"].ok


def test_the_record_names_this_check_for_ggtts_parity() -> None:
    from ggtts.families.base import import_target
    from ggtts.families.piper import FAMILY
    from ggtts.measure.piper.parity import piper_parity

    assert FAMILY.parity is not None and import_target(FAMILY.parity) is piper_parity


def test_speaker_names_sit_at_their_ids_and_configs_are_checked(tmp_path: Path) -> None:
    from ggtts.convert.piper_onnx import voice_keys
    from ggtts.errors import ConversionError
    from ggtts.gguf.keys import Piper as K

    config = {
        "audio": {"sample_rate": 22050},
        "espeak": {"voice": "en-us"},
        "phoneme_id_map": {"_": [0], "^": [1], "$": [2], "a": [3]},
        "num_speakers": 4,
        "speaker_id_map": {"ann": 3, "bob": 0},
    }
    assert voice_keys(config, tmp_path)[K.SPEAKER_NAMES] == ["bob", "speaker_1", "speaker_2", "ann"]
    with pytest.raises(ConversionError, match="phoneme_type 'pinyin'"):
        voice_keys({**config, "phoneme_type": "pinyin"}, tmp_path)
    with pytest.raises(ConversionError, match="must name its espeak voice"):
        voice_keys({**config, "espeak": {}}, tmp_path)


def test_a_draw_past_the_frame_bound_is_refused_before_the_decoder(medium: Built) -> None:
    from ggtts.errors import InputError

    with pytest.raises(InputError, match=r"the voice drew \d+ frames for 27 phoneme ids .*lower noise_w"):
        medium.ours.synthesize(IDS, noise_scale=0.0, length_scale=1.0, noise_w=0.0, max_frames_per_id=0)


def test_a_phoneme_map_past_the_embedding_is_refused(medium: Built) -> None:
    from ggtts.errors import GGUFError
    from ggtts.families.piper.text import PhonemeTable

    table = PhonemeTable.from_gguf(GGUFFile(medium.gguf_path))
    table.check_vocabulary(N_VOCAB, "voice.gguf")
    with pytest.raises(GGUFError, match=r"voice.gguf: the phoneme map uses id \d+; the voice's embedding has 10 rows"):
        table.check_vocabulary(10, "voice.gguf")
