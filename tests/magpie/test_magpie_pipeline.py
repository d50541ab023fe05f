"""The Magpie pipeline through the public API and the CLI, on a tiny NeMo-built model and codec: voices, languages,
streaming equal to one-shot synthesis, and one clear error for each kind of bad input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from _magpie_tiny import tiny_magpie_files

pytestmark = pytest.mark.needs_reference


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tiny_magpie_files(tmp_path_factory.mktemp("magpie-pipeline"), seed=1)


def test_speaks_with_the_codec_found_beside_it(files: tuple[Path, Path]) -> None:
    import ggtts

    tts = ggtts.load(files[0])
    assert tts.family_name == "magpie" and tts.voices == ["Jason", "Aria", "Leo"]
    audio = tts.synthesize("Hello world, this is a test.", voice="Aria", max_frames=20)
    assert audio.sample_rate == 22_050 and len(audio) == 20 * 64  # the tiny codec: 64 samples per frame


def test_streamed_chunks_join_to_the_one_shot_decoding_of_the_codes(files: tuple[Path, Path]) -> None:
    """The stream (the first frame alone, then 3 frames a chunk) against the codec decoding all the utterance's codes at
    once, drawn with the same seed: the codec's per-layer streaming state makes the pieces join (float noise)."""
    import torch

    import ggtts
    from ggtts.families.magpie import MagpieOptions
    from ggtts.families.magpie.generate import generate_codes

    tts = ggtts.load(files[0])
    text = "Hello world. This is a test of the magpie voice!"
    parts = list(tts.stream(text, voice="Leo", max_frames=12, chunk_frames=3, seed=5))
    assert [len(p) // 64 for p in parts] == [1, 3, 4, 4]  # the tiny codec: 64 samples a frame
    assert [p.offset for p in parts] == [0.0, *np.cumsum([p.duration for p in parts[:-1]])]
    ids = tts.text.encode(text, "en")
    codes = generate_codes(tts.model, ids, 2, tts.params(MagpieOptions(max_frames=12, seed=5)))
    one_shot = tts.codec.decode(codes).numpy()
    joined = np.concatenate([p.samples for p in parts])
    assert joined.shape == one_shot.shape
    assert float(np.abs(joined - one_shot).max()) < 1e-5
    assert torch.equal(
        torch.from_numpy(joined),
        torch.from_numpy(tts.synthesize(text, voice="Leo", max_frames=12, chunk_frames=3, seed=5).samples),
    )


def test_by_default_chunks_grow_after_the_first_frame(files: tuple[Path, ...]) -> None:
    """Asked for no chunk size, a stream sends the first frame alone, then about 4 frames, then 12 at a time (the
    codec decodes a push of 12 frames at 0.21 of real time at the real shape, one of 4 at 0.28-0.33); the pieces
    still join to the whole."""
    import ggtts
    from ggtts.families.magpie.pipeline import DEFAULT_CHUNK_FRAMES, RAMP_FRAMES

    tts = ggtts.load(files[0])
    text = "Hello world. This is a test of the magpie voice!"
    parts = list(tts.stream(text, voice="Leo", max_frames=40, seed=5))
    frames = [len(p) // 64 for p in parts]  # the tiny codec: 64 samples a frame
    assert sum(frames) == 40 and frames[0] == 1
    assert RAMP_FRAMES <= frames[1] < RAMP_FRAMES + 2  # two frames arrive per step (frame stacking)
    assert all(DEFAULT_CHUNK_FRAMES <= f < DEFAULT_CHUNK_FRAMES + 2 for f in frames[2:-1]) and len(frames) >= 4
    whole = tts.synthesize(text, voice="Leo", max_frames=40, seed=5).samples
    assert np.array_equal(np.concatenate([p.samples for p in parts]), whole)


def test_a_codec_over_fixed_tensors_streams_the_same_audio(files: tuple[Path, Path]) -> None:
    """The codec's pushes over fixed tensors (what a GPU replays as graphs of 12, 4, 2 and 1 frames; eagerly here):
    the same pieces as the eager stream's, the same audio within the streaming float noise, after the warm-up's
    stream (each stream starts from silence). A model whose steps are over fixed tensors gets such a codec."""
    import ggtts
    from ggtts.families.magpie.pipeline import STREAM_GRAPH_FRAMES

    tts = ggtts.load(files[0])
    text = "Hello world. This is a test of the magpie voice!"
    want = list(tts.stream(text, voice="Leo", max_frames=40, seed=5))
    tts.codec.use_static_streams(STREAM_GRAPH_FRAMES, capture=False)
    tts.warm_up()
    got = list(tts.stream(text, voice="Leo", max_frames=40, seed=5))
    assert [len(p) for p in got] == [len(p) for p in want] and len(got) >= 4
    joined, whole = np.concatenate([p.samples for p in got]), np.concatenate([p.samples for p in want])
    assert float(np.abs(joined - whole).max()) < 1e-5
    assert tts.codec.static is not None and tts.codec.static.captured is False  # no CUDA here
    tts.model.use_static_steps(capture=False)
    tts.with_codec(files[1])
    assert tts.codec.static is not None and tts.codec.static.sizes == tuple(sorted(STREAM_GRAPH_FRAMES, reverse=True))


def test_text_is_chunked_as_nemo_chunks_it() -> None:
    """Whole under NeMo's 45-word threshold; above it, sentences, and word cuts for a sentence that is too long."""
    from ggtts.families.magpie.pipeline import sentences

    assert sentences("One. Two three! Four?") == ["One. Two three! Four?"]
    assert sentences("One. Two three! Four?", max_words=3) == ["One.", "Two three!", "Four?"]
    long = " ".join(["word"] * 100)
    cut = sentences(long, max_words=45)
    assert [len(c.split()) for c in cut] == [45, 45, 10]
    assert sentences("   ") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"voice": "Nobody"}, "unknown voice 'Nobody'"),
        ({"lang": "ja"}, "no tokenizer for language 'ja'"),
        ({"lang": "xx"}, "no tokenizer for language 'xx'"),
        ({"top_k": 0}, "top_k"),
        ({"speed": 1.5}, "no speed control"),
        ({"chunk_codes": 3}, "unknown option 'chunk_codes'"),
        ({"temperature": "abc"}, "temperature must be a finite number"),
        ({"cfg_scale": float("nan")}, "cfg_scale must be a finite number"),
        ({"max_frames": 10**9}, "more than this model's decoder positions allow"),
        ({"guidance": False, "cfg_scale": 2.0}, "leave it out with guidance off"),
        ({"prior": "no"}, "prior must be true or false"),
        ({"seed": -1}, "seed must be between"),
    ],
)
def test_bad_requests_get_one_clear_error(files: tuple[Path, Path], kwargs: dict, message: str) -> None:
    import ggtts
    from ggtts.errors import InputError

    tts = ggtts.load(files[0])
    with pytest.raises(InputError, match=message):
        list(tts.stream("Hello world.", **kwargs))


