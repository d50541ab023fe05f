"""OuteTTS prompts (v0.2 and v0.3) in llama.cpp's ``llama-tts`` layout, speaker profiles and text cleaning.

Layout::

    <|im_start|>\\n<|text_start|>{speaker words, each followed by SEP}{cleaned text}<|text_end|>\\n
    <|audio_start|>\\n{word}<|t_{duration:.2f}|>{CODE_START}<|c1|><|c2|>...{CODE_END}\\n ...

v0.2: SEP ``<|text_sep|>``, CODE_START ``<|code_start|>``, CODE_END ``<|code_end|>``.
v0.3: SEP ``<|space|>``, no CODE_START, CODE_END ``<|space|>``.
The built-in speaker reproduces llama.cpp's default prompt exactly (its last word has no trailing newline);
a speaker file gets a newline after every word, as llama.cpp's ``audio_data_from_speaker`` writes.
"""

from __future__ import annotations

import enum
import json
import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggtts.errors import InputError
from ggtts.families.base import NothingToSay
from ggtts.families.outetts import CODE_TOKEN
from ggtts.families.outetts.default_speaker import DEFAULT_SPEAKER_NAME, DEFAULT_SPEAKER_WORDS
from ggtts.text.number_words import replace_numbers
from ggtts.text.sanitize import break_long_runs

IM_START = "<|im_start|>"
TEXT_START, TEXT_END = "<|text_start|>", "<|text_end|>"
AUDIO_START, AUDIO_END = "<|audio_start|>", "<|audio_end|>"
V03_CHAT_TEMPLATE = "outetts-0.3"  # llama.cpp picks v0.3 when the model's chat template is exactly this


class OuteTTSVersion(enum.Enum):
    V0_2 = "0.2"
    V0_3 = "0.3"

    @property
    def separator(self) -> str:
        return "<|space|>" if self is OuteTTSVersion.V0_3 else "<|text_sep|>"

    @property
    def code_start(self) -> str:
        return "" if self is OuteTTSVersion.V0_3 else "<|code_start|>"

    @property
    def code_end(self) -> str:
        return "<|space|>" if self is OuteTTSVersion.V0_3 else "<|code_end|>"


def version_from_chat_template(template: str | None) -> OuteTTSVersion:
    return OuteTTSVersion.V0_3 if template == V03_CHAT_TEMPLATE else OuteTTSVersion.V0_2


@dataclass(frozen=True)
class SpeakerWord:
    word: str
    duration: float  # seconds
    codes: tuple[int, ...]


@dataclass(frozen=True)
class Speaker:
    name: str
    words: tuple[SpeakerWord, ...]
    version: OuteTTSVersion | None = None  # a speaker file may pin the prompt version
    trailing_newline: bool = True  # llama.cpp's built-in prompt ends without one

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "speaker") -> Speaker:
        words = data.get("words")
        if not isinstance(words, list) or not words:
            raise InputError(f"speaker '{name}': needs a non-empty 'words' list")
        parsed = []
        for i, w in enumerate(words):
            try:
                parsed.append(SpeakerWord(str(w["word"]), float(w["duration"]), tuple(int(c) for c in w["codes"])))
            except (KeyError, TypeError, ValueError):
                raise InputError(f"speaker '{name}': word {i} needs 'word', 'duration' and a list of 'codes'") from None
        version = data.get("version")
        if version is not None and version not in {v.value for v in OuteTTSVersion}:
            raise InputError(f"speaker '{name}': unsupported version '{version}'; use 0.2 or 0.3")
        return cls(name, tuple(parsed), OuteTTSVersion(version) if version else None)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Speaker:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{p}: no such speaker file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{p}: not a readable JSON speaker profile ({e})") from None
        if not isinstance(data, dict):
            raise InputError(f"{p}: a speaker profile is a JSON object with a 'words' list")
        return cls.from_dict(data, name=p.stem)

    def max_code(self) -> int:
        return max((c for w in self.words for c in w.codes), default=-1)


def default_speaker() -> Speaker:
    words = tuple(SpeakerWord(w, d, codes) for w, d, codes in DEFAULT_SPEAKER_WORDS)
    return Speaker(DEFAULT_SPEAKER_NAME, words, trailing_newline=False)


def process_text(text: str, version: OuteTTSVersion) -> str:
    """llama.cpp's ``process_text``: numbers to words, lowercase, ``-_/,.\\`` to spaces, drop other
    non-letters,
    words joined by the separator token. Accented letters are kept as their base letter (llama.cpp drops
    them). A "word" longer than any real one is read in pieces, so tokenizing stays linear in the text.
    """
    text = replace_numbers(text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    text = re.sub(r"[-_/,.\\]", " ", text)
    text = re.sub(r"[^a-z\s]", "", text)
    return version.separator.join(break_long_runs(text).split())


def audio_text(speaker: Speaker, version: OuteTTSVersion) -> str:
    return TEXT_START + "".join(w.word + version.separator for w in speaker.words)


def _code_tokens(codes: Sequence[int]) -> str:
    return "".join(f"<|{c}|>" for c in codes)


def audio_data(speaker: Speaker, version: OuteTTSVersion) -> str:
    entries = [
        f"{w.word}<|t_{w.duration:.2f}|>{version.code_start}{_code_tokens(w.codes)}{version.code_end}"
        for w in speaker.words
    ]
    body = "\n".join(entries) + ("\n" if speaker.trailing_newline else "")
    return f"{AUDIO_START}\n{body}"


@dataclass(frozen=True)
class OuteTTSPrompt:
    text: str  # the whole prompt, special tokens written out
    clean_text: str  # the user's text after process_text
    words: tuple[str, ...]  # the words to speak, for guide tokens
    ends_with_newline: bool


def build_prompt(text: str, speaker: Speaker, version: OuteTTSVersion) -> OuteTTSPrompt:
    clean = process_text(text, version)
    if not clean:  # (numbers, punctuation and symbols handled: nothing is left)
        raise NothingToSay(text)
    data = audio_data(speaker, version)
    prompt = f"{IM_START}\n{audio_text(speaker, version)}{clean}{TEXT_END}\n{data}"
    return OuteTTSPrompt(prompt, clean, tuple(clean.split(version.separator)), data.endswith("\n"))


def parse_code_text(text: str) -> list[int]:
    """Codes from ``"12 7 968"`` / ``"12,7"`` or from ``"<|12|><|7|>"`` text (other tokens are ignored)."""
    found = CODE_TOKEN.findall(text)
    if found:
        return [int(c) for c in found]
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    try:
        return [int(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not p.lstrip("-").isdigit())
        raise InputError(f"'{bad}' is not an audio code: give integers or <|N|> tokens") from None
