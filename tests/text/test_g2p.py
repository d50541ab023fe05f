"""English G2P through misaki: offline, espeak-ng for unknown words, American vs British."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from no_network import NO_NETWORK

pytest.importorskip("misaki")
pytest.importorskip("espeakng_loader")

from misaki import en

from ggtts.errors import InputError
from ggtts.text import g2p
from ggtts.text.g2p import EnglishG2P, get_g2p, phonemize, resolve_language

pytestmark = pytest.mark.slow  # the first G2P call loads spaCy and misaki's lexicons (several seconds)

PUNCTUATION = set(' ;:,.!?—…"“”()')


@pytest.mark.parametrize(
    ("word", "lang", "expected"),
    [
        # misaki's American/British lexicons: GOAT is "O" in American, "Q" in British.
        ("hello", "a", "həlˈO"),
        ("hello", "b", "həlˈQ"),
        ("world", "a", "wˈɜɹld"),
        ("world", "b", "wˈɜːld"),
    ],
)
def test_known_words(word: str, lang: str, expected: str) -> None:
    assert phonemize(word, lang) == expected


@pytest.mark.parametrize(("lang", "vocab"), [("a", en.US_VOCAB), ("b", en.GB_VOCAB)])
def test_sentence_uses_only_the_language_symbols(lang: str, vocab: frozenset[str]) -> None:
    phonemes = phonemize("The quick brown fox jumps over the lazy dog, doesn't it?", lang)
    assert set(phonemes) <= set(vocab) | PUNCTUATION
    assert phonemes.endswith("?")
    assert "," in phonemes
    assert "ˈ" in phonemes  # primary stress is marked
    assert len(phonemes.split()) == 11  # one phoneme word per written word ("doesn't it?" is two)


@pytest.mark.parametrize("word", ["tomato", "schedule", "water", "dance"])
def test_american_and_british_differ(word: str) -> None:
    assert phonemize(word, "a") != phonemize(word, "b")


def test_schedule_and_tomato_dialect_features() -> None:
    assert phonemize("schedule", "a").startswith("sk")  # American "skedule"
    assert phonemize("schedule", "b").startswith("ʃ")  # British "shedule"
    assert "ˈA" in phonemize("tomato", "a")  # American "tomayto"
    assert "ˈɑː" in phonemize("tomato", "b")  # British "tomahto"


def test_normalized_meridiem_is_spelled_out() -> None:
    # normalize() writes "AM"/"PM"; misaki must spell them out, not read "am" the verb.
    phonemes = phonemize("Call me at nine AM if I am late.")
    assert "ˌAˈɛm" in phonemes


def test_oov_word_goes_through_espeak() -> None:
    word = "snorfblat"  # in no lexicon
    assert EnglishG2P("a", espeak_fallback=False)(word) == ""
    phonemes = get_g2p("a")(word)
    assert phonemes
    assert set(phonemes) <= set(en.US_VOCAB)


def test_tokens_rebuild_the_text() -> None:
    text = "Well, don't panic: it's (mostly) fine."
    tokens = get_g2p("a").tokens(text)
    assert "".join(t.text + t.whitespace for t in tokens) == text
    assert all(t.phonemes for t in tokens)


def test_shared_instances_per_language() -> None:
    assert get_g2p("a") is get_g2p("en-us") is get_g2p("EN")
    assert get_g2p("b") is get_g2p("en-gb")
    assert get_g2p("a") is not get_g2p("b")


@pytest.mark.parametrize("lang", ["fr", "", "c", "en-au"])
def test_unknown_language_is_an_input_error(lang: str) -> None:
    with pytest.raises(InputError, match="language code"):
        resolve_language(lang)


def test_empty_text() -> None:
    assert phonemize("") == ""
    assert get_g2p("a").tokens("   ") == []


def test_offline_g2p_sets_what_upstream_init_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our subclass skips misaki's __init__ (which may download); it must set the same attributes."""
    nlp = g2p.load_spacy_english()
    monkeypatch.setattr(en.spacy.util, "is_package", lambda name: True)
    monkeypatch.setattr(en.spacy, "load", lambda name, **kwargs: nlp)
    upstream = en.G2P(british=False, fallback=None, unk="")
    ours = g2p.build_misaki_g2p(british=False, espeak_fallback=False)
    assert set(vars(ours)) == set(vars(upstream))
    for name, value in vars(upstream).items():
        assert type(getattr(ours, name)) is type(value), name
    text = "Tomorrow, 3 cats and 2 dogs."
    assert ours(text)[0] == upstream(text)[0]


