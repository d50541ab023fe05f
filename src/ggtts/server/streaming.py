"""Encoders that turn a sequence of audio chunks into bytes that can be sent as soon as each chunk is ready.

WAV is sent with an open-ended header followed by 16-bit PCM, raw ``pcm`` is the samples alone. MP3 and
Ogg Opus go through libsndfile writing into a sink that hands on every byte written, once; what libsndfile
would rewrite at the start of the file when it closes (the MP3 frame-count tag) is never sent.
Ogg Opus pages hold up to a second of audio, so Opus arrives in steps of about a second. AAC is FFmpeg's encoder
(through PyAV) in ADTS frames, each of which a reader can start from: a stream of them is a valid file whenever it
is cut between frames.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import soundfile as sf

from ggtts.audio import Audio, encoded_rate, wav_header

# format -> (libsndfile major format, subtype)
SOUNDFILE_FORMATS: dict[str, tuple[str, str]] = {
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
}
AAC_RATES = frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000})
# Formats that can be sent as they are encoded. FLAC cannot: a FLAC stream of unknown length is valid, but
# libsndfile (so soundfile) cannot read one, so it would hurt the clients most likely to ask for it.
STREAMABLE_FORMATS = ("wav", "pcm", "mp3", "opus", "aac")
# MP3: LAME starts a file with a placeholder frame (header + zeros) that it fills with the frame count when
# it closes. Streamed, that frame would stay empty and readers (libsndfile/mpg123) would estimate the length
# from its bitrate, not the real one; so it is left out and the rest is sent at a constant bitrate
# (libsndfile applies a bitrate mode only with a compression level; 0.5 gives 80 kbit/s for 24 kHz mono).
MP3_BITRATE_MODE = "CONSTANT"
MP3_COMPRESSION_LEVEL = 0.5
_MP3_BITRATES_KBPS = {  # layer III bitrate index -> kbit/s, for MPEG-1 and for MPEG-2/2.5
    True: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    False: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES_HZ = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
_MP3_HEADER_BYTES = 4
# Sample rates the codecs accept (Hz); other rates are refused up front with a message naming these. (Opus takes
# any: audio at a rate it does not encode is resampled to 48 kHz, as files are: ggtts.audio.encoded_rate.)
CODEC_RATES: dict[str, frozenset[int]] = {
    "mp3": frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}),
    "aac": AAC_RATES,
}


def unsupported_rate_message(fmt: str, sample_rate: int) -> str | None:
    """A sentence for people when ``fmt`` cannot carry audio at ``sample_rate`` Hz, else None."""
    rates = CODEC_RATES.get(fmt)
    if rates is None or sample_rate in rates:
        return None
    listed = ", ".join(str(r) for r in sorted(rates))
    return f"{fmt} cannot carry {sample_rate} Hz audio (it takes {listed} Hz); ask for wav, flac or pcm"


def mp3_frame_length(header: bytes) -> int | None:
    """Bytes in the MPEG layer III frame starting with ``header``, or None if it is not one."""
    if len(header) < _MP3_HEADER_BYTES or header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version, layer = (header[1] >> 3) & 3, (header[1] >> 1) & 3
    bitrate_index, rate_index, padding = header[2] >> 4, (header[2] >> 2) & 3, (header[2] >> 1) & 1
    if version not in _MP3_RATES_HZ or layer != 1 or not 0 < bitrate_index < 15 or rate_index == 3:
        return None
    mpeg1 = version == 3
    bitrate = _MP3_BITRATES_KBPS[mpeg1][bitrate_index] * 1000
    rate = _MP3_RATES_HZ[version][rate_index]
    return (144 if mpeg1 else 72) * bitrate // rate + padding


def drop_mp3_placeholder(data: bytes) -> bytes:
    """``data`` without its first frame if that frame is LAME's empty placeholder (a header and zeros)."""
    length = mp3_frame_length(data)
    if length is None or len(data) < length or any(data[_MP3_HEADER_BYTES:length]):
        return data
    return data[length:]


class StreamEncoder(Protocol):
    def start(self) -> bytes: ...

    def feed(self, audio: Audio) -> bytes: ...

    def finish(self) -> bytes: ...

    def close(self) -> None: ...


class PcmStreamEncoder:
    """Raw little-endian 16-bit mono samples; ``with_header`` puts an open-ended WAV header in front."""

    def __init__(self, sample_rate: int, *, with_header: bool) -> None:
        self.sample_rate = sample_rate
        self.with_header = with_header

    def start(self) -> bytes:
        return wav_header(self.sample_rate, None) if self.with_header else b""

    def feed(self, audio: Audio) -> bytes:
        return audio.pcm16()

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        pass


