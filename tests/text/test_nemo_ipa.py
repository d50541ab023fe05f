"""NeMo's IPATokenizer + IpaG2p (Magpie TTS's phoneme tokenizers) vs ggtts.text.nemo_ipa, which runs without NeMo.

The reference is NeMo itself, built the way a Magpie model builds it: ``setup_tokenizers`` over a
``text_tokenizers`` config, with the G2P's phoneme probability then set to 1.0 as NeMo's inference does. The
dictionaries are small ones written here in NeMo's format (comments, "(1)" variants, tabs, inner spaces).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.text.nemo_ipa import (
    BYT5_VOCAB_SIZE,
    IpaTokenizer,
    IpaTokenizerSpec,
    build_ipa_tokens,
    dict_to_tsv,
    predates_nemo_release,
    tokenizer_size,
)

IPA_TARGET = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.IPATokenizer"
G2P_TARGET = "nemo.collections.tts.g2p.models.i18n_ipa.IpaG2p"
CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers."

EN_DICT = """\
;;; # CMUdict-style header: comment lines start with ";;;"
;;;
!EXCLAMATION-POINT  ˌɛkskləˈmeɪʃənˌpɔɪnt
#HASH-MARK  ˈhæˌmɑɹk
'S  ˈɛs
'TIS  ˈtɪz
3-D  ˈθɹiˌdi
A  ə
A(1)  ˈeɪ
A.  ˈeɪ
AIRPORT  ˈɛɹˌpɔɹt
AND  ənd
AND(1)  ˈænd
BROWN  ˈbɹaʊn
BUS  ˈbʌs
CAFE  kæˈfeɪ
CAFÉ  kæˈfeɪ
CAN'T  ˈkænt
CAT  ˈkæt
DOG  ˈdɔɡ
DON'T  ˈdoʊnt
FOX  ˈfɑks
GPU  ˌdʒiˌpiˈju
HELLO  həˈloʊ
HELLO(1)  hɛˈloʊ
I  ˈaɪ
IS  ˈɪz
IT  ˈɪt
IT'S  ˈɪts
JONES  ˈdʒoʊnz
JUMPS  ˈdʒʌmps
KISS  ˈkɪs
KNOWN  ˈnoʊn
LAZY  ˈleɪzi
LIVE  ˈlaɪv
LIVE(1)  ˈlɪv
MOTHER-IN-LAW  ˈmʌðɚɪnˌlɔ
NAÏVE  naɪˈiv
NEW  ˈnu
NVIDIA  ɛnˈvɪdiə
OF  əv
OVER  ˈoʊvɚ
PEOPLE  ˈpipəl
QUICK  ˈkwɪk
READ  ˈɹɛd
READ(1)  ˈɹid
RECORD  ˈɹɛkɚd
RECORD(1)  ɹɪˈkɔɹd
ROSE  ˈɹoʊz
ROSES  ˈɹoʊzɪz
SPEECH  ˈspitʃ
TEXT  ˈtɛkst
THE  ðə
THE(1)  ˈðə
THE(2)  ði
TO  tə
TO(1)  ˈtu
TOMATO  təˈmeɪˌtoʊ
TOMATO(1)  təˈmɑˌtoʊ
WALK\tˈwɔk
WALKED  ˈwɔ k t
WELL  ˈwɛl
WORLD  ˈwɝld
YORK  ˈjɔɹk
iPhone  ˈaɪˌfoʊn
 INDENTED  ˈɪndɛntɪd
