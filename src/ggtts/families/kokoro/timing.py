"""Word timestamps from Kokoro's predicted durations, as hexgrad's ``KPipeline.join_timestamps`` counts them
(what Kokoro-FastAPI's captioned speech returns).

The duration predictor gives every input id (BOS, each phoneme symbol, EOS) a whole number of frames, and the
decoder turns each frame into the same number of samples (600 at 24 kHz: 25 ms). A word covers the frames of its
spoken symbols, plus half of the space before it and half of the space after it (words separated by a space
alone meet in the middle of it, with no gap, as in connected speech); punctuation and the other half of a space
next to it belong to no word. Every time is then :data:`ONSET_LEAD_FRAMES` earlier (at most BOS's frames): the
audio of a word begins before its symbols' frames do (the energy of the first word crosses -30 dB of the
utterance's peak a median 35 ms, one to three frames, before its first frame on the 25 built-in sentences), and
hexgrad's pipeline shifts its times by the same 3 frames.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from ggtts.audio import WordTiming
from ggtts.text.chunking import NOT_SPOKEN, SpokenWord

ONSET_LEAD_FRAMES = 3  # how much earlier than its symbols' frames a word is heard (hexgrad's offset)
SPACE = " "


def phoneme_spans(phonemes: str, words: Sequence[SpokenWord]) -> list[tuple[int, int] | None]:
    """Where each word's phonemes stand in the chunk's ``phonemes`` (``[start, end)`` character offsets), its
    parts found in order; punctuation at a word's edges is left out. ``None`` for a word whose parts are not all
    found after the word before it."""
    spans: list[tuple[int, int] | None] = []
    cursor = 0
    for word in words:
        found = _find_parts(phonemes, word.phonemes, cursor)
        if found is None:
            spans.append(None)
            continue
        at, end = found
        cursor = end
        while at < end and phonemes[at] in NOT_SPOKEN:
            at += 1
        while end > at and phonemes[end - 1] in NOT_SPOKEN:
            end -= 1
        spans.append((at, end) if at < end else None)
    return spans


def _find_parts(phonemes: str, parts: Sequence[str], cursor: int) -> tuple[int, int] | None:
    start = end = -1
    for part in parts:
        part = part.strip()
        at = phonemes.find(part, cursor) if part else -1
        if at < 0:
            return None
        start = at if start < 0 else start
        cursor = end = at + len(part)
    return (start, end) if start >= 0 else None


def word_timings(
    phonemes: str,
    words: Sequence[SpokenWord],
    durations: Sequence[int],
    vocab: Set[str],
    seconds_per_frame: float,
    offset: float = 0.0,
    continues: int | None = None,
) -> list[WordTiming]:
    """The words of one chunk with their times, ``offset`` seconds after the utterance's start.

    ``continues``: the ``source`` of the last word of the chunk before; a first word with the same source is the
    rest of that word (``WordTiming.continues``); a word that goes on in the chunk after keeps ``goes_on``.

    ``durations`` are the frames of the ids the model read: BOS, then one per symbol of ``phonemes`` in ``vocab``
    (others are dropped before the model, as :meth:`KokoroTTS.token_ids` does), then EOS.
    """
    before = [0]  # before[i]: how many ids the first i characters of ``phonemes`` became
    for char in phonemes:
        before.append(before[-1] + (char in vocab))
    if len(durations) != before[-1] + 2:
        raise ValueError(f"{len(durations)} durations for {before[-1]} phonemes; expected one more on each side")
    frames = [0]  # frames[k]: frames before id k
    for d in durations:
        frames.append(frames[-1] + int(d))
    lead = min(ONSET_LEAD_FRAMES, int(durations[0]))

    def half_space(char: int) -> float:
        """Half the frames of the space at ``phonemes[char]``; 0 where there is none (an edge, punctuation)."""
        if 0 <= char < len(phonemes) and phonemes[char] == SPACE and SPACE in vocab:
            return int(durations[1 + before[char]]) / 2
        return 0.0

    timings = []
    for i, (word, span) in enumerate(zip(words, phoneme_spans(phonemes, words), strict=True)):
        if span is None:
            continue
        first, last = 1 + before[span[0]], 1 + before[span[1]]  # ids of the word: [first, last), after BOS
        start = frames[first] - lead - half_space(span[0] - 1)
        end = frames[last] - lead + half_space(span[1])
        timings.append(
            WordTiming(
                word.text,
                offset + start * seconds_per_frame,
                offset + end * seconds_per_frame,
                word.ends_sentence,
                continues=i == 0 and word.source is not None and word.source == continues,
                goes_on=word.goes_on,
            )
        )
    return timings
