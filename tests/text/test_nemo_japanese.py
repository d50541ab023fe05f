"""NeMo's JapanesePhonemeTokenizer + JapaneseKatakanaAccentG2p vs ggtts.text.nemo_japanese, which runs without NeMo.

Both read text with the same installed pyopenjtalk; the reference is NeMo built the way a Magpie model builds it
(``setup_tokenizers`` over a ``text_tokenizers`` config).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.text.nemo_japanese import JapaneseTokenizer, JapaneseTokenizerSpec, build_japanese_tokens, pitch_pattern

TOKENIZER = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.JapanesePhonemeTokenizer"
G2P = "nemo.collections.tts.g2p.models.ja_jp_ipa.JapaneseKatakanaAccentG2p"

# pyopenjtalk-plus calls a SudachiPy method that SudachiPy deprecates
pytestmark = pytest.mark.filterwarnings("ignore:Dictionary.create:DeprecationWarning")


def _ja(g2p: dict[str, Any] | None = None, **tokenizer: Any) -> dict[str, Any]:
    return {"_target_": TOKENIZER, **tokenizer, "g2p": {"_target_": G2P, **(g2p or {})}}


CONFIGS: dict[str, dict[str, Any]] = {
    "japanese_default": _ja(),
    # as the multilingual Magpie configs write their tokenizers
    "japanese_phoneme": _ja(
        {"ascii_letter_prefix": "", "ascii_letter_case": "lower"}, punct=True, apostrophe=True, pad_with_space=True
    ),
    "japanese_upper": _ja(
        {"ascii_letter_prefix": "#", "ascii_letter_case": "upper"}, silence="<sil>", add_blank_at="last"
    ),
    "japanese_mixed": _ja(
        {"ascii_letter_case": "mixed", "mapping_file": None},
        non_default_punct_list=["、", "。", "!", "?", "・・・", "「"],
        apostrophe=False,
        space="▁",
    ),
    "japanese_no_punct": _ja(punct=False, add_blank_at=True, pad_with_space=True),
}

SENTENCES = [
    "こんにちは",
    "こんにちは、世界。",
    "今日はいい天気ですね。",
    "東京タワーは高い！",
    "私の名前は田中です。よろしくお願いします。",
    "日本語を勉強しています。",
    "彼は学校へ行きました。",
    "雨が降ってきたので、傘を持っていきましょう。",
    "桜の花が咲いています。",
    "お茶をください。",
    "ありがとうございました！",
    "すみません、駅はどこですか？",
    "明日は雨が降るかもしれません。",
    "富士山に登りたい。",
    "新しいコンピューターを買いました。",
    "ヴァイオリンとヴィオラ",
    "ティーカップ、ディズニー、ファミリー、フォーク",
    "ウィキペディアのウェブサイト",
    "ちょっと待って",
    "きゃきゅきょ しゃしゅしょ ちゃちゅちょ",
    "がっこう きって ざっし",
    "ラーメン、コーヒー、ケーキ",
    "ひらがなだけのぶん",
    "カタカナダケノブン",
    "漢字文章",
    "東京都千代田区丸の内一丁目",
    "2024年1月1日",
    "今日は2024年12月31日です。",
    "３月３日はひな祭り",
    "123",
    "1,000円",
    "3.14",
    "電話番号は03-1234-5678です。",
    "午後3時45分",
    "10%オフ",
    "第1回",
    "100人",
    "一二三四五六七八九十",
    "百千万億",
    "ABC",
    "abc",
    "NHK",
    "AIとML",
    "Google",
    "iPhoneを買った",
    "Hello World",
    "hello, world!",
    "これはpenです",
    "xyzzy plugh",
    "I'm fine, thank you.",
    "don't can't",
    "rock'n'roll",
    "Ｔｏｋｙｏ",
    "ＡＢＣ１２３",
    "ｶﾀｶﾅ ﾊﾝｶｸ",
    "「こんにちは」と言った。",
    "『源氏物語』を読む",
    "【重要】お知らせ",
    "え？！本当に？",
    "ええと…そうですね",
    "あのー、すみません",
    "わーい！",
    "なるほど〜",
    "東京・大阪・名古屋",
    "東京･大阪",
    "※注意",
    "（括弧）と(半角括弧)",
    "〒100-0001",
    "「」『』【】",
    "。、",
    "、。！？",
    "!?",
    "...",
    "……",
    "・・・",
    "",
    " ",
    "　",
    "   ",
    "こんにちは 世界",
    "こんにちは　世界",
    "こんにちは  世界  ",
    "\tこんにちは\n世界\r\n",
    "こんにちは\u00a0世界",
    "😀 こんにちは 🐕",
    "中文和日本語",
    "한국어 텍스트",
    "Привет",
    "café naïve",
    "@ # $ % ^ & * _ + = | \\ ~ `",
    "<pad> <oov>",
    "email@example.com https://nvidia.com/ja",
    "'",
    "’",
    "ゐゑ ヰヱ ヷ",
    "ヵ月 ヶ所",
    "ゔ",
    "ー",
    "ッ",
    "ん",
    "々",
    "人々",
    "〃",
    "ゝゞヽヾ",
    "あ",
    "ア",
    "亜",
    "今日は晴れ。明日は雨。明後日は曇り。",
    "吾輩は猫である。名前はまだ無い。",
    "国境の長いトンネルを抜けると雪国であった。",
    "行く川の流れは絶えずして、しかももとの水にあらず。",
    "生麦生米生卵",
    "隣の客はよく柿食う客だ",
    "東京特許許可局",
    "お疲れ様でした",
    "いただきます",
    "ごちそうさまでした",
    "おはようございます",
    "こんばんは",
    "さようなら",
    "いってきます",
    "ただいま",
]
# joins between words, through every separator
_WORDS = ("東京", "こんにちは", "Hello", "123", "ＮＨＫ", "ラーメン", "it's")
_SEPARATORS = ("", " ", "　", "、", "。", "！", "?", "・", "\n", "-")
SENTENCES += [f"{a}{sep}{b}" for a in _WORDS for sep in _SEPARATORS for b in _WORDS[:3]]


@pytest.fixture(scope="module")
def nemo(no_network: None) -> Any:
    """NeMo's aggregated tokenizer over every config, as a Magpie model builds it."""
    pytest.importorskip("nemo")
    pytest.importorskip("pyopenjtalk")
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from nemo.utils import logging as nemo_logging
    from omegaconf import OmegaConf

    nemo_logging.setLevel(nemo_logging.ERROR)  # one warning per unknown symbol otherwise
    return setup_tokenizers(OmegaConf.create(CONFIGS), mode="test")


