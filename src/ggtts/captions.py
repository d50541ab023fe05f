"""Word timestamps written out: JSON (every word), SubRip (``.srt``) and WebVTT (``.vtt``) captions.

Captions group words into cues the way subtitles are read: a cue ends before it would pass :data:`MAX_CUE_CHARS`
characters or :data:`MAX_CUE_SECONDS` seconds, after a word that ends a sentence, and where a pause of
:data:`CUE_PAUSE_S` or more falls between two words (a dash, a chunk boundary). WebVTT cues also carry each word's
start as an inline timestamp (``<00:00:01.250>``), which players use for karaoke-style highlighting.
"""

from __future__ import annotations

import itertools
import json
import os
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from ggtts.audio import WordTiming
from ggtts.errors import InputError
from ggtts.fsutil import atomic_output

CAPTION_FORMATS = (".json", ".srt", ".vtt")
MAX_CUE_CHARS = 42  # a subtitle line's usual limit, in columns (a CJK character takes two)
MAX_CUE_SECONDS = 7.0
CUE_PAUSE_S = 0.4


def check_caption_suffix(path: str | os.PathLike[str]) -> str:
    """The caption format of ``path`` from its suffix, or an InputError naming the ones there are."""
    suffix = Path(path).suffix.lower()
    if suffix not in CAPTION_FORMATS:
        raise InputError(f"{path}: unknown timestamp format '{suffix}'; use one of {', '.join(CAPTION_FORMATS)}")
    return suffix


def cues(words: Sequence[WordTiming]) -> list[list[WordTiming]]:
    """``words`` grouped into caption cues (see the module's rules)."""
    groups: list[list[WordTiming]] = []
    for word in words:
        current = groups[-1] if groups else None
        if current is not None:
            starts_new = (
                _width(line([*current, word])) > MAX_CUE_CHARS
                or word.end - current[0].start > MAX_CUE_SECONDS
                or word.start - current[-1].end >= CUE_PAUSE_S
                or current[-1].ends_sentence
            )
            if not starts_new:
                current.append(word)
                continue
        groups.append([word])
    return groups


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _width(text: str) -> int:
    """Columns ``text`` takes: two for a wide (CJK, kana) character."""
    return sum(2 if _wide(c) else 1 for c in text)


def line(words: Sequence[WordTiming]) -> str:
    """The words as a line of text: spaced, except next to a word of a script written without spaces (Japanese,
    Chinese)."""
    out = ""
    for word in words:
        glued = not out or _wide(out[-1]) or _wide(word.text[:1] or " ")
        out += word.text if glued else " " + word.text
    return out


def _clock(seconds: float, separator: str) -> str:
    ms = max(round(seconds * 1000), 0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def to_json(words: Sequence[WordTiming]) -> str:
    return json.dumps({"words": [w.as_dict() for w in words]}, ensure_ascii=False, indent=1) + "\n"


def to_srt(words: Sequence[WordTiming]) -> str:
    blocks = []
    for n, cue in enumerate(cues(words), start=1):
        span = f"{_clock(cue[0].start, ',')} --> {_clock(cue[-1].end, ',')}"
        blocks.append(f"{n}\n{span}\n{line(cue)}\n")
    return "\n".join(blocks)


def to_vtt(words: Sequence[WordTiming]) -> str:
    blocks = ["WEBVTT\n"]
    for cue in cues(words):
        span = f"{_clock(cue[0].start, '.')} --> {_clock(cue[-1].end, '.')}"
        text = _escape_vtt(cue[0].text)
        for before, word in itertools.pairwise(cue):
            space = line([before, word])[len(before.text) : -len(word.text) or None]
            text += f"{space}<{_clock(word.start, '.')}>{_escape_vtt(word.text)}"
        blocks.append(f"{span}\n{text}\n")
    return "\n".join(blocks)


def _escape_vtt(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


WRITERS = {".json": to_json, ".srt": to_srt, ".vtt": to_vtt}


def save_timestamps(words: Sequence[WordTiming], path: str | os.PathLike[str]) -> Path:
    """Write ``words`` to ``path`` as JSON, SRT or VTT (from the suffix); written whole or not at all."""
    path = Path(path)
    text = WRITERS[check_caption_suffix(path)](words)
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
