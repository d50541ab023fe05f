"""The Magpie pipeline through the public API and the CLI, on a tiny NeMo-built model and codec: voices, languages,
streaming equal to one-shot synthesis, and one clear error for each kind of bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.needs_reference


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.families.magpie.upstream import build_tiny_codec
    from ggtts.families.magpie.upstream_tts import build_tiny_magpie

    work = tmp_path_factory.mktemp("magpie-pipeline")
    codec = build_tiny_codec(work / "codec.nemo", seed=1)
    model = build_tiny_magpie(work / "model.nemo", codec, seed=1)
    return convert_magpie([model], work / "tiny.gguf", "f32"), convert_nanocodec([codec], work / "codec.gguf", "f32")


def test_speaks_with_the_codec_found_beside_it(files: tuple[Path, Path]) -> None:
    import ggtts

    tts = ggtts.load(files[0])
    assert tts.family_name == "magpie" and tts.voices == ["Jason", "Aria", "Leo"]
    audio = tts.synthesize("Hello world, this is a test.", voice="Aria", max_frames=20)
    assert audio.sample_rate == 22_050 and len(audio) == 20 * 64  # the tiny codec: 64 samples per frame


def test_stream_concatenates_to_synthesize(files: tuple[Path, Path]) -> None:
    import ggtts

    tts = ggtts.load(files[0])
    text = "Hello world. This is a test of the magpie voice!"
    parts = list(tts.stream(text, voice="Leo", max_frames=12, chunk_frames=3, seed=5))
    whole = tts.synthesize(text, voice="Leo", max_frames=12, chunk_frames=3, seed=5)
    assert len(parts) > 2
    joined = np.concatenate([p.samples for p in parts])
    assert np.array_equal(joined, whole.samples)
    offsets = [p.offset for p in parts]
    assert offsets == sorted(offsets) and offsets[0] == 0.0


def test_sentences_are_kept_whole_and_long_ones_cut_at_words() -> None:
    from ggtts.families.magpie.pipeline import sentences

    assert sentences("One. Two three! Four?") == ["One.", "Two three!", "Four?"]
    long = " ".join(["word"] * 100)
    cut = sentences(long, max_words=45)
    assert [len(c.split()) for c in cut] == [45, 45, 10]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"voice": "Nobody"}, "unknown voice 'Nobody'"),
        ({"lang": "ja"}, "no tokenizer for language 'ja'"),
        ({"lang": "xx"}, "no tokenizer for language 'xx'"),
        ({"top_k": 0}, "top_k"),
        ({"speed": 1.5}, "no speed control"),
        ({"chunk_codes": 3}, "unknown option 'chunk_codes'"),
    ],
)
def test_bad_requests_get_one_clear_error(files: tuple[Path, Path], kwargs: dict, message: str) -> None:
    import ggtts
    from ggtts.errors import InputError

    tts = ggtts.load(files[0])
    with pytest.raises(InputError, match=message):
        list(tts.stream("Hello world.", **kwargs))


def test_without_a_codec_it_says_how_to_give_one(files: tuple[Path, Path], tmp_path: Path) -> None:
    import ggtts
    from ggtts.errors import InputError

    alone = tmp_path / "alone.gguf"
    shutil.copy(files[0], alone)
    with pytest.raises(InputError, match="no codec"):
        ggtts.load(alone).synthesize("Hello world.")
    tts = ggtts.load(alone, codec=str(files[1]))
    assert len(tts.synthesize("Hello world.", max_frames=4)) == 4 * 64


def test_cli_speak_names_the_codec_and_voice(files: tuple[Path, Path], tmp_path: Path) -> None:
    from ggtts.cli import main

    alone = tmp_path / "m.gguf"
    shutil.copy(files[0], alone)
    out = tmp_path / "out.wav"
    assert (
        main(["speak", "-m", str(alone), "--codec", str(files[1]), "-v", "Jason", "Hello world.", "-o", str(out)]) == 0
    )
    assert out.stat().st_size > 44
    assert main(["speak", "-m", str(alone), "-v", "Nobody", "Hello.", "-o", str(tmp_path / "x.wav")]) != 0
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.parametrize("out_type", ["f16", "q8_0"])
def test_f16_and_q8_0_files_run_as_stored_and_stay_close(files: tuple[Path, Path], out_type: str) -> None:
    """Linear maps and pointwise feed-forwards run in the stored type (ggml), and the decoder's output stays near
    float32's: relative difference measured 3.3e-4 (f16) and 1.1e-2 (q8_0) on this model (random weights of unit
    scale, a worst case for 8 bits); the bounds are about 4x that."""
    import torch

    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import LayerInputs, load_magpie
    from ggtts.runtime.stored_weights import StoredLinear

    source = files[0].parent / "model.nemo"
    path = convert_magpie([source], files[0].parent / f"tiny-{out_type}.gguf", out_type)
    low, full = load_magpie(GGUFFile(path)), load_magpie(GGUFFile(files[0]))
    assert isinstance(low.decoder.layers[0].self_attention.qkv_net, StoredLinear)
    assert low.decoder.layers[0].pos_ff.proj.stored is not None
    assert low.encoder.layers[0].pos_ff.proj.stored is None  # kernel 3: widened
    text = torch.tensor([[1, 5, 9, 14, 3, full.cfg.text_eos_id]])
    x = torch.randn(1, 9, full.cfg.d_model, generator=torch.Generator().manual_seed(0))
    outs = []
    for model in (full, low):
        with torch.inference_mode():
            memory = model.memory_kv(model.encode_text(text))
            outs.append(model.decode(x, LayerInputs(memory=memory, cross_rows=1))[0])
    rel = float((outs[1] - outs[0]).abs().max() / outs[0].abs().max())
    assert 0 < rel < {"f16": 1.5e-3, "q8_0": 4e-2}[out_type], rel
