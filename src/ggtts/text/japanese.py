"""Japanese text for Kokoro: numbers said in kana, an offline G2P in misaki's phoneme style, language detection.

Numbers are read by :mod:`ggtts.text.japanese_numbers` first (misaki reads every run of digits on its own:
"3月1日" would be "san tsuki ichi nichi", not "sangatsu tsuitachi").

G2P. :class:`JapaneseG2P` finds words and their pronunciations with a reader, then romanizes the kana with
misaki's cutlet table, the phoneme style Kokoro's Japanese voices were trained with. The default reader is MeCab
over pyopenjtalk-plus's dictionary (bundled in its wheel); :func:`read_with_unidic` gives misaki's own readings
(fugashi over UniDic-lite; never the ``unidic`` package, which downloads its dictionary). Unlike misaki, the G2P
normalizes numbers itself and keeps what a rule wrote as one word and one token ("3月" -> "saŋɡaʦɨ"), reads
the words after a number as its counters and suffixes, one word with it, sound changes included (3名 さんめい, not
さん な; 1社 いっしゃ; 10年後 じゅうねんご: the reader sees the number as written, pyopenjtalk's NJD says the
pair), returns
tokens aligned with the input, joins syllables the tagger cut ("び|ゃく") and the auxiliary う to its long
vowel (でしょ|う -> でしょー). Latin words, which misaki passes through as letters, are read from
pyopenjtalk-plus's dictionary in katakana ("Google" -> グーグル), spelled when they are short capitals ("NHK"),
and otherwise given to the English G2P. Kanji the reader does not know (variants such as 髙 and 𠮷, rare ones such
as 𩸽) are read by pyopenjtalk's NJD with the kanji around them; anything still unreadable gets no phonemes, never
stray symbols, and is logged as a warning. Nothing is downloaded at run time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ggtts.errors import GGTTSError
from ggtts.text.g2p import G2PToken
from ggtts.text.japanese_numbers import normalize_japanese, normalize_marked

log = logging.getLogger(__name__)

INSTALL_HINT = "install ggtts's Japanese frontend with pip install 'ggtts[ja]'"

# --- G2P ------------------------------------------------------------------------------------------------

# Kokoro's symbol for each punctuation mark, after NFKC (which makes "！" "!" and "（" "("). Brackets become
# quotation marks: misaki writes "«»" and "[]" for them, which Kokoro's vocabulary lacks.
_STOPS = {"。": ".", ".": ".", "、": ",", ",": ",", "!": "!", "?": "?", "…": "…", "‥": "…", ":": ":", ";": ";"}
_DASHES = {"〜": "—", "~": "—", "—": "—", "―": "—"}
OPENING = "「『(【《〈“[｢"
CLOSING = "」』)】》〉”]｣"
PUNCTUATION: dict[str, str] = {**_STOPS, **_DASHES, **dict.fromkeys(OPENING, "“"), **dict.fromkeys(CLOSING, "”")}
PUNCTUATION['"'] = '"'
_KEEP_UNFOLDED = frozenset("…‥〜")  # NFKC would write "..." and "~"
# Tokens glued to their neighbour in the phoneme string (misaki's spacing): no space before a stop or closing
# quote, none after an opening quote, none on either side of a glottal stop ("iʔta", not "iʔ ta").
_NO_SPACE_BEFORE = frozenset('.,!?…:;”"')
_NO_SPACE_AFTER = frozenset("“")
GLOTTAL_STOP = "ʔ"
_SMALL_KANA = frozenset("ぁぃぅぇぉゃゅょゎっァィゥェォャュョヮッ")
_CONTINUING_KANA = _SMALL_KANA | frozenset("んンー")  # no word starts with these: the tagger cut a syllable
_SMALL_VOWELS_AND_Y = frozenset("ぁぃぅぇぉゃゅょ")
_BIG_KANA = str.maketrans("ぁぃぅぇぉゃゅょ", "あいうえおやゆよ")
_TO_KATAKANA = {code: code + 0x60 for code in range(0x3041, 0x3097)}  # ぁ..ゖ -> ァ..ヶ
_KANJI_REPEAT = "々"
_MAX_ACRONYM_LETTERS = 6  # all-capital words up to this long are spelled ("NHK"); longer ones are words
_HIRAGANA = (0x3041, 0x309F)
_KATAKANA = (0x30A0, 0x30FF)
_HALF_WIDTH_KATAKANA = (0xFF66, 0xFF9F)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
_HANGUL = ((0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F))
# Common in Chinese, never in Japanese: kanji-only text with these is not Japanese.
_CHINESE_ONLY = frozenset("们这说吗呢么还对个为时发经过长问题听东车门见开关书买卖")
# One Japanese character says about as much as this many Latin letters (for "mainly Japanese").
_LETTERS_PER_JAPANESE_CHARACTER = 2

# MeCab's character classes (UniDic's char.def) the tagger reports.
_HIRAGANA_CHARACTER_TYPE, _KATAKANA_CHARACTER_TYPE = 6, 7
# Indexes among the features of OpenJTalk's dictionary: part of speech, its first subdivision, pronunciation.
_OPENJTALK_PART_OF_SPEECH, _OPENJTALK_SUBDIVISION, _OPENJTALK_PRONUNCIATION = 1, 2, 9
# OpenJTalk's subdivisions of nouns for suffixes and counters (名詞,接尾,助数詞), and for numerals (名詞,数).
_SUFFIX, _NUMERAL = "接尾", "数"
# UniDic's part of speech of suffixes, its subdivisions of counter nouns and of numerals.
_UNIDIC_SUFFIX, _UNIDIC_COUNTER, _UNIDIC_NUMERAL = "接尾辞", "助数詞", "数詞"
_INFLECTING = frozenset({"動詞", "形容詞"})  # verbs and adjectives, the words written with okurigana
_OKURIGANA_PATHS = 10  # how many of the tagger's best analyses of a word are searched for it as one word
MAX_READER_CHARS = 1000  # a reader sees at most this much text at a time (OpenJTalk fails beyond ~5000)
# A vowel said twice is a long vowel: おう, こう, じゅう, とお (how the dictionary writes number words).
_LONG_VOWEL = re.compile(
    "(?<=[うくぐすずつづぬふぶぷむゆゅるおこごそぞとどのほぼぽもよょろ])う|(?<=[おこごそぞとどのほぼぽもよょろ])お"
)

# The tagger and misaki are not documented as thread-safe; calls are short, so serialize them.
_LOCK = threading.RLock()


def _in(code: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(low <= code <= high for low, high in ranges)


def is_japanese(text: str) -> bool:
    """Whether ``text`` is mainly Japanese: it has kana, or kanji without Hangul or Chinese-only characters,
    and its Japanese characters outweigh its Latin letters (one character counting as two letters)."""
    kana = kanji = latin = 0
    for char in text:
        code = ord(char)
        if _in(code, (_HIRAGANA, _KATAKANA, _HALF_WIDTH_KATAKANA)):
            kana += 1
        elif _in(code, _CJK):
            kanji += 1
        elif _in(code, _HANGUL):
            return False
        elif char.isascii() and char.isalpha():
            latin += 1
    if not kana and (not kanji or any(c in _CHINESE_ONLY for c in text)):
        return False
    return (kana + kanji) * _LETTERS_PER_JAPANESE_CHARACTER >= latin


_ROMAN_FIRST, _ROMAN_LAST = 0x2160, 0x217F  # Ⅰ..ⅿ: the Roman numeral characters, capital and small
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_ROMAN = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")


def _roman_numerals(text: str) -> dict[int, str]:
    """The runs of Roman numeral characters (Ⅲ, ⅩⅡ, ⅶ) in ``text`` that write a number: where each starts, its
    value in digits, and where the rest are, "". NFKC would make them Latin letters ("III"), read as letters. A
    run next to a digit (Ⅲ3), or one that writes no number (ⅠⅠⅠⅠ), is left to NFKC."""
    numerals: dict[int, str] = {}
    index = 0
    while index < len(text):
        if not _ROMAN_FIRST <= ord(text[index]) <= _ROMAN_LAST:
            index += 1
            continue
        end = index
        while end < len(text) and _ROMAN_FIRST <= ord(text[end]) <= _ROMAN_LAST:
            end += 1
        letters = unicodedata.normalize("NFKC", text[index:end]).upper()
        beside_digit = (index and text[index - 1].isdigit()) or (end < len(text) and text[end].isdigit())
        if letters and _ROMAN.fullmatch(letters) and not beside_digit:
            values = [_ROMAN_VALUES[letter] for letter in letters]
            total = sum(-v if v < next_value else v for v, next_value in zip(values, [*values[1:], 0], strict=True))
            numerals |= dict.fromkeys(range(index + 1, end), "")
            numerals[index] = str(total)
        index = end
    return numerals


def _fold(text: str) -> tuple[str, list[int]]:
    """NFKC character by character (full-width Latin to ASCII, half-width katakana to full-width), keeping for
    each folded character the index of the character it came from."""
    folded: list[str] = []
    origin: list[int] = []
    numerals = _roman_numerals(text)
    for index, char in enumerate(text):
        out = numerals.get(index)
        if out == "":
            continue  # (the rest of a Roman numeral, whose value its first character has)
        if out is None:
            out = char if char in _KEEP_UNFOLDED else unicodedata.normalize("NFKC", char)
            if out.isdecimal() and not char.isdecimal():  # ① -> "1 ": a list's mark, no digit of the number after it
                out += " "
        if out in ("\u3099", "\u309a") and folded:  # half-width (han)dakuten: combine with the kana before
            combined = unicodedata.normalize("NFC", folded[-1] + out)
            if len(combined) == 1:
                folded[-1] = combined
                continue
        folded += out
        origin += [index] * len(out)
    return "".join(folded), origin


@dataclass(frozen=True)
class Morpheme:
    """A word a reader found: where it is in the text it was given, its pronunciation in katakana ("" when the
    dictionary has none), whether the dictionary knows it, whether it is a suffix or counter, a word that goes
    with the number or noun before it (名 in 3名, 後 in 10年後), and whether it is a numeral (三, 十, 百)."""

    start: int
    end: int
    pronunciation: str
    known: bool
    suffix: bool = False
    numeral: bool = False


Reader = Callable[[str], list[Morpheme]]


def read_with_openjtalk(text: str) -> list[Morpheme]:
    """The words of ``text`` by MeCab over pyopenjtalk-plus's dictionary, with their pronunciations.

    The dictionary reads everyday words better than UniDic-lite (お父さん おとうさん, 月曜日 げつようび, 私
    わたし, 日本語 にほんご, 一日中 いちにちじゅう, where UniDic-lite has おちちさん, げつようひ, わたくし, にっぽんご,
    いちにっちゅう). Only the tagger's words are used, not OpenJTalk's later rewriting (it turns "さん" into
    "三"), so every word is a stretch of ``text``.

    Okurigana are said once. The dictionary also has verbs written without their okurigana and read with them
    (晴 for 晴れ, 待 for 待て, 跨 for 跨が), and the tagger sometimes picks one before the okurigana the text
    writes, which it then reads as a word of its own (晴|れ ハレ|レ, 待|て マテ|テ). Such a pair is one word:
    see :func:`_okurigana_said`.
    """
    pyopenjtalk = _import_openjtalk()
    if pyopenjtalk is None:
        raise GGTTSError(f"the Japanese G2P's default reader needs pyopenjtalk-plus; {INSTALL_HINT}.")
    _, morphs = pyopenjtalk.run_mecab_detailed(text)
    words: list[Morpheme] = []
    part_of_speech = ""  # of the last word
    for morph in morphs:
        start, end = morph["char_span"]
        if not (words[-1].end if words else 0) <= start < end <= len(text) or not text[start:end].strip():
            continue  # whitespace, or a span that does not fit (its text goes with the word before)
        features = morph["features"]
        pronunciation = _feature(features, _OPENJTALK_PRONUNCIATION).replace("’", "")
        subdivision = _feature(features, _OPENJTALK_SUBDIVISION)
        word = Morpheme(
            start, end, pronunciation, not morph["is_unknown"], subdivision == _SUFFIX, subdivision == _NUMERAL
        )
        said = _okurigana_said(text, words[-1], part_of_speech, word) if words else 0
        if said:
            previous = words[-1]
            words[-1] = replace(previous, end=end, pronunciation=previous.pronunciation + pronunciation[said:])
        else:
            words.append(word)
        part_of_speech = _feature(features, _OPENJTALK_PART_OF_SPEECH)
    return words


def _feature(features: Sequence[str], index: int) -> str:
    """A feature of OpenJTalk's dictionary, "" where it has none (unknown words have fewer features)."""
    value = features[index] if len(features) > index else ""
    return "" if value == "*" else value