"""
EN_HETERONYMS = "read\nlive\nrecord  \n  bass\n"

ES_DICT = """\
agua  ˈaɣwa
año  ˈaɲo
bien  ˈbjen
casa  ˈkasa
cómo  ˈkomo
corazón  koɾaˈθon
de  de
el  el
es  es
está  esˈta
estás  esˈtas
feliz  feˈliθ
gato  ˈɡato
gracias  ˈɡɾaθjas
hola  ˈola
la  la
mañana  maˈɲana
mundo  ˈmundo
niño  ˈniɲo
perro  ˈpero
pingüino  pinˈɡwino
por  poɾ
qué  ˈke
que  ke
señor  seˈɲoɾ
un  un
una  ˈuna
y  i
"""

DE_DICT = """\
Ball  bal
Bäume  ˈbɔʏ̯mə
das  das
der  deːɐ̯
die  diː
du  duː
ein  aɪ̯n
eine  ˈaɪ̯nə
Fußball  ˈfuːsbal
groß  ɡʁoːs
Hallo  haˈloː
Hallo(1)  ˈhalo
Haus  haʊ̯s
Hund  hʊnt
ich  ɪç
iPhone  ˈaɪ̯foːn
ist  ɪst
Katze  ˈkat͡sə
Mädchen  ˈmɛːtçən
modern  moˈdɛʁn
modern(1)  ˈmoːdɐn
Morgen  ˈmɔʁɡn̩
morgen  ˈmɔʁɡən
Mutter  ˈmʊtɐ
nicht  nɪçt
schön  ʃøːn
Straße  ˈʃtʁaːsə
über  ˈyːbɐ
und  ʊnt
USA  uːʔɛsˈʔaː
Weg  veːk
Weg(1)  vɛk
Welt  vɛlt
"""
DE_HETERONYMS = "modern\nWeg\n"

PT_DICT = """\
olá  oˈla
mundo  ˈmũdu
você  voˈse
não  ˈnɐ̃w̃
coração  koɾaˈsɐ̃w̃
"""

FR_DICT = """\
homme  ɔm
ami  ami
eau  o
il  il
elle  ɛl
est  ɛ
un  œ̃
jour  ʒuʁ
"""

HI_DICT = """\
नमस्ते  nəməsteː
भारत  bʱaːrət
है  hɛː
मैं  mɛ̃ː
हिंदी  ɦɪndiː
"""


def _ipa(locale: str | None, g2p: dict[str, Any], **tokenizer: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"_target_": IPA_TARGET, **tokenizer, "g2p": {"_target_": G2P_TARGET, **g2p}}
    if locale is not None:
        cfg["locale"] = locale
        cfg["g2p"]["locale"] = locale
    return cfg


# name -> (config with {dict}/{het} placeholders for the file paths, dictionary texts, heteronyms text)
CONFIGS: dict[str, tuple[dict[str, Any], list[str], str | None]] = {
    # Magpie multilingual's english_phoneme
    "english_phoneme": (
        _ipa(
            None,
            {
                "phoneme_probability": 0.8,
                "ignore_ambiguous_words": False,
                "use_chars": True,
                "use_stresses": True,
            },
            punct=True,
            apostrophe=True,
            pad_with_space=False,
        ),
        [EN_DICT],
        EN_HETERONYMS,
    ),
    # NeMo's defaults where Magpie sets them: ambiguous words spelt out, no stresses, no graphemes, blank, silence
    "english_defaults": (
        _ipa("en-US", {"ignore_ambiguous_words": True, "use_stresses": False}, silence="<sil>", add_blank_at="last"),
        [EN_DICT],
        EN_HETERONYMS,
    ),
    "english_prefixed": (
        _ipa(
            "en-US",
            {"use_chars": True, "grapheme_case": "lower", "grapheme_prefix": "#", "ignore_ambiguous_words": False},
            apostrophe=True,
            pad_with_space=True,
            add_blank_at=True,
            oov="<unk>",
        ),
        [EN_DICT],
        EN_HETERONYMS,
    ),
    "spanish_phoneme": (
        _ipa(
            "es-ES",
            {"phoneme_probability": 0.8, "ignore_ambiguous_words": False, "use_chars": True, "use_stresses": True},
            punct=True,
            apostrophe=True,
            pad_with_space=True,
        ),
        [ES_DICT],
        None,
    ),
    "german_phoneme": (
        _ipa(
            "de-DE",
            {
                "phoneme_probability": 0.8,
                "ignore_ambiguous_words": False,
                "use_chars": True,
                "use_stresses": True,
                "grapheme_case": "mixed",
                "grapheme_prefix": "#",
            },
            punct=True,
            apostrophe=True,
            pad_with_space=True,
        ),
        [DE_DICT],
        DE_HETERONYMS,
    ),
    "german_ambiguous": (
        _ipa("de-DE", {"use_chars": True, "grapheme_case": "mixed", "grapheme_prefix": "#"}, apostrophe=True),
        [DE_DICT],
        DE_HETERONYMS,
    ),
    "portuguese_Brazilian_phoneme": (
        _ipa(
            "pt-BR",
            {"phoneme_probability": 0.8, "use_chars": True, "grapheme_case": "upper", "grapheme_prefix": "#"},
            apostrophe=True,
            pad_with_space=True,
            locale_specific_punct=False,
        ),
        [PT_DICT],
        None,
    ),
    # French is a ByT5 tokenizer in Magpie, but IpaG2p has French rules (elisions) of its own
    "french_ipa": (
        _ipa("fr-FR", {"use_chars": True, "grapheme_prefix": "#", "ignore_ambiguous_words": False}, apostrophe=True),
        [FR_DICT],
        None,
    ),
    # code-switching: two dictionaries merged in order
    "hindi_phoneme": (
        _ipa(
            "hi-IN",
            {
                "_convert_": "all",  # a list of dictionaries reaches IpaG2p as a list only so
                "phoneme_probability": 0.8,
                "use_chars": True,
                "grapheme_case": "upper",
                "ignore_ambiguous_words": False,
            },
            apostrophe=True,
            pad_with_space=True,
            non_default_punct_list=[",", ".", "?", "!", "।", "-"],
        ),
        [HI_DICT, EN_DICT],
        None,
    ),
}

SENTENCES = [
    "",
    " ",
    "   ",
    "\t\n",
    ".",
    "...",
    "Hello world.",
    "Hello world!",
    "hello, world?",
    "HELLO WORLD",
    "HeLLo WoRLD",
    "  Hello   world  ",
    "Hello\tworld\nagain",
    "The quick brown fox jumps over the lazy dog.",
    "the dog's bus; the dogs' bus.",
    "dog's dogs dogs' cat's cats",
    "airport's airports jones's joneses kiss's kisses roses rose's",
    "It's, it's, IT'S; don't can't won't",
    "a A a. A. a's",
    "I read the record; we record it live, they live.",
    "READ Read read reads",
    "mother-in-law well-known new-york New York 'tis",
    "x-ray x- -x --x a--b well--known",
    "state-of-the-art dog-cat-bus",
    "GPUs NVIDIA's NVIDIAs nvidia",
    "3 dogs, 42 cats and 1,000,000 people.",
    "In 2024-2025 the 3-D model cost $3.50 (or 4%).",
    "1st 2nd 3rd 4th 21st",
    "phone: +1 (555) 123-4567",
    "email me@example.com or visit https://nvidia.com/tts",
    "He said, “Hello” — and left…",
    "‘Quoted’ and “double quoted” and «guillemets» and „German“ quotes.",
    "it’s a dog’s life",
    "café naïve CAFÉ Café cafe",
    "résumé über straße Ærø",
    "piñata jalapeño Zoë",
    "tomato, tomato; TOMATO!",
    "iPhone IPHONE iphone",
    "indented INDENTED",
    "walk walked walks walking",
    "|verbatim words| here",
    "|ˈhɛloʊ| |h| || |<pad>| |a b c|",
    "unterminated | pipe",
    "a|b|c",
    "Hello? Hello! Hello: hello; hello/hello",
    "[brackets] {braces} (parens)",
    "semi;colon,comma.period",
    "tabs\tand\u00a0non-breaking\u2009spaces",
    "emoji 😀 dog 🐕 cat",
    "中文 text 日本語 text",
    "Привет мир hello",
    "the ‘best’ – or worst — case",
    "O'Neil O'NEIL o'neil rock'n'roll",
    "dogs'' 'dogs' ''",
    "'s 's's s",
    "-hello- -world",
    "hello-",
    "z",
    "s",
    "ss",
    "'",
    "-",
    "#",
    "# hash & ampersand * star",
    "_under_score_",
    "ALL CAPS SENTENCE WITH UNKNOWN WORDS LIKE FLIBBERTIGIBBET",
    "flibbertigibbet zxqv",
    "Hola mundo, ¿cómo estás?",
    "¡Qué bien! El niño y la niña.",
    "Mañana, señor; el año de la casa.",
    "El pingüino está feliz. Gracias por favor.",
    "HOLA MUNDO hola Mundo",
    "corazón CORAZÓN Corazón",
    "Hallo Welt, wie geht's?",
    "Der Hund und die Katze.",
    "HALLO hallo Hallo hAllo",
    "Mädchen MÄDCHEN mädchen",
    "Straße STRASSE strasse",
    "Fußball FUSSBALL",
    "Ich bin groß und schön.",
    "Der Weg ist modern, der WEG ist MODERN.",
    "Morgen morgen MORGEN",
    "die USA usa Usa",
    "Bäume über Häuser",
    "Olá mundo, você não está?",
    "Coração CORAÇÃO",
    "L'homme, l'ami, c'est l'eau; qu'il jusqu'au jour, puisqu'elle est là.",
    "L'HOMME D'UN JOUR, J'AI l'hommes l' x'homme",
    "नमस्ते भारत",
    "मैं हिंदी में बात करता हूँ। है॥",
    "नमस्ते, hello world!",
    "A\u0301 decomposed e\u0301 and composed é",
    "ﬁ ligature ﬀ Ⅻ ½ ²",
    "ǅ titlecase ŉ",
    "İstanbul ı i̇",
    "ß ẞ",
    "K (Kelvin) Å (Angstrom)",
    "café'",
    "dog.s cat,s",
    "The end.\n",
]
# every pair of a few words and separators, for the joins between words
_WORDS = ("dog", "dog's", "dogs", "Hello", "hola", "Hallo", "3", "x-y", "über", "'")
_SEPARATORS = (" ", ", ", "-", "'", "  ", "’", ".", "")
SENTENCES += [f"{a}{sep}{b}" for a in _WORDS for sep in _SEPARATORS for b in _WORDS[:4]]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nemo_ipa")
    texts = {
        "en": EN_DICT,
        "en_het": EN_HETERONYMS,
        "es": ES_DICT,
        "de": DE_DICT,
        "de_het": DE_HETERONYMS,
        "pt": PT_DICT,
        "fr": FR_DICT,
        "hi": HI_DICT,
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = root / name
        paths[name].write_text(text, encoding="utf-8")
    return paths


def _with_files(name: str, files: dict[str, Path]) -> dict[str, Any]:
    """The config of ``name`` with NeMo's file paths filled in."""
    cfg, dicts, heteronyms = CONFIGS[name]
    by_text = {EN_DICT: "en", ES_DICT: "es", DE_DICT: "de", PT_DICT: "pt", FR_DICT: "fr", HI_DICT: "hi"}
    paths = [str(files[by_text[text]]) for text in dicts]
    g2p = {**cfg["g2p"], "phoneme_dict": paths[0] if len(paths) == 1 else paths}
    if heteronyms is not None:
        g2p["heteronyms"] = str(files["en_het" if heteronyms == EN_HETERONYMS else "de_het"])
    return {**cfg, "g2p": g2p}