def test_punctuation_alone_has_nothing_to_say(files: tuple[Path, Path]) -> None:
    import ggtts
    from ggtts.families.base import NothingToSay

    with pytest.raises(NothingToSay):
        ggtts.load(files[0]).synthesize("... ?! --")


def test_a_huge_seed_wraps_from_one_chunk_to_the_next(files: tuple[Path, Path]) -> None:
    import ggtts

    text = " ".join(["Hello world."] * 25)  # 50 words: spoken in chunks, each seeded one more than the one before
    audio = ggtts.load(files[0]).synthesize(text, seed=2**64 - 1, max_frames=4)
    assert len(audio) > 0


def test_without_a_codec_it_says_how_to_give_one(files: tuple[Path, Path], tmp_path: Path) -> None:
    import ggtts
    from ggtts.errors import InputError

    alone = tmp_path / "alone.gguf"
    shutil.copy(files[0], alone)
    with pytest.raises(InputError, match="no codec"):
        ggtts.load(alone).synthesize("Hello world.")
    with pytest.raises(InputError, match="the codec is chosen at load"):  # a request never loads a file
        ggtts.load(alone).synthesize("Hello world.", codec=str(files[1]))
    tts = ggtts.load(alone, codec=str(files[1]))
    assert len(tts.synthesize("Hello world.", max_frames=4, codec=str(files[1]))) == 4 * 64  # the one loaded
    for name in ("codec-a.gguf", "codec-b.gguf"):  # two beside it: neither is guessed, and the message says so
        shutil.copy(files[1], tmp_path / name)
    with pytest.raises(InputError, match=r"no codec: .*\(2 are beside it, codec-a.gguf, codec-b.gguf: which one"):
        ggtts.load(alone).synthesize("Hello world.")


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


