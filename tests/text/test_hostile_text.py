"""Hostile text: the frontends raise nothing but our input error, and their cost stays linear in the input.

Cost is checked without a clock: what reaches misaki and spaCy is bounded (no segment over MAX_G2P_CHARS, no
whitespace-free run over the limits), misaki's cubic token merging is counted (10x the input must cost at most
about 10x the merges), and the normalizer's regular expressions run on half a million characters under a watchdog
set far above their linear time (quadratic ones take minutes there).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.errors import InputError
from ggtts.families.outetts.prompt import OuteTTSVersion, process_text
from ggtts.text import g2p as g2p_module
from ggtts.text.chunking import MAX_G2P_CHARS, g2p_segments
from ggtts.text.frontend import text_to_phoneme_chunks
from ggtts.text.normalize import normalize
from ggtts.text.numbers import MAX_SCALED_DIGITS
from ggtts.text.sanitize import (
    MAX_COMBINING_MARKS,
    MAX_MIXED_PUNCTUATION_RUN,
    MAX_PUNCTUATION_RUN,
    MAX_RUN_CHARS,
    MAX_RUN_PUNCTUATION,
    bound_marks,
    break_long_runs,
)
from time_limit import time_limit

WATCHDOG_S = 60  # linear work here takes at most ~3 s at 500,000 characters; a quadratic rule, minutes
NORMALIZE_CHARS = 500_000

# The report's pathological families (issue "Hardening"), and a few more of the same kinds.
HOSTILE_UNITS = {
    "apostrophes": "'",
    "apostrophe-backtick": "'`",
    "apostrophe-space": "' ",
    "letter-apostrophe": "a'",
    "brackets": "[",
    "bracket-letter": "[a",
    "a-dot": "a.",
    "one-dot": "1.",
    "dash-dot": "-.",
    "one-dash": "1-",
    "digits": "1234567890",
    "grouped": "1,000",
    "dollars": "$1,000 ",
    "mixed-punctuation": "?!.,;:",
    "url-like": "http://a.b/c?d=e&",
}


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


# ---- the normalizer -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [_repeat(u, NORMALIZE_CHARS) for u in ("a.", "1.", "-.", "1-", "[", "[a", "[a](", "St ", "Main St. Dr. ")]
    + [_repeat("a.", NORMALIZE_CHARS - 2) + "@x"],
    ids=[
        "a-dot",
        "one-dot",
        "dash-dot",
        "one-dash",
        "brackets",
        "bracket-letter",
        "link-like",
        "titles",  # each title looked at all the text before and after it (issue #36: 100,000 chars, 8 s)
        "titles-after-names",
        "dotted-email",
    ],
)
def test_normalize_is_linear_on_the_reported_inputs(text: str) -> None:
    with time_limit(WATCHDOG_S, "the frontend"):
        normalize(text)


# Markup the normalizer takes away: runs of its marks, and openings that never close
MARKUP_UNITS = ["*", "_", "#", "<", "`", "~", ">", "**a ", "_a ", "<b ", "<a x=", "[a](", "`a", "``a`", "&amp", "\\*"]
MARKUP_UNITS += ["# a\n", "- a\n", "| a ", "![", "**a**", "<!--", "```\n"]
MARKUP_UNITS += ["は**重", "は*", "「**", "重要**で"]  # text written without spaces: "*" opens after a letter


@pytest.mark.parametrize("unit", MARKUP_UNITS)
def test_markup_removal_is_linear(unit: str) -> None:
    with time_limit(WATCHDOG_S, "the frontend"):
        normalize(_repeat(unit, NORMALIZE_CHARS))


@pytest.mark.parametrize("rule", ["---", "***", "___", "- - -", "\t***"])
def test_a_rule_line_followed_by_blanks_is_linear(rule: str) -> None:
    """A horizontal rule's own blanks overlapped the line end's: "---" and 40,000 spaces took 7.8 s."""
    with time_limit(WATCHDOG_S, "the frontend"):
        normalize(rule + " \t" * (NORMALIZE_CHARS // 2) + "x")


# the rules that read a number by what is near it: a phone word, an "=", a range's marks
NEAR_UNITS = ["call 555-1234 ", "1 - 2 = ", "$5 - $3 = ", "a < b > ", "9-10 am-", "5%-10%-", "1.5M-", "4x4x", "--"]
NEAR_UNITS += ["1.2k-", "1,000s ", "5 lb. ", "Jan 5-", "3h 20m ", "1 1/2 ", "3.30 pm ", "0800 hours ", "9/10 "]
NEAR_UNITS += ["$5/hr ", "Mon-", "p. 5 ", "2x-3x ", "RTX 4090 ", "1.2.3rc1 ", "✅", "❤️ ", "call 911 ", " ", " \t"]
NEAR_UNITS += ["a ❤️ ", "★☆", "1h 2m 3s ", "9/10. ", "4.5/5 ", "0805 hours ", "8 p.m. EST "]


@pytest.mark.parametrize("unit", NEAR_UNITS)
def test_rules_that_look_around_are_linear(unit: str) -> None:
    with time_limit(WATCHDOG_S, "the frontend"):
        normalize(_repeat(unit, NORMALIZE_CHARS))


@pytest.mark.parametrize(
    "text, spoken",
    [
        ("1" + ",000" * 102, "one zero zero"),
        ("$1" + ",000" * 102, "dollars"),
        ("1" + ",000" * 102 + "%", "percent"),
        ("1" + ",000" * 102 + "th", " th"),
        ("9" * 5000, "nine nine"),  # past Python's 4300-digit int() limit
        ("$" + "9" * 5000 + ".50", "dollars"),
        ("1" * 50 + "/" + "2" * 50, "one one"),
        ("1" + ",000" * 11, "one decillion"),  # the last size read with scale words
    ],
)
def test_numbers_of_any_length_are_read(text: str, spoken: str) -> None:
    said = normalize(text)
    assert spoken in said
    assert not any(c.isdigit() for c in said)


def test_scale_words_stop_where_num2words_does() -> None:
    groups = MAX_SCALED_DIGITS // 3 - 1
    assert "decillion" in normalize("999" + ",999" * groups)  # 36 digits
    assert normalize("9,999" + ",999" * groups) == " ".join(["nine"] * (MAX_SCALED_DIGITS + 1))


# ---- what reaches the tagger and the G2P ---------------------------------------------------------------------
def test_bound_marks() -> None:
    assert bound_marks("e" + "\u0301" * 3000) == "\u00e9" + "\u0301" * MAX_COMBINING_MARKS  # NFC composes é first
    assert bound_marks("x" + "\u0301\u0302\u0303\u0304") == "x\u0301\u0302"
    assert bound_marks("x" + "\u20dd" * 10) == "x" + "\u20dd" * MAX_COMBINING_MARKS  # enclosing marks: class 0
    assert bound_marks("Wait!!!!!!! What?!?!?!?!") == "Wait!!! What?!?!?!"
    assert bound_marks("'" * 600) == "'" * MAX_PUNCTUATION_RUN
    assert bound_marks("'`" * 300) == ("'`" * 300)[:MAX_MIXED_PUNCTUATION_RUN]
    # the Markdown around a word stays whole, for the normalizer to take away
    markup = "See [**docs**](https://x.com), **[Kokoro](/kˈOkəɹO/)** and ***this.***"
    assert bound_marks(markup) == markup
    assert bound_marks("Dr. Smith's café… (really)") == "Dr. Smith's café… (really)"  # ordinary text unchanged


def test_break_long_runs_keeps_ordinary_words() -> None:
    ordinary = "U.S.A. e.g., mother-in-law's state-of-the-art pneumonoultramicroscopicsilicovolcanoconiosis"
    assert break_long_runs(ordinary) == ordinary
    broken = break_long_runs("a" * 120)
    assert broken.replace(" ", "") == "a" * 120
    assert max(len(r) for r in broken.split()) <= MAX_RUN_CHARS
    assert break_long_runs("[a" * 20).replace(" ", "") == "[a" * 20


def _record_g2p_inputs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = g2p_module.EnglishG2P.tokens

    def recording(self: Any, text: str) -> Any:
        seen.append(text)
        return original(self, text)

    monkeypatch.setattr(g2p_module.EnglishG2P, "tokens", recording)
    return seen


def _punctuation(run: str) -> int:
    return sum(1 for c in run if not (c.isalnum() or c == "_"))


@pytest.mark.parametrize("name", list(HOSTILE_UNITS))
def test_what_reaches_the_g2p_is_bounded(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    seen = _record_g2p_inputs(monkeypatch)
    with time_limit(WATCHDOG_S, "the frontend"):
        list(text_to_phoneme_chunks(_repeat(HOSTILE_UNITS[name], 3000)))
    for segment in seen:
        assert len(segment) <= MAX_G2P_CHARS
        for run in segment.split():
            assert len(run) <= MAX_RUN_CHARS, run
            # a piece ends before a word once it holds the limit; punctuation runs are at most six long
            assert _punctuation(run) <= MAX_RUN_PUNCTUATION + MAX_MIXED_PUNCTUATION_RUN, run


def test_g2p_segments_cut_at_sentence_ends() -> None:
    line = "Hello there. " * 200
    segments = list(g2p_segments(line.strip()))
    assert all(len(s) <= MAX_G2P_CHARS and s.endswith("there.") for s in segments)
    assert " ".join(segments) == line.strip()
    assert "".join(g2p_segments("x" * 2500)) == "x" * 2500


def _count_merges(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    from misaki import en

    calls = [0]
    original = en.merge_tokens

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(en, "merge_tokens", counting)
    return lambda: calls[0]


@pytest.mark.parametrize("name", ["apostrophe-backtick", "bracket-letter", "letter-apostrophe", "url-like"])
def test_misaki_work_grows_linearly(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    merges = _count_merges(monkeypatch)
    counts = []
    for n in (1_000, 10_000):
        before = merges()
        list(text_to_phoneme_chunks(_repeat(HOSTILE_UNITS[name], n)))
        counts.append(merges() - before)
    assert counts[1] <= 12 * max(counts[0], 1), f"{name}: {counts[0]} merges at 1k, {counts[1]} at 10k"


def test_outetts_words_are_bounded() -> None:
    cleaned = process_text("a" * 10_000 + " " + "b" * 10, OuteTTSVersion.V0_3)
    words = cleaned.split(OuteTTSVersion.V0_3.separator)
    assert max(len(w) for w in words) <= MAX_RUN_CHARS
    assert "".join(words[:-1]) == "a" * 10_000 and words[-1] == "b" * 10


# ---- fuzz -----------------------------------------------------------------------------------------------------
_PUNCTUATION = string.punctuation + "…—–“”‘’«»¿¡"
_MARKS = [chr(c) for c in range(0x300, 0x370)]
_SCRIPTS = "abcXYZ éñøßçüÅ Ωλπ Жщы 漢字かなカナ 한국 العربية हिन्दी 🙂👍🏽"
hostile_text = st.lists(
    st.one_of(
        st.text(alphabet=_PUNCTUATION, min_size=1, max_size=40),  # punctuation runs
        st.text(alphabet=_MARKS, min_size=1, max_size=30),  # combining marks
        st.from_regex(r"[$€£]?-?\d{1,12}([,.]\d{1,4}){0,6}(%|st|th|°C| km)?", fullmatch=True),  # numbers
        st.text(alphabet=_SCRIPTS, min_size=1, max_size=20),  # mixed scripts
        st.sampled_from(["Dr.", "St.", "3:45 pm", "3/15/2024", "a@b.co", "www.x.io", "\n", "\n\n", " ", "\t"]),
        st.text(min_size=1, max_size=10),  # any other character
    ),
    max_size=25,
).map("".join)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(hostile_text)
def test_normalize_never_fails(text: str) -> None:
    normalize(text)
    normalize(text, british=True)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_text)
def test_frontend_raises_only_input_errors(text: str) -> None:
    try:
        for chunk in text_to_phoneme_chunks(text, "a", vocab=None):
            assert 0 < len(chunk.phonemes) <= 510
    except InputError:
        pass


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(hostile_text)
def test_outetts_text_cleaning_never_fails(text: str) -> None:
    cleaned = process_text(text, OuteTTSVersion.V0_3)
    assert all(len(w) <= MAX_RUN_CHARS for w in cleaned.split(OuteTTSVersion.V0_3.separator))