def _okurigana_said(text: str, word: Morpheme, part_of_speech: str, following: Morpheme) -> int:
    """How many of the kana ``following`` starts with ``word`` has already said as its okurigana (0 for none).

    They are its okurigana when ``word`` is a known verb or adjective that ends in a kanji, its pronunciation
    ends with those kana, ``following`` is a known word written in kana that starts with them, and the
    dictionary writes ``word`` with them as one word said the same (晴+れ is 晴れ ハレ, 待+て is 待て マテ).
    The last test keeps kana that merely sound alike: 着|きれ (着き is つき, so 着きれない is ききれない). Nouns
    are left out: their kanji stand for their whole reading, and a word after them may repeat its last kana
    (その話|しか はなし しか, お話|します).
    """
    surface, kana = text[word.start : word.end], text[following.start : following.end]
    if not (word.known and following.known and part_of_speech in _INFLECTING and _is_kana(kana)):
        return 0
    if not (_is_kanji(surface[-1]) and word.pronunciation):
        return 0
    for count in range(len(kana), 0, -1):
        okurigana = _katakana(kana[:count])
        if (
            word.pronunciation.endswith(okurigana)
            and following.pronunciation.startswith(okurigana)
            and word.pronunciation in _one_word_readings(surface + kana[:count])
        ):
            return count
    return 0