@pytest.fixture(scope="module")
def nemo(no_network: None, files: dict[str, Path]) -> Any:
    """NeMo's aggregated tokenizer over every config, as a Magpie model builds it, phoneme probability 1.0."""
    pytest.importorskip("nemo")
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from nemo.utils import logging as nemo_logging
    from omegaconf import OmegaConf

    nemo_logging.setLevel(nemo_logging.ERROR)  # one warning per dropped symbol otherwise
    aggregated = setup_tokenizers(OmegaConf.create({name: _with_files(name, files) for name in CONFIGS}), mode="test")
    for tokenizer in aggregated.tokenizers.values():
        tokenizer.g2p.phoneme_probability = 1.0  # what NeMo's inference sets; mode="test" does not
    return aggregated


@pytest.fixture(scope="module")
def ours(files: dict[str, Path]) -> dict[str, IpaTokenizer]:
    tokenizers = {}
    for name, (_, dicts, heteronyms) in CONFIGS.items():
        spec = IpaTokenizerSpec.from_config(_with_files(name, files))
        tokens = build_ipa_tokens(spec, dicts if len(dicts) > 1 else dicts[0], heteronyms)
        tokenizers[name] = IpaTokenizer(spec, tokens, dicts if len(dicts) > 1 else dicts[0], heteronyms)
    return tokenizers


