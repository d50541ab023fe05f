"""Kokoro parity against hexgrad's ``kokoro``, through our converter, a real GGUF file and our loader."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

pytest.importorskip("kokoro")
pytest.importorskip("transformers")

from _kokoro_upstream import TINY_VOCAB, build_upstream, random_voices, tiny_config, upstream_source, upstream_stages

from ggtts.convert.kokoro_gguf import write_kokoro_gguf
from ggtts.gguf import GGUFFile
from ggtts.measure.kokoro.parity import kokoro_stages
from ggtts.models.kokoro import istftnet
from ggtts.models.kokoro.load import load_kokoro

pytestmark = pytest.mark.needs_reference

SEED = 1234
PHONEMES = "hə ˈloʊ wɜrld, ðɪs ɪz ə tɛst."


def _ids(vocab: dict[str, int], text: str) -> torch.Tensor:
    return torch.tensor([[0, *(vocab[c] for c in text if c in vocab), 0]])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    config = tiny_config()
    parts = build_upstream(config)
    voices = random_voices(config)
    path = tmp_path_factory.mktemp("kokoro") / "tiny.gguf"
    write_kokoro_gguf(path, config, parts.folded_state(), voices, "f32", name="tiny")
    _, model, loaded_voices, vocab = load_kokoro(GGUFFile(path))
    ids = _ids(vocab, "hello world, this is a test.")
    ref_s = loaded_voices["v_one"][ids.shape[1] - 3]
    expected = upstream_stages(parts, ids, ref_s, config["style_dim"])
    return config, parts, model, voices, loaded_voices, ids, ref_s, expected


def test_voices_and_vocab_round_trip(tiny) -> None:
    _, _, model, voices, loaded, *_ = tiny
    assert list(loaded) == list(voices)
    for name in voices:
        torch.testing.assert_close(loaded[name], voices[name], rtol=0, atol=0)
    assert dict(model.config.vocab) == TINY_VOCAB


def test_albert_matches(tiny) -> None:
    *_, model, _, _, ids, _, expected = tiny
    torch.testing.assert_close(model.bert(ids), expected["bert"], rtol=1e-5, atol=1e-5)


def test_durations_equal(tiny) -> None:
    *_, model, _, _, ids, ref_s, expected = tiny
    prosody = model.encode_prosody(ids, ref_s)
    assert torch.equal(prosody.durations, expected["durations"])
    # the rounding did not happen to sit on a knife edge
    assert (expected["raw_durations"] - expected["raw_durations"].round()).abs().min() > 1e-3


def test_f0_energy_and_text_features_match(tiny) -> None:
    *_, model, _, _, ids, ref_s, expected = tiny
    prosody = model.encode_prosody(ids, ref_s)
    f0, n = model.predict_f0_n(prosody, ref_s)
    torch.testing.assert_close(f0, expected["f0"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(n, expected["n"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.encode_text(ids, prosody.durations), expected["asr"], rtol=1e-5, atol=1e-5)


def test_decoder_matches_on_the_same_source(tiny) -> None:
    _, parts, model, _, _, _, ref_s, expected = tiny
    style = model.config.style_dim
    excitation, spectrum = upstream_source(parts, expected["f0"], SEED)
    torch.manual_seed(SEED)
    with torch.no_grad():
        want = parts.decoder(expected["asr"], expected["f0"], expected["n"], ref_s[:, :style]).squeeze(1)
    generator = model.decoder.generator
    torch.testing.assert_close(
        generator.m_source(expected["f0"], torch.Generator().manual_seed(SEED)), excitation, rtol=0, atol=1e-6
    )
    # the source's phase spectrum is an angle: the decoder is compared on upstream's own (see ggtts.measure.parity)
    with mock.patch.object(generator, "source_spectrum", lambda f0, gen: spectrum):
        got = model.decode(expected["asr"], expected["f0"], expected["n"], ref_s)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=5e-5 * want.abs().max().item())


@pytest.mark.parametrize("speed", [1.0, 1.3])
def test_every_stage_and_the_whole_chain_match(tiny, speed: float) -> None:
    _, parts, model, _, _, ids, ref_s, _ = tiny
    results = kokoro_stages(parts, model, ids, ref_s, SEED, speed)
    assert [r.stage for r in results if not r.ok] == [], "\n".join(map(str, results))
    assert [r.stage for r in results][-1] == "end_to_end"


def test_seed_changes_only_the_noise(tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    *_, model, _, _, ids, ref_s, _ = tiny
    a, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(1))
    b, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(1))
    c, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # without the source's noise, the seed makes no difference at all
    monkeypatch.setattr(istftnet, "NOISE_STD", 0.0)
    monkeypatch.setattr(istftnet, "UNVOICED_NOISE_STD", 0.0)
    quiet1, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(1))
    quiet2, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(2))
    assert torch.equal(quiet1, quiet2)
    assert not torch.equal(quiet1, a)
