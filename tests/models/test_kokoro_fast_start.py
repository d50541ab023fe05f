"""``fast_start=True``: the first chunk's head is rendered on its own and streamed first, then the whole chunk's
rendering takes over after a short crossfade. Checked on the tiny model: from the crossfade on, the audio is the
one-shot audio sample for sample; the head is the vocoder's rendering of exactly the head's frames (plus its
context) of the same features and source; words and times are those of the one-shot run, split where they start."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import ggtts
from ggtts.errors import GGTTSError, InputError
from ggtts.families.kokoro import pipeline
from ggtts.families.kokoro.pipeline import KokoroTTS, fade_edges
from ggtts.models.kokoro.model import CROSSFADE_S, HEAD_CONTEXT_FRAMES

LONG = "wˈʌn tˈu θɹˈi fˈɔɹ fˈIv sˈɪks sˈɛvən ˈeɪt nˈIn tˈɛn."  # 108 frames of the tiny model (300 frames/s)
SHORT = "hˈI ðˈɛɹ."
TWO_CHUNKS = LONG + " " + "hˈI ðˈɛɹ, hˈI ðˈɛɹ, hˈI ðˈɛɹ, hˈI ðˈɛɹ, hˈI ðˈɛɹ, hˈI ðˈɛɹ."
VOICE = "v_one"
FRAMES_PER_S = 300  # the tiny model: 24 kHz, 80 samples per frame


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")


@pytest.fixture(autouse=True)
def tiny_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's bounds in the tiny model's frames (its frames are 3.3 ms, not 25 ms)."""
    monkeypatch.setattr(pipeline, "FAST_START_EARLIEST_S", 20 / FRAMES_PER_S)
    monkeypatch.setattr(pipeline, "FAST_START_LATEST_S", 40 / FRAMES_PER_S)
    monkeypatch.setattr(pipeline, "FAST_START_MIN_S", 80 / FRAMES_PER_S)


def _load(path: Path, **options: object) -> KokoroTTS:
    model = ggtts.load(str(path), **options)
    assert isinstance(model, KokoroTTS)
    return model


def _stream(model: KokoroTTS, text: str, fast_start: bool = True) -> list[ggtts.Audio]:
    return list(model.stream(text, voice=VOICE, phonemes=True, fast_start=fast_start))


def test_the_rest_is_the_one_shot_audio_and_the_head_comes_first(tiny: Path) -> None:
    model = _load(tiny)
    want = model.synthesize(LONG, voice=VOICE, phonemes=True)
    parts = _stream(model, LONG)
    assert len(parts) == 2
    head, rest = parts
    assert 20 * model.model.samples_per_frame <= len(head.samples) <= 40 * model.model.samples_per_frame
    assert rest.offset == pytest.approx(head.duration)
    whole = np.concatenate([head.samples, rest.samples])
    assert whole.shape == want.samples.shape
    fade = round(CROSSFADE_S * model.sample_rate)
    at = len(head.samples)
    assert np.array_equal(whole[at + fade :], want.samples[at + fade :])  # exact, not close
    # the head is another rendering: it differs from the one-shot's first samples (by the statistics)
    assert not np.allclose(whole[:at], want.samples[:at], atol=1e-4)
    # synthesize is the stream joined
    assert np.array_equal(model.synthesize(LONG, voice=VOICE, phonemes=True, fast_start=True).samples, whole)


def test_the_head_is_the_vocoder_on_the_heads_frames_alone(tiny: Path) -> None:
    """Rebuilt from the model's public stages: features of the whole chunk, the same source draws, the
    vocoder on the first cut + context frames; the cut at the quietest frame in range by the predicted energy."""
    model = _load(tiny).model
    ids = torch.tensor([[0, *range(1, 40), 0]])
    ref_s = torch.randn(1, 2 * model.config.style_dim, generator=torch.Generator().manual_seed(3))
    prosody = model.encode_prosody(ids, ref_s)
    f0, n = model.predict_f0_n(prosody, ref_s)
    asr = model.encode_text(ids, prosody.durations)
    frames = asr.shape[-1]
    earliest, latest = 10, frames - HEAD_CONTEXT_FRAMES - 5
    head, rest = model.decode_fast_start(asr, f0, n, ref_s, earliest, latest, torch.Generator().manual_seed(7))

    energy = n.reshape(frames, 2).mean(dim=1)
    cut = earliest + int(energy[earliest : latest + 1].argmin())
    assert head.shape[-1] == cut * model.samples_per_frame
    with torch.inference_mode():
        s = model.timbre(ref_s)
        vocoder = model.decoder.generator
        x = model.decoder.features(asr, f0, n, s)
        har = vocoder.source_spectrum(f0, torch.Generator().manual_seed(7))
        k = 2 * (cut + HEAD_CONTEXT_FRAMES)
        alone = vocoder.render(x[..., :k], s, har[..., : k * vocoder.spectrum_frames_per_frame + 1])
        one_shot = model.decode(asr, f0, n, ref_s, torch.Generator().manual_seed(7))
    assert torch.equal(head, alone[:, : head.shape[-1]])
    assert torch.equal(torch.cat([head, rest], 1)[:, -100:], one_shot[:, -100:])
    # the crossfade starts at the head's own rendering and ends at the whole chunk's
    assert torch.allclose(rest[:, 0], alone[:, head.shape[-1]], atol=1e-3 * float(alone.abs().max()))


