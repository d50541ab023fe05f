"""Japanese text -> chunks for Kokoro: within the limit, cut at 。 before 、 before words, every word kept once."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pyopenjtalk")

from ggtts.text.frontend import _spaced, japanese_to_phoneme_chunks
from ggtts.text.japanese import JapaneseG2P, join_japanese_phonemes

SENTENCES = [
    "今日はとても良い天気ですね。",
    "私は2024年3月1日に東京へ引っ越しました。",
    "会議は午後3時15分から始まり、夕方まで続きます。",
    "猫が3匹、庭で遊んでいます！",
    "明日の朝、何時に起きればいいですか？",
]
TEXT = "".join(SENTENCES * 12)  # no line break anywhere


def test_chunks_fit_and_keep_every_word_once() -> None:
    chunks = list(japanese_to_phoneme_chunks(TEXT, max_phonemes=62))
    assert len(chunks) > 12
    assert all(len(c.phonemes) <= 62 for c in chunks)
    words = [w for c in chunks for w in c.words]
    assert "".join(w.text for w in words) == re.sub(r"[。、！？]", "", TEXT)
    assert len({w.source for w in words}) == len(words)  # no word said twice


def test_sentence_ends_come_before_clause_marks_as_cuts() -> None:
    chunks = list(japanese_to_phoneme_chunks(TEXT, max_phonemes=120))
    ends = [c.phonemes[-1] for c in chunks[:-1]]
    assert all(e in ".!?" for e in ends), ends  # every sentence fits: cuts fall only at sentence ends
    shorter = [c.phonemes[-1] for c in japanese_to_phoneme_chunks(SENTENCES[2] * 3, max_phonemes=40)][:-1]
    assert "," in shorter  # a sentence over the limit is cut at its 、


def test_words_are_spaced_as_their_phonemes_are() -> None:
    tokens = JapaneseG2P().tokens(SENTENCES[1] + SENTENCES[3])
    spaced = _spaced(tokens)
    assert "".join(t.phonemes + t.whitespace for t in spaced).strip() == join_japanese_phonemes(tokens)


def test_paragraphs_number_their_words_apart() -> None:
    chunks = list(japanese_to_phoneme_chunks("はい。\n\nはい。", max_phonemes=62))
    sources = [w.source for c in chunks for w in c.words]
    assert len(sources) == 2 and sources[0] != sources[1]


def _said(text: str, **options: object) -> list[str]:
    return [c.phonemes for c in japanese_to_phoneme_chunks(text, max_phonemes=120, **options)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("marked", "plain"),
    [
        ("これは**重要**なお知らせです。", "これは重要なお知らせです。"),
        ("[こちら](https://example.com)をクリックしてください。", "こちらをクリックしてください。"),
        ("<b>注意</b>してください😊", "注意してください"),
        ("## 手順\n- 電源を入れる\n- `reboot`を待つ", "手順。\n電源を入れる。\nrebootを待つ。"),
    ],
)
def test_markup_is_not_read_aloud(marked: str, plain: str) -> None:
    """An LLM's reply in Japanese: its Markdown, HTML and decorative emoji say nothing (the tags were read "bii",
    the link's address letter by letter), unless the normalization switches keep them."""
    from ggtts.text.normalize import AS_WRITTEN, Normalization

    assert _said(marked) == _said(plain)
    assert _said(marked, normalization=Normalization(markdown=False)) != _said(plain)
    assert _said(marked, normalization=AS_WRITTEN) == _said(marked, normalization=Normalization(markdown=False))


def test_a_full_width_decimal_point_ends_no_sentence() -> None:
    """ "１．５倍" is one and a half times: it was cut into two sentences at "．" ("iʨi." then "ɡobai")."""
    assert _said("価格は１．５倍です。終わり．") == _said("価格は1.5倍です。終わり。")
    assert len(_said("価格は１．５倍になりました。" * 20)) == len(_said("価格は1.5倍になりました。" * 20))