def test_info_gives_the_languages_the_file_speaks(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The family's list is what files may hold; the tiny model's tokenizers speak English only."""
    import ggtts
    from ggtts.cli import main

    assert main(["info", str(files[0])]) == 0
    assert "capabilities: fixed speed; languages en; " in capsys.readouterr().out
    with pytest.raises(ggtts.InputError, match="no tokenizer for language 'es'; it speaks en"):
        ggtts.load(files[0]).synthesize("Hola.", lang="es")


@pytest.mark.parametrize("out_type", ["f16", "q8_0"])
def test_f16_and_q8_0_files_run_as_stored_and_stay_close(files: tuple[Path, Path], out_type: str) -> None:
    """Linear maps and pointwise feed-forwards run in the stored type (ggml), and the decoder's output stays near
    float32's: relative difference measured 4.2e-4 (f16) and 1.1e-2 (q8_0) on this model (random weights of unit
    scale, a worst case for 8 bits); the bounds are about 4x that."""
    import torch

    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import LayerInputs, load_magpie
    from ggtts.ops.stored_weights import StoredLinear

    source = files[0].parent / "model.nemo"
    path = convert_magpie([source], files[0].parent / f"tiny-{out_type}.gguf", out_type)
    low, full = load_magpie(GGUFFile(path)), load_magpie(GGUFFile(files[0]))
    assert isinstance(low.decoder.layers[0].self_attention.qkv_net, StoredLinear)
    assert low.decoder.layers[0].pos_ff.proj.stored is not None
    assert len(low.encoder.layers[0].pos_ff.proj.stored) == 3  # kernel 3: a matrix per tap
    text = torch.tensor([[1, 5, 9, 14, 3, full.cfg.text_eos_id]])
    x = torch.randn(1, 9, full.cfg.d_model, generator=torch.Generator().manual_seed(0))
    outs = []
    for model in (full, low):
        with torch.inference_mode():
            memory = model.memory_kv(model.encode_text(text))
            outs.append(model.decode(x, LayerInputs(memory=memory, cross_rows=1))[0])
    rel = float((outs[1] - outs[0]).abs().max() / outs[0].abs().max())
    assert 0 < rel < {"f16": 1.5e-3, "q8_0": 4e-2}[out_type], rel


CPP_KEYS = (  # what m1el/magpie-tts.cpp's converter writes (its scripts/convert_magpie_to_gguf.py)
    "sample_rate", "num_codebooks", "codebook_size", "vocab_size_per_codebook", "text_vocab_size", "d_model", "d_ffn",
    "encoder_layers", "decoder_layers", "encoder_heads", "decoder_sa_heads", "decoder_xa_heads",
    "local_transformer_dim", "local_transformer_layers", "num_baked_speakers", "baked_context_frames", "text_bos_id",
    "text_eos_id", "audio_bos_id", "audio_eos_id", "context_audio_bos_id", "context_audio_eos_id", "mask_token_id",
    "tokenizer.vocab", "tokenizer.dict", "tokenizer.pad", "tokenizer.oov", "tokenizer.space",
)  # fmt: skip


def test_a_file_with_only_magpie_tts_cpp_keys_speaks_the_same(files: tuple[Path, Path], tmp_path: Path) -> None:
    """magpie-tts.cpp's files lack the keys ggtts adds (kernels, frame stacking, speakers, tokenizer settings,
    inference defaults): its loader's assumptions and the tensors' shapes stand in, and its English tokens and
    ``word\\tIPA`` dictionary are read with NeMo's English settings; same tokens, same codes as our own file."""
    import torch

    from ggtts.families.magpie.generate import GenerationParams, generate_codes
    from ggtts.families.magpie.text import MagpieText
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.write import ModelWriter
    from ggtts.models.magpie.model import load_magpie

    ours = GGUFFile(files[0])
    cpp = ModelWriter(tmp_path / "cpp.gguf", "magpie")
    for key in CPP_KEYS:
        cpp.add(f"magpie.{key}", ours.get(f"magpie.{key}"))
    for name in ours.names():
        cpp.add_tensor(name, ours.tensor(name))
    theirs = GGUFFile(cpp.write())
    a, b = load_magpie(ours), load_magpie(theirs)
    assert b.cfg.local_transformer.n_heads == 1 and b.cfg.frame_stacking == 2  # the loader's default; the shapes'
    assert b.cfg.speaker_names == ("speaker0", "speaker1", "speaker2")
    text = "Hello world, this is a test of the magpie voice; unheard-of words!"
    ids = MagpieText(ours, a.cfg.text_eos_id).encode(text, "en")
    assert MagpieText(theirs, b.cfg.text_eos_id).encode(text, "en") == ids
    params = GenerationParams(temperature=0.0, cfg_scale=2.5, prior=True, max_frames=24, prior_lookahead=3)
    assert torch.equal(generate_codes(a, ids, 0, params), generate_codes(b, ids, 0, params))