@pytest.fixture(scope="module")
def ours(no_network: None) -> dict[str, JapaneseTokenizer]:
    pytest.importorskip("pyopenjtalk")
    tokenizers = {}
    for name, cfg in CONFIGS.items():
        spec = JapaneseTokenizerSpec.from_config(cfg)
        tokenizers[name] = JapaneseTokenizer(spec, build_japanese_tokens(spec))
    return tokenizers


needs_nemo = pytest.mark.needs_reference


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tokens_equal_nemo(name: str, nemo: Any, ours: dict[str, JapaneseTokenizer]) -> None:
    assert ours[name].tokens == nemo.tokenizers[name].tokens


@needs_nemo
def test_g2p_equals_nemo(nemo: Any, ours: dict[str, JapaneseTokenizer]) -> None:
    for name in ("japanese_phoneme", "japanese_upper", "japanese_mixed"):
        reference = nemo.tokenizers[name].g2p
        mismatches = [
            (text, want, got)
            for text in SENTENCES
            if (want := reference(text.lower())) != (got := ours[name].g2p(text.lower()))
        ]
        assert not mismatches, "\n".join(f"{name} {t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:5])


def _nemo_encode(tokenizer: Any, text: str) -> list[int] | None:
    """NeMo's encoding, or None where NeMo fails: with punct off it has no PUNCT_LIST to test a symbol against."""
    try:
        return list(tokenizer.encode(text))
    except AttributeError as error:
        assert "PUNCT_LIST" in str(error) and not tokenizer.punct
        return None


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_equals_nemo(name: str, nemo: Any, ours: dict[str, JapaneseTokenizer]) -> None:
    reference = nemo.tokenizers[name]
    compared = [(text, want) for text in SENTENCES if (want := _nemo_encode(reference, text)) is not None]
    mismatches = [(text, want, got) for text, want in compared if want != (got := ours[name].encode(text))]
    assert not mismatches, "\n".join(f"{t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:10])
    assert len(compared) > len(SENTENCES) // 4
    # the table exercises what it is for: most kana, both pitches, letters and marks occur
    assert len({i for text in SENTENCES for i in ours[name].encode(text)}) > 60


@needs_nemo
@pytest.mark.parametrize("name", ["japanese_phoneme", "japanese_mixed"])
def test_fuzz_equals_nemo(name: str, nemo: Any, ours: dict[str, JapaneseTokenizer]) -> None:
    pieces = st.one_of(
        st.text(
            st.sampled_from(list("あかさんっーャアカヴ日本語東京人々0123abAB '’、。！？・「」…〜 \u3000\n!?.,-%")),
            max_size=6,
        ),
        st.sampled_from(["こんにちは", "東京", "Google", "NHK", "2024年", "ラーメン", "I'm", "です。", "？！"]),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(pieces, max_size=6).map("".join))
    def check(text: str) -> None:
        assert ours[name].encode(text) == _nemo_encode(nemo.tokenizers[name], text)

    check()


@needs_nemo
def test_known_encodings(ours: dict[str, JapaneseTokenizer]) -> None:
    """Spot checks, spelt out as symbols, of what the table compares: each rule once."""
    tokenizer = ours["japanese_default"]

    def symbols(text: str) -> str:
        return "".join(tokenizer.tokens[i] for i in tokenizer.encode(text))

    assert symbols("こんにちは") == "0コ1ン1ニ1チ1ワ"  # heiban, pronounced ワ
    assert symbols("世界") == "1セ0カ0イ"  # atamadaka
    # letters OpenJTalk only spells (フィラー) stay letters; the space between two such words is lost in OpenJTalk
    assert symbols("qwxz hello") == "qwxzhello"
    assert symbols("pen") == "1ペ0ン"  # a word it knows is read
    assert symbols("こんにちは！？") == "0コ1ン1ニ1チ1ワ!?"  # NFKC: full-width marks are ASCII ones
    assert symbols("ちょっと") == "1チョ0ッ0ト"  # a small kana joins its mora
    assert symbols("  こんにちは  世界  ") == "0コ1ン1ニ1チ1ワ1セ0カ0イ"  # OpenJTalk drops spaces
    assert symbols("😀こんにちは😀😀世界😀") == "0コ1ン1ニ1チ1ワ 1セ0カ0イ"  # a foreign symbol is one inner space


def test_pitch_patterns() -> None:
    assert pitch_pattern(0, 4) == [0, 1, 1, 1]  # heiban
    assert pitch_pattern(1, 4) == [1, 0, 0, 0]  # atamadaka
    assert pitch_pattern(2, 4) == [0, 1, 0, 0]  # nakadaka
    assert pitch_pattern(3, 4) == [0, 1, 1, 0]
    assert pitch_pattern(4, 4) == [0, 1, 1, 1]  # odaka
    assert pitch_pattern(7, 2) == [0, 1]
    assert pitch_pattern(1, 1) == [1]
    assert pitch_pattern(0, 0) == []


def test_tokens_without_nemo() -> None:
    tokens = build_japanese_tokens(JapaneseTokenizerSpec())
    assert tokens[:3] == [" ", "0", "1"] and tokens[-2:] == ["<pad>", "<oov>"]
    assert "ヴ" in tokens and "a" in tokens and "A" not in tokens and "。" in tokens


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (_ja(text_preprocessing_func="f"), "text_preprocessing_func"),
        (_ja({"word_tokenize_func": "f"}), "word_tokenize_func"),
        (_ja({"phoneme_dict": "ja.txt"}), "phoneme_dict"),
        (_ja({"ascii_letter_case": "title"}), "ascii_letter_case"),
        ({**_ja(), "g2p": {"_target_": "nemo.collections.tts.g2p.models.ja_jp_ipa.JapaneseG2p"}}, "JapaneseG2p"),
        ({"_target_": "x.IPATokenizer", "g2p": {"_target_": G2P}}, "JapanesePhonemeTokenizer"),
        ({"_target_": TOKENIZER}, "g2p"),
    ],
)
def test_from_config_names_what_it_cannot_do(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JapaneseTokenizerSpec.from_config(cfg)