@functools.lru_cache(maxsize=4096)
def _one_word_readings(text: str) -> frozenset[str]:
    """The pronunciations pyopenjtalk-plus's dictionary gives ``text`` as one known word, among the tagger's
    :data:`_OKURIGANA_PATHS` best analyses of it."""
    pyopenjtalk = _import_openjtalk()
    readings = set()
    for path in pyopenjtalk.run_mecab_nbest_features(text, _OKURIGANA_PATHS):
        if len(path["features"]) == 1:
            reading = _feature(path["features"][0].split(","), _OPENJTALK_PRONUNCIATION)
            readings.add(reading.replace("’", ""))
    return frozenset(readings - {""})


def read_with_unidic(text: str) -> list[Morpheme]:
    """The words of ``text`` as misaki reads them: fugashi over UniDic-lite (Kokoro's upstream uses full UniDic,
    which downloads its dictionary). With this reader, text without numbers gets exactly misaki's phonemes."""
    words, position = [], 0
    for node in _unidic_tagger()(text):
        start = text.find(node.surface, position)
        if not node.surface or start < 0:
            continue
        position = start + len(node.surface)
        known = node.char_type == _KATAKANA_CHARACTER_TYPE or not node.is_unk  # misaki reads katakana as written
        pronunciation = node.feature.pron or node.feature.kana or (node.surface if known else "")
        suffix = node.feature.pos1 == _UNIDIC_SUFFIX or (node.feature.pos3 or "").startswith(_UNIDIC_COUNTER)
        words.append(Morpheme(start, position, pronunciation, known, suffix, node.feature.pos2 == _UNIDIC_NUMERAL))
    return words


@dataclass
class _Word:
    """A word of the normalized text: where it is, how it is read (hiragana), and how it becomes phonemes; for a
    rule's output, the text the rule read (``written``); for a tagged word, whether it is a suffix or a numeral."""

    start: int
    end: int
    surface: str
    reading: str
    kind: str  # "said" (a rule's output), "kana" (a tagged word), "latin", "symbol", "unknown"
    written: str = ""
    suffix: bool = False
    numeral: bool = False


JAPANESE_MODULES = ("misaki", "fugashi", "mojimoji", "jaconv", "pyopenjtalk", "unidic_lite")


