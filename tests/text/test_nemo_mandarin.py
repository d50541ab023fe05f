"""NeMo's ChinesePhonemesTokenizer + ChineseG2p vs ggtts.text.nemo_mandarin, which runs without NeMo.

Both read text with the same installed jieba and pypinyin; the reference is NeMo built the way a Magpie model builds
it (``setup_tokenizers`` over a ``text_tokenizers`` config), over a pinyin dictionary written here: every syllable
pypinyin reads in the test text gets made-up phonemes, except a few left out on purpose (NeMo drops those).

NeMo's G2P imports pypinyin-dict to load CC-CEDICT's readings into pypinyin. Where that package is not installed,
both sides get a stand-in whose ``load()`` does nothing, so both read with pypinyin's own data.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import jieba
import pypinyin
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.errors import GGTTSError
from ggtts.text.nemo_mandarin import (
    MandarinTokenizer,
    MandarinTokenizerSpec,
    build_mandarin_tokens,
    parse_pinyin_dict,
)

TOKENIZER = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.ChinesePhonemesTokenizer"
G2P = "nemo.collections.tts.g2p.models.zh_cn_pinyin.ChineseG2p"
DICT_PATH = "zh/ipa_dict_test.txt"


def _zh(g2p: dict[str, Any] | None = None, **tokenizer: Any) -> dict[str, Any]:
    return {"_target_": TOKENIZER, **tokenizer, "g2p": {"_target_": G2P, "phoneme_dict": DICT_PATH, **(g2p or {})}}


CONFIGS: dict[str, dict[str, Any]] = {
    # as the multilingual Magpie config writes it
    "mandarin_phoneme": _zh(
        {
            "word_segmenter": "jieba",
            "phoneme_prefix": "",
            "phoneme_case": "lower",
            "tone_prefix": "#",
            "ascii_letter_prefix": "",
            "ascii_letter_case": "upper",
        },
        punct=True,
        apostrophe=True,
        pad_with_space=True,
    ),
    "mandarin_default": _zh(),  # no word segmenter: pypinyin reads the whole text as one phrase
    "mandarin_mixed": _zh(
        {
            "word_segmenter": "jieba",
            "phoneme_prefix": None,
            "phoneme_case": "mixed",
            "tone_prefix": None,
            "ascii_letter_prefix": "@",
            "ascii_letter_case": "mixed",
            "mapping_file": None,
        },
        silence="<sil>",
        add_blank_at="last",
        apostrophe=False,
    ),
    "mandarin_custom_punct": _zh(
        {"word_segmenter": "jieba", "ascii_letter_case": "lower"},
        non_default_punct_list=["，", "。", "!", "?", "……"],
        space="▁",
    ),
    "mandarin_no_punct": _zh({"word_segmenter": "jieba"}, punct=False, add_blank_at=True, pad_with_space=True),
}

SENTENCES = [
    "你好",
    "你好，世界。",
    "今天天气很好。",
    "我们一起去公园散步吧！",
    "你吃饭了吗？",
    "他是我的好朋友。",
    "中华人民共和国",
    "北京是中国的首都。",
    "上海和广州都是大城市。",
    "我喜欢学习中文。",
    "这本书很有意思。",
    "银行在哪里？",
    "他在银行工作，行不行？",
    "长城很长。",
    "重庆的火锅很重要。",
    "我们还要还钱。",
    "音乐让人快乐。",
    "一个人，一本书，一只猫。",
    "不对，不是，不要。",
    "东西南北",
    "妈妈骂马吗？",
    "绿色的女孩",
    "略微，律师，旅行",
    "儿子，女儿，哪儿",
    "嗯，好的。",
    "哦，是吗？",
    "啊！",
    "谢谢你的帮助。",
    "对不起，我迟到了。",
    "春眠不觉晓，处处闻啼鸟。",
    "床前明月光，疑是地上霜。",
    "学而时习之，不亦说乎？",
    "我今天去了Apple Store，买了一个iPhone。",
    "我用Python写代码。",
    "AI和ML",
    "NVIDIA的GPU",
    "Hello World",
    "hello, world!",
    "OK",
    "ok",
    "I'm fine, thank you.",
    "don't can't",
    "他说：“我不知道。”",
    "‘单引号’",
    "（括号）和(半角括号)",
    "【重要】通知",
    "「引号」《书名》",
    "你好；再见：好的、谢谢",
    "什么？！真的吗？",
    "等等……",
    "——破折号",
    "a-b/c [d] {e}",
    '"quoted"',
    "2024年1月1日",
    "今天是2024年12月31日。",
    "123",
    "1,000元",
    "3.14",
    "电话号码是010-12345678。",
    "下午3点45分",
    "10%的折扣",
    "第1名",
    "100个人",
    "一二三四五六七八九十",
    "百千万亿",
    "０１２３４５６７８９",
    "ＡＢＣ",
    "Ｈｅｌｌｏ",
    "，。？！",
    "!?",
    "...",
    "",
    " ",
    "　",
    "   ",
    "你好 世界",
    "你好　世界",
    "你好  世界  ",
    "\t你好\n世界\r\n",
    "你好\u00a0世界",
    "😀 你好 🐕",
    "中文和日本語",
    "こんにちは",
    "한국어",
    "Привет",
    "café naïve straße",
    "@ # $ % ^ & * _ + = | \\ ~ `",
    "<pad> <oov>",
    "email@example.com https://nvidia.cn/zh",
    "'",
    "’",
    "龘靐齉",
    "〇",
    "々",
    "虽然下雨了，但是我们还是去了。",
    "如果明天不下雨，我们就去爬山。",
    "因为他病了，所以没来上课。",
    "小明的妈妈是老师。",
    "我觉得这个主意不错。",
    "请问洗手间在哪里？",
    "这件衣服多少钱？",
    "祝你生日快乐！",
    "新年快乐，万事如意。",
    "人工智能正在改变世界。",
    "语音合成技术越来越好了。",
]
# joins between words, through every separator
_WORDS = ("中国", "你好", "Hello", "123", "ＯＫ", "银行", "it's")
_SEPARATORS = ("", " ", "　", "，", "。", "！", "?", "、", "\n", "-")
SENTENCES += [f"{a}{sep}{b}" for a in _WORDS for sep in _SEPARATORS for b in _WORDS[:3]]

# syllables the dictionary leaves out: NeMo drops them (and logs an error)
MISSING = ("yin", "zhong")
# the fuzz's alphabet, whose readings the dictionary also covers
FUZZ_CHARACTERS = list("你好中国银行长重还乐了的一不儿绿吗嗯 \u3000\n，。？！、“”（）,.!?-'’abAB0123")
FUZZ_WORDS = ["你好", "中国", "Hello", "iPhone", "I'm", "银行", "长城", "2024年", "……", "不要", "哪儿"]


@pytest.fixture(scope="module")
def cedict() -> Iterator[None]:
    """pypinyin-dict's CC-CEDICT loader, or a stand-in that loads nothing where it is not installed."""
    if find_spec("pypinyin_dict") is not None:
        yield
        return
    package, data, loader = (types.ModuleType(n) for n in ("pypinyin_dict", "pinyin_data", "cc_cedict"))
    loader.load = lambda: None  # type: ignore[attr-defined]
    data.cc_cedict = loader  # type: ignore[attr-defined]
    package.pinyin_data = data  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as patch:
        for name, module in [
            ("pypinyin_dict", package),
            ("pypinyin_dict.pinyin_data", data),
            ("pypinyin_dict.pinyin_data.cc_cedict", loader),
        ]:
            patch.setitem(sys.modules, name, module)
        yield


