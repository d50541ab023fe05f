"""The ``Audio`` result type and its encodings (WAV 16-bit PCM or float, FLAC, raw PCM)."""

from __future__ import annotations

import dataclasses
import io
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf

from ggtts.errors import InputError
from ggtts.fsutil import atomic_output, check_writable

# suffix -> (soundfile format, subtype)
FILE_FORMATS: dict[str, tuple[str, str]] = {
    ".wav": ("WAV", "PCM_16"),
    ".flac": ("FLAC", "PCM_16"),
    ".ogg": ("OGG", "VORBIS"),
    ".opus": ("OGG", "OPUS"),
    ".mp3": ("MP3", "MPEG_LAYER_III"),
}
PCM16_MAX = 32767
# Opus encodes these rates only; audio at any other (Piper's and Magpie's 22,050 Hz) is resampled to Opus's own
# 48 kHz, as opusenc does (an Opus decoder plays 48 kHz whatever the rate encoded)
OPUS_RATES = frozenset({8000, 12000, 16000, 24000, 48000})
OPUS_RATE = 48000


def encoded_rate(fmt: str | None, sample_rate: int) -> int:
    """The rate audio at ``sample_rate`` Hz is encoded at in ``fmt`` (a format's name: ``opus``, ``wav``, ...): its
    own, but in Opus where Opus cannot encode it (48 kHz then). Files, their manifests and joins, and the server's
    streams and headers all ask this."""
    return OPUS_RATE if fmt == "opus" and sample_rate not in OPUS_RATES else sample_rate


@dataclass(frozen=True)
class WordTiming:
    """When a word is said: ``start`` and ``end`` in seconds from the start of the utterance. ``text`` is the word
    as the user wrote it, without the punctuation around it ("$5" is one word, though spoken as two)."""

    text: str
    start: float
    end: float
    ends_sentence: bool = False  # sentence-final punctuation follows it in the text
    # the rest of a word begun in the audio before (a chunk boundary fell inside it): joined by merge_words
    continues: bool = False
    # the word goes on in the audio after (its ``end`` here is this audio's part of it): joined by merge_words
    goes_on: bool = False

    def as_dict(self) -> dict[str, str | float]:
        return {"word": self.text, "start": round(self.start, 3), "end": round(self.end, 3)}


@dataclass(frozen=True, eq=False)  # (two Audio are compared by their samples: np.array_equal(a.samples, b.samples))
class Audio:
    """Mono float32 samples in [-1, 1] at ``sample_rate`` Hz.

    ``words`` are the words said in it with their times, where the model gives them (Kokoro does); times count
    from the start of the utterance, and ``offset`` is where this audio starts in it (a streamed chunk's offset is
    the duration of the chunks before it; a whole utterance's is 0).
    """

    samples: np.ndarray
    sample_rate: int
    words: tuple[WordTiming, ...] = ()
    offset: float = 0.0

    def __post_init__(self) -> None:
        """The samples as one contiguous float32 row (a ``(1, N)`` array is one channel too); an InputError for a
        sample rate that is not a positive whole number, or for several channels (this is mono audio)."""
        rate = self.sample_rate
        if isinstance(rate, bool) or not isinstance(rate, int | np.integer) or rate <= 0:
            raise InputError(f"sample_rate must be a positive whole number of Hz, got {rate!r}")
        samples = np.ascontiguousarray(self.samples, dtype=np.float32)
        if sum(n > 1 for n in samples.shape) > 1:
            raise InputError(f"Audio is mono: samples must be one channel, got an array of shape {samples.shape}")
        object.__setattr__(self, "samples", samples.reshape(-1))
        object.__setattr__(self, "sample_rate", int(rate))

    @property
    def duration(self) -> float:
        return len(self.samples) / self.sample_rate

    def __len__(self) -> int:
        return len(self.samples)

    @staticmethod
    def concatenate(parts: Iterable[Audio]) -> Audio:
        """The parts one after another, starting where the first starts; each part's words move to where the part
        now stands (the chunks of one stream are already there: their words keep their times)."""
        parts = list(parts)
        if not parts:
            raise ValueError("no audio to concatenate")
        rates = {p.sample_rate for p in parts}
        if len(rates) != 1:
            raise ValueError(f"cannot concatenate audio of different sample rates {sorted(rates)}")
        rate, offset = parts[0].sample_rate, parts[0].offset
        words: list[WordTiming] = []
        position = 0
        for part in parts:
            shift = offset + position / rate - part.offset
            words += [dataclasses.replace(w, start=w.start + shift, end=w.end + shift) for w in part.words]
            position += len(part.samples)
        return Audio(np.concatenate([p.samples for p in parts]), rate, merge_words(words), offset)

    def pcm16(self) -> bytes:
        """Little-endian signed 16-bit samples, clipped."""
        return (np.clip(self.samples, -1.0, 1.0) * PCM16_MAX).round().astype("<i2").tobytes()

    def encode(self, fmt: str = "wav", *, float_wav: bool = False) -> bytes:
        """The audio as a file in ``fmt`` (wav, flac, ogg, opus, mp3) or raw ``pcm`` (16-bit little-endian)."""
        if fmt == "pcm":
            return self.pcm16()
        buf = io.BytesIO()
        self.write_to(buf, "." + fmt, float_wav=float_wav)
        return buf.getvalue()

    def write_to(self, stream: BinaryIO, suffix: str, *, float_wav: bool = False) -> None:
        fmt, subtype = soundfile_format(suffix, float_wav=float_wav)
        samples, rate = self.samples, encoded_rate(suffix.lower().lstrip("."), self.sample_rate)
        if rate != self.sample_rate:
            samples = resample(samples, self.sample_rate, rate)
        elif subtype == "PCM_16":  # the integers a stream sends (pcm16): libsndfile's own scaling differs by 1 LSB
            samples = np.frombuffer(self.pcm16(), dtype="<i2")
        sf.write(stream, samples, rate, format=fmt, subtype=subtype)

    def save(self, path: str | os.PathLike[str], *, float_wav: bool = False) -> Path:
        """Write to ``path`` (format from the suffix; ``.wav`` is 16-bit PCM unless ``float_wav``).

        The file is written under a temporary name and renamed, so a failure leaves nothing under ``path``; one
        that cannot be written is an :class:`~ggtts.fsutil.OutputError` naming it. Its folder must exist: a missing
        one is an error, as for ``ggtts speak -o``, not made.
        """
        if not isinstance(path, str | os.PathLike) or isinstance(os.fspath(path), bytes):
            raise InputError(f"save takes a file's path (str or pathlib.Path), got {type(path).__name__}")
        path = Path(path).expanduser()
        suffix = check_output_suffix(path)
        check_writable(path)  # (atomic_output would make a missing folder)
        encoded = io.BytesIO()  # encoded first: a full disk is then one OSError, not soundfile's callback tracebacks
        self.write_to(encoded, suffix, float_wav=float_wav)
        with atomic_output(path) as tmp:
            tmp.write_bytes(encoded.getbuffer())
        return path