@functools.cache
def japanese_installed() -> bool:
    """Whether the ``ja`` extra's modules are installed (found, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in JAPANESE_MODULES)


def _import_japanese() -> tuple[Any, Any]:
    try:
        import jaconv
        from misaki import cutlet  # imports fugashi and mojimoji
    except ImportError as error:
        raise GGTTSError(
            f"Japanese G2P needs misaki, fugashi, mojimoji and jaconv ({error}); {INSTALL_HINT}."
        ) from error
    return jaconv, cutlet


def _import_openjtalk() -> Any:
    try:
        import pyopenjtalk
    except ImportError:
        return None
    return pyopenjtalk


@functools.cache
def _unidic_tagger() -> Any:
    """fugashi on the UniDic-lite dictionary (fugashi's default prefers ``unidic``, which downloads)."""
    _import_japanese()
    try:
        import fugashi
        import unidic_lite
    except ImportError as error:
        raise GGTTSError(f"the UniDic reader needs fugashi and unidic-lite ({error}); {INSTALL_HINT}.") from error
    dicdir = unidic_lite.DICDIR
    return fugashi.Tagger(f'-d "{dicdir}" -r "{os.path.join(dicdir, "mecabrc")}"')


@functools.cache
def _romanizer() -> Any:
    """misaki's cutlet romanizer, built once, without the tagger its constructor would load (we tag ourselves)."""
    _, cutlet = _import_japanese()

    class Romanizer(cutlet.Cutlet):  # type: ignore[misc, name-defined]
        """misaki's Cutlet, for its kana table only. Sets exactly the attributes misaki 0.9.4's
        ``Cutlet.__init__`` sets (a test checks they still match)."""

        def __init__(self) -> None:
            self.tagger = None
            self.table = dict(cutlet.HEPBURN)
            self.exceptions: dict[str, str] = {}

    return Romanizer()


@functools.cache
def _longest_listed_word() -> int:
    _, cutlet = _import_japanese()
    return max(map(len, cutlet.JA_WORDS))


@functools.cache
def _kana_symbols() -> frozenset[str]:
    """Every symbol the romanizer writes for kana (its table, っ, ん before each consonant, ー)."""
    _, cutlet = _import_japanese()
    table = "".join(sound for kana, sound in cutlet.HEPBURN.items() if _is_kana(kana))
    return frozenset(table) | frozenset("ʔɴŋɲmnː")


def _dictionary_reading(text: str) -> str | None:
    """The katakana pronunciation pyopenjtalk-plus's dictionary gives ``text``, if it knows all of it (None when
    it does not, or pyopenjtalk-plus is not installed)."""
    if _import_openjtalk() is None:
        return None
    words = read_with_openjtalk(text)
    if not words or not all(w.known and w.pronunciation for w in words):
        return None
    if sum(w.end - w.start for w in words) != len("".join(text.split())):
        return None
    return "".join(w.pronunciation for w in words)


class JapaneseG2P:
    """Japanese text -> Kokoro phonemes in misaki's cutlet style, numbers read by :func:`normalize_japanese`.

    ``reader`` finds the words and their pronunciations: :func:`read_with_openjtalk` (default, the better
    dictionary) or :func:`read_with_unidic` (misaki's own readings). Cheap to create; dictionaries load on first
    use and are shared. Needs the ``ja`` extra. Text is read as Japanese whatever it holds: Latin words get
    katakana readings or English phonemes (see the module docstring).
    """

    def __init__(self, reader: Reader = read_with_openjtalk) -> None:
        self.reader = reader

    def load(self) -> None:
        """Load the dictionaries now (about a second the first time) rather than on the first call."""
        self.tokens("日本語")

    def tokens(self, text: str) -> list[G2PToken]:
        """The words and punctuation marks of ``text`` with their phonemes (no spaces inside; see
        :func:`join_japanese_phonemes` for the string). Their text and whitespace rebuild ``text`` without its
        leading whitespace.

        ``text`` is normalized here (normalizing it before changes nothing), and what one rule wrote is one
        token with the text it came from, romanized as one word: "3月" is one token said "saŋɡaʦɨ", "333" one
        said "sambʲakɯsaɲʥɨːsaɴ"; the counters and suffixes right after a number join its token ("3名です" is
        "3名" "sammeː", "です"). Punctuation marks are tokens of their own, with Kokoro's symbols: 。-> ".",
        、-> ",", ！-> "!", ？-> "?", …-> "…", 「」-> “ ”. A word nothing can read has no phonemes.
        """
        if not text.strip():
            return []
        # Folded first: the rules read full-width digits and signs as ASCII ones (０３－１２３４ a phone number,
        # ５ｋｍ kilometres, １２：３０ a time, ㎏ kg).
        folded, folded_origin = _fold(text)
        normalized, normalized_origin, written = normalize_marked(folded)
        with _LOCK:
            romanizer = _romanizer()
            words = _read_unknown(self._read(folded, normalized, normalized_origin, written))
            words = _counted(_what_said(words, normalized))
            words = _merge_cut_syllables(_group(_join_long_vowels(words)))
            phonemes = [self._phonemes(romanizer, w) for w in words]
        if not words:  # nothing a reader calls a word: one silent token
            body = text.strip()
            return [G2PToken(text=body, phonemes="", whitespace=text[text.index(body) + len(body) :])]
        return _aligned_tokens(text, [folded_origin[normalized_origin[w.start]] for w in words], phonemes)

    def __call__(self, text: str) -> str:
        """The phoneme string of ``text``, words separated by spaces as misaki separates them."""
        return join_japanese_phonemes(self.tokens(text))

    def _read(self, folded: str, normalized: str, origin: Sequence[int], written: Sequence[bool]) -> list[_Word]:
        """The words of ``normalized`` (``folded`` normalized, ``origin`` and ``written`` as
        :func:`normalize_marked` gives them): each rule's output one word, the text between read by the reader.

        The reader reads ``folded`` as written, numbers included, and the words between the rules' outputs are
        taken from that reading: a word after a number is then read as what follows a number (名 in 3名です is
        メイ, the counter, not ナ; 後 in 10年後 is ゴ, not アト), which the text after the number read on its own
        would not tell. A word of the reader's that starts inside a rule's output and ends after it (年生 in
        2年生, where the rule read 2年) keeps what its pronunciation says past the part the rule said (セイ);
        where that is unclear, or a word runs on into a rule's output, that stretch is read on its own.
        """
        morphemes = self._morphemes(folded)
        segments = _segments(origin, written)
        words: list[_Word] = []
        first = 0  # the first morpheme that may reach into the current segment
        for n, (start, end) in enumerate(segments):
            at = origin[start]
            until = origin[segments[n + 1][0]] if n + 1 < len(segments) else len(folded)
            piece = normalized[start:end]
            if written[start] and _is_kana(piece):
                words.append(_Word(start, end, piece, _long_vowels(piece), "said", folded[at:until]))
                continue
            if written[start]:  # a rule's output that is not kana (a slash left as written): read on its own
                words += self._read_alone(normalized, start, end)
                continue
            while first < len(morphemes) and morphemes[first].end <= at:
                first += 1
            previous = words[-1] if words and words[-1].kind == "said" and words[-1].end == start else None
            words += self._read_between(normalized, start, at, until, morphemes, first, previous)
        return words

    def _morphemes(self, text: str) -> list[Morpheme]:
        """The reader's words of all of ``text``, read in pieces (see :func:`_reader_pieces`)."""
        morphemes: list[Morpheme] = []
        for start, end in _reader_pieces(text, 0, len(text)):
            for m in self.reader(text[start:end]):
                morphemes.append(replace(m, start=start + m.start, end=start + m.end))
        return morphemes

    def _read_between(
        self,
        normalized: str,
        start: int,
        at: int,
        until: int,
        morphemes: Sequence[Morpheme],
        first: int,
        previous: _Word | None,
    ) -> list[_Word]:
        """The words of text no rule changed, ``folded[at:until]`` (``normalized`` from ``start`` on), from the
        reader's words of the whole text (``morphemes[first:]``), after the rule's output ``previous``."""
        shift = start - at  # folded -> normalized
        words: list[_Word] = []
        covered, ran_on = at, False  # how far the words made so far reach; whether a word runs on past `until`
        for index in range(first, len(morphemes)):  # (a slice would copy the rest of the text's words each time)
            morpheme = morphemes[index]
            if morpheme.start >= until or morpheme.end > until:
                ran_on = morpheme.start < until
                break
            if morpheme.start < at:  # starts before: inside the rule's output, or before it (then read on its own)
                inside = previous is not None and morpheme.start >= at - len(previous.written)
                rest = _said_after(previous.reading, morpheme) if previous and inside else None
                if rest is not None:
                    surface = normalized[start : morpheme.end + shift]
                    words.append(_Word(start, morpheme.end + shift, surface, rest, "kana", suffix=morpheme.suffix))
                    covered = morpheme.end
                continue
            if covered == at < morpheme.start:  # after a word that started in the rule's output: read on its own
                words += self._read_alone(normalized, start, morpheme.start + shift)
            words.append(self._word(normalized, morpheme.start + shift, morpheme.end + shift, morpheme))
            covered = morpheme.end
        if ran_on:  # a Latin word just before that one was cut by it (AKB48: A|K|B4|8): read them together
            while words and words[-1].kind == "latin" and words[-1].end == covered + shift and covered > at:
                covered = words.pop().start - shift
        if ran_on or covered == at:
            words += self._read_alone(normalized, covered + shift, until + shift)
        return words

    def _read_alone(self, text: str, start: int, end: int) -> list[_Word]:
        """The reader's words of ``text[start:end]`` read on their own."""
        words = []
        for part_start, part_end in _reader_pieces(text, start, end):
            for morpheme in self.reader(text[part_start:part_end]):
                words.append(self._word(text, part_start + morpheme.start, part_start + morpheme.end, morpheme))
        return words

    def _word(self, text: str, at: int, until: int, morpheme: Morpheme) -> _Word:
        """The reader's word ``morpheme``, found at ``text[at:until]``, sorted into a kind, read in hiragana."""
        jaconv, _ = _import_japanese()
        surface = text[at:until]
        if any(c.isdigit() for c in surface):  # a digit the rules left: read as a number
            kind, reading = "said", _long_vowels(normalize_japanese(surface))
        elif all(c in PUNCTUATION or not c.isalnum() for c in surface):
            kind, reading = "symbol", surface
        elif surface.isascii():
            kind, reading = "latin", surface
        elif surface[0] in _SMALL_KANA and _is_kana(surface):  # a syllable cut by the tagger ("ゃく")
            kind, reading = "kana", jaconv.kata2hira(surface)  # as written: its dictionary reading is a big kana
        elif morpheme.known and morpheme.pronunciation:
            kind, reading = "kana", jaconv.kata2hira(morpheme.pronunciation)
        elif _is_kana(surface):  # unknown, but kana say themselves
            kind, reading = "kana", jaconv.kata2hira(surface)
        else:
            kind, reading = "unknown", surface
        return _Word(at, until, surface, reading, kind, suffix=morpheme.suffix, numeral=morpheme.numeral)

    def _phonemes(self, romanizer: Any, word: _Word) -> str:
        if word.kind == "symbol":
            symbols = "".join(PUNCTUATION.get(c, "") for c in word.surface)
            return "…" if len(symbols) > 1 and set(symbols) == {"."} else symbols
        if word.kind == "latin":
            return _latin_phonemes(word.surface)
        reading = word.reading
        if word.kind == "unknown":
            katakana = _dictionary_reading(word.surface)
            if katakana is None:
                log.warning("no reading for %r: it is not said", word.surface)
                return ""
            reading = katakana
        return _romanize(romanizer, reading)


@functools.lru_cache(maxsize=4096)
def _latin_phonemes(word: str) -> str:
    """A Latin word inside Japanese text: its katakana reading if pyopenjtalk's dictionary has one, spelled out
    if it is an acronym, else English phonemes (misaki's English G2P, loaded on first need)."""
    if not any(c.isalpha() for c in word):
        return ""
    katakana = _dictionary_reading(word)
    if katakana is None and word.isupper() and len(word) <= _MAX_ACRONYM_LETTERS:
        letters = [reading for reading in map(_dictionary_reading, word) if reading]
        katakana = "".join(letters) if len(letters) == len(word) else None
    if katakana is not None:
        return _romanize(_romanizer(), katakana)
    try:
        from ggtts.text import g2p

        return g2p.get_g2p("a")(word).replace(" ", "")
    except GGTTSError as error:
        log.debug("no English G2P for %r: %s", word, error)
        return ""


def _said_after(said: str, morpheme: Morpheme) -> str | None:
    """What a word that starts inside a rule's output says past it, in hiragana: its pronunciation without the
    longest start that ends what the rule said (``said``, hiragana). 年生 ネンセー after にねん -> せー, 回戦
    カイセン after いっかい -> せん. None when none of it does, or nothing is left."""
    jaconv, _ = _import_japanese()
    if not (morpheme.known and morpheme.pronunciation):
        return None
    spoken, pronunciation = _katakana(said), morpheme.pronunciation
    for count in range(min(len(pronunciation) - 1, len(spoken)), 0, -1):
        if spoken.endswith(pronunciation[:count]):
            return str(jaconv.kata2hira(pronunciation[count:]))
    return None


_INNING_HALVES = {"表": "おもて", "裏": "うら"}


def _counted(words: list[_Word]) -> list[_Word]:
    """Each number joined with the suffixes right after it (3名, 10年後, 21世紀, 三名) into one word, said as
    pyopenjtalk's NJD says them together.

    After a number a rule read, the suffixes are said as NJD says them after that number, with the sound changes
    between the two: 1社 いっしゃ (the number's last mora doubled), 3敗 さんぱい, 1日中 いちにちじゅう, 1口 ひとくち.
    A number written in kanji numerals (二十一, 一) is said with its suffixes as NJD says them all: 一ヶ所
    いっかしょ, 二十一世紀 にじゅういっせいき."""
    joined: list[_Word] = []
    words = list(words)
    i = 0
    while i < len(words):
        word, end = words[i], i + 1
        ruled = word.kind == "said" and any(c.isdigit() for c in word.written)
        if word.kind == "kana" and word.numeral:
            while end < len(words) and words[end].kind == "kana" and words[end].numeral and _adjacent(words, end):
                end += 1
        if ruled or (word.kind == "kana" and word.numeral):
            while end < len(words) and words[end].kind == "kana" and words[end].suffix and _adjacent(words, end):
                if (
                    words[end].surface in _INNING_HALVES
                    and (words[end - 1].written or words[end - 1].surface)[-1:] == "回"
                ):
                    words[end] = replace(words[end], reading=_INNING_HALVES[words[end].surface])
                    break  # 3回表: the top of the third inning, おもて (NJD: ひょう, a table)
                end += 1
        if ruled and end < len(words) and _adjacent(words, end) and not words[end].suffix:
            words[end] = _voiced_after(word.written + "".join(w.surface for w in words[i + 1 : end]), words[end])
        if end == i + 1:
            joined.append(word)
            i += 1
            continue
        run = words[i:end]
        surface = "".join(w.surface for w in run)
        if ruled:
            written = word.written + surface[len(word.surface) :]
            number, readings = _njd_readings(word.reading, written, [w.surface for w in run[1:]])
            reading = number + "".join(r or w.reading for r, w in zip(readings, run[1:], strict=True))
        else:
            written = surface
            nodes = _njd_nodes(written) if len(written) <= _MAX_COUNTED_CHARS else ()
            if "".join(string for string, _ in nodes) == written:
                reading = _hiragana("".join(pronunciation for _, pronunciation in nodes))
            else:
                reading = "".join(w.reading for w in run)
        joined.append(_Word(word.start, run[-1].end, surface, reading, "said", written))
        i = end
    return joined


_VOICED = str.maketrans("かきくけこさしすせそたちつてとはひふへほ", "がぎぐげござじずぜぞだぢづでどばびぶべぼ")


def _voiced_after(written: str, word: _Word) -> _Word:
    """``word``, a noun after the number and counter ``written``, with its first sound voiced where NJD voices
    it there (rendaku: 3人部屋 さんにんべや, 1人旅)."""
    if word.kind != "kana" or not any(_is_kanji(c) for c in word.surface) or len(written) > _MAX_COUNTED_CHARS:
        return word
    nodes = _njd_nodes(written + word.surface)
    if not nodes or nodes[-1][0] != word.surface:
        return word
    said = _hiragana(nodes[-1][1])
    if said[:1] != word.reading[:1].translate(_VOICED) or said[:1] == word.reading[:1] or said[1:] != word.reading[1:]:
        return word
    return replace(word, reading=said)


_MAX_NJD_CHARS = 128  # NJD reads text the reader does not know in pieces of at most this many characters
_MAX_UNKNOWN_RUN_CHARS = 32  # the kanji read with an unknown word by NJD reach at most this far


def _read_unknown(words: list[_Word]) -> list[_Word]:
    """Words the reader does not know (髙橋, 𩸽, 𠮷 of 𠮷野家), read by pyopenjtalk's NJD, with the kanji-only
    words right before and after them: NJD writes variant kanji as the usual ones (髙 高, 𠮷 吉, 栁 柳, 濵 浜) and
    reads kanji its dictionary lacks by their usual readings, and the words around a variant may be words only
    with it (𠮷|野家 is 吉野家 ヨシノヤ, where the reader has ノヤ for 野家). The words added around an unknown
    word reach at most :data:`_MAX_UNKNOWN_RUN_CHARS` characters. What NJD cannot read stays unknown."""
    read: list[_Word] = []
    added = 0  # how many characters the last run took from the words around its unknown words
    for word in words:
        last = read[-1] if read else None
        joins = last is not None and last.kind == "unknown-run" and last.end == word.start
        if word.kind != "unknown":
            if joins and _kanji_word(word) and added + len(word.surface) <= _MAX_UNKNOWN_RUN_CHARS:
                added += len(word.surface)
                read[-1] = replace(read[-1], end=word.end, surface=read[-1].surface + word.surface)
            else:
                read.append(word)
            continue
        if not any(_is_kanji(c) for c in word.surface):
            read.append(word)
            continue
        if joins and last is not None:  # a second unknown word in the same run of kanji
            read[-1] = replace(last, end=word.end, surface=last.surface + word.surface)
            continue
        first, added = len(read), 0
        while first and _kanji_word(read[first - 1]) and read[first - 1].end == (read[first:] or [word])[0].start:
            if added + len(read[first - 1].surface) > _MAX_UNKNOWN_RUN_CHARS:
                break
            first -= 1
            added += len(read[first].surface)
        run = [*read[first:], word]
        del read[first:]
        surface = "".join(w.surface for w in run)
        read.append(_Word(run[0].start, word.end, surface, surface, "unknown-run"))
    return [_njd_read(w) if w.kind.startswith("unknown") else w for w in read]


_WHAT, _WHAT_SAID = "何", frozenset({"なに", "なん"})
_WHAT_CONTEXT_CHARS = 12  # how much of the text after 何 NJD sees to choose なに or なん


def _what_said(words: list[_Word], text: str) -> list[_Word]:
    """何 as a word of its own said なん or なに as NJD predicts from the words after it (何だろう, 何でも, 何と,
    何ですか なん; 何が, 何を, 何も, 何か なに): the reader says なに but before a counter. Only the text up to the next
    punctuation mark, at most :data:`_WHAT_CONTEXT_CHARS` characters, is read with it."""
    for index, word in enumerate(words):
        if word.kind == "kana" and word.surface[:1] == _WHAT and len(word.surface) == 2 and _is_kanji(word.surface[1]):
            # 何 and a counter the dictionary has as one word, with no sound change: 何分 ナンフン, not ナンプン
            said = _hiragana("".join(p for _, p in _njd_nodes(word.surface)))
            if word.reading.startswith("なん") and said.startswith("なん") and len(said) == len(word.reading):
                words[index] = replace(word, reading=said)
            continue
        if word.kind != "kana" or word.surface != _WHAT or word.reading != "なに":  # (なん before a counter)
            continue
        context = text[word.start : word.start + 1 + _WHAT_CONTEXT_CHARS]
        stop = next((i for i, c in enumerate(context) if i and (c in PUNCTUATION or c.isspace())), len(context))
        nodes = _njd_nodes(context[:stop])
        said = _hiragana(nodes[0][1]) if nodes and nodes[0][0] == _WHAT else ""
        if said in _WHAT_SAID:
            words[index] = replace(word, reading=said)
    return words


def _kanji_word(word: _Word) -> bool:
    """Whether ``word`` is a word the reader knows written in kanji only."""
    return word.kind == "kana" and all(_is_kanji(c) for c in word.surface)


def _njd_read(word: _Word) -> _Word:
    """``word`` (text the reader does not know all of) read by NJD if it reads all of it, else unknown."""
    pieces = range(0, len(word.surface), _MAX_NJD_CHARS)  # (NJD refuses long text)
    pronunciation = "".join(p for at in pieces for _, p in _njd_nodes(word.surface[at : at + _MAX_NJD_CHARS]))
    if pronunciation and all(_in(ord(c), (_KATAKANA,)) and c != "・" for c in pronunciation):
        return replace(word, reading=_hiragana(pronunciation), kind="kana")
    return replace(word, reading=word.surface, kind="unknown")


def _adjacent(words: Sequence[_Word], index: int) -> bool:
    """Whether ``words[index]`` follows the word before it with nothing between."""
    return words[index].start == words[index - 1].end


def _hiragana(katakana: str) -> str:
    """A pronunciation in katakana as hiragana, long vowels marked: "チュウ" -> "ちゅー"."""
    jaconv, _ = _import_japanese()
    return _long_vowels(str(jaconv.kata2hira(katakana)))


_MAX_COUNTED_CHARS = 32  # a number and its suffixes longer than this are read without NJD
# How NJD may change the last word of a number before a counter (katakana): doubled (1社 いっしゃ, 10冊
# じゅっさつ, 100歩 ひゃっぽ) or said otherwise (4人 よにん, 7時 しちじ, 9時 くじ). These changes are taken from
# it; other readings of the number are not (NJD reads 302号室 サンマルニ).
_NUMBER_ENDINGS = {"イチ": "イッ", "ハチ": "ハッ", "ロク": "ロッ", "ジュー": "ジュッ", "ヒャク": "ヒャッ"}
_NUMBER_ENDINGS |= {"ヨン": "ヨ", "ナナ": "シチ", "キュー": "ク"}
# NJD says 1 and 2 as ひと and ふた before some counters (1口 ひとくち, 2箱 ふたはこ): these are taken from it.
_NATIVE_NUMBERS = {"いち": "ヒト", "に": "フタ"}


def _njd_readings(number: str, written: str, suffixes: Sequence[str]) -> tuple[str, list[str | None]]:
    """How NJD says the ``suffixes`` (surfaces) that end ``written`` after a number said ``number`` (hiragana):
    the number (its last word changed as NJD changes it, いち -> いっ before 社, よん -> よ before 人, see
    :data:`_NUMBER_ENDINGS`; ひと, ふた where NJD says them) and each suffix in hiragana, None for those NJD
    does not give as words of their own."""
    readings: list[str | None] = [None] * len(suffixes)
    nodes = _njd_nodes(written) if len(written) <= _MAX_COUNTED_CHARS else ()
    position = len(nodes)
    for index in range(len(suffixes) - 1, -1, -1):
        if position == 0 or nodes[position - 1][0] != suffixes[index]:
            return number, readings
        position -= 1
        readings[index] = _hiragana(nodes[position][1])
    said_by_njd = "".join(pronunciation for _, pronunciation in nodes[:position])
    ours = _katakana(number)
    ending = next((e for e in _NUMBER_ENDINGS if ours.endswith(e)), None)
    changed = ending is not None and said_by_njd == ours[: -len(ending)] + _NUMBER_ENDINGS[ending]
    if changed or said_by_njd == _NATIVE_NUMBERS.get(number):
        number = _hiragana(said_by_njd)
    return number, readings


@functools.lru_cache(maxsize=4096)
def _njd_nodes(text: str) -> tuple[tuple[str, str], ...]:
    """The words of ``text`` as pyopenjtalk's NJD says them: (written, NFKC; pronunciation, katakana)."""
    pyopenjtalk = _import_openjtalk()
    if pyopenjtalk is None:
        return ()
    nodes = pyopenjtalk.run_frontend(text)
    return tuple((unicodedata.normalize("NFKC", n["string"]), n["pron"].replace("’", "")) for n in nodes)


def _segments(origin: Sequence[int], ruled: Sequence[bool]) -> list[tuple[int, int]]:
    """Spans of the text: each rule's output on its own, and the text between."""
    spans: list[tuple[int, int]] = []
    for i in range(len(origin)):
        key = (ruled[i], origin[i] if ruled[i] else None)
        if i and key == (ruled[i - 1], origin[i - 1] if ruled[i - 1] else None):
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


def _reader_pieces(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``text[start:end]`` in pieces of at most :data:`MAX_READER_CHARS` characters (OpenJTalk refuses long
    input), cut after punctuation or whitespace where there is some; pieces of only whitespace are left out."""
    pieces = []
    while start < end:
        stop = min(end, start + MAX_READER_CHARS)
        if stop < end:
            window = text[start:stop]
            cut = max(i for i, c in enumerate(window, 1) if c in PUNCTUATION or c.isspace() or i == 1)
            stop = start + (cut if cut > 1 else len(window))
        if text[start:stop].strip():
            pieces.append((start, stop))
        start = stop
    return pieces


def _group(words: list[_Word]) -> list[_Word]:
    """Join runs of tagged kana words that misaki's word list reads as one word, as misaki's cutlet does (the
    longest that is in the list; only runs as long as its longest word are tried, so the cost stays linear)."""
    _, cutlet = _import_japanese()
    longest = _longest_listed_word()
    grouped: list[_Word] = []
    i = 0
    while i < len(words):
        end, length = i + 1, len(words[i].surface)
        while end < len(words) and words[end].kind == "kana" == words[i].kind:
            length += len(words[end].surface)
            if length > longest:
                break
            end += 1
        joined = (j for j in range(end, i + 1, -1) if "".join(w.surface for w in words[i:j]) in cutlet.JA_WORDS)
        run = words[i : next(joined, i + 1)]
        reading = "".join(w.reading for w in run)
        grouped.append(_Word(run[0].start, run[-1].end, "".join(w.surface for w in run), reading, run[0].kind))
        i += len(run)
    return grouped


def _join_long_vowels(words: list[_Word]) -> list[_Word]:
    """Join the auxiliary う (でしょ|う, 行こ|う, which OpenJTalk's tagger splits) to the word before, as the
    long vowel it is: でしょー."""
    joined: list[_Word] = []
    for word in words:
        previous = joined[-1] if joined else None
        if previous and previous.kind == word.kind == "kana" and word.reading == "う" and _lengthens(previous.reading):
            joined[-1] = _Word(
                previous.start, word.end, previous.surface + word.surface, previous.reading + "ー", "kana"
            )
        else:
            joined.append(word)
    return joined


def _merge_cut_syllables(words: list[_Word]) -> list[_Word]:
    """Join a tagged kana word that starts with a small kana, ん or ー to the one before: the tagger cut a
    syllable (び|ゃく), which misaki reads "bʲi ja"."""
    merged: list[_Word] = []
    for word in words:
        previous = merged[-1] if merged else None
        if previous and previous.kind == word.kind == "kana" and word.surface[0] in _CONTINUING_KANA:
            surface, reading = previous.surface + word.surface, previous.reading + word.reading
            merged[-1] = _Word(previous.start, word.end, surface, reading, "kana")
        else:
            merged.append(word)
    return merged


def _aligned_tokens(text: str, starts: list[int], phonemes: list[str]) -> list[G2PToken]:
    """Tokens whose texts are the slices of ``text`` between consecutive starts (whitespace split off); words
    that start at the same character (one rule's output, ㍻ -> 平成) share a token."""
    starts[0] = len(text) - len(text.lstrip())
    tokens: list[G2PToken] = []
    for i, (start, said) in enumerate(zip(starts, phonemes, strict=True)):
        piece = text[start : starts[i + 1] if i + 1 < len(starts) else len(text)]
        if not piece and tokens:
            tokens[-1] = G2PToken(tokens[-1].text, tokens[-1].phonemes + said, tokens[-1].whitespace)
            continue
        body = piece.rstrip()
        tokens.append(G2PToken(text=body, phonemes=said, whitespace=piece[len(body) :]))
    return tokens


def _is_kana(text: str) -> bool:
    return all(_in(ord(c), (_HIRAGANA, _KATAKANA)) for c in text)


def _is_kanji(char: str) -> bool:
    return char == _KANJI_REPEAT or _in(ord(char), _CJK)


def _katakana(kana: str) -> str:
    """Hiragana as katakana (other characters as they are): "はれ" -> "ハレ"."""
    return kana.translate(_TO_KATAKANA)


def _lengthens(kana: str) -> bool:
    """Whether an う after ``kana`` lengthens its last vowel (おう, よう, ゆう), rather than being a mora."""
    return bool(_LONG_VOWEL.search(kana[-1:] + "う"))


def _long_vowels(kana: str) -> str:
    """Kana as spoken, long vowels marked as the dictionary marks them: "じゅう" -> "じゅー", "とお" -> "とー"."""
    return _LONG_VOWEL.sub("ー", kana)


def _unstranded(hiragana: str, table: Mapping[str, str]) -> str:
    """Small kana after a kana they cannot join (ん, ー, a symbol: "んゃ") as big kana: misaki fails on them."""
    out: list[str] = []
    for char in hiragana:
        if char in _SMALL_VOWELS_AND_Y and (not out or (out[-1] not in table and out[-1] != "っ")):
            char = char.translate(_BIG_KANA)
        out.append(char)
    return "".join(out)


def _romanize(romanizer: Any, reading: str) -> str:
    """Kana (hiragana, or katakana with ー) -> phonemes with misaki's cutlet table; other characters dropped."""
    jaconv, cutlet = _import_japanese()
    hiragana = _unstranded(jaconv.kata2hira(reading), romanizer.table)
    said = romanizer._romaji_word(cutlet.Word(hiragana, hiragana, _HIRAGANA_CHARACTER_TYPE))
    allowed = _kana_symbols()
    return "".join(c for c in said if c in allowed)


def join_japanese_phonemes(tokens: Sequence[G2PToken]) -> str:
    """Phonemes of consecutive tokens the way misaki spaces them: one space between words, none before a stop
    or closing quote, none after an opening quote, none next to a glottal stop; empty tokens are skipped."""
    out = ""
    for token in tokens:
        said = token.phonemes
        if not said:
            continue
        glued = (
            not out
            or said[0] in _NO_SPACE_BEFORE
            or out[-1] in _NO_SPACE_AFTER
            or (said[0] == GLOTTAL_STOP and out[-1] not in _NO_SPACE_BEFORE)
            or (out[-1] == GLOTTAL_STOP and said[0] not in _NO_SPACE_AFTER)
        )
        out += said if glued else " " + said
    return out