def _syllables(cedict: None) -> set[str]:
    """Every syllable pypinyin reads in the test text, cut by jieba or not, in any letter case."""
    del cedict
    texts = [*SENTENCES, *FUZZ_CHARACTERS, *FUZZ_WORDS, "".join(FUZZ_CHARACTERS)]
    syllables = set()
    for text in texts:
        for cased in (text, text.upper(), text.lower()):
            for words in ([cased], list(jieba.cut(cased))):
                for word in words:
                    for reading in pypinyin.lazy_pinyin(
                        word, style=pypinyin.Style.TONE3, neutral_tone_with_five=True, errors="ignore"
                    ):
                        if reading[-1:] in "12345":
                            syllables.add(reading[:-1])
    return syllables


def _phonemes(syllable: str) -> str:
    """Made-up phonemes: the initial (or a glottal stop), then the rest; some upper case, for phoneme_case."""
    split = 2 if syllable[:2] in ("zh", "ch", "sh") else 1
    initial, rest = syllable[:split], syllable[split:]
    if initial in "aeiouvy":
        initial, rest = "ʔ", syllable
    return f"{initial} {rest.upper() if len(rest) > 2 else rest}".strip()


@pytest.fixture(scope="module")
def dict_text(cedict: None) -> str:
    """A pinyin dictionary in NeMo's format, with comments, blank lines, CRLF, an upper-case and a repeated entry."""
    syllables = sorted(_syllables(cedict) - set(MISSING))
    lines = [";;; made-up phonemes for the test syllables", ""]
    lines += [f"{s.upper() if s == 'hao' else s}\t{_phonemes(s)}" for s in syllables]
    lines += ["ni\tn I\tignored", "", "de\tD e\r"]  # replaces ni and de; a third field is ignored
    return "\r\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def nemo(no_network: None, cedict: None, dict_text: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """NeMo's aggregated tokenizer over every config, as a Magpie model builds it."""
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from nemo.utils import logging as nemo_logging
    from omegaconf import OmegaConf

    path = tmp_path_factory.mktemp("zh") / "ipa_dict_test.txt"
    path.write_bytes(dict_text.encode("utf-8"))
    configs = {name: {**cfg, "g2p": {**cfg["g2p"], "phoneme_dict": str(path)}} for name, cfg in CONFIGS.items()}
    nemo_logging.setLevel(nemo_logging.CRITICAL)  # one error per missing syllable, one warning per unknown symbol
    return setup_tokenizers(OmegaConf.create(configs), mode="test")


