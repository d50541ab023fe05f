"""Qwen3-TTS: text -> the talker's prompt (:mod:`.prompt`) -> the talker and code predictor (Qwen3-Omni's loop,
:mod:`ggtts.families.qwen3omni.generate`) -> the 12 Hz speech decoder -> 24 kHz audio, streamed a few frames at a
time (the decoder streams exactly: its audio of N frames is a prefix of its audio of N + 1).

Long text is spoken sentence by sentence (chunks of at most :data:`CHUNK_WORDS` words), each chunk a fresh
prompt. Sampling follows qwen-tts's ``generate``: the file's defaults (``generation_config.json``: temperature 0.9,
top-k 50, repetition penalty 1.05 for the talker; the code predictor draws at its own settings), EOS held back for
the first two frames.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import torch

from ggtts.audio import Audio
from ggtts.errors import GGUFError, InputError
from ggtts.families.base import AudioStream, NothingToSay, Request, TTSModel, VoiceMix, not_found_beside
from ggtts.families.qwen3omni.generate import TalkerSampling
from ggtts.families.qwen3omni.pipeline import (
    FrameSpeech,
    speak_frames,
    speaker_name,
    static_decoder,
    talker_lanes,
    talker_sampling,
    warm_talker,
)
from ggtts.families.qwen3tts import FAMILY, Qwen3TTSOptions, find_mmproj, is_mmproj, language_name
from ggtts.families.qwen3tts.prompt import ROLE, instruct_text, talker_inputs
from ggtts.families.qwen3tts.voices import ClonedVoice, voices_beside
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.models.qwen2.tokenizer import BPETokenizer
from ggtts.models.qwen3omni_code2wav.model import Code2WavStream
from ggtts.models.qwen3tts.config import MIN_FRAMES
from ggtts.models.qwen3tts.decoder import SpeechDecoder, fingerprint
from ggtts.models.qwen3tts.model import Talker
from ggtts.runtime.lanes import LaneLoop, speeches_in_lanes
from ggtts.text.sentences import sentence_chunks

CHUNK_WORDS = 60  # about 20 s of speech per prompt
SMALL_TALKER = 1024  # the 0.6B models' talker width: their CustomVoice models take no instruction (upstream)


class Qwen3TTSPipeline(TTSModel):
    family = FAMILY

    def __init__(self, gguf: GGUFFile, mmproj: GGUFFile, device: str = "cpu", precision: str = "float32") -> None:
        self.path, self.mmproj_path, self.device = gguf.path, mmproj.path, device
        self.tokenizer = BPETokenizer.from_gguf(gguf)
        self.talker = Talker.from_gguf(gguf, mmproj, device)
        self.decoder = SpeechDecoder.from_gguf(mmproj, device, precision)
        cfg, dec = self.talker.cfg, self.decoder.cfg
        first_codes = cfg.codec_vocab - len(cfg.suppressed_ids) - 1  # what the talker may draw, EOS apart
        if dec.num_quantizers != cfg.n_codebooks or max(cfg.cp_vocab, first_codes) > dec.codebook_size:
            raise GGUFError(
                f"{mmproj.path}: the talker writes {cfg.n_codebooks} codebooks of codes below "
                f"{max(cfg.cp_vocab, first_codes)}, the decoder reads {dec.num_quantizers} of {dec.codebook_size}: "
                f"not a matching pair ({gguf.path})"
            )
        self.role_ids = self.tokenizer.encode(ROLE, parse_special=True)
        self.sample_rate = dec.sample_rate
        # a Base model's cloned voices: the voice files beside it (ggtts voice create); speakers' names come first
        self.cloned: dict[str, ClonedVoice] = {}
        self.damaged: dict[str, str] = {}  # voice files beside it that do not read: the problem, by voice name
        if cfg.model_type == "base":
            found, self.damaged = voices_beside(Path(gguf.path), cfg.talker.dim)
            self.cloned = {n: v for n, v in found.items() if n not in cfg.speakers}
        # the decoder's hash, for voices that stored its state (only they need it: it reads every decoder tensor)
        self.decoder_check = fingerprint(mmproj) if any(v.decoder_state for v in self.cloned.values()) else ""
        self._primed: dict[str, Code2WavStream] = {}  # in-context voices: the decoder after their recordings
        self.lanes: LaneLoop[Audio] | None = None  # utterances spoken together (the ``parallel`` load option)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> Qwen3TTSPipeline:
        """``options``: ``mmproj`` (the code predictor and speech decoder's GGUF; default: the one beside);
        ``precision``: ``"float32"`` (default) or ``"bfloat16"``, the speech decoder's convolutions in bfloat16
        where the device has it natively (:meth:`SpeechDecoder.prepare`)."""
        from ggtts.ops.precision import check_precision

        mmproj = options.pop("mmproj", None)
        precision = options.pop("precision", "float32")
        parallel = int(options.pop("parallel", 1))
        if options:
            known = ", ".join(FAMILY.load_option_names())
            raise InputError(f"unknown option '{next(iter(options))}' for Qwen3-TTS; known: {known}")
        check_precision(precision, device)
        path = Path(mmproj) if mmproj is not None else find_mmproj(Path(gguf.path))
        if path is None:
            raise InputError(
                f"{gguf.path}: Qwen3-TTS needs its mmproj file (code predictor and speech decoder): put "
                f"mmproj-{Path(gguf.path).name} beside it or name it with --mmproj / mmproj="
                + not_found_beside(Path(gguf.path), K.CLIP_ARCH, is_mmproj)
            )
        model = cls(gguf, GGUFFile(path), device, precision)
        model.use_lanes(talker_lanes(model.talker, parallel))
        static_decoder(model.talker, model.decoder, model.decoder.cfg.num_quantizers, model.lanes)
        return model

    @property
    def parallel_streams(self) -> int:
        return 1 if self.lanes is None else self.lanes.max_lanes

    @property
    def voices(self) -> list[str]:
        return [*self.talker.cfg.speakers, *self.cloned]

    @property
    def default_voice(self) -> str | None:
        """A Base model speaks with no speaker unless a cloned voice is asked for (as qwen-tts without a voice
        prompt, and llama-tts without a speaker file); the others with their first preset speaker, if any."""
        return None if self.talker.cfg.model_type == "base" else super().default_voice

    def info(self) -> dict[str, Any]:
        cfg = self.talker.cfg
        languages = sorted(n for n in cfg.languages if "dialect" not in n)
        return {**super().info(), "mmproj": str(self.mmproj_path), "model_type": cfg.model_type,
                "languages": ["auto", *languages]}  # fmt: skip

    def warm_up(self) -> None:
        # a built-in speaker, else none (a Base model's voiceless request: a request with an in-context voice would
        # first prime the decoder with its recording, time the warm-up does not need)
        voice = next(iter(self.talker.cfg.speakers), None)
        instructions = "A calm voice." if self.talker.cfg.model_type == "voice_design" else None
        warm_talker(
            self.talker,
            lambda **options: self.stream("Hello.", voice, instructions=instructions, **options),
            self.decoder,
        )

    def resolve_voice(self, voice: str | None) -> VoiceMix | None:
        name = speaker_name(voice, self.voices)
        if name is not None and name not in self.voices and name in self.damaged:
            raise InputError(f"voice '{name}' cannot be spoken: its file is damaged ({self.damaged[name]})")
        return super().resolve_voice(name)

    def _instruct(self, o: Qwen3TTSOptions) -> list[int] | None:
        cfg = self.talker.cfg
        instruct = (o.instructions or "").strip()
        if cfg.model_type == "voice_design" and not instruct:
            raise InputError("this is a VoiceDesign model: describe the voice with instructions= / --instructions")
        if not instruct:
            return None
        if cfg.model_type == "base":
            raise InputError("instructions are not taken by a Base (voice cloning) model; leave them out")
        if cfg.model_type == "custom_voice" and cfg.talker.dim <= SMALL_TALKER:
            raise InputError("instructions are not taken by the 0.6B CustomVoice models (the 1.7B ones take them); "
                             "leave them out")  # fmt: skip
        # upstream's <|im_start|>user\n{instruct}<|im_end|>\n, the wrapper's specials parsed, the words not (a
        # request's text never becomes a codec or control token)
        before, after = instruct_text("\0").split("\0")
        encode = self.tokenizer.encode
        return [*encode(before, parse_special=True), *encode(instruct, parse_special=False),
                *encode(after, parse_special=True)]  # fmt: skip

    def run(self, request: Request[Qwen3TTSOptions]) -> AudioStream:
        o = request.options
        text = self.said_plainly(request.text, o.normalization)
        if o.mmproj is not None and Path(o.mmproj).resolve() != Path(self.mmproj_path).resolve():
            raise InputError(f"mmproj {o.mmproj} differs from the one loaded ({self.mmproj_path}): it is chosen at "
                             "load (ggtts.load(..., mmproj=PATH), --mmproj)")  # fmt: skip
        if not any(ch.isalnum() for ch in text):
            raise NothingToSay(request.text)
        speaker = request.voice.single if request.voice is not None else None
        if request.voice is not None and speaker is None:
            raise InputError("Qwen3-TTS speaks in one voice at a time")
        language = language_name(o.language or "auto")
        instruct = self._instruct(o)
        chunks = sentence_chunks(text, CHUNK_WORDS)
        # every chunk's prompt built (and so checked) before the first frame
        prompts = [self._inputs(chunk, language, speaker, instruct) for chunk in chunks]
        cfg = self.talker.cfg
        return self._stream(prompts, talker_sampling(cfg.sampling, cfg.cp_sampling, o), o.chunk_frames, speaker)

    def _inputs(self, text: str, language: str, speaker: str | None, instruct: list[int] | None) -> Any:
        ids = self.tokenizer.encode(text.strip(), parse_special=False)
        if not ids:
            raise NothingToSay(text)
        if speaker in self.cloned:  # upstream's voice cloning: the x-vector as the speaker, the text streamed in
            voice = self.cloned[speaker]
            reference = None
            if voice.in_context:  # and the recording's text and codes ahead of the text (upstream's ICL mode)
                assert voice.text is not None and voice.codes is not None
                reference = (self.tokenizer.encode(voice.text, parse_special=False), voice.codes)
            return talker_inputs(self.talker, self.role_ids, ids, language, voice.embedding, non_streaming=False,
                                 reference=reference)  # fmt: skip
        return talker_inputs(self.talker, self.role_ids, ids, language, speaker, instruct_ids=instruct)

    def decoder_stream(self, speaker: str | None) -> Code2WavStream:
        """The speech decoder's stream for an utterance: an in-context voice's goes on from its recording's frames
        (upstream decodes the recording's codes and the new ones together and cuts the recording's audio off; the
        decoder being causal, this is the same audio, cut at exactly the recording's frames)."""
        voice = self.cloned.get(speaker) if speaker is not None else None
        if voice is None or voice.codes is None or not voice.in_context:
            return self.decoder.fresh_stream()
        primed = self._primed.get(voice.name)
        if primed is None:
            primed = self._resumed(voice)
            if primed is None:
                primed = self.decoder.stream()
                primed.push(voice.codes.T.unsqueeze(0))  # its audio is the recording's again: not spoken
            self._primed[voice.name] = primed
        return self.decoder.going_on(primed)

    def _resumed(self, voice: ClonedVoice) -> Code2WavStream | None:
        """The decoder after the recording as ``voice create`` stored it, where this decoder made it, checked by
        decoding one frame on a copy; None where there is none or it does not fit."""
        state = voice.decoder_state
        if state is None or voice.codes is None or voice.decoder_check != self.decoder_check:
            return None
        codes = voice.codes.T.unsqueeze(0)
        # the layers that keep state, and their shapes: a fresh stream's after one frame, the attention layers'
        # keys and values (2, B, H, T, D) then holding min(frames, window - 1) positions rather than 1
        template = self.decoder.stream()
        template.push(codes[..., :1])
        kept = min(codes.shape[-1], self.decoder.cfg.sliding_window - 1)
        layers = template.saved()
        if set(state) != set(layers):
            return None
        for name, value in layers.items():
            want = list(value.shape)
            if len(want) == 5:
                want[3] = kept
            if list(state[name].shape) != want:
                return None
        try:
            stream = Code2WavStream.resumed(self.decoder, codes.shape[-1], codes.shape[:-1], state)
            trial = stream.fork().push(codes[..., -1:])
        except (ValueError, RuntimeError, IndexError):
            return None
        return stream if bool(torch.isfinite(trial).all()) else None

    def _stream(
        self, prompts: list[Any], params: TalkerSampling, frames_per_chunk: int, speaker: str | None
    ) -> AudioStream:
        def speech(i: int, offset: float) -> FrameSpeech:
            return FrameSpeech(self.talker, prompts[i], self.decoder_stream(speaker), self.sample_rate, params, i,
                               offset, frames_per_chunk, MIN_FRAMES)  # fmt: skip

        if self.lanes is not None:
            return speeches_in_lanes(self.lanes, len(prompts), speech)
        return self._alone(len(prompts), speech)

    def _alone(self, n: int, speech: Callable[[int, float], FrameSpeech]) -> Generator[Audio, None, None]:
        offset = 0.0
        for i in range(n):
            offset = yield from speak_frames(speech(i, offset))
