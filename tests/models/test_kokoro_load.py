"""Kokoro loader, converter helpers and pipeline inputs on a tiny random model (no upstream package)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_kokoro_config import CONFIG, VOCAB

from ggtts.convert.kokoro_gguf import fold_weight_norm, write_kokoro_gguf
from ggtts.errors import ConversionError, GGUFError, InputError
from ggtts.families.kokoro.pipeline import (
    FIRST_CHUNK_PHONEMES,
    GROWTH,
    KokoroTTS,
    _as_chunk,
    _quick_start,
    fade_edges,
)
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Kokoro as K
from ggtts.gguf.write import ModelWriter
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.load import load_kokoro
from ggtts.models.kokoro.model import KokoroModel
from ggtts.text.chunking import Chunk, SpokenWord


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(KokoroModel(KokoroConfig.from_upstream(CONFIG)).state_dict())


def _voices(rows: int = 30) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {name: torch.randn(rows, 1, 16, generator=g) for name in ("aa", "bb")}


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kokoro") / "tiny.gguf"
    return write_kokoro_gguf(path, CONFIG, _state(), _voices())


def _rewrite(src: Path, dst: Path, skip: str = "", replace: dict[str, torch.Tensor] | None = None) -> Path:
    """Copy a GGUF file, dropping tensor ``skip`` and replacing some tensors."""
    gguf = GGUFFile(src)
    writer = ModelWriter(dst, K.ARCH)
    for key, value in gguf.metadata.items():
        if key != "general.architecture" and key != "general.file_type":
            writer.add(key, value)
    for name in gguf.names():
        if name != skip:
            writer.add_tensor(name, (replace or {}).get(name, gguf.tensor(name)))
    for name, tensor in (replace or {}).items():
        if name not in gguf:
            writer.add_tensor(name, tensor)
    return writer.write()


def test_config_round_trips_through_metadata(gguf_path: Path) -> None:
    cfg = KokoroConfig.from_gguf(GGUFFile(gguf_path))
    assert cfg == KokoroConfig.from_upstream(CONFIG)
    assert cfg.resblock_dilation_sizes == ((1, 3, 5),)
    assert cfg.vocab == VOCAB and cfg.context_length == 32 and cfg.sample_rate == 24000


def test_loads_exactly_what_was_written(gguf_path: Path) -> None:
    _, model, voices, vocab = load_kokoro(GGUFFile(gguf_path))
    for name, tensor in _state().items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0)
    assert list(voices) == ["aa", "bb"] and vocab == VOCAB
    assert not any(p.requires_grad for p in model.parameters())


def test_missing_tensor_is_named(gguf_path: Path, tmp_path: Path) -> None:
    victim = "dec.gen.conv_post.weight"
    bad = _rewrite(gguf_path, tmp_path / "bad.gguf", skip=victim)
    with pytest.raises(GGUFError, match=f"missing tensor '{victim}'"):
        load_kokoro(GGUFFile(bad))


def test_misshapen_tensor_is_named(gguf_path: Path, tmp_path: Path) -> None:
    victim = "bert.layer.ffn.weight"
    bad = _rewrite(gguf_path, tmp_path / "bad.gguf", replace={victim: torch.zeros(3, 16)})
    with pytest.raises(GGUFError, match=rf"tensor '{victim}' has shape \[3, 16\], expected \[32, 16\]"):
        load_kokoro(GGUFFile(bad))


def test_unexpected_tensor_is_named(gguf_path: Path, tmp_path: Path) -> None:
    bad = _rewrite(gguf_path, tmp_path / "bad.gguf", replace={"dec.extra.weight": torch.zeros(4)})
    with pytest.raises(GGUFError, match=r"unexpected tensor 'dec\.extra\.weight'"):
        load_kokoro(GGUFFile(bad))


def test_converter_rejects_missing_and_misshapen_weights(tmp_path: Path) -> None:
    state = _state()
    del state["decoder.F0_conv.weight"]
    with pytest.raises(ConversionError, match=r"decoder\.F0_conv\.weight"):
        write_kokoro_gguf(tmp_path / "x.gguf", CONFIG, state, _voices())
    state = _state()
    state["bert_encoder.weight"] = torch.zeros(2, 2)
    with pytest.raises(ConversionError, match=r"bert_encoder\.weight"):
        write_kokoro_gguf(tmp_path / "x.gguf", CONFIG, state, _voices())
    assert not (tmp_path / "x.gguf").exists()


def test_fold_weight_norm_both_forms_and_zero_rows() -> None:
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(3, 4, 5))
    old = torch.nn.utils.weight_norm(copy.deepcopy(torch.nn.Conv1d(3, 4, 5)))
    with torch.no_grad():
        old.weight_v[1].zero_()
    state = {
        **{f"a.{k}": v for k, v in conv.state_dict().items()},
        **{f"b.{k}": v for k, v in old.state_dict().items()},
    }
    folded = fold_weight_norm(state)
    assert set(folded) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    torch.testing.assert_close(folded["a.weight"], conv.weight.detach())
    old_weight = folded["b.weight"]
    assert torch.isfinite(old_weight).all() and torch.equal(old_weight[1], torch.zeros(3, 5))
    torch.testing.assert_close(old_weight[0], torch.nn.utils.remove_weight_norm(old).weight.detach()[0])


@pytest.fixture(scope="module")
def tts(gguf_path: Path) -> KokoroTTS:
    return KokoroTTS.from_gguf(GGUFFile(gguf_path))


def test_pipeline_phonemes_make_audio(tts: KokoroTTS) -> None:
    audio = tts.synthesize_phonemes("abc def.", "aa", 1.0, seed=3)
    again = tts.synthesize_phonemes("abc def.", "aa", 1.0, seed=3)
    assert audio.sample_rate == 24000 and len(audio) > 0
    assert (audio.samples == again.samples).all()
    parts = list(tts.stream("abc. " * 12, "aa", phonemes=True))
    assert len(parts) >= 2  # longer than the 30-phoneme limit: chunked
    whole = tts.synthesize("abc. " * 12, "aa", phonemes=True)
    assert (whole.samples == np.concatenate([p.samples for p in parts])).all()
    for part in parts:  # every join meets at (nearly) zero: no click
        peak = np.abs(part.samples).max()
        assert abs(part.samples[0]) <= 1e-3 * peak and abs(part.samples[-1]) <= 1e-3 * peak


def test_fade_edges() -> None:
    x = np.ones(1000, dtype=np.float32)
    y = fade_edges(x.copy(), 100)
    assert y[0] < 1e-3 and y[-1] < 1e-3 and (y[100:900] == 1).all()
    assert (np.diff(y[:100]) > 0).all() and (np.diff(y[900:]) < 0).all()
    np.testing.assert_allclose(y[:100] + y[:100][::-1], 1.0, atol=1e-6)  # raised cosine: symmetric crossfade
    np.testing.assert_allclose(fade_edges(np.ones(3, np.float32), 100), [0.5, 1.0, 0.5], atol=1e-6)


def test_pipeline_voice_blend_and_errors(tts: KokoroTTS) -> None:
    blend = tts.voicepack("aa:0.75,bb:0.25")
    torch.testing.assert_close(blend, 0.75 * tts.voicepacks["aa"] + 0.25 * tts.voicepacks["bb"])
    with pytest.raises(InputError, match="unknown voice 'zz'; choose one of aa, bb"):
        tts.voicepack("zz")
    with pytest.raises(InputError, match="not a number"):
        tts.voicepack("aa:x")
    with pytest.raises(InputError, match="phonemes"):
        tts.token_ids("a" * 31)


def _quick(*chunks: str | Chunk) -> list[str]:
    return [c.phonemes for c in _quick_start(map(_as_chunk, chunks))]


def test_quick_start_cuts_the_first_chunk_at_its_first_clause() -> None:
    first = "abc defg hij, klm nop. qrs tuv wx"
    assert _quick(first, "ab cd.") == ["abc defg hij,", "klm nop. qrs tuv wx", "ab cd."]
    # no punctuation break within reach: never cut between words
    long_clause = "abc " * (FIRST_CHUNK_PHONEMES // 4 + 1) + "de, fg"
    assert _quick(long_clause) == [long_clause]
    assert _quick("abc defg hij.") == ["abc defg hij."]  # the break at the very end: nothing to cut
    assert _quick() == []


def test_later_chunks_grow_at_most_twice_what_was_said() -> None:
    """After the first, a chunk longer than GROWTH times the phonemes said before it is cut at its last sentence
    break within that, else its last clause break; no phoneme is lost or repeated, no chunk cut without a break."""
    assert GROWTH == 2
    first = "ab cd. "  # 6 phonemes said first
    second = "efg hi, jkl mn. opq rs, tuv wxy, zab cde fgh ijk lmn."
    chunks = _quick(first + second)
    assert chunks == [
        "ab cd.",
        "efg hi,",  # no sentence break within 12: the last clause break
        "jkl mn.",  # within 2 * 13 = 26: "jkl mn. opq rs," ends at 15, but the sentence break is preferred
        "opq rs, tuv wxy, zab cde fgh ijk lmn.",  # within 2 * 20 = 40: the rest, whole
    ]
    assert " ".join(chunks) == (first + second).strip()
    # a chunk from the phonemizer is cut the same way; one without a break within reach is left whole
    assert _quick("ab cd.", "efgh ijklm nopq rstu vwxy zabc.") == ["ab cd.", "efgh ijklm nopq rstu vwxy zabc."]
    assert _quick("ab cd.", "ef gh. ij kl mn op qr st uv wx.") == ["ab cd.", "ef gh.", "ij kl mn op qr st uv wx."]


def test_quick_start_never_cuts_inside_one_written_word() -> None:
    """A phone number is one written word said with pauses: the cut goes to the first break after it, and each
    part keeps its own words."""
    words = (
        SpokenWord("call", ("kɔl",), 0),
        SpokenWord("555-1234", ("fIv", "fIv", "wʌn", "tu"), 1),
        SpokenWord("now", ("naʊ",), 2),
        SpokenWord("please", ("pliz",), 3),
    )
    chunk = Chunk("call 555-1234 now, please", "kɔl fIv fIv, wʌn tu naʊ, pliz", words=words)
    head, tail = _quick_start([chunk])
    assert (head.phonemes, tail.phonemes) == ("kɔl fIv fIv, wʌn tu naʊ,", "pliz")
    assert [w.text for w in head.words] == ["call", "555-1234", "now"]
    assert [w.text for w in tail.words] == ["please"]


def _metadata_rewrite(src: Path, dst: Path, **changes: object) -> Path:
    """Copy a GGUF file with metadata keys changed (a value of None drops the key)."""
    gguf = GGUFFile(src)
    writer = ModelWriter(dst, K.ARCH)
    for key, value in {**gguf.metadata, **changes}.items():
        if key not in ("general.architecture", "general.file_type") and value is not None:
            writer.add(key, value)
    for name in gguf.names():
        writer.add_tensor(name, gguf.tensor(name))
    return writer.write()


def test_the_utterance_edge_id_is_read_from_the_file(gguf_path: Path, tmp_path: Path) -> None:
    assert GGUFFile(gguf_path).get(K.BOS_EOS_ID) == 0  # written by the converter
    edge3 = _metadata_rewrite(gguf_path, tmp_path / "edge3.gguf", **{K.BOS_EOS_ID: 3})
    older = _metadata_rewrite(gguf_path, tmp_path / "older.gguf", **{K.BOS_EOS_ID: None})
    assert KokoroConfig.from_gguf(GGUFFile(older)).bos_eos_id == 0  # files from before the key: upstream's 0
    tts = KokoroTTS.from_gguf(GGUFFile(edge3))
    assert tts.config.bos_eos_id == 3
    seen: list[list[int]] = []
    real = tts.model.encode_prosody

    def spy(input_ids: torch.Tensor, *args: object) -> object:
        seen.append(input_ids[0].tolist())
        return real(input_ids, *args)  # type: ignore[arg-type]

    tts.model.encode_prosody = spy  # type: ignore[method-assign]
    tts.synthesize_phonemes("abc", "aa")
    assert seen == [[3, VOCAB["a"], VOCAB["b"], VOCAB["c"], 3]]


def test_the_vocoders_wide_kernels_go_through_the_fft_on_a_cpu(gguf_path: Path) -> None:
    """On a CPU the generator's convolutions of kernel 7 and more, dilated or not (here its noise paths'
    resblocks) run long inputs through the DFT (``models/layers/fft_conv.py``): the vocoder's output within float
    rounding of the direct path's, and not the same bytes (the DFT path was taken)."""
    from ggtts.models.layers.channels_last import ChannelsLastConv1d

    tts = KokoroTTS.from_gguf(GGUFFile(gguf_path))
    vocoder = tts.model.decoder.generator
    convs = [m for m in vocoder.modules() if isinstance(m, ChannelsLastConv1d)]
    wide = [m for m in convs if m.kernel_size[0] >= 7]
    assert any(m.dilation != (1,) for m in wide) and [m for m in convs if m.fft_length is not None] == wide
    g = torch.Generator().manual_seed(4)
    frames = 1500
    x = torch.randn(1, vocoder.ups[0].in_channels, frames, generator=g)
    s = torch.randn(1, tts.config.style_dim, generator=g)
    har = torch.randn(1, vocoder.n_fft + 2, frames * vocoder.spectrum_frames_per_frame + 1, generator=g)
    with torch.inference_mode():
        fft = vocoder.body(x, s, har)
        assert any("_fft_cache" in m.__dict__ for m in wide if m.dilation == (1,))
        assert any("_fft_cache" in m.__dict__ for m in wide if m.dilation != (1,))
        for m in wide:
            m.fft_length = None
        direct = vocoder.body(x, s, har)
    assert fft.shape == direct.shape and not torch.equal(fft, direct)
    assert (fft - direct).abs().max() <= 1e-5 * direct.abs().max()
