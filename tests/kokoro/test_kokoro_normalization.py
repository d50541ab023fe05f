"""Kokoro's ``normalization`` option: the switches reach the English frontend through the Python API and the CLI,
a bad value is refused before any work; on a tiny random model through the real converter and frontend."""

from __future__ import annotations

import pytest

import ggtts
from ggtts.cli import build_parser, family_options
from ggtts.errors import InputError
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.text.normalize import Normalization

pytestmark = pytest.mark.slow  # writes a tiny model with hexgrad's modules, loads spaCy and misaki's lexicons

TEXT = "It is 2 GB."


@pytest.fixture(scope="module")
def tts(tmp_path_factory: pytest.TempPathFactory) -> KokoroTTS:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    model = ggtts.load(str(write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")))
    assert isinstance(model, KokoroTTS)
    return model


def _words(tts: KokoroTTS, normalization: Normalization | bool) -> list[str]:
    return [w.text for w in tts.synthesize(TEXT, voice="v_one", normalization=normalization).words]


def test_the_switches_reach_the_frontend(tts: KokoroTTS) -> None:
    # "2 GB" read as units is one written word said as "two gigabytes"; unread, "2" and "GB" are two
    assert _words(tts, True) == ["It", "is", "2 GB"]
    assert _words(tts, Normalization(units=False)) == ["It", "is", "2", "GB"]
    assert _words(tts, Normalization(symbols=False)) == ["It", "is", "2 GB"]
    assert _words(tts, False) == ["It", "is", "2", "GB"]


def test_all_on_is_the_default(tts: KokoroTTS) -> None:
    default = tts.synthesize(TEXT, voice="v_one")
    every = tts.synthesize(TEXT, voice="v_one", normalization=Normalization())
    assert (default.samples == every.samples).all() and default.words == every.words


@pytest.mark.parametrize("value", ["no", 0, 1.5, {"units": False}])
def test_a_bad_value_is_refused_before_any_work(tts: KokoroTTS, value: object) -> None:
    with pytest.raises(InputError, match="normalization must be true, false or a"):
        next(tts.stream(TEXT, normalization=value))  # type: ignore[arg-type]


def test_a_phonemizer_of_its_own_takes_only_the_default(tts: KokoroTTS) -> None:
    custom = KokoroTTS(tts.config, tts.model, tts.voicepacks, tts.vocab, phonemizer=lambda *a: ["hˈI ðˈɛɹ."])
    assert custom.synthesize(TEXT, normalization=True).samples.size
    with pytest.raises(InputError, match="built-in text frontend"):
        custom.synthesize(TEXT, normalization=False)


def test_a_phonemizer_that_is_not_a_function_is_refused_at_load() -> None:
    """It was taken, and failed at the first synthesis with "'int' object is not callable"."""
    from ggtts.families.kokoro import FAMILY

    with pytest.raises(InputError, match=r"phonemizer must be a function \(text, language, max phonemes"):
        FAMILY.check_load_options({"phonemizer": 5})
    FAMILY.check_load_options({"phonemizer": lambda text, lang, limit, vocab: ["hˈI."]})


def test_the_cli_flag() -> None:
    parse = build_parser().parse_args
    assert family_options(parse(["speak", "hi", "--no-normalize"]))["normalization"] is False
    assert family_options(parse(["speak", "hi", "--normalize"]))["normalization"] is True
    assert "normalization" not in family_options(parse(["speak", "hi"]))


def test_the_markdown_switch_reaches_the_japanese_frontend(tts: KokoroTTS) -> None:
    """Japanese text (the real voices' language) has its markup taken away as English has; the switch keeps it."""
    pytest.importorskip("pyopenjtalk")

    def words(text: str, normalization: Normalization | bool = True) -> list[str]:
        said = tts.synthesize(text, voice="v_one", lang="j", normalization=normalization)
        return [w.text for w in said.words]

    assert words("<b>注意</b>してください") == words("注意してください")
    assert words("<b>注意</b>してください", Normalization(markdown=False)) != words("注意してください")


@pytest.mark.parametrize(
    ("written", "respelled", "lang", "words"),
    [
        ("I use ggtts, GGTTS too.", "I use banana, banana too.", "a", ["I", "use", "ggtts", "GGTTS", "too"]),
        ("東京に行く。", "大阪に行く。", "j", ["大阪", "に", "行く"]),  # Japanese words are the G2P's: as said
    ],
)
def test_a_lexicon_says_its_words(
    tts: KokoroTTS, monkeypatch: pytest.MonkeyPatch, written: str, respelled: str, lang: str, words: list[str]
) -> None:
    """The lexicon's words are said as it spells them out (the same audio as the respelled text), in English and in
    Japanese; English word timestamps show what was written."""
    from ggtts.text.lexicon import Lexicon

    if lang == "j":
        pytest.importorskip("pyopenjtalk")
    plain = tts.synthesize(respelled, voice="v_one", lang=lang)
    monkeypatch.setattr(tts, "lexicon", Lexicon.of({"ggtts": "banana", "東京": "大阪"}))
    said = tts.synthesize(written, voice="v_one", lang=lang)
    assert (said.samples == plain.samples).all()
    assert [w.text for w in said.words] == words
