"""Markup taken away before any language reads the text (:mod:`ggtts.text.markup`): what English's normalizer
already did, for text written without spaces (Japanese, Chinese) and for the families that read text as written."""

from __future__ import annotations

import pytest

from ggtts.text.markup import plain_text, strip_markup
from ggtts.text.normalize import AS_WRITTEN, Normalization, unmarked
from ggtts.text.tracking import Tracked


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("これは**重要**です。", "これは重要です。"),  # emphasis opens after a letter: no spaces between words
        ("これは*強調*です", "これは強調です"),
        ("「**重要**」です", "「重要」です"),  # and inside Japanese quotation marks
        ("**重要**なお知らせ", "重要なお知らせ"),
        ("# 見出し。", "見出し。"),  # a heading ending in a Japanese full stop gets no "." of its own
        ("## 手順\n1. 電源を入れる\n2. 待つ", "手順.\n1. 電源を入れる.\n2. 待つ."),
        ("[こちら](https://example.com)をクリック", "こちらをクリック"),
        ("<b>注意</b>してください", "注意してください"),
        ("詳細は`config.yaml`を見てください。", "詳細はconfig.yamlを見てください。"),
        ("| 項目 | 値 |\n|---|---|\n| 速度 | 速い |", "項目, 値.\n\n速度, 速い."),
        ("今日は暑いですね😊", "今日は暑いですね"),
        ("✅ ビルド成功", "ビルド成功"),
        ("Hallo **Welt**, <i>wie</i> geht's?", "Hallo Welt, wie geht's?"),
    ],
)
def test_markup_goes_in_any_language(written: str, read: str) -> None:
    assert plain_text(written) == read


@pytest.mark.parametrize(
    "written",
    [
        *("2*3*4", "a*b*c", "x = a * b", "重要**です", "これは__重要__です", "snake_case"),
        *("送料無料*1、返品可能*2", "ファイル名は*.txtや*.mdです", "A社*B社*C社"),  # footnotes, globs, products
    ],
)
def test_what_is_no_emphasis_stays(written: str) -> None:
    """ "*" opens emphasis after a wide letter only: Latin text keeps its products, and "_" never opens inside a
    word (CommonMark's rule)."""
    assert plain_text(written) == written


def test_emoji_are_said_in_english_words_only_in_english() -> None:
    assert strip_markup(Tracked.of("I ❤️ it, rated ★★★★☆ ✓"), english=True).text == (
        "I love it, rated 4 out of 5 stars yes"
    )
    # elsewhere those between words are left for the language's own G2P; those that decorate go either way
    assert plain_text("I ❤️ it, rated ★★★★☆ ✓") == "I ❤️ it, rated"
    assert plain_text("Danke ❤️.") == "Danke."


def test_what_is_kept_keeps_its_spans() -> None:
    text = "これは**重要**です"
    kept = strip_markup(Tracked.of(text), english=False)
    start, end = kept.span(kept.text.index("重要"), kept.text.index("重要") + 2)
    assert text[start:end] == "重要"


def test_unmarked_follows_the_switches() -> None:
    written = "**Hello** <b>there</b>"
    assert unmarked(written, True) == unmarked(written, Normalization(urls=False)) == "Hello there"
    assert unmarked(written, False) == unmarked(written, AS_WRITTEN) == written
    assert unmarked(written, Normalization(markdown=False)) == written