ADDED_TOKENIZERS = {  # as nvidia/magpie_tts_multilingual_357m configures them (after its English one)
    "french_chartokenizer": {"_target_": "AutoTokenizer", "pretrained_model": "google/byt5-small"},
    "arabic_MSA_chartokenizer": {
        "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.ArabicCharsTokenizer",
        "charset_version": 1,
    },
    "mandarin_phoneme": {
        "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.ChinesePhonemesTokenizer",
        "punct": True,
        "apostrophe": True,
        "pad_with_space": True,
        "g2p": {
            "_target_": "nemo.collections.tts.g2p.models.zh_cn_pinyin.ChineseG2p",
            "phoneme_dict": "nemo:tiny_pinyin_dict.txt",
            "word_segmenter": "jieba",
            "phoneme_prefix": "",
            "phoneme_case": "lower",
            "tone_prefix": "#",
            "ascii_letter_prefix": "",
            "ascii_letter_case": "upper",
        },
    },
    "japanese_phoneme": {
        "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.JapanesePhonemeTokenizer",
        "punct": True,
        "apostrophe": True,
        "pad_with_space": True,
        "g2p": {"_target_": "nemo.collections.tts.g2p.models.ja_jp_ipa.JapaneseKatakanaAccentG2p"},
    },
}


PINYIN_DICT = "ni\tn i\nhao\th au\nshi\tsh ir\njie\tj ie\nzhong\tzh ung\nwen\tw en\n"  # NeMo's format


def _with_tokenizers(source: Path, out_path: Path, added: dict[str, dict[str, object]], rows: int) -> Path:
    """The .nemo ``source`` with ``added`` tokenizers after its own, ``rows`` more text-embedding rows, and a tiny
    pinyin dictionary as the artifact ``tiny_pinyin_dict.txt``."""
    import io
    import tarfile

    import torch
    import yaml

    with tarfile.open(source) as tar, tarfile.open(out_path, "w") as out:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name.endswith("model_config.yaml"):
                cfg = yaml.safe_load(data)
                cfg["text_tokenizers"].update(added)
                data = yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False).encode()
            elif member.name.endswith("model_weights.ckpt"):
                state = torch.load(io.BytesIO(data), weights_only=True)
                table = state["text_embedding.weight"]
                state["text_embedding.weight"] = torch.cat([table[:-2], torch.randn(rows, table.shape[1]), table[-2:]])
                buffer = io.BytesIO()
                torch.save(state, buffer)
                data = buffer.getvalue()
            if data is not None:
                member.size = len(data)
                out.addfile(member, io.BytesIO(data))
            else:
                out.addfile(member)
        artifact = tarfile.TarInfo("./tiny_pinyin_dict.txt")
        artifact.size = len(PINYIN_DICT.encode())
        out.addfile(artifact, io.BytesIO(PINYIN_DICT.encode()))
    return out_path


