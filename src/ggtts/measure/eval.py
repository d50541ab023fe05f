"""``ggtts eval``: intelligibility as Whisper hears it (word and character error rates).

Each sentence is synthesized, transcribed by Whisper, and both the sentence and the transcript are normalized
(:mod:`ggtts.measure.normalize`) before counting edits. The overall rates sum the edits of every sentence over
the total reference length.

The scoring is English's (Whisper is told the speech is English; the normalizer keeps a-z and spells numbers in
English), so every sentence must be English text with at least one word: :func:`check_sentences` refuses any
other before the model loads, rather than print rates that mean nothing (a sentence of punctuation alone has no
words to divide by; Japanese would be scored on its digits alone).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from tqdm import tqdm

from ggtts.errors import InputError
from ggtts.measure.normalize import foreign_letters, normalize
from ggtts.measure.sentences import EVAL_SENTENCES, read_sentences
from ggtts.measure.wer import ErrorCounts, char_errors, word_errors
from ggtts.measure.whisper import Transcriber, load_transcriber

SEED = 0  # vocoder noise seed: the same audio on every run
TEXT_COLUMN = 60  # characters of a sentence shown in the table


@dataclass(frozen=True)
class SentenceResult:
    index: int
    text: str
    transcript: str
    reference: str  # normalized text
    hypothesis: str  # normalized transcript
    words: int
    word_errors: int
    substitutions: int
    deletions: int
    insertions: int
    wer: float
    chars: int
    char_errors: int
    cer: float
    audio_s: float
    synth_s: float


@dataclass(frozen=True)
class Overall:
    sentences: int
    words: int
    word_errors: int
    wer: float
    chars: int
    char_errors: int
    cer: float
    audio_s: float
    synth_s: float
    rtf: float  # synthesis seconds per second of audio


@dataclass(frozen=True)
class EvalReport:
    model: str
    voice: str | None
    whisper: str
    sample_rate: int
    sentences: list[SentenceResult]
    overall: Overall

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_sentences(sentences: Sequence[str]) -> None:
    """An InputError naming the first sentence that cannot be scored: one that is not English text, or that has no
    word to score once normalized (punctuation alone)."""
    for index, text in enumerate(sentences, start=1):
        quoted = repr(_shorten(text, TEXT_COLUMN))
        if letters := foreign_letters(text):
            raise InputError(
                f"sentence {index} ({quoted}) is not English (it has {letters[:10]!r}): ggtts eval scores English "
                "text only (Whisper listens for English; the normalizer keeps the letters a-z, digits spelled out)"
            )
        if not normalize(text):
            raise InputError(f"sentence {index} ({quoted}) has no word to score once punctuation is dropped")


def score(index: int, text: str, transcript: str, audio_s: float = 0.0, synth_s: float = 0.0) -> SentenceResult:
    """Error counts of one transcript against the sentence it should say."""
    reference, hypothesis = normalize(text), normalize(transcript)
    w = word_errors(reference, hypothesis)
    c = char_errors(reference, hypothesis)
    return SentenceResult(
        index=index,
        text=text,
        transcript=transcript,
        reference=reference,
        hypothesis=hypothesis,
        words=w.reference_length,
        word_errors=w.errors,
        substitutions=w.substitutions,
        deletions=w.deletions,
        insertions=w.insertions,
        wer=w.rate,
        chars=c.reference_length,
        char_errors=c.errors,
        cer=c.rate,
        audio_s=audio_s,
        synth_s=synth_s,
    )


def summarize(results: Sequence[SentenceResult]) -> Overall:
    words = ErrorCounts.total(ErrorCounts(r.substitutions, r.deletions, r.insertions, r.words) for r in results)
    chars = sum(r.chars for r in results)
    char_errs = sum(r.char_errors for r in results)
    audio = sum(r.audio_s for r in results)
    synth = sum(r.synth_s for r in results)
    return Overall(
        sentences=len(results),
        words=words.reference_length,
        word_errors=words.errors,
        wer=words.rate,
        chars=chars,
        char_errors=char_errs,
        cer=char_errs / chars if chars else 0.0,
        audio_s=audio,
        synth_s=synth,
        rtf=synth / audio if audio else 0.0,
    )


def evaluate(
    model: Any,
    sentences: Sequence[str],
    transcriber: Transcriber,
    *,
    voice: str | None = None,
    model_name: str = "",
    progress: bool | None = None,
) -> EvalReport:
    """Synthesize every sentence with ``model`` (a :class:`ggtts.TTSModel`), transcribe it, and score it.

    ``progress``: None shows a bar only when standard error is a terminal.
    """
    check_sentences(sentences)
    voice = voice or model.default_voice
    results = []
    bar = tqdm(
        sentences,
        desc="eval",
        unit="sentence",
        file=sys.stderr,
        disable=None if progress is None else not progress,
    )
    for i, text in enumerate(bar, start=1):
        start = time.perf_counter()
        audio = model.synthesize(text, voice=voice, seed=SEED)
        synth_s = time.perf_counter() - start
        transcript = transcriber.transcribe(audio.samples, audio.sample_rate)
        results.append(score(i, text, transcript, audio_s=audio.duration, synth_s=synth_s))
    return EvalReport(
        model=model_name,
        voice=voice,
        whisper=transcriber.name,
        sample_rate=int(model.sample_rate),
        sentences=results,
        overall=summarize(results),
    )


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def print_table(report: EvalReport, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    print(f"model: {report.model}   voice: {report.voice}   whisper: {report.whisper}", file=out)
    print(f"{'#':>3}  {'WER':>6}  {'CER':>6}  text", file=out)
    for r in report.sentences:
        print(f"{r.index:>3}  {r.wer:>6.1%}  {r.cer:>6.1%}  {_shorten(r.text, TEXT_COLUMN)}", file=out)
        if r.word_errors:
            print(f"{'':>19}heard: {_shorten(r.transcript, TEXT_COLUMN)}", file=out)
    o = report.overall
    print(
        f"overall: WER {o.wer:.2%} ({o.word_errors}/{o.words} words), CER {o.cer:.2%} "
        f"({o.char_errors}/{o.chars} characters), {o.sentences} sentences, "
        f"{o.audio_s:.1f} s of audio in {o.synth_s:.1f} s (RTF {o.rtf:.3f})",
        file=out,
    )


def run(args: argparse.Namespace) -> int:
    import ggtts
    from ggtts.flags import load_options

    sentences = read_sentences(args.sentences) if args.sentences else list(EVAL_SENTENCES)
    check_sentences(sentences)  # before any work
    model = ggtts.load(args.model, **load_options(args, lambda note: print(f"ggtts: {note}", file=sys.stderr)))
    transcriber = load_transcriber(args.whisper)
    report = evaluate(
        model,
        sentences,
        transcriber,
        voice=args.voice,
        model_name=str(args.model or ggtts.api.DEFAULT_MODEL),
    )
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, allow_nan=False)  # JSON has no Infinity or NaN
        print()
    else:
        print_table(report)
    return 0