def soundfile_format(suffix: str, *, float_wav: bool = False) -> tuple[str, str]:
    """soundfile's (format, subtype) for a file suffix (``.wav`` is 16-bit PCM unless ``float_wav``)."""
    suffix = suffix.lower()
    if suffix not in FILE_FORMATS:
        raise InputError(f"unsupported audio format '{suffix}'; supported: {', '.join(sorted(FILE_FORMATS))}")
    fmt, subtype = FILE_FORMATS[suffix]
    return (fmt, "FLOAT") if suffix == ".wav" and float_wav else (fmt, subtype)


def check_output_suffix(path: str | os.PathLike[str]) -> str:
    """The audio format suffix of ``path``, or an InputError naming the supported ones."""
    suffix = Path(path).suffix.lower()
    if suffix not in FILE_FORMATS:
        raise InputError(f"{path}: unsupported audio format '{suffix}'; use one of {', '.join(sorted(FILE_FORMATS))}")
    return suffix


STREAMING_WAV_SIZE = 0xFFFFFFFF  # data size unknown when streaming: the maximum, as ffmpeg and browsers accept


def wav_header(sample_rate: int, n_samples: int | None = None, *, bits: int = 16, channels: int = 1) -> bytes:
    """A 44-byte PCM WAV header; with ``n_samples=None`` the sizes are set for an open-ended stream."""
    block_align = channels * bits // 8
    if n_samples is None:
        data_size = STREAMING_WAV_SIZE - 36
        riff_size = STREAMING_WAV_SIZE
    else:
        data_size = n_samples * block_align
        riff_size = 36 + data_size
    return (
        b"RIFF"
        + struct.pack("<I", riff_size & 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block_align, block_align, bits)
        + b"data"
        + struct.pack("<I", data_size & 0xFFFFFFFF)
    )


def merge_words(words: Iterable[WordTiming]) -> tuple[WordTiming, ...]:
    """``words`` with each continuation (``continues``) joined to the word before it: one word, from the first
    part's start to the last part's end."""
    merged: list[WordTiming] = []
    for word in words:
        if word.continues and merged:
            last = merged[-1]
            text = word.text if len(word.text) > len(last.text) else last.text
            merged[-1] = dataclasses.replace(
                last, text=text, end=word.end, ends_sentence=word.ends_sentence, goes_on=word.goes_on
            )
        else:
            merged.append(dataclasses.replace(word, continues=False) if word.continues else word)
    return tuple(merged)


class StreamedWords:
    """A stream's words as each is whole: a word that goes on in the next chunk (``goes_on``) is held back until
    its rest has come, then given once, from its start to its rest's end. What a live caption sends."""

    def __init__(self) -> None:
        self._held: WordTiming | None = None

    def add(self, words: Iterable[WordTiming]) -> tuple[WordTiming, ...]:
        """The words of the stream's next chunk that are whole now (a word held before first)."""
        words = list(words)
        if self._held is not None:
            words.insert(0, self._held)
        elif words and words[0].continues:  # the rest of a word not held (its first part had no goes_on): given
            words.pop(0)
        merged = merge_words(words)
        self._held = merged[-1] if merged and merged[-1].goes_on else None
        return tuple(_settled(w) for w in (merged[:-1] if self._held is not None else merged))

    def finish(self) -> tuple[WordTiming, ...]:
        """The word still held at the stream's end (its rest never came), as it is."""
        held, self._held = self._held, None
        return () if held is None else (_settled(held),)


def _settled(word: WordTiming) -> WordTiming:
    return dataclasses.replace(word, goes_on=False) if word.goes_on else word


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Band-limited resampling of mono float audio (soxr's high-quality mode); float32 out."""
    samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
    if rate == target_rate or samples.size == 0:
        return samples
    import soxr

    return np.asarray(soxr.resample(samples, rate, target_rate, quality="HQ"), dtype=np.float32)
