"""Word timestamps from Kokoro's durations, on a tiny random model through the real converter and frontend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import ggtts
from ggtts.audio import Audio, StreamedWords, WordTiming
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.families.kokoro.timing import phoneme_spans, word_timings
from ggtts.text.chunking import SpokenWord

TEXT = "The quick brown fox, “jumps” over $5 and the lazy dog. Then it rests!"
WORDS = ["The", "quick", "brown", "fox", "jumps", "over", "$5", "and", "the", "lazy", "dog", "Then", "it", "rests"]


@pytest.fixture(scope="module")
def tts(tmp_path_factory: pytest.TempPathFactory) -> KokoroTTS:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")
    model = ggtts.load(str(path))
    assert isinstance(model, KokoroTTS)
    return model


def test_the_word_list_and_order_are_the_inputs(tts: KokoroTTS) -> None:
    audio = tts.synthesize(TEXT, voice="v_one")
    assert [w.text for w in audio.words] == WORDS


def test_times_follow_each_other_inside_the_audio(tts: KokoroTTS) -> None:
    audio = tts.synthesize(TEXT + " " + TEXT, voice="v_two")
    assert len(audio.words) == 2 * len(WORDS)
    for before, word in zip(audio.words, audio.words[1:], strict=False):
        assert 0 <= word.start < word.end <= audio.duration + 1e-9
        assert before.end <= word.start + 1e-9


def test_a_word_spans_exactly_its_phonemes_frames(tts: KokoroTTS) -> None:
    """One chunk, no quick-start cut: each word's times counted by hand from the model's own durations, as
    hexgrad's join_timestamps counts them (half-frames: BOS - 3, then each word's symbols plus half of each space
    beside it)."""
    [chunk] = tts.phonemizer("quick brown fox", "a", tts.config.max_phonemes, frozenset(tts.vocab))
    ids = tts.token_ids(chunk.phonemes)
    edge = tts.config.bos_eos_id
    pack = tts.voicepack("v_one")
    row = min(len(chunk.phonemes), pack.shape[0]) - 1
    generator = torch.Generator().manual_seed(0)
    _, durations = tts.model(torch.tensor([[edge, *ids, edge]]), pack[row], 1.0, generator)
    frame_s = 2 * tts.config.upsample_factor / tts.sample_rate  # F0 runs at twice the frame rate (real model: 25 ms)
    words = [w.phonemes[0] for w in chunk.words]
    assert " ".join(words) == chunk.phonemes  # plain words, one space between: ids are the characters
    d = durations.tolist()
    # hexgrad's loop, in half-frames (each word here is followed by a space but the last)
    left = right = 2 * max(0, d[0] - 3)
    expected, i = [], 1
    for k, word in enumerate(words):
        j = i + len(word)
        space = d[j] if k + 1 < len(words) else 0
        start = left
        left = right + 2 * sum(d[i:j]) + space
        expected.append((start / 2 * frame_s, left / 2 * frame_s))
        right = left + space
        i = j + 1
    audio = tts.synthesize("quick brown fox", voice="v_one")
    got = [t for w in audio.words for t in (w.start, w.end)]
    assert got == pytest.approx([t for pair in expected for t in pair], abs=1e-9)


def test_streamed_chunks_carry_their_words_with_absolute_times(tts: KokoroTTS) -> None:
    text = " ".join(["One, two three four five six seven eight nine ten."] * 3)
    parts = list(tts.stream(text, voice="v_one"))
    assert len(parts) > 2
    position = 0.0
    for part in parts:
        assert part.offset == pytest.approx(position)
        outside = [w for w in part.words if not position - 1e-9 <= w.start < w.end <= position + part.duration + 1e-9]
        assert outside == [], (position, part.duration)
        position += part.duration
    whole = tts.synthesize(text, voice="v_one")
    counted = ["One", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    assert [w.text for w in whole.words] == counted * 3


def test_a_word_across_a_chunk_boundary_is_one_word(tts: KokoroTTS) -> None:
    """The tiny model takes 62 phonemes: the number is said across chunks, and timed once, start to end."""
    parts = list(tts.stream("I paid $1,234,567.89 today.", voice="v_one"))
    said = [w for p in parts for w in p.words]
    assert [w.continues for w in said].count(True) >= 1  # a later chunk goes on with it
    whole = Audio.concatenate(parts)
    assert [w.text for w in whole.words] == ["I", "paid", "$1,234,567.89", "today"]
    number = whole.words[2]
    pieces = [w for w in said if w.text == "$1,234,567.89"]
    assert (number.start, number.end) == (pieces[0].start, pieces[-1].end)
    # each piece but the last says that it goes on; a live caption gives the word once, with the chunk of its end
    assert [w.goes_on for w in pieces] == [True] * (len(pieces) - 1) + [False]
    held = StreamedWords()
    given = [(w, i) for i, p in enumerate(parts) for w in held.add(p.words)] + [(w, -1) for w in held.finish()]
    assert [w for w, _ in given] == list(whole.words)
    chunk = next(i for w, i in given if w.text == "$1,234,567.89")
    end = parts[chunk].offset + parts[chunk].duration
    assert end - parts[chunk].duration <= number.end <= end + 1e-9  # the number ends in the chunk it came with


def test_streamed_words_hold_a_word_until_its_rest_has_come() -> None:
    held = StreamedWords()
    first = held.add([WordTiming("a", 0.0, 0.5), WordTiming("$5", 0.6, 1.0, goes_on=True)])
    assert first == (WordTiming("a", 0.0, 0.5),)
    # three chunks: the middle piece both continues and goes on
    assert held.add([WordTiming("$5", 1.0, 1.5, continues=True, goes_on=True)]) == ()
    assert held.add([]) == ()  # a chunk with no words keeps it held
    last = held.add([WordTiming("$5", 1.5, 2.0, ends_sentence=True, continues=True), WordTiming("b", 2.1, 2.4)])
    assert last == (WordTiming("$5", 0.6, 2.0, ends_sentence=True), WordTiming("b", 2.1, 2.4))
    assert held.finish() == ()
    # a rest that never comes: the word as far as it went, at the next chunk's words or at the end
    assert held.add([WordTiming("c", 0.0, 1.0, goes_on=True)]) == ()
    assert held.add([WordTiming("d", 1.2, 1.4)]) == (WordTiming("c", 0.0, 1.0), WordTiming("d", 1.2, 1.4))
    assert held.add([WordTiming("e", 1.5, 2.0, goes_on=True)]) == ()
    assert held.finish() == (WordTiming("e", 1.5, 2.0),)
    # the rest of a word given before (its first part did not say it goes on): its start was what counted
    assert held.add([WordTiming("f", 2.0, 2.2, continues=True), WordTiming("g", 2.3, 2.5)]) == (
        WordTiming("g", 2.3, 2.5),
    )


def test_a_custom_phonemizer_of_strings_still_speaks_each_chunk(tts: KokoroTTS) -> None:
    """Plain strings (trailing space and all): the first chunk ends with its break and is spoken whole."""
    custom = KokoroTTS(tts.config, tts.model, tts.voicepacks, tts.vocab, phonemizer=lambda *a: ["hˈI ðˈɛɹ. ", "wˈʌn"])
    audio = custom.synthesize("anything", voice="v_one")
    assert [w.text for w in audio.words] == ["hˈI", "ðˈɛɹ.", "wˈʌn"]


def test_phoneme_input_gets_its_phoneme_words(tts: KokoroTTS) -> None:
    audio = tts.synthesize("hˈI ðˈɛɹ, wˈʌn", voice="v_one", phonemes=True)
    assert [w.text for w in audio.words] == ["hˈI", "ðˈɛɹ", "wˈʌn"]
    single = tts.synthesize_phonemes("hˈI ðˈɛɹ", voice="v_one")
    assert [w.text for w in single.words] == ["hˈI", "ðˈɛɹ"]


def test_japanese_words_are_the_g2p_words(tts: KokoroTTS) -> None:
    pytest.importorskip("pyopenjtalk")
    audio = tts.synthesize("今日は3月1日です。", voice="v_one")  # Japanese text: read as Japanese by default
    assert [w.text for w in audio.words] == ["今日", "は", "3月", "1日", "です"]


def test_concatenation_moves_each_parts_words_to_where_it_now_stands() -> None:
    a = Audio(np.zeros(24000), 24000, (WordTiming("a", 0.1, 0.5),))
    b = Audio(np.zeros(12000), 24000, (WordTiming("b", 0.2, 0.3),))
    joined = Audio.concatenate([a, b])
    assert joined.words == (WordTiming("a", 0.1, 0.5), WordTiming("b", 1.2, 1.3))
    # chunks of one stream are already placed: their words keep their times
    c = Audio(np.zeros(12000), 24000, (WordTiming("c", 1.2, 1.4),), offset=1.0)
    assert Audio.concatenate([a, c]).words == (WordTiming("a", 0.1, 0.5), WordTiming("c", 1.2, 1.4))


def test_timing_arithmetic_on_given_durations() -> None:
    words = (SpokenWord("ab", ("ab",)), SpokenWord("555-1", ("cd", "e")), SpokenWord("f", ("f.",)))
    # ids: BOS a b ␣ c d , ␣ e ␣ f . EOS  ("," and "." are in the vocabulary: they take frames, no word does)
    vocab = set("abcdef,. ")
    durations = [5, 1, 2, 1, 1, 1, 4, 1, 2, 1, 5, 6, 7]
    timings = word_timings("ab cd, e f.", words, durations, vocab, 0.5, offset=10.0)
    # frames before each id: BOS 0, a 5, b 6, ␣ 8, c 9, d 10, "," 11, ␣ 15, e 16, ␣ 18, f 19, "." 24; all 3 earlier
    assert [(t.text, t.start, t.end) for t in timings] == [
        ("ab", 10 + (5 - 3) * 0.5, 10 + (8 + 0.5 - 3) * 0.5),  # half the space after it
        ("555-1", 10 + (9 - 0.5 - 3) * 0.5, 10 + (18 + 0.5 - 3) * 0.5),  # the comma's pause is inside the word
        ("f", 10 + (19 - 0.5 - 3) * 0.5, 10 + (24 - 3) * 0.5),  # the period after it is not
    ]
    # BOS shorter than the lead: times are earlier by BOS's frames only (the first word starts at 0)
    short = word_timings("ab cd", (*words[:1], SpokenWord("cd", ("cd",))), [2, 1, 2, 2, 1, 1, 9], vocab, 1.0)
    assert [(t.start, t.end) for t in short] == [(0.0, 4.0), (4.0, 7.0)]
    # a symbol outside the vocabulary is dropped before the model: it has no frames
    odd = SpokenWord("ab", ("a~b",))
    assert word_timings("a~b", [odd], [1, 2, 3, 4], set("ab"), 1.0) == [WordTiming("ab", 0.0, 5.0)]
    with pytest.raises(ValueError, match="durations"):
        word_timings("ab", words[:1], [1, 2], vocab, 1.0)


def test_a_word_not_found_in_the_chunk_has_no_span() -> None:
    words = (SpokenWord("x", ("zz",)), SpokenWord("ab", ("ab",)))
    assert phoneme_spans("ab cd", words) == [None, (0, 2)]


def test_cli_writes_timestamps_in_each_format(tts: KokoroTTS, tmp_path: Path) -> None:
    from ggtts.cli import main

    model = tts.source
    assert model is not None
    for suffix in (".json", ".srt", ".vtt"):
        out = tmp_path / f"t{suffix}"
        args = ["speak", "-m", model, "Hello there. It costs $5!", "-o", str(tmp_path / "a.wav")]
        assert main([*args, "--timestamps", str(out)]) == 0
        text = out.read_text(encoding="utf-8")
        assert "$5" in text and "Hello" in text
    assert '"word": "$5"' in (tmp_path / "t.json").read_text()
    assert (tmp_path / "t.srt").read_text().startswith("1\n00:00:00,")
    assert (tmp_path / "t.vtt").read_text().startswith("WEBVTT\n\n00:00:00.")


def test_merge_words_joins_continuations() -> None:
    from ggtts.audio import merge_words

    words = [WordTiming("$5", 1.0, 1.4), WordTiming("$5", 1.6, 2.0, ends_sentence=True, continues=True)]
    assert merge_words(words) == (WordTiming("$5", 1.0, 2.0, ends_sentence=True),)
    assert merge_words([WordTiming("a", 0, 1, continues=True)]) == (WordTiming("a", 0, 1),)  # nothing to join


def test_japanese_is_chosen_only_for_japanese_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ggtts.errors import InputError
    from ggtts.families.kokoro import frontend, pipeline
    from ggtts.text import japanese

    assert frontend.default_language("今日は晴れです。", "a") == "j" or not japanese.japanese_installed()
    assert frontend.default_language("Hello there.", "a") == "a"
    assert frontend.default_language("Hello there.", "j") == "a"  # a file of Japanese voices, English text
    monkeypatch.setattr(japanese, "japanese_installed", lambda: False)
    with caplog.at_level("WARNING"):
        assert frontend.default_language("今日は晴れです。", "a", warn=False) == "a"  # read_ahead's: said later
        assert not caplog.records
        assert frontend.default_language("今日は晴れです。", "a") == "a"  # without the extra: a warning, and English
    assert [r.getMessage() for r in caplog.records] == [
        "the text looks Japanese, but the Japanese frontend is not installed (pip install 'ggtts[ja]')"
    ]
    with pytest.raises(InputError, match=r"Japanese \(lang 'j'\) is not installed here.*ggtts\[ja\]"):
        list(pipeline._text_frontend("今日は", "j", 62, frozenset("abc")))


def test_warm_up_builds_the_files_english_g2p(tts: KokoroTTS, monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.text import g2p

    built: list[str] = []

    class Recorder:
        def __init__(self, lang: str) -> None:
            self.lang = lang

        def load(self) -> None:
            built.append(self.lang)

    monkeypatch.setattr(g2p, "get_g2p", Recorder)
    tts.warm_up()
    assert built == [tts.config.language]
    custom = KokoroTTS(tts.config, tts.model, tts.voicepacks, tts.vocab, phonemizer=lambda *a: ["a"])
    custom.warm_up()  # a phonemizer of its own: nothing of ours to build
    assert built == [tts.config.language]
