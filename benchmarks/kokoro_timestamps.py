"""Word timestamps checked against Whisper: how far ggtts's word starts are from where Whisper hears them.

Each built-in evaluation sentence (:data:`ggtts.measure.sentences.EVAL_SENTENCES`) is spoken by the default model
(or ``-m``); ggtts's words (``Audio.words``: the words as written, "$25" one word) and Whisper base's word
timestamps (faster-whisper, ``word_timestamps=True``) are both turned into normalized spoken tokens with
:func:`ggtts.measure.normalize.normalize` ("$25" -> "twenty five dollars"), aligned with difflib, and where the
first token of one of our words is matched to the first token of one of Whisper's, the two starts are compared.
Whisper's own word times are estimates (cross-attention alignment, about 20 ms frames): it starts each word where
the word before it ends and the first word at 0.0, so it is early wherever there is a pause; this measures the
agreement of two estimates, and a listener's reference would be better and is not available here. The spread
with the constant offset between the two removed is printed too.

    python benchmarks/kokoro_timestamps.py [-m MODEL] [--voice NAME] [--threads 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import sys
from dataclasses import dataclass

import numpy as np

import ggtts
from ggtts.measure.bench import cpu_model
from ggtts.measure.normalize import normalize
from ggtts.measure.sentences import EVAL_SENTENCES
from ggtts.measure.whisper import load_transcriber, resample


@dataclass(frozen=True)
class Token:
    text: str
    start: float | None  # the start of the word it begins; None inside a word


def tokens(words: list[tuple[str, float]]) -> list[Token]:
    """(word, start) pairs -> normalized spoken tokens, the first of each word carrying its start."""
    out = []
    for word, start in words:
        for i, token in enumerate(normalize(word).split()):
            out.append(Token(token, start if i == 0 else None))
    return out


def start_differences(ours: list[Token], heard: list[Token]) -> list[float]:
    """Our start minus Whisper's, for each pair of word-initial tokens difflib matches."""
    matcher = difflib.SequenceMatcher(a=[t.text for t in ours], b=[t.text for t in heard], autojunk=False)
    diffs = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            a, b = ours[block.a + k], heard[block.b + k]
            if a.start is not None and b.start is not None:
                diffs.append(a.start - b.start)
    return diffs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", default=None)
    parser.add_argument("--voice", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    tts = ggtts.load(args.model)
    whisper = load_transcriber("base", threads=args.threads)
    all_diffs: list[float] = []
    ours_total = 0
    rows = []
    for sentence in EVAL_SENTENCES:
        audio = tts.synthesize(sentence, voice=args.voice)
        ours = tokens([(w.text, w.start) for w in audio.words])
        segments, _ = whisper.model.transcribe(
            resample(audio.samples, audio.sample_rate),
            language="en",
            beam_size=5,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
            word_timestamps=True,
        )
        heard_words = [(w.word.strip(), w.start) for s in segments for w in (s.words or [])]
        diffs = start_differences(ours, tokens(heard_words))
        all_diffs += diffs
        ours_total += len(audio.words)
        median = statistics.median(abs(d) for d in diffs) if diffs else float("nan")
        rows.append({"sentence": sentence, "words": len(audio.words), "matched": len(diffs), "median_abs_s": median})
        print(
            f"  {len(diffs):3d}/{len(audio.words):3d} words  median |d| {median * 1000:6.1f} ms  {sentence[:60]}",
            file=sys.stderr,
        )
    absolute = np.abs(np.array(all_diffs))
    summary = {
        "cpu": cpu_model(),
        "model": args.model or "kokoro",
        "voice": args.voice or tts.default_voice,
        "words": ours_total,
        "matched": len(all_diffs),
        "median_abs_start_ms": float(np.median(absolute) * 1000),
        "mean_abs_start_ms": float(absolute.mean() * 1000),
        "p90_abs_start_ms": float(np.percentile(absolute, 90) * 1000),
        "mean_signed_start_ms": float(np.mean(all_diffs) * 1000),
        # the spread once a constant offset between the two conventions is taken out
        "median_abs_start_minus_median_ms": float(np.median(np.abs(all_diffs - np.median(all_diffs))) * 1000),
    }
    print(f"Word starts, ggtts vs Whisper base word timestamps ({summary['cpu']}, voice {summary['voice']}):")
    print(f"  matched {summary['matched']} of {summary['words']} words in {len(EVAL_SENTENCES)} sentences")
    print(
        f"  median |start difference| {summary['median_abs_start_ms']:.0f} ms (goal < 80 ms), "
        f"mean {summary['mean_abs_start_ms']:.0f} ms, 90th percentile {summary['p90_abs_start_ms']:.0f} ms, "
        f"mean signed (ours - Whisper) {summary['mean_signed_start_ms']:+.0f} ms"
    )
    spread = summary["median_abs_start_minus_median_ms"]
    print(f"  without the constant offset (median |d - median d|): {spread:.0f} ms")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"summary": summary, "sentences": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