@pytest.fixture(scope="module")
def ours(no_network: None, cedict: None, dict_text: str) -> dict[str, MandarinTokenizer]:
    tokenizers = {}
    for name, cfg in CONFIGS.items():
        spec = MandarinTokenizerSpec.from_config(cfg)
        tokenizers[name] = MandarinTokenizer(spec, build_mandarin_tokens(spec, dict_text), dict_text)
    return tokenizers


needs_nemo = pytest.mark.needs_reference


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tokens_equal_nemo(name: str, nemo: Any, ours: dict[str, MandarinTokenizer]) -> None:
    assert ours[name].tokens == nemo.tokenizers[name].tokens
    assert len(ours[name].tokens) > 90  # the dictionary's phonemes are in


@needs_nemo
def test_g2p_equals_nemo(nemo: Any, ours: dict[str, MandarinTokenizer]) -> None:
    for name in ("mandarin_phoneme", "mandarin_default", "mandarin_mixed"):
        reference = nemo.tokenizers[name].g2p
        mismatches = [(t, w, g) for t in SENTENCES if (w := reference(t)) != (g := ours[name].g2p(t))]
        assert not mismatches, "\n".join(f"{name} {t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:5])


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_equals_nemo(name: str, nemo: Any, ours: dict[str, MandarinTokenizer]) -> None:
    reference = nemo.tokenizers[name]
    mismatches = [(t, w, g) for t in SENTENCES if (w := list(reference.encode(t))) != (g := ours[name].encode(t))]
    assert not mismatches, "\n".join(f"{t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:10])
    # the table exercises what it is for: many phonemes, every tone, letters and marks occur
    assert len({i for text in SENTENCES for i in ours[name].encode(text)}) > 80


@needs_nemo
@pytest.mark.parametrize("name", ["mandarin_phoneme", "mandarin_mixed"])
def test_fuzz_equals_nemo(name: str, nemo: Any, ours: dict[str, MandarinTokenizer]) -> None:
    pieces = st.one_of(st.text(st.sampled_from(FUZZ_CHARACTERS), max_size=6), st.sampled_from(FUZZ_WORDS))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(pieces, max_size=6).map("".join))
    def check(text: str) -> None:
        assert ours[name].encode(text) == list(nemo.tokenizers[name].encode(text))

    check()


def test_known_encodings(cedict: None) -> None:
    """Spot checks, spelt out as symbols, of each rule once, over a dictionary of four syllables."""
    dict_text = ";;; test\nni\tN I\nhao\th AO\n\nshi\tsh ir\njie\tj IE\n"
    spec = MandarinTokenizerSpec.from_config(CONFIGS["mandarin_phoneme"])
    tokenizer = MandarinTokenizer(spec, build_mandarin_tokens(spec, dict_text), dict_text)

    def symbols(text: str) -> str:
        return " ".join(tokenizer.tokens[i] for i in tokenizer.encode(text))

    assert symbols("你好") == "  n i #3 h ao #3  "  # lowercased phonemes, tone marks, a pad at each end
    assert symbols("你好，世界！") == "  n i #3 h ao #3 ， sh ir #4 j ie #4 ！  "  # Chinese marks stay Chinese
    assert symbols("Hi 好") == "  H I   h ao #3  "  # letters upper-cased, one space kept
    assert symbols("  你  好  ") == "  n i #3   h ao #3  "  # no leading, double or trailing space
    assert symbols("你们好") == "  n i #3 h ao #3  "  # 们 (men) is not in the dictionary: dropped
    assert symbols("好123好") == "  h ao #3 h ao #3  "  # digits: 1..5 read as an empty syllable, 0, 6..9 unknown
    assert symbols("it's") == "  I T ' S  "


def test_tokens_without_nemo() -> None:
    dict_text = "ba\tb a\nBA\tB A2\nzhi\tzh ir\n"
    tokens = build_mandarin_tokens(MandarinTokenizerSpec(), dict_text)
    # upper-cased phonemes with "#", the later "ba" line wins; tones; lower-case letters; the marks
    assert tokens[:8] == [" ", "#A2", "#B", "#IR", "#ZH", "#1", "#2", "#3"]
    assert tokens[10:12] == ["a", "b"] and tokens[-2:] == ["<pad>", "<oov>"]
    assert "，" in tokens and "'" in tokens and "A" not in tokens
    assert parse_pinyin_dict(MandarinTokenizerSpec(phoneme_case="mixed", phoneme_prefix=""), dict_text) == {
        "ba": ["B", "A2"],
        "zhi": ["zh", "ir"],
    }


def test_missing_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pypinyin_dict", "pypinyin_dict.pinyin_data", "pypinyin_dict.pinyin_data.cc_cedict"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError
    spec = MandarinTokenizerSpec(word_segmenter="jieba")
    with pytest.raises(GGTTSError, match="pip install jieba pypinyin pypinyin-dict"):
        MandarinTokenizer(spec, [" "], "")


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (_zh(text_preprocessing_func="f"), "text_preprocessing_func"),
        (_zh({"word_tokenize_func": "f"}), "word_tokenize_func"),
        (_zh({"word_segmenter": "pkuseg"}), "word_segmenter"),
        (_zh({"phoneme_case": "title"}), "phoneme_case"),
        (_zh({"ascii_letter_case": "title"}), "ascii_letter_case"),
        (_zh({"phoneme_dict": {"ni": ["n", "i"]}}), "phoneme_dict"),
        (_zh({"g2p_mode": "x"}), "g2p_mode"),
        ({**_zh(), "g2p": {"_target_": "nemo.collections.tts.g2p.models.i18n_ipa.IpaG2p"}}, "IpaG2p"),
        ({"_target_": "x.IPATokenizer", "g2p": {"_target_": G2P}}, "ChinesePhonemesTokenizer"),
        ({"_target_": TOKENIZER}, "g2p"),
    ],
)
def test_from_config_names_what_it_cannot_do(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MandarinTokenizerSpec.from_config(cfg)


def test_bad_dictionary_line_is_named() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_pinyin_dict(MandarinTokenizerSpec(), "ni\tn i\nhao h ao\n")


def test_from_config_keeps_the_dictionary_path() -> None:
    spec = MandarinTokenizerSpec.from_config(CONFIGS["mandarin_phoneme"])
    assert spec.phoneme_dict == DICT_PATH and spec.word_segmenter == "jieba" and spec.ascii_letter_case == "upper"