def test_a_head_outside_the_chunk_is_refused(tiny: Path) -> None:
    model = _load(tiny).model
    asr, curve = torch.zeros(1, model.config.hidden_dim, 30), torch.zeros(1, 60)
    for earliest, latest in ((0, 10), (12, 10), (10, 30)):
        with pytest.raises(ValueError, match="within the chunk's 30 frames"):
            next(
                model.decode_fast_start(asr, curve, curve, torch.zeros(1, 2 * model.config.style_dim), earliest, latest)
            )


def test_words_and_times_are_the_one_shot_ones_split_where_they_start(tiny: Path) -> None:
    model = _load(tiny)
    want = model.synthesize(LONG, voice=VOICE, phonemes=True).words
    head, rest = _stream(model, LONG)
    assert head.words and rest.words
    assert head.words + rest.words == want
    assert all(w.start < rest.offset for w in head.words) and all(w.start >= rest.offset for w in rest.words)


def test_the_heads_rendering_stops_short_of_the_chunks_end(tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A latest cut within HEAD_CONTEXT_FRAMES of the end would render the whole chunk as the head, then again:
    the cut is held HEAD_CONTEXT_FRAMES + 1 frames before the end (seen failing without: a head up to the end)."""
    model = _load(tiny)
    total = len(model.synthesize(LONG, voice=VOICE, phonemes=True).samples) // model.model.samples_per_frame
    monkeypatch.setattr(pipeline, "FAST_START_EARLIEST_S", (total - 3) / FRAMES_PER_S)
    monkeypatch.setattr(pipeline, "FAST_START_LATEST_S", (total - 1) / FRAMES_PER_S)
    assert _stream(model, LONG)[0].samples.shape == model.synthesize(LONG, voice=VOICE, phonemes=True).samples.shape
    # earliest past the held-back latest: no head at all, the chunk rendered once
    monkeypatch.setattr(pipeline, "FAST_START_EARLIEST_S", (total - HEAD_CONTEXT_FRAMES) / FRAMES_PER_S)
    assert len(_stream(model, LONG)) == 1
    monkeypatch.setattr(pipeline, "FAST_START_EARLIEST_S", 20 / FRAMES_PER_S)
    head, _ = _stream(model, LONG)
    assert len(head.samples) <= (total - HEAD_CONTEXT_FRAMES - 1) * model.model.samples_per_frame


def test_only_the_first_chunk_and_only_a_long_one_is_split(tiny: Path) -> None:
    model = _load(tiny)
    # a short first chunk: rendered whole, the same audio
    assert [len(a.samples) for a in _stream(model, SHORT)] == [len(a.samples) for a in _stream(model, SHORT, False)]
    assert np.array_equal(
        model.synthesize(SHORT, voice=VOICE, phonemes=True, fast_start=True).samples,
        model.synthesize(SHORT, voice=VOICE, phonemes=True).samples,
    )
    # two chunks: the first in two parts, the second as the one-shot stream's (same seed state, same audio)
    got, want = _stream(model, TWO_CHUNKS), _stream(model, TWO_CHUNKS, False)
    assert len(got) == len(want) + 1
    assert np.array_equal(got[-1].samples, want[-1].samples)
    assert got[-1].offset == pytest.approx(want[-1].offset)


def test_no_fade_where_the_head_joins_the_rest(tiny: Path) -> None:
    model = _load(tiny)
    head, rest = _stream(model, LONG)
    edge = round(pipeline.EDGE_FADE_S * model.sample_rate)
    unfaded = _load(tiny)
    parts = list(
        unfaded._parts(
            pipeline._as_chunk(LONG),
            unfaded.voicepack(VOICE),
            1.0,
            torch.Generator().manual_seed(0),
            0.0,
            fast_start=True,
        )
    )
    assert np.array_equal(head.samples[-edge:], parts[0].samples[-edge:])
    assert np.array_equal(rest.samples[:edge], parts[1].samples[:edge])
    assert not np.array_equal(head.samples[:edge], parts[0].samples[:edge])  # the utterance's own edges fade


def test_fade_edges_leaves_a_joined_edge_alone() -> None:
    x = np.ones(10, np.float32)
    np.testing.assert_array_equal(fade_edges(x.copy(), 3, start=False)[:3], 1.0)
    assert fade_edges(x.copy(), 3, start=False)[-1] < 0.5
    np.testing.assert_array_equal(fade_edges(x.copy(), 3, end=False)[-3:], 1.0)
    assert fade_edges(x.copy(), 3, end=False)[0] < 0.5


def test_the_bench_peer_starts_fast_on_a_texts_first_chunk_only(tiny: Path) -> None:
    from ggtts.measure.kokoro import peers

    with peers.ENGINES["fast"](str(tiny), VOICE) as synthesize:
        first, later = list(synthesize(LONG, True)), list(synthesize(LONG, False))
    assert len(first) == 2 and len(later) == 1
    assert len(np.concatenate(first)) == len(later[0])


def test_damaged_weights_fail_before_the_head_is_yielded(tiny: Path) -> None:
    model = _load(tiny)
    with torch.no_grad():
        model.model.decoder.generator.conv_post.weight[0, 0, 0] = float("nan")
    stream = model.stream(LONG, voice=VOICE, phonemes=True, fast_start=True)
    with pytest.raises(GGTTSError, match="non-finite"):
        next(stream)


def test_fast_start_must_be_a_bool(tiny: Path) -> None:
    with pytest.raises(InputError, match="fast_start must be true or false"):
        next(_load(tiny).stream(LONG, voice=VOICE, phonemes=True, fast_start="yes"))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="kokoro has no load option 'fast_start'; it takes device, lexicon, precision"):
        _load(tiny, fast_start=True)  # a choice per call, not per model
