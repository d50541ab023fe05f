"""Caption files from word timestamps, and ``ggtts speak --timestamps`` refusing what it cannot do before work."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ggtts.audio import WordTiming
from ggtts.captions import MAX_CUE_CHARS, cues, line, save_timestamps, to_json, to_srt, to_vtt
from ggtts.cli import main
from ggtts.errors import InputError

WORDS = [
    WordTiming("Hello", 0.3, 0.6),
    WordTiming("there", 0.65, 1.0, ends_sentence=True),
    WordTiming("It", 1.2, 1.3),
    WordTiming("costs", 1.35, 1.7),
    WordTiming("$5", 1.75, 2.4, ends_sentence=True),
    WordTiming("Bye", 3.5, 3.9),  # after a long pause
]


def test_cues_end_at_sentences_pauses_and_length() -> None:
    assert [[w.text for w in cue] for cue in cues(WORDS)] == [["Hello", "there"], ["It", "costs", "$5"], ["Bye"]]
    many = [WordTiming(f"word{i}", i * 0.3, i * 0.3 + 0.2) for i in range(30)]
    assert all(len(line(cue)) <= MAX_CUE_CHARS for cue in cues(many))
    assert [w for cue in cues(many) for w in cue] == many


def test_srt_and_vtt_text() -> None:
    assert to_srt(WORDS[:2]) == "1\n00:00:00,300 --> 00:00:01,000\nHello there\n"
    assert to_vtt(WORDS[:2]) == "WEBVTT\n\n00:00:00.300 --> 00:00:01.000\nHello <00:00:00.650>there\n"
    assert to_vtt([WordTiming("a<b", 3661.5, 3662.0)]).endswith("01:01:01.500 --> 01:01:02.000\na&lt;b\n")


def test_json_lists_every_word() -> None:
    words = json.loads(to_json(WORDS))["words"]
    assert words[4] == {"word": "$5", "start": 1.75, "end": 2.4}
    assert len(words) == len(WORDS)


def test_japanese_words_are_joined_without_spaces() -> None:
    words = [WordTiming("今日", 0, 0.2), WordTiming("は", 0.2, 0.3), WordTiming("3月", 0.3, 0.5)]
    assert line(words) == "今日は3月"
    assert to_vtt(words).endswith("今日<00:00:00.200>は<00:00:00.300>3月\n")


def test_an_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown timestamp format '\.txt'"):
        save_timestamps(WORDS, tmp_path / "t.txt")
    assert not list(tmp_path.iterdir())


def test_speak_refuses_bad_timestamp_paths_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.wav"
    assert main(["speak", "hi", "-o", str(out), "--timestamps", str(tmp_path / "t.txt")]) != 0
    assert "unknown timestamp format '.txt'" in capsys.readouterr().err
    assert main(["speak", "hi", "-o", str(out), "--timestamps", str(tmp_path)]) != 0
    assert not out.exists()


def test_speak_refuses_timestamps_from_a_model_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ggtts
    import ggtts.families
    from ggtts.families.base import Capabilities, Family

    @dataclasses.dataclass(frozen=True)
    class NoOptions:
        pass

    no_timings = Family("tone", "no word times", ("tone",), "x:Y", NoOptions, Capabilities(timestamps=False))
    monkeypatch.setattr(ggtts.families, "family_for", lambda gguf: no_timings)
    monkeypatch.setattr(ggtts, "load", lambda *args, **kwargs: pytest.fail("refused before the model loads"))
    out = tmp_path / "a.wav"
    assert main(["speak", "hi", "-o", str(out), "--timestamps", str(tmp_path / "t.srt")]) != 0
    assert "tone gives no word timestamps; leave out --timestamps" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "t.srt").exists()