def _nemo_encode(tokenizer: Any, text: str) -> list[int]:
    try:
        return list(tokenizer.encode(text))
    except IndexError:  # NeMo pops trailing spaces off an all-space list and then reads ps[-1] of the empty list
        return list(tokenizer.encode(""))


needs_nemo = pytest.mark.needs_reference


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tokens_equal_nemo(name: str, nemo: Any, ours: dict[str, IpaTokenizer]) -> None:
    assert ours[name].tokens == nemo.tokenizers[name].tokens


@needs_nemo
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_encode_equals_nemo(name: str, nemo: Any, ours: dict[str, IpaTokenizer]) -> None:
    reference = nemo.tokenizers[name]
    mismatches = [
        (text, want, got)
        for text in SENTENCES
        if (want := _nemo_encode(reference, text)) != (got := ours[name].encode(text))
    ]
    assert not mismatches, "\n".join(f"{t!r}: NeMo {w} ours {g}" for t, w, g in mismatches[:10])
    # the table exercises what it is for: phonemes, graphemes and drops all occur
    ids = {i for text in SENTENCES for i in ours[name].encode(text)}
    assert len(ids) > 20


@needs_nemo
def test_known_encodings(nemo: Any, ours: dict[str, IpaTokenizer]) -> None:
    """Spot checks, spelt out as symbols, of what the table compares: each rule once."""
    english = ours["english_phoneme"]

    def symbols(text: str) -> str:
        return "".join(english.tokens[i] for i in english.encode(text))

    assert symbols("Hello world!") == "həˈloʊ ˈwɝld!"  # first variant of an ambiguous word
    assert symbols("dog's airport's jones's") == "ˈdɔɡz ˈɛɹˌpɔɹts ˈdʒoʊnzɪz"  # the 's rules
    assert symbols("dogs airports") == "ˈdɔɡz ˈɛɹˌpɔɹts"  # plural s
    assert symbols("read") == "READ"  # heteronym: graphemes
    assert symbols("zq-dog") == "ZQ-ˈdɔɡ"  # unknown hyphenated word: part by part
    assert symbols("café") == "kæˈfeɪ"  # en-US drops accents
    assert symbols("a  b ") == "ə  B"  # repeated spaces stay, trailing ones go
    for name in ("english_phoneme", "german_phoneme"):
        assert ours[name].encode("Hallo Straße") == nemo.tokenizers[name].encode("Hallo Straße")


