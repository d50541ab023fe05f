"""A pronunciation lexicon (:mod:`ggtts.text.lexicon`): its files, what it finds in a text, and that what it says
keeps the span of what was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ggtts.errors import InputError
from ggtts.text.lexicon import Lexicon, as_lexicon
from ggtts.text.tracking import Tracked
from time_limit import time_limit

LEXICON = Lexicon.of({"ggtts": "gee gee tee tee ess", "US": "you ess", "cat": "kitty", "New York": "noo york"})


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("I use ggtts, GGTTS and Ggtts.", "I use gee gee tee tee ess, gee gee tee tee ess and gee gee tee tee ess."),
        ("the US and us", "the you ess and us"),  # a capital is found only as written
        ("catalog, cat, cat's, bobcat", "catalog, kitty, kitty's, bobcat"),  # whole words only
        ("New York City", "noo york City"),  # several words; the longest entry first
        ("**ggtts**", "**gee gee tee tee ess**"),  # (the markup goes after)
        ("ggttsを使う", "gee gee tee tee essを使う"),  # no space needed beside text written without spaces
        ("ggtts_v2 xggtts", "ggtts_v2 xggtts"),
    ],
)
def test_what_is_found_and_what_is_said(written: str, said: str) -> None:
    assert LEXICON.said(written) == said


def test_a_longer_entry_wins_and_cjk_words_need_no_spaces() -> None:
    lexicon = Lexicon.of({"東京": "とうきょう", "東京都": "とうきょうと", "New": "gnu"})
    assert lexicon.said("東京都に住む、東京に行く") == "とうきょうとに住む、とうきょうに行く"
    assert lexicon.said("New York") == "gnu York"


@pytest.mark.parametrize(
    ("entries", "written", "said"),
    [
        ({"SQL": "sequel", "sqlite": "es queue lite"}, "SQLite and SQL", "es queue lite and sequel"),
        ({"US": "you ess", "usa": "you ess ay"}, "USA and US", "you ess ay and you ess"),  # longest, any case
        ({"Ray": "ray", "Ray Serve": "ray serve"}, "Ray Server, Ray Serve", "ray Server, ray serve"),
        ({"new": "gnu", "new york": "noo york"}, "new yorker, New York", "gnu yorker, noo york"),
    ],
)
def test_the_longest_whole_word_wins_as_written_or_in_lowercase(
    entries: dict[str, str], written: str, said: str
) -> None:
    """A longer form found inside a longer word leaves the shorter whole word to its own entry; an entry as written
    and a lowercase one are one choice, the longest (both were missed: the first branch of one regex won)."""
    assert Lexicon.of(entries).said(written) == said


def test_what_is_said_keeps_the_written_words_span() -> None:
    text = "I use ggtts daily"
    said = LEXICON.apply(Tracked.of(text))
    at = said.text.index("gee")
    start, end = said.span(at, at + len("gee gee tee tee ess"))
    assert text[start:end] == "ggtts"


def test_a_file_of_lines_and_a_json_file(tmp_path: Path) -> None:
    lines = tmp_path / "words.txt"
    lines.write_text("# mine\n\nggtts = gee gee tee tee ess\n  Kokoro =  [Kokoro](/kˈOkəɹO/)  \n", encoding="utf-8")
    assert Lexicon.read(lines).entries == (("ggtts", "gee gee tee tee ess"), ("Kokoro", "[Kokoro](/kˈOkəɹO/)"))
    as_json = tmp_path / "words.json"
    as_json.write_text(json.dumps({"ggtts": "gee gee tee tee ess"}), encoding="utf-8")
    assert Lexicon.read(as_json).said("ggtts") == "gee gee tee tee ess"
    assert as_lexicon(str(lines)) == Lexicon.read(lines) and as_lexicon(None) is None
    assert as_lexicon({"a": "b"}) == Lexicon.of({"a": "b"})
    with_bom = tmp_path / "bom.txt"
    with_bom.write_bytes("\ufeffggtts = banana\n".encode())  # as some editors save UTF-8
    assert Lexicon.read(with_bom).said("ggtts") == "banana"


def test_a_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("ggtts = banana\n", encoding="utf-8")
    first = Lexicon.read(path)
    assert Lexicon.read(path) is first  # (checked, read ahead and loaded: read once)
    path.write_text("ggtts = pineapple\n", encoding="utf-8")
    assert Lexicon.read(path).said("ggtts") == "pineapple"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("ggtts gee gee\n", r"words\.txt:1: an entry is 'written = said'"),
        ("# ok\nggtts = \n", r"words\.txt:2: an entry needs a written word and what to say"),
        (" = said\n", r"words\.txt:1: an entry needs"),
        ("cat = kitty\nCAT = dog\ncat = puss\n", r"'cat' is given twice, said 'kitty' and 'puss'"),
    ],
)
def test_a_bad_line_is_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "words.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        Lexicon.read(path)


def test_a_file_that_is_no_lexicon_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such lexicon file"):
        Lexicon.read(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="a lexicon is a file, not a folder"):
        Lexicon.read(tmp_path)
    (tmp_path / "latin1.txt").write_bytes("café = cafe\n".encode("latin-1"))
    with pytest.raises(InputError, match="UTF-8"):
        Lexicon.read(tmp_path / "latin1.txt")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InputError, match="one object"):
        Lexicon.read(tmp_path / "list.json")
    (tmp_path / "numbers.json").write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(InputError, match="must be text"):
        Lexicon.read(tmp_path / "numbers.json")
    with pytest.raises(InputError, match="lexicon must be a file's path or a mapping"):
        as_lexicon(3)


def test_many_entries_and_a_long_text_stay_linear() -> None:
    """One alternation, no quantifier: half a million characters against 5,000 entries is one pass (a watchdog,
    not a timing: quadratic work would take minutes)."""
    lexicon = Lexicon.of({f"word{i}": f"said {i}" for i in range(5000)})
    text = "word4999 word12 wordy " * 22_700
    with time_limit(60, "the lexicon"):
        assert lexicon.said(text).count("said 4999") == 22_700


def test_entries_out_of_bounds_are_one_clear_error(tmp_path: Path) -> None:
    from ggtts.text import lexicon

    with pytest.raises(InputError, match="'ggtts ' begins or ends with a space"):
        Lexicon.of({"ggtts ": "banana"})
    with pytest.raises(InputError, match="an entry is one line"):
        Lexicon.of({"ggtts": "gee\ngee"})
    with pytest.raises(InputError, match="at most 200 characters written and 1000 said"):
        Lexicon.of({"x" * 201: "long"})
    with pytest.raises(InputError, match=f"{lexicon.MAX_ENTRIES + 1} entries; at most {lexicon.MAX_ENTRIES}"):
        Lexicon.of({f"w{i}": "x" for i in range(lexicon.MAX_ENTRIES + 1)})
    with pytest.raises(InputError, match="must map written words to what is said, got list"):
        Lexicon.of(["ggtts"])  # type: ignore[arg-type]
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as f:
        f.truncate(lexicon.MAX_FILE_BYTES + 1)  # (sparse: nothing written)
    with pytest.raises(InputError, match="a lexicon file is at most 16 MiB"):
        Lexicon.read(huge)
    (tmp_path / "bad.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.json: not JSON"):
        Lexicon.read(tmp_path / "bad.json")
