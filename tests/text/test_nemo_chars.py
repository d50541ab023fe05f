"""NeMo's ArabicCharsTokenizer and HindiCharsTokenizer vs ggtts.text.nemo_chars, which runs without NeMo.

The reference is NeMo itself, built the way a Magpie model builds it: ``setup_tokenizers`` over a
``text_tokenizers`` config and the model config's ``nemo_version`` stamp, which dates unset charset versions.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.text.nemo_chars import CharsTokenizer, CharsTokenizerSpec, build_chars_tokens, default_charset
from ggtts.text.nemo_ipa import tokenizer_size

CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers."
ARABIC = CHARS + "ArabicCharsTokenizer"
HINDI = CHARS + "HindiCharsTokenizer"

# name -> (config, the model config's nemo_version)
CONFIGS: dict[str, tuple[dict[str, Any], str | None]] = {
    # NeMo's defaults today: charset_version 2, ar-MSA's marks, apostrophe
    "arabic_default": ({"_target_": ARABIC}, None),
    # the released multilingual Magpie pins charset_version 1 (two copies of the letters, the later ids win)
    "arabic_v1": ({"_target_": ARABIC, "charset_version": 1}, None),
    "arabic_v2_padded": ({"_target_": ARABIC, "charset_version": 2, "pad_with_space": True}, None),
    # an unset version in a config stamped before 2.8.0 is version 1; a pinned one stays
    "arabic_dated": ({"_target_": ARABIC}, "2.6.0"),
    "arabic_dated_pinned": ({"_target_": ARABIC, "charset_version": 2}, "2.7.1"),
    "arabic_dated_rc": ({"_target_": ARABIC}, "2.8.0rc0"),
    # an explicit null falls back to the base class's marks, in their unsorted order
    "arabic_null_punct": (
        {"_target_": ARABIC, "non_default_punct_list": None, "apostrophe": False, "add_blank_at": "last"},
        None,
    ),
    "arabic_no_punct": ({"_target_": ARABIC, "punct": False, "add_blank_at": True}, None),
    # own characters (a multi-character entry is in the vocabulary, never in an encoding) and marks (a space too)
    "arabic_custom": (
        {"_target_": ARABIC, "chars": ["a", "b", "ب", "ab", "ـ"], "non_default_punct_list": [" ", "؟", "!", "..."]},
        "2.6.0",
    ),
    "arabic_string_chars": ({"_target_": ARABIC, "chars": "abcابتَ", "non_default_punct_list": ".,"}, None),
    "hindi_default": ({"_target_": HINDI}, None),
    "hindi_v1": ({"_target_": HINDI, "charset_version": 1, "punct_version": 1}, None),
    "hindi_dated": ({"_target_": HINDI, "pad_with_space": True}, "2.7.0"),
    "hindi_dated_charset_pinned": ({"_target_": HINDI, "charset_version": 2}, "1.23.0"),
    "hindi_custom_punct": (
        {
            "_target_": HINDI,
            "non_default_punct_list": ["!", "?", "।"],
            "punct_version": 1,  # ignored: the list decides
            "add_blank_at": True,
            "pad_with_space": True,
        },
        None,
    ),
    "hindi_bare": ({"_target_": HINDI, "punct": False, "apostrophe": False, "chars": None}, None),
}

ARABIC_SENTENCES = [
    "مرحبا بالعالم",
    "مَرْحَبًا بِالْعَالَمِ",
    "السَّلَامُ عَلَيْكُمْ وَرَحْمَةُ اللَّهِ",
    "كيف حالك؟ أنا بخير، شكرا.",
    "قال: «هذا كتاب جديد»؛ ثم ذهب!",
    "في عام 2024 زار 3 ملايين شخص المدينة.",
    "الرقم ١٢٣٤٥ والرقم ٦٧٨٩٠",
    "الساعة ٣:٤٥ مساءً",
    "سعر الكتاب ٢٥٫٥٠ درهم أو 25.50 درهم",
    "مرحبا Hello كيف حالك World",
    "أحب لغة Python كثيرا",
    "NVIDIA و GPU و TTS",
    "إِنَّ مَعَ الْعُسْرِ يُسْرًا",
    "ذَهَبَ الوَلَدُ إِلَى المَدْرَسَةِ",
    "قرأتُ الكتابَ قراءةً متأنيةً",
    "مُدَرِّسٌ، مُدَرِّسًا، مُدَرِّسٍ",
    "الْقُرْآنُ الْكَرِيمُ",
    "هٰذَا رَجُلٌ",
    "مسؤول، مسئول، سماء، شيء",
    "إبراهيم وإسماعيل وأحمد وآدم",
    "مستشفى ومصطفى وعلى",
    "مدرسة جميلة",
    "کتاب فارسی پ چ ژ گ",  # Persian letters the set lacks
    "ٱلْحَمْدُ لِلَّهِ",  # alef wasla
    "الـــعـــربـــيـــة",  # tatweel
    "ﻻ ﷲ ﷺ",  # presentation forms, ligatures
    "ا\u0653 و\u0654 ي\u0654 ا\u0655 ا\u0654",  # decomposed: NFC makes آ ؤ ئ إ أ
    "\u0622\u0624\u0626",
    "كلمة\u200cكلمة\u200dكلمة",  # zero-width (non-)joiner
    "\u200fمرحبا\u200e Hello",  # direction marks
    "  مرحبا   بالعالم  ",
    "\tمرحبا\nبالعالم\r\n",
    "مرحبا\u00a0بالعالم\u2009!",
    "مرحبا ؟ ، ؛",
    '?,.!-:;/"()[]{}',
    "...",
    "",
    " ",
    "   ",
    "،",
    "'",
    "’",
    "don’t can't won't",
    "L'homme O’Neil",
    "it's 'quoted' “double” ‘single’",
    "«guillemets» ‹single›",
    "— – ‒ … ¿ ¡",
    "@ # $ % ^ & * _ + = | \\ ~ `",
    "< > <pad> <oov> <blank>",
    "email@example.com https://nvidia.com/ar",
    "ABC abc XYZ xyz",
    "Ærø café naïve Zoë",
    "😀 مرحبا 🐕",
    "中文 日本語 한국어",
    "Привет мир",
    "नमस्ते दुनिया",
    "ء",
    "ً ٌ ٍ َ ُ ِ ّ ٰ ْ",
    "ّ",
    "a",
    "z Z",
    "0 1 2 3 4 5 6 7 8 9",
    "٠ ١ ٢ ٣ ٤ ٥ ٦ ٧ ٨ ٩",
    "۰۱۲۳ ۴۵۶",  # Persian digits
    "١٢٣,٤٥٦.٧٨",
    "ab ab  ab",
    "مرحبا.",
    "مرحبا .",
    "مرحبا\t.",
]

HINDI_SENTENCES = [
    "नमस्ते दुनिया",
    "मैं हिंदी में बात करता हूँ।",
    "यह एक परीक्षा है॥",
    "भारत एक विशाल देश है, जिसकी राजधानी नई दिल्ली है।",
    "क्या आप ठीक हैं? हाँ, मैं ठीक हूँ!",
    "अंगड़ाई",
    "क़लम ख़बर ग़लत ज़रूर फ़ोन ड़ ढ़ य़",  # nukta letters: NFC splits U+0958.. into letter + nukta
    "\u0958\u0959\u095a\u095b\u095c\u095d\u095e\u095f",
    "क\u093c ड\u093c",
    "ॐ नमः शिवाय",
    "सोऽहम्",  # avagraha
    "२०२४ में ३ करोड़ लोग",
    "2024 में 3 करोड़ लोग",
    "०१२३४५६७८९",
    "मैंने Python में code लिखा",
    "Hello नमस्ते World",
    "HELLO hello Hello",
    "ऋषि ॠ ऍ ऑ ऒ ऎ",
    "कृष्ण क्षत्रिय ज्ञान श्री त्र",
    "क्\u200dष क्\u200cष",
    "ळ ऩ ऱ ॡ ॢ ॣ",
    "ऀ ॎ ॏ ॑ ॒ ॓ ॔",
    "  नमस्ते   दुनिया  ",
    "\tनमस्ते\nदुनिया",
    "नमस्ते\u00a0दुनिया",
    "। ॥ ।।",
    "राम' श्याम’",
    '"उद्धरण" (कोष्ठक) [वर्ग] {घुंघराले}',
    "a-b: c; d/e",
    "ক বাংলা ਪੰਜਾਬੀ",
    "مرحبا नमस्ते",
]
# joins between words, through every separator
_WORDS = ("مَرْحَبًا", "كتاب", "Hello", "123", "١٢٣", "नमस्ते", "क़लम", "don't", "’")
_SEPARATORS = (" ", "  ", "، ", ", ", "؟", "?", "\t", "\u00a0", "-", "")
SENTENCES = ARABIC_SENTENCES + HINDI_SENTENCES
SENTENCES += [f"{a}{sep}{b}" for a in _WORDS for sep in _SEPARATORS for b in _WORDS[:4]]


@pytest.fixture(scope="module")
def nemo(no_network: None) -> dict[str, Any]:
    """NeMo's tokenizer for every config, as a Magpie model of that nemo_version builds it."""
    pytest.importorskip("nemo")
    import warnings

    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from nemo.utils import logging as nemo_logging
    from omegaconf import OmegaConf

    nemo_logging.setLevel(nemo_logging.ERROR)  # one warning per dropped character otherwise
    tokenizers = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # charset_version=1 and punct_version=1 are frozen
        for name, (cfg, nemo_version) in CONFIGS.items():
            aggregated = setup_tokenizers(OmegaConf.create({name: cfg}), cfg_nemo_version=nemo_version)
            tokenizers[name] = aggregated.tokenizers[name]
    return tokenizers