@needs_nemo
@pytest.mark.parametrize("name", ["english_phoneme", "english_prefixed", "german_phoneme", "spanish_phoneme"])
def test_fuzz_equals_nemo(name: str, nemo: Any, ours: dict[str, IpaTokenizer]) -> None:
    alphabet = st.sampled_from(
        list("adeghlorstwkiyADEGHLORSTWKIY") + list(" ''-.,!?;:\"()|") + list("0123\t\n’“”éÉüÜßñöÖ«»¿¡—")
    )
    pieces = st.one_of(
        st.text(alphabet, max_size=6),
        st.sampled_from(["dog", "DOG's", "dogs'", "hello", "hallo", "Hallo", "Weg", "read", "mother-in-law", "hola"]),
    )

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(pieces, max_size=8).map("".join))
    def check(text: str) -> None:
        assert ours[name].encode(text) == _nemo_encode(nemo.tokenizers[name], text)

    check()


@needs_nemo
def test_fixed_vocab_equals_nemo(no_network: None, files: dict[str, Path]) -> None:
    """A fixed vocabulary trims the dictionary: words with symbols outside it become graphemes."""
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from omegaconf import OmegaConf

    cfg = _with_files("english_phoneme", files)
    full = build_ipa_tokens(IpaTokenizerSpec.from_config(cfg), EN_DICT)
    fixed = [t for t in full if t not in {"ɡ", "W", "ʊ", " ", "<pad>", "<oov>", "!", "'"}] + ["é", "\u0303"]
    cfg = {**cfg, "fixed_vocab": fixed}
    reference = setup_tokenizers(OmegaConf.create({"en": cfg}), mode="test").tokenizers["en"]
    reference.g2p.phoneme_probability = 1.0
    spec = IpaTokenizerSpec.from_config(cfg)
    tokens = build_ipa_tokens(spec, EN_DICT)
    assert tokens == reference.tokens
    ours = IpaTokenizer(spec, tokens, EN_DICT, EN_HETERONYMS)
    for text in SENTENCES:
        assert ours.encode(text) == _nemo_encode(reference, text), text