class _ForwardSink:
    """A seekable file for libsndfile whose bytes can be taken away as they are written.

    Bytes already taken cannot be changed any more: later writes over them are dropped.
    """

    def __init__(self) -> None:
        self._data = bytearray()
        self._pos = 0
        self._taken = 0

    def write(self, data: bytes) -> int:
        end = self._pos + len(data)
        if len(self._data) < end:
            self._data.extend(b"\0" * (end - len(self._data)))
        keep_from = max(self._taken, self._pos)
        if keep_from < end:
            self._data[keep_from:end] = data[keep_from - self._pos :]
        self._pos = end
        return len(data)

    def read(self, size: int = -1) -> bytes:
        stop = len(self._data) if size < 0 else min(len(self._data), self._pos + size)
        out = bytes(self._data[self._pos : stop])
        self._pos = max(self._pos, stop)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._data)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def take(self) -> bytes:
        out = bytes(self._data[self._taken :])
        self._taken = len(self._data)
        return out


class SoundFileStreamEncoder:
    """MP3 or Ogg Opus, encoded chunk by chunk with libsndfile; Opus at a rate it does not encode is resampled to
    48 kHz on the way (soxr's stream: the same samples as resampling the whole, to rounding)."""

    def __init__(self, fmt: str, sample_rate: int) -> None:
        major, subtype = SOUNDFILE_FORMATS[fmt]
        self._sink = _ForwardSink()
        self._first_bytes_pending = fmt == "mp3"
        rate = encoded_rate(fmt, sample_rate)
        self._resampler: Any = None
        if rate != sample_rate:
            import soxr

            self._resampler = soxr.ResampleStream(sample_rate, rate, 1, dtype="float32", quality="HQ")
        self._file: sf.SoundFile | None = sf.SoundFile(
            self._sink,
            mode="w",
            samplerate=rate,
            channels=1,
            format=major,
            subtype=subtype,
            bitrate_mode=MP3_BITRATE_MODE if fmt == "mp3" else None,
            compression_level=MP3_COMPRESSION_LEVEL if fmt == "mp3" else None,
        )

    def start(self) -> bytes:
        return self._take()

    def feed(self, audio: Audio) -> bytes:
        assert self._file is not None, "feed after finish"
        samples = np.ascontiguousarray(audio.samples, dtype=np.float32)
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        self._file.write(samples)
        return self._take()

    def finish(self) -> bytes:
        if self._file is not None and self._resampler is not None:  # what the resampler still holds
            self._file.write(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        self.close()
        return self._take()

    def _take(self) -> bytes:
        data = self._sink.take()
        if self._first_bytes_pending and data:
            self._first_bytes_pending = False
            data = drop_mp3_placeholder(data)
        return data

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class AacStreamEncoder:
    """AAC-LC in ADTS frames (FFmpeg's encoder through PyAV, at its default bitrate); the encoder holds back
    about a frame (1024 samples) until the next chunk or the end."""

    def __init__(self, sample_rate: int) -> None:
        try:
            import av
        except ImportError as exc:
            raise RuntimeError("aac needs PyAV: pip install 'ggtts[server]'") from exc
        self._sink = _ForwardSink()
        self._container: Any = av.open(self._sink, mode="w", format="adts")
        self._stream: Any = self._container.add_stream("aac", rate=sample_rate)
        self._stream.layout = "mono"
        self._frame_class = av.AudioFrame
        self._rate = sample_rate
        self._pts = 0

    def start(self) -> bytes:
        return b""

    def feed(self, audio: Audio) -> bytes:
        samples = np.ascontiguousarray(audio.samples, dtype=np.float32)
        if samples.size:
            frame = self._frame_class.from_ndarray(samples[None, :], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = self._rate, self._pts
            self._pts += samples.size
            self._mux(self._stream.encode(frame))
        return self._sink.take()

    def finish(self) -> bytes:
        if self._container is not None:
            self._mux(self._stream.encode(None))
            self.close()
        return self._sink.take()

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self._container.mux(packet)

    def close(self) -> None:
        if self._container is not None:
            container, self._container = self._container, None
            container.close()


def encode_whole(audio: Audio, fmt: str) -> bytes:
    """``audio`` as one file in ``fmt``: soundfile's formats as :meth:`Audio.encode` writes them, AAC here."""
    if fmt != "aac":
        return audio.encode(fmt)
    encoder = AacStreamEncoder(audio.sample_rate)
    try:
        return encoder.start() + encoder.feed(audio) + encoder.finish()
    finally:
        encoder.close()


def stream_encoder(fmt: str, sample_rate: int) -> StreamEncoder:
    if fmt in ("wav", "pcm"):
        return PcmStreamEncoder(sample_rate, with_header=fmt == "wav")
    if fmt == "aac":
        return AacStreamEncoder(sample_rate)
    if fmt in SOUNDFILE_FORMATS:
        return SoundFileStreamEncoder(fmt, sample_rate)
    raise ValueError(f"audio in '{fmt}' cannot be streamed; streamable: {', '.join(STREAMABLE_FORMATS)}")
