"""hexgrad's own ``KModel`` vs ours, through the ``.pth`` converter and the pipeline, v1.0 layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("kokoro")
pytest.importorskip("transformers")

from _kokoro_upstream import (
    Upstream,
    build_upstream,
    random_voices,
    upstream_stages,
    v1_config,
)

from ggtts.convert.kokoro_pth import convert_pth
from ggtts.gguf import GGUFFile
from ggtts.pipelines.kokoro import KokoroTTS

pytestmark = pytest.mark.needs_reference

PHONEMES = "hˈɛloʊ wˈɜːld."
SEED = 7


def _convert(tmp_path: Path, config: dict, parts: Upstream) -> tuple[torch.nn.Module, KokoroTTS]:
    from kokoro import KModel

    pth = tmp_path / "kokoro.pth"
    # as hexgrad saved it: weight norm unfolded, keys behind DataParallel's "module." prefix
    torch.save({k: {f"module.{n}": t for n, t in sd.items()} for k, sd in parts.state_dicts().items()}, pth)
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps(config), encoding="utf-8")
    voice_files = []
    for name, pack in random_voices(config, ("af_test", "am_test"), rows=510).items():
        torch.save(pack, tmp_path / f"{name}.pt")
        voice_files.append(tmp_path / f"{name}.pt")
    out = convert_pth(pth, config_json, voice_files, tmp_path / "kokoro.gguf", "f32")
    reference = KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(pth)).eval()
    return reference, KokoroTTS.from_gguf(GGUFFile(out))


def _relative_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def _compare(reference: torch.nn.Module, tts: KokoroTTS, speed: float) -> None:
    ref_s = tts.voicepacks["af_test"][len(PHONEMES) - 1]
    ids = torch.tensor([[0, *tts.token_ids(PHONEMES), 0]])
    stages = upstream_stages(reference, ids, ref_s, tts.config.style_dim, speed=speed)
    # the decoder alone, on upstream's own features and curves, sample by sample
    torch.manual_seed(SEED)
    with torch.no_grad():
        want_dec = reference.decoder(stages["asr"], stages["f0"], stages["n"], ref_s[:, :128]).squeeze()
    got_dec = tts.model.decode(stages["asr"], stages["f0"], stages["n"], ref_s, torch.Generator().manual_seed(SEED))
    peak = want_dec.abs().max().item()
    torch.testing.assert_close(got_dec.squeeze(), want_dec, rtol=1e-4, atol=1e-4 * peak)
    # the whole chain: KModel's forward vs our pipeline
    torch.manual_seed(SEED)
    want = reference(PHONEMES, ref_s, speed, return_output=True)
    assert torch.equal(want.audio, want_dec)  # upstream_stages mirrors KModel exactly
    got = tts.synthesize_phonemes(PHONEMES, "af_test", speed, seed=SEED)
    assert torch.equal(tts.model.encode_prosody(ids, ref_s, speed).durations, want.pred_dur)
    # F0 differs from upstream's in the last bits only, but the source integrates it into phases whose STFT
    # angles then flip between +π and -π here and there (upstream is just as sensitive: a different CPU does
    # the same), disturbing samples locally. Sample-exact parity is the decoder check above; here the whole
    # chain must agree in energy.
    assert _relative_l2(torch.from_numpy(got.samples), want.audio) < 0.15


def test_kmodel_small_albert_matches(tmp_path: Path) -> None:
    config = v1_config(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2)
    reference, tts = _convert(tmp_path, config, build_upstream(config))
    assert tts.voices == ["af_test", "am_test"]
    _compare(reference, tts, speed=1.0)
    _compare(reference, tts, speed=1.3)


@pytest.mark.slow
def test_kmodel_full_size_matches(tmp_path: Path) -> None:
    config = v1_config()
    reference, tts = _convert(tmp_path, config, build_upstream(config))
    _compare(reference, tts, speed=1.0)