@needs_nemo
@pytest.mark.parametrize("nemo_version", [None, "2.7.0", "2.8.0rc0", "2.8", "3.0.0", "not a version"])
def test_versioned_punctuation_equals_nemo(nemo_version: str | None, no_network: None, files: dict[str, Path]) -> None:
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import _predates_nemo_release
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from omegaconf import OmegaConf

    assert predates_nemo_release(nemo_version, (2, 8, 0)) == _predates_nemo_release(nemo_version, "2.8.0")
    cfg = _with_files("portuguese_Brazilian_phoneme", files)
    del cfg["locale_specific_punct"]
    reference = setup_tokenizers(OmegaConf.create({"pt": cfg}), cfg_nemo_version=nemo_version).tokenizers["pt"]
    assert build_ipa_tokens(IpaTokenizerSpec.from_config(cfg, nemo_version=nemo_version), PT_DICT) == reference.tokens


CHAR_TOKENIZERS: list[dict[str, Any]] = [
    {"_target_": CHARS + "ArabicCharsTokenizer"},
    {"_target_": CHARS + "ArabicCharsTokenizer", "charset_version": 1},
    {"_target_": CHARS + "ArabicCharsTokenizer", "non_default_punct_list": None, "apostrophe": False},
    {"_target_": CHARS + "ArabicCharsTokenizer", "punct": False, "add_blank_at": "last"},
    {"_target_": CHARS + "ArabicCharsTokenizer", "chars": "abc"},
    {"_target_": CHARS + "HindiCharsTokenizer"},
    {"_target_": CHARS + "HindiCharsTokenizer", "charset_version": 1, "punct_version": 1},
    {"_target_": CHARS + "HindiCharsTokenizer", "non_default_punct_list": ["!", "?"], "add_blank_at": True},
]


@needs_nemo
@pytest.mark.filterwarnings("ignore:.*(charset_version|punct_version)=1:DeprecationWarning")
@pytest.mark.parametrize("nemo_version", [None, "2.6.0"])
def test_char_tokenizer_sizes_equal_nemo(nemo_version: str | None, nemo: Any) -> None:
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from omegaconf import OmegaConf

    configs = {f"chars_{i}": cfg for i, cfg in enumerate(CHAR_TOKENIZERS)}
    reference = setup_tokenizers(OmegaConf.create(configs), cfg_nemo_version=nemo_version)
    sizes = {name: tokenizer_size(name, cfg, nemo_version=nemo_version) for name, cfg in configs.items()}
    assert sizes == reference.num_tokens_per_tokenizer


def test_byt5_size() -> None:
    transformers = pytest.importorskip("transformers")
    assert len(transformers.ByT5Tokenizer().get_vocab()) == BYT5_VOCAB_SIZE  # built in, no download
    for target in ("AutoTokenizer", "T5Tokenizer"):
        assert tokenizer_size("x", {"_target_": target, "pretrained_model": "google/byt5-small"}) == BYT5_VOCAB_SIZE
    assert tokenizer_size("x", {"_target_": "AutoTokenizer", "pretrained_model": "google/t5-small"}) is None
    assert tokenizer_size("x", {"_target_": CHARS + "ChinesePhonemesTokenizer"}) is None


@needs_nemo
def test_dict_to_tsv_keeps_first_variant(nemo: Any) -> None:
    g2p_dict = nemo.tokenizers["english_phoneme"].g2p.phoneme_dict
    rows = [line.split("\t") for line in dict_to_tsv(EN_DICT).splitlines()]
    assert all(len(row) == 2 for row in rows)
    assert {word for word, _ in rows} == {word.lower() for word in g2p_dict}
    for word, ipa in rows:
        assert ipa == "".join(g2p_dict[word.upper()][0]), word
    assert dict(rows)["hello"] == "həˈloʊ"
    assert dict(rows)["walked"] == "ˈwɔkt"  # the pronunciation's inner spaces go