def test_no_download_is_ever_attempted() -> None:
    """In a fresh interpreter with the network and spaCy's downloader booby-trapped, G2P still works."""
    script = NO_NETWORK + textwrap.dedent(
        """
        import spacy.cli
        import spacy.util

        spacy.cli.download = refuse

        # The name misaki asks for is not installed: misaki on its own would call spacy.cli.download.
        print("upstream_would_download", not spacy.util.is_package("en_core_web_sm"))

        from ggtts.text.frontend import text_to_phoneme_chunks
        for lang in ("a", "b"):
            chunks = list(text_to_phoneme_chunks("Hello there, snorfblat! It costs $5.", lang))
            print(lang, chunks[0].phonemes)
        import importlib.util
        import sys

        # misaki[en] installs spacy-curated-transformers (hexgrad's kokoro, in the test install, asks for
        # misaki[en]); spaCy would import it, and transformers with it, for nothing
        print("plugin_installed", importlib.util.find_spec("spacy_curated_transformers") is not None)
        print("plugin_imported", "spacy_curated_transformers" in sys.modules, "transformers" in sys.modules)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines() if " " in line)
    assert lines["a"].startswith("həlˈO")
    assert lines["b"].startswith("həlˈQ")
    if lines["plugin_installed"] != "True":  # hexgrad's kokoro (the reference extra) installs it
        pytest.skip("spacy-curated-transformers is not installed: nothing to keep from being imported")
    assert lines["plugin_imported"] == "False False", "spaCy's plugin factories were imported with the G2P"


@pytest.mark.parametrize("british", [False, True], ids=["us", "gb"])
def test_the_cached_lexicon_is_the_one_misaki_builds(
    british: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built once and kept: the second load reads the cache, and what it reads is exactly misaki's own lexicon
    (every attribute its ``__init__`` sets, every entry); a damaged cache file is built again, not trusted."""
    monkeypatch.setenv("GGTTS_HOME", str(tmp_path))
    path = g2p.lexicon_cache_path(en, british)
    assert not path.exists()
    built = g2p.load_lexicon(en, british)
    assert path.is_file()
    reference = vars(en.Lexicon(british))
    assert set(reference) == set(g2p.LEXICON_STATE)  # misaki sets nothing the cache leaves out
    cached = g2p.load_lexicon(en, british)
    assert type(cached) is en.Lexicon and vars(cached) == reference == vars(built)
    path.write_bytes(b"\x00 damaged")
    assert vars(g2p.load_lexicon(en, british)) == reference
    assert g2p.lexicon_cache_path(en, not british) != path


def test_an_unwritable_cache_only_costs_the_build(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"  # type: ignore[operator]
    blocker.write_text("not a folder")
    monkeypatch.setenv("GGTTS_HOME", str(blocker))
    assert vars(g2p.load_lexicon(en, False)) == vars(en.Lexicon(False))


def test_spacys_command_line_is_imported_only_when_asked_for() -> None:
    """spaCy's package imports its command line (weasel, typer, httpx) for ``spacy.info`` alone: the G2P loads
    without it, and ``spacy.cli`` / ``spacy.info`` / ``import spacy.cli`` still reach the real one afterwards."""
    script = NO_NETWORK + textwrap.dedent(
        """
        import sys

        from ggtts.text.frontend import text_to_phoneme_chunks

        print("phonemes", list(text_to_phoneme_chunks("Hello there.", "a"))[0].phonemes)
        print("loaded_without", "spacy.cli" in sys.modules, "httpx" in sys.modules, "weasel" in sys.modules)
        import spacy

        print("stand_in_info", callable(spacy.cli.info), "spacy.cli" in sys.modules)
        print("download", spacy.cli.download.__module__, "spacy.cli" in sys.modules)
        import spacy.cli
        from spacy.cli.info import info

        print("same", spacy.cli is sys.modules["spacy.cli"], info is spacy.cli.info)
        print("info", sorted(spacy.info(silent=True))[:1])
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines() if " " in line)
    assert lines["phonemes"].startswith("həlˈO")
    assert lines["loaded_without"] == "False False False"
    assert lines["stand_in_info"] == "True False"  # spacy.cli.info is a function before and after
    assert lines["download"] == "spacy.cli.download True"
    assert lines["same"] == "True True"
    assert lines["info"] == "['location']"
