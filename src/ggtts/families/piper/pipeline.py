"""Piper voices: text -> espeak-ng phonemes -> ids -> VITS, one sentence at a time (one streamed chunk each).

Word timestamps come from the durations the model draws: each phoneme id lasts a whole number of latent frames
(``hop_length`` samples each), and each phoneme knows the written word it says (:mod:`ggtts.families.piper.text`),
so a word starts where its first phoneme's ids start and ends where its last phoneme's end.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import torch

from ggtts.audio import Audio, WordTiming
from ggtts.errors import GGUFError, InputError
from ggtts.families.base import AudioStream, NothingToSay, Request, TTSModel
from ggtts.families.piper import FAMILY, MAX_NOISE, PiperOptions, voices
from ggtts.families.piper.text import PhonemeTable, Piece, Spoken
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Piper as K
from ggtts.models.layers.validate import Bounds
from ggtts.models.piper.load import load_piper
from ggtts.models.piper.model import PiperModel
from ggtts.runtime.cancel import check_cancelled
from ggtts.text.normalize import normalization_switches

SILENT_PEAK = 1e-8  # piper-tts leaves a sentence this quiet unscaled (as zeros)
# most latent frames per phoneme id (256 samples each: 3 s); natural speech takes a few, and a draw past this is
# refused before the decoder would be asked for hours of audio
MAX_FRAMES_PER_ID = 256
# a voice's own inference defaults: the noise as the per-call options allow it, a length scale voices keep near 1
NOISE = Bounds(0.0, MAX_NOISE, "a noise scale")
LENGTH = Bounds(0.1, 10.0, "a length scale")


class PiperPipeline(TTSModel):
    family = FAMILY

    def __init__(self, model: PiperModel, gguf: GGUFFile) -> None:
        self.model = model
        self.table = PhonemeTable.from_gguf(gguf)
        self.table.check_vocabulary(model.cfg.n_vocab, gguf.path)
        self.sample_rate = model.cfg.sample_rate
        self._voices = voices(gguf)
        if len(self._voices) > model.cfg.n_speakers:
            raise GGUFError(f"{gguf.path}: {len(self._voices)} speaker names for {model.cfg.n_speakers} speakers")
        self.noise_scale = NOISE.check(gguf.path, K.NOISE_SCALE, gguf.get_float(K.NOISE_SCALE, 0.667))
        self.length_scale = LENGTH.check(gguf.path, K.LENGTH_SCALE, gguf.get_float(K.LENGTH_SCALE, 1.0))
        self.noise_w = NOISE.check(gguf.path, K.NOISE_W, gguf.get_float(K.NOISE_W, 0.8))
        self.language = str(gguf.get(K.LANGUAGE) or "")  # the voice's language code ("en_US"), if its config gave it

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> PiperPipeline:
        """``options``: ``precision``: ``"float32"`` (default) or ``"bfloat16"``, the decoder's upsampling and
        resblock convolutions in bfloat16 (faster where the device has it natively, refused where it does not;
        :meth:`ggtts.models.piper.model.Generator.use_bfloat16`)."""
        from ggtts.ops.precision import check_precision

        precision = options.pop("precision", "float32")
        if options:
            raise InputError(f"unknown option '{next(iter(options))}' for Piper; known: precision")
        check_precision(precision, device)
        model = load_piper(gguf, device)
        if precision == "bfloat16":
            model.dec.use_bfloat16()
        return cls(model, gguf)

    def voice_languages(self, voice: str) -> list[str]:
        return [self.language] if self.language else []

    @property
    def voices(self) -> list[str]:
        return list(self._voices)

    def warm_up(self) -> None:
        if self.table.phoneme_type != "text":
            self.table.sentences("Hello.")  # espeak-ng's library and its data

    def run(self, request: Request[Any]) -> AudioStream:
        options: PiperOptions = request.options
        speaker = self._voices.index(request.voice.single) if request.voice and request.voice.single else 0
        spoken = self.table.spoken(request.text, normalization_switches(options.normalization), self.lexicon)
        if not spoken.pieces:
            raise NothingToSay(request.text)
        return self._sentences(spoken, options, speaker, request.speed)

    def _sentences(
        self, spoken: Spoken, options: PiperOptions, speaker: int, speed: float
    ) -> Generator[Audio, None, None]:
        generator = torch.Generator().manual_seed(options.seed)
        device = next(self.model.parameters()).device
        offset = 0.0
        for piece in spoken.pieces:
            check_cancelled()
            ids = torch.tensor([self.table.ids(piece.phonemes)], device=device)
            with torch.inference_mode():
                out = self.model.synthesize(
                    ids,
                    noise_scale=self.noise_scale if options.noise_scale is None else options.noise_scale,
                    length_scale=self.length_scale / speed,
                    noise_w=self.noise_w if options.noise_w is None else options.noise_w,
                    speaker=speaker if self.model.cfg.gin else None,
                    generator=generator,
                    max_frames_per_id=MAX_FRAMES_PER_ID,
                )
            samples = out.audio[0].float().cpu().numpy()
            if options.normalize:
                peak = float(np.abs(samples).max()) if samples.size else 0.0
                samples = samples / peak if peak >= SILENT_PEAK else np.zeros_like(samples)
            frames = out.durations[0].float().cpu().numpy()
            words = self._word_times(piece, spoken, frames, offset)
            audio = Audio(np.clip(samples, -1.0, 1.0), self.sample_rate, words=words, offset=offset)
            offset += audio.duration
            yield audio

    def _word_times(self, piece: Piece, spoken: Spoken, frames: np.ndarray, offset: float) -> tuple[WordTiming, ...]:
        """When each word of ``piece`` is said, from the latent frames of each phoneme id (``frames``)."""
        seconds = np.concatenate([[0.0], np.cumsum(frames)]) * self.model.cfg.hop_length / self.sample_rate
        spans: dict[int, tuple[int, int]] = {}  # word -> first and last id position (end excluded)
        for word, span in zip(piece.words, self.table.id_spans(piece.phonemes), strict=True):
            if word is None or span is None:
                continue
            start, end = spans.get(word, span)
            spans[word] = (min(start, span[0]), max(end, span[1]))
        return tuple(
            WordTiming(
                spoken.words[word].text,
                offset + float(seconds[start]),
                offset + float(seconds[end]),
                ends_sentence=spoken.words[word].ends_sentence,
            )
            for word, (start, end) in sorted(spans.items())
        )