def test_dict_to_tsv_format() -> None:
    text = ";;; comment\nHELLO  həˈloʊ\nHELLO(1)  hɛˈloʊ\n3-D  θɹi\nWorld\tˈwɝld\nworld  wɔld\n"
    assert dict_to_tsv(text) == "hello\thəˈloʊ\nworld\tˈwɝld\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"g2p": {"_target_": G2P_TARGET, "phoneme_dict": "d", "set_graphemes_upper": True}}, "set_graphemes_upper"),
        ({"g2p": {"_target_": G2P_TARGET, "phoneme_dict": "d", "apply_to_oov_word": "f"}}, "apply_to_oov_word"),
        ({"g2p": {"_target_": G2P_TARGET, "phoneme_dict": {"HI": [["h"]]}}}, "phoneme_dict"),
        ({"g2p": {"_target_": G2P_TARGET, "phoneme_dict": "d", "grapheme_case": "title"}}, "grapheme_case"),
        ({"g2p": {"_target_": "x.EnglishG2p", "phoneme_dict": "d"}}, "IpaG2p"),
        ({"text_preprocessing_func": "f"}, "text_preprocessing_func"),
        ({"locale": "xx-XX"}, "xx-XX"),
        ({"_target_": CHARS + "EnglishPhonemesTokenizer"}, "IPATokenizer"),
    ],
)
def test_from_config_names_what_it_cannot_do(change: dict[str, Any], message: str) -> None:
    cfg: Mapping[str, Any] = {**_ipa("en-US", {"phoneme_dict": "d"}), **change}
    with pytest.raises(ValueError, match=message):
        IpaTokenizerSpec.from_config(cfg)


def test_from_config_reads_the_magpie_english_entry() -> None:
    cfg = CONFIGS["english_phoneme"][0]
    cfg = {**cfg, "g2p": {**cfg["g2p"], "phoneme_dict": "nemo:abc_ipa.txt", "heteronyms": "nemo:def_het"}}
    spec = IpaTokenizerSpec.from_config(cfg)
    assert spec.phoneme_dict_paths == ("nemo:abc_ipa.txt",)
    assert spec.heteronyms_path == "nemo:def_het"
    assert spec.apostrophe and spec.use_chars and not spec.ignore_ambiguous_words
    assert spec.locale == spec.g2p_locale == "en-US" and spec.grapheme_case == "upper"


def _base26(n: int) -> str:
    """A word of capital letters for n: 0 -> "AAAA", 1 -> "AAAB"."""
    letters = ""
    for _ in range(4):
        n, digit = divmod(n, 26)
        letters = chr(ord("A") + digit) + letters
    return letters


def test_a_dictionary_of_the_real_size_parses_whole() -> None:
    """The real English dictionary has ~125k lines, variants among them: every line is read (the first word and
    the last), a variant does not displace the first pronunciation. (How long it takes is not a test's business:
    the Magpie benchmark's load time shows it.)"""
    words = [_base26(i) for i in range(130_000)]
    lines = [f"{w}  ˈwɝ{i % 7}d" if i % 9 else f"{words[i - 1]}(1)  wɔld" for i, w in enumerate(words) if i]
    text = "\n".join([";;; header", *lines]) + "\n"
    spec = IpaTokenizerSpec(use_chars=True, apostrophe=True, ignore_ambiguous_words=False)
    tokens = build_ipa_tokens(spec, text)
    tokenizer = IpaTokenizer(spec, tokens, text)
    assert tokenizer.encode(words[1].lower()) == [tokens.index(s) for s in "ˈwɝ1d"]
    assert tokenizer.encode(words[8].lower()) == [tokens.index(s) for s in "ˈwɝ1d"]  # then AAAI(1) wɔld
    assert tokenizer.encode(words[-1].lower()) == [tokens.index(s) for s in f"ˈwɝ{(len(words) - 1) % 7}d"]
