"""Text cut into the chunks a model speaks one at a time: whole while short, else sentence by sentence."""

from __future__ import annotations

import re
from collections.abc import Callable

SENTENCE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？])\s*")
SENTENCE_END = ".!?。！？"


def word_count(text: str) -> int:
    return len(text.split())


def sentence_chunks(text: str, max_words: int, count: Callable[[str], int] = word_count) -> list[str]:
    """The whole ``text`` while it has fewer than ``max_words`` words (as ``count`` counts them); else its
    sentences, joined while short and cut at word boundaries when longer (NeMo's ``do_tts`` rule)."""
    text = text.strip()
    if count(text) < max_words:
        return [text] if text else []
    out: list[str] = []
    for piece in SENTENCE.split(text):
        words = piece.split()
        for i in range(0, len(words), max_words):
            part = " ".join(words[i : i + max_words])
            if out and len(out[-1].split()) + len(part.split()) <= max_words and out[-1][-1:] not in SENTENCE_END:
                out[-1] = f"{out[-1]} {part}"
            elif part:
                out.append(part)
    return out