@pytest.fixture(scope="module")
def ours() -> dict[str, CharsTokenizer]:
    tokenizers = {}
    for name, (cfg, nemo_version) in CONFIGS.items():
        spec = CharsTokenizerSpec.from_config(cfg, nemo_version=nemo_version)
        tokenizers[name] = CharsTokenizer(spec, build_chars_tokens(spec))
    return tokenizers


needs_nemo = pytest.mark.needs_reference


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tokens_equal_nemo(name: str, nemo: dict[str, Any], ours: dict[str, CharsTokenizer]) -> None:
    assert ours[name].tokens == nemo[name].tokens


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_equals_nemo(name: str, nemo: dict[str, Any], ours: dict[str, CharsTokenizer]) -> None:
    mismatches = [
        (text, want, got)
        for text in SENTENCES
        if (want := list(nemo[name].encode(text))) != (got := ours[name].encode(text))
    ]
    assert not mismatches, "\n".join(f"{t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:10])
    # the table exercises what it is for: many characters kept, some dropped
    assert len({i for text in SENTENCES for i in ours[name].encode(text)}) > min(10, len(ours[name].tokens) // 2)


@needs_nemo
@pytest.mark.parametrize("name", ["arabic_v1", "arabic_custom", "hindi_default", "hindi_custom_punct"])
def test_fuzz_equals_nemo(name: str, nemo: dict[str, Any], ours: dict[str, CharsTokenizer]) -> None:
    alphabet = st.sampled_from(
        list("ابتثمرحكلءآأإؤئىيةـًٌٍَُِّْٰ\u0653\u0654\u0655٠١٢٣")
        + list("कखगअआािीुंँ़्।॥\u0958\u095e०१")
        + list("abAB01 '’\t\n\u00a0\u200c,.?!؟،؛-:\"()…«»")
    )

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(alphabet, max_size=16))
    def check(text: str) -> None:
        assert ours[name].encode(text) == list(nemo[name].encode(text))

    check()


@needs_nemo
def test_known_encodings(ours: dict[str, CharsTokenizer]) -> None:
    """Spot checks, spelt out as characters, of what the table compares: each rule once."""

    def chars(name: str, text: str) -> str:
        tokenizer = ours[name]
        return "".join(tokenizer.tokens[i] for i in tokenizer.encode(text))

    assert chars("arabic_default", "  مرحبا   Hello\t!  ") == "مرحبا Hello!"  # spaces collapse, tab drops
    assert chars("arabic_default", "ا\u0653") == "آ"  # NFC
    assert chars("arabic_default", "don’t") == "don't"
    assert chars("arabic_default", "کتاب ١٢٣ 123") == "تاب"  # Persian kaf, digits: not in the set
    assert chars("arabic_custom", "a  b") == "a  b"  # a space among the marks is kept every time
    assert chars("hindi_default", "\u0958") == "क\u093c"  # NFC decomposes qa
    assert chars("hindi_v1", "Hello ।॥") == "ello ।"  # version 1: lower-case Latin only; the danda a letter
    assert chars("hindi_dated", "a") == " a "  # pad_with_space
    # repeated entries: the later id is used (v1's second copy of the letters; Hindi's danda among the marks)
    v1 = ours["arabic_v1"]
    assert v1.encode("ب") == [len(v1.tokens) - 1 - v1.tokens[::-1].index("ب")]
    assert v1.tokens.count("ب") == 2
    hindi = ours["hindi_default"]
    assert hindi.tokens.count("।") == 2 and hindi.encode("।") == [len(hindi.tokens) - 1 - hindi.tokens[::-1].index("।")]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sizes_agree_with_tokenizer_size(name: str) -> None:
    """nemo_ipa.tokenizer_size counts the rows these vocabularies have."""
    cfg, nemo_version = CONFIGS[name]
    spec = CharsTokenizerSpec.from_config(cfg, nemo_version=nemo_version)
    assert len(build_chars_tokens(spec)) == tokenizer_size(name, cfg, nemo_version=nemo_version)


def test_versions_dated_by_nemo_version() -> None:
    unset = {"_target_": ARABIC}
    assert CharsTokenizerSpec.from_config(unset).chars == tuple(default_charset("ArabicCharsTokenizer", 2))
    assert CharsTokenizerSpec.from_config(unset, nemo_version="2.7.0").chars == tuple(
        default_charset("ArabicCharsTokenizer", 1)
    )
    assert len(CharsTokenizerSpec.from_config(unset, nemo_version="2.8.0").chars) == 45 + 52
    short = {"_target_": "ArabicCharsTokenizer"}  # NeMo dates only the class named in full
    assert len(CharsTokenizerSpec.from_config(short, nemo_version="2.7.0").chars) == 45 + 52
    hindi = CharsTokenizerSpec.from_config({"_target_": HINDI}, nemo_version="2.0.0")
    assert "।" not in hindi.punct_marks and "a" in hindi.chars and "A" not in hindi.chars


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"_target_": CHARS + "EnglishCharsTokenizer"}, "EnglishCharsTokenizer"),
        ({"_target_": ARABIC, "text_preprocessing_func": "f"}, "text_preprocessing_func"),
        ({"_target_": ARABIC, "punct_version": 1}, "punct_version"),
        ({"_target_": ARABIC, "charset_version": 3}, "charset_version"),
        ({"_target_": HINDI, "punct_version": "2"}, "punct_version"),
        ({"_target_": HINDI, "non_default_punct_list": [1, 2]}, "non_default_punct_list"),
        ({"_target_": HINDI, "chars": 5}, "chars"),
    ],
)
def test_from_config_names_what_it_cannot_do(cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CharsTokenizerSpec.from_config(cfg)


def test_foreign_vocabulary_is_refused() -> None:
    spec = CharsTokenizerSpec.from_config({"_target_": ARABIC})
    with pytest.raises(ValueError, match="space token"):
        CharsTokenizer(spec, ["a", " "])