def test_the_other_tokenizers_encode_as_nemo_with_their_offsets(files: tuple[Path, Path], tmp_path: Path) -> None:
    """A checkpoint with byte (ByT5), Arabic character, Mandarin and Japanese tokenizers after its English one, as
    the multilingual 357M has: the converter sizes each from its config (and the Mandarin dictionary), and each
    language's ids are NeMo's aggregated tokenizer's (NeMo's own classes; transformers' ByT5Tokenizer for the
    bytes) plus EOS."""
    pytest.importorskip("pyopenjtalk")
    transformers = pytest.importorskip("transformers")
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import (
        AggregatedTTSTokenizer,
        ArabicCharsTokenizer,
        ChinesePhonemesTokenizer,
        JapanesePhonemeTokenizer,
    )
    from nemo.collections.tts.g2p.models.ja_jp_ipa import JapaneseKatakanaAccentG2p
    from nemo.collections.tts.g2p.models.zh_cn_pinyin import ChineseG2p

    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.families.magpie.text import MagpieText
    from ggtts.gguf import GGUFFile

    english = GGUFFile(files[0]).get_int("magpie.tokenizers.english_phoneme.size")
    byt5 = transformers.ByT5Tokenizer()
    arabic = ArabicCharsTokenizer(charset_version=1)
    japanese = JapanesePhonemeTokenizer(JapaneseKatakanaAccentG2p(), punct=True, apostrophe=True, pad_with_space=True)
    pinyin = tmp_path / "pinyin.txt"
    pinyin.write_text(PINYIN_DICT, encoding="utf-8")
    zh_g2p = {k: v for k, v in ADDED_TOKENIZERS["mandarin_phoneme"]["g2p"].items() if k != "_target_"}  # type: ignore[union-attr]
    mandarin = ChinesePhonemesTokenizer(
        ChineseG2p(**{**zh_g2p, "phoneme_dict": str(pinyin)}), punct=True, apostrophe=True, pad_with_space=True
    )
    sizes = [len(byt5.get_vocab()), len(arabic.tokens), len(mandarin.tokens), len(japanese.tokens)]
    source = files[0].parent / "model.nemo"
    patched = _with_tokenizers(source, tmp_path / "five.nemo", ADDED_TOKENIZERS, sum(sizes))
    gguf = GGUFFile(convert_magpie([patched], tmp_path / "five.gguf", "f32"))
    eos = gguf.get_int("magpie.text_eos_id")
    assert eos == english + sum(sizes) + 1
    text = MagpieText(gguf, eos)
    assert set(text.spoken) == {"en", "fr", "ar", "zh", "ja"}
    reference = AggregatedTTSTokenizer([byt5, arabic, mandarin, japanese], list(ADDED_TOKENIZERS))
    for language, name, phrase in (
        ("fr", "french_chartokenizer", "Ça va, l'été?"),
        ("ar", "arabic_MSA_chartokenizer", "مَرْحَبًا بِالْعَالَم، كيف حالك؟"),
        ("zh", "mandarin_phoneme", "你好，世界！中文 OK。"),
        ("ja", "japanese_phoneme", "今日は良い天気ですね。3時に会いましょう！"),
    ):
        expected = [english + i for i in reference.encode(phrase, name)] + [eos]
        assert text.encode(phrase, language) == expected, language


def test_a_request_after_the_warm_up_runs_the_steps_over_fixed_tensors(files: tuple[Path, Path]) -> None:
    """The steps over fixed tensors (what CUDA replays as graphs; eagerly here) made by the warm-up, in inference
    mode, are written by the requests after it: each request runs in that mode too (outside it torch refuses to
    write into tensors made in it), and speaks as the ordinary steps do (greedy: the same codes)."""
    import torch

    import ggtts

    plain, tts = ggtts.load(files[0]), ggtts.load(files[0])
    tts.model.use_static_steps(capture=False)
    tts.warm_up()
    text, options = "Hello world, this is a test.", {"voice": "Aria", "max_frames": 20, "temperature": 0}
    with torch.enable_grad():  # (as a caller's thread may be)
        parts = list(tts.stream(text, **options))
    assert len(parts) > 1
    want = plain.synthesize(text, **options).samples
    got = np.concatenate([p.samples for p in parts])
    assert got.shape == want.shape and float(np.abs(got - want).max()) < 1e-4


def test_markup_is_taken_away_in_every_language(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """English through ggtts's normalizer (its markup pass among its rules), the other languages' text with its
    markup alone taken away (Japanese then without spaces, as NeMo's); ``normalization=False``: as written."""
    import ggtts
    from ggtts.text.lexicon import Lexicon
    from ggtts.text.normalize import Normalization

    tts = ggtts.load(files[0])
    seen: list[str] = []
    encode = tts.text.encode
    monkeypatch.setattr(tts.text, "encode", lambda text, language: seen.append(text) or encode(text, language))
    tts.synthesize("**Hello** <b>world</b>, it costs $5.", max_frames=2)
    tts.synthesize("**Hello** world.", max_frames=2, normalization=False)
    monkeypatch.setattr(tts, "lexicon", Lexicon.of({"world": "planet", "Welt": "Erde"}))  # first, always
    tts.synthesize("**Hello** world.", max_frames=2, normalization=False)
    assert seen == ["Hello world, it costs five dollars.", "**Hello** world.", "**Hello** planet."]
    assert tts._normalize("**Hallo** <b>Welt</b>", "de", True) == "Hallo Erde"
    monkeypatch.setattr(tts, "lexicon", None)
    marked = "**Hallo** <b>Welt</b>, [hier](https://example.com) 5 km."
    assert tts._normalize(marked, "de", True) == "Hallo Welt, hier 5 km."
    assert tts._normalize("**重要** です。", "ja", True) == "重要です。"
    assert tts._normalize(marked, "de", Normalization(markdown=False)) == marked
