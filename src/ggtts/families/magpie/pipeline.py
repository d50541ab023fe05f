"""Magpie TTS: text -> tokens (the file's own tokenizer for the language) -> codes (:mod:`.generate`) -> the nano
codec -> audio, streamed a few frames at a time (the codec is causal and streams with each layer's state: its
streamed audio equals one-shot decoding).

Text is spoken as NeMo's ``do_tts`` chunks it: whole while under its word threshold, else sentence by sentence
(NeMo carries text and audio history between the chunks of a long text; ggtts starts each chunk afresh).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ggtts.audio import Audio
from ggtts.errors import GGUFError, InputError
from ggtts.families.base import MAX_SEED, AudioStream, NothingToSay, Request, TTSModel, find_beside, not_found_beside
from ggtts.families.magpie import CODEC_ARCH, FAMILY, MagpieOptions
from ggtts.families.magpie.generate import GenerationParams, MagpieGenerator, Utterance
from ggtts.families.magpie.lanes import MagpieLanes
from ggtts.families.magpie.text import MagpieText
from ggtts.gguf import GGUFFile
from ggtts.models.magpie.model import MagpieTTS, load_magpie
from ggtts.models.nanocodec.model import NanoCodec
from ggtts.runtime.frames import decode_frames
from ggtts.runtime.lanes import LaneLoop, speeches_in_lanes
from ggtts.text.sentences import sentence_chunks

if TYPE_CHECKING:
    from ggtts.text.normalize import Normalization

# codec frames per streamed chunk unless asked: the utterance's very first frame goes out alone (first audio), then
# RAMP_FRAMES (0.19 s at 21.5 frames/s), then DEFAULT_CHUNK_FRAMES (0.56 s: the codec decodes a push of 12 frames at
# 0.21 of real time at the real shape on 2 cores, one of 4 at 0.28-0.33)
RAMP_FRAMES = 4
DEFAULT_CHUNK_FRAMES = 12
WARM_UP_FRAMES = 4
# the codec's pushes over fixed tensors (when the model's steps are): the sizes captured as graphs, of which every
# push is made (13 = 12 + 1; a decoder step gives two frames)
STREAM_GRAPH_FRAMES = (DEFAULT_CHUNK_FRAMES, RAMP_FRAMES, 2, 1)
# NeMo's LanguageThresholds (about 20 s of speech): text with fewer words (characters for zh, OpenJTalk's words
# for ja) is spoken whole, longer text sentence by sentence
CHUNK_WORDS = {"en": 45, "es": 73, "fr": 69, "de": 50, "it": 53, "vi": 50, "zh": 100, "hi": 50, "ja": 80}
MAX_SENTENCE_WORDS = CHUNK_WORDS["en"]  # NeMo's default for the languages it lists none for


def find_codec(model_path: Path) -> Path | None:
    """The only ``nano-codec`` GGUF in the model's folder, if there is exactly one."""
    return find_beside(model_path, CODEC_ARCH)


def count_words(text: str, language: str) -> int:
    """NeMo's ``LanguageThresholds.get_word_count``: characters for Chinese, OpenJTalk's words for Japanese (its
    characters without OpenJTalk), whitespace-separated words otherwise."""
    letters = sum(1 for c in text if not c.isspace())
    if language == "zh":
        return letters
    if language == "ja":
        try:
            import pyopenjtalk
        except ImportError:
            return letters
        words = sum(1 for w in pyopenjtalk.run_frontend(text) if isinstance(w, dict) and w.get("string", "").strip())
        return words or letters
    return len(text.split())


def sentences(text: str, max_words: int = MAX_SENTENCE_WORDS, language: str = "en") -> list[str]:
    """The chunks ``text`` is spoken in, as NeMo's ``do_tts`` chunks it (words counted as the language counts
    them)."""
    return sentence_chunks(text, max_words, lambda t: count_words(t, language))


def chunk_frames(decoded: int) -> int:
    """Frames of the next streamed push when the caller asked for no size: :data:`RAMP_FRAMES` while the stream is
    young, then :data:`DEFAULT_CHUNK_FRAMES`."""
    return RAMP_FRAMES if decoded < 1 + RAMP_FRAMES else DEFAULT_CHUNK_FRAMES


class MagpieTTSPipeline(TTSModel):
    family = FAMILY

    def __init__(self, model: MagpieTTS, gguf: GGUFFile, device: str = "cpu") -> None:
        self.model, self.device, self.path = model, device, gguf.path
        self.text = MagpieText(gguf, model.cfg.text_eos_id)
        self.codec: NanoCodec | None = None
        self.codec_path: str | None = None
        self.sample_rate = model.cfg.sample_rate
        self.lanes: LaneLoop[Audio] | None = None  # utterances decoded together (the ``parallel`` load option)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> MagpieTTSPipeline:
        """``options``: ``codec`` (a nano-codec GGUF path; default: the only one beside the model)."""
        FAMILY.check_load_on(options, device)
        codec = options.pop("codec", None)
        parallel = int(options.pop("parallel", 1))
        if options:
            known = ", ".join(FAMILY.load_option_names())
            raise InputError(f"unknown option '{next(iter(options))}' for Magpie; known: {known}")
        model = load_magpie(gguf, device)
        model.null_context_kv()  # guidance's null row over the context: the same for every request, computed once
        pipeline = cls(model, gguf, device)
        pipeline.use_lanes(LaneLoop(MagpieLanes(), parallel) if parallel > 1 else None)
        codec = codec if codec is not None else find_codec(Path(gguf.path))
        if codec is not None:
            pipeline.with_codec(codec)
        return pipeline

    def with_codec(self, path: str | os.PathLike[str]) -> MagpieTTSPipeline:
        """Make the codec at ``path`` this pipeline's own (a request may still name another with ``codec=``)."""
        codec = self._load_codec(path)
        self.codec, self.sample_rate, self.codec_path = codec, codec.cfg.sample_rate, str(path)
        return self

    def _load_codec(self, path: str | os.PathLike[str]) -> NanoCodec:
        g = GGUFFile(path)
        if g.architecture != CODEC_ARCH:
            raise GGUFError(f"{path}: a Magpie codec must be a '{CODEC_ARCH}' GGUF, not '{g.architecture}'")
        codec = NanoCodec.from_gguf(g, self.device)
        if self.model.static_capture is not None:  # the model's steps are graphs on CUDA: the codec's pushes too
            codec.use_static_streams(STREAM_GRAPH_FRAMES, capture=self.model.static_capture)
        cfg = self.model.cfg
        if codec.cfg.num_codebooks != cfg.num_codebooks or codec.cfg.codebook_size != cfg.codebook_size:
            raise GGUFError(
                f"{path}: this codec has {codec.cfg.num_codebooks} codebooks of {codec.cfg.codebook_size} codes; the "
                f"model writes {cfg.num_codebooks} of {cfg.codebook_size}"
            )
        return codec

    def _request_codec(self, path: str) -> NanoCodec | None:
        """The codec a request names: the one loaded (a request never loads another file)."""
        if self.codec_path is None or Path(path).resolve() != Path(self.codec_path).resolve():
            raise InputError(
                f"codec {path} differs from the one loaded ({self.codec_path or 'none'}): the codec is chosen at load "
                "(ggtts.load(..., codec=PATH), --codec)"
            )
        return self.codec

    @property
    def voices(self) -> list[str]:
        return list(self.model.cfg.speaker_names)

    @property
    def parallel_streams(self) -> int:
        return 1 if self.lanes is None else self.lanes.max_lanes

    def warm_up(self) -> None:
        """Parse the English tokenizer's dictionary now (the real one has 125k words) and speak a few frames with a
        request's default settings (ggml's graphs, CUDA's captured steps and the codec's kernels are set up on
        first use), so the first request does not pay for it."""
        if "en" in self.text.spoken:
            self.text.tokenizer("en")
        if self.codec is not None:
            ids = [self.model.cfg.text_eos_id]
            # a request's default settings: on CUDA the graphs captured here are the ones requests replay
            defaults = self.params(MagpieOptions())
            warm = dataclasses.replace(defaults, max_frames=WARM_UP_FRAMES, min_frames=WARM_UP_FRAMES + 1)
            stream = self.codec.stream()
            for codes in MagpieGenerator(self.model, warm).frames(ids, 0):
                stream.push(codes)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "languages": list(self.text.spoken), "codec": self.codec is not None}

    def params(self, o: MagpieOptions) -> GenerationParams:
        """One request's generation settings: its options (checked by the family record) over the file's."""
        d = self.model.cfg.inference
        max_frames = d.max_decoder_steps if o.max_frames is None else o.max_frames
        limit = self.model.cfg.max_frames
        if max_frames > limit:
            raise InputError(f"max_frames {max_frames} is more than this model's decoder positions allow ({limit})")
        if not o.guidance and o.cfg_scale is not None:
            raise InputError("cfg_scale is the guidance's scale: leave it out with guidance off")
        scale = d.cfg_scale if o.cfg_scale is None else float(o.cfg_scale)
        return GenerationParams(
            temperature=d.temperature if o.temperature is None else float(o.temperature),
            top_k=d.top_k if o.top_k is None else int(o.top_k),
            cfg_scale=scale if o.guidance else None,
            prior=d.apply_attention_prior if o.prior is None else o.prior,
            prior_epsilon=d.prior_epsilon,
            prior_lookahead=d.prior_lookahead,
            prior_layers=d.prior_layers,
            alignment_layers=d.alignment_layers,
            prior_start=d.prior_start,
            max_frames=max_frames,
            min_frames=d.min_generated_frames,
            eos_method=d.eos_method,
            seed=o.seed,
        )

    def run(self, request: Request[MagpieOptions]) -> AudioStream:
        o, text = request.options, request.text
        codec = self._request_codec(o.codec) if o.codec else self.codec
        if codec is None:
            raise InputError(
                f"{self.path}: no codec: put the nano-codec GGUF beside the model or load it with codec=PATH (--codec)"
                + not_found_beside(Path(self.path), CODEC_ARCH)
            )
        if not any(ch.isalnum() for ch in text):  # punctuation alone: the tokenizers would speak its symbols
            raise NothingToSay(text)
        mix = request.voice
        speaker = self.voices.index(mix.single if mix is not None and mix.single else self.voices[0])
        language = o.lang or "en"
        words = CHUNK_WORDS.get(language, MAX_SENTENCE_WORDS)
        chunks = sentences(self._normalize(text, language, o.normalization), words, language)
        tokenizer_ids = [self.text.encode(s, language) for s in chunks]
        tokenizer_ids = [ids for ids in tokenizer_ids if len(ids) > 1]
        if not tokenizer_ids:
            raise NothingToSay(text)
        limit = self.model.cfg.encoder.max_positions
        if any(len(ids) > limit for ids in tokenizer_ids):
            raise InputError(f"a sentence is longer than the model's {limit} text tokens; split it")
        params = self.params(o)
        return self._stream(tokenizer_ids, speaker, params, o.chunk_frames, codec)

    def _normalize(self, text: str, language: str, normalization: Normalization | bool) -> str:
        """English through ggtts's normalizer, other languages' markup taken away, as ``normalization`` says."""
        from ggtts.text.normalize import normalization_switches, normalize

        if language == "en":  # (the lexicon's words first, as everywhere)
            return normalize(self.said(text), switches=normalization_switches(normalization))
        text = self.said_plainly(text, normalization)
        return re.sub(r"\s+", "", text) if language == "ja" else text  # as NeMo's do_tts: its Japanese drops spaces

    def _stream(
        self, chunks: list[list[int]], speaker: int, params: GenerationParams, frames_per_chunk: int | None,
        codec: NanoCodec,
    ) -> AudioStream:  # fmt: skip
        def speech(i: int, offset: float) -> ChunkSpeech:
            seed = ((params.seed or 0) + i) % (MAX_SEED + 1)
            generator = MagpieGenerator(self.model, GenerationParams(**{**params.__dict__, "seed": seed}))
            return ChunkSpeech(generator.utterance(chunks[i], speaker), generator.steps, codec, offset,
                               frames_per_chunk, first=not i)  # fmt: skip

        if self.lanes is not None:  # the first chunk joins the loop now (requests asked together decode together)
            return speeches_in_lanes(self.lanes, len(chunks), speech)
        return _alone(len(chunks), speech)


@torch.inference_mode()  # (the steps over fixed tensors write into tensors a warm-up made in this mode)
def _alone(n: int, speech: Callable[[int, float], ChunkSpeech]) -> Generator[Audio, None, None]:
    """``n`` chunks' speech (``speech(i, offset)``: chunk ``i``'s), one after another on this thread."""
    offset = 0.0
    for i in range(n):
        chunk = speech(i, offset)
        for codes in decode_frames(chunk.utterance, chunk.steps):
            yield from chunk.on_frame(codes)
        yield from chunk.on_end()
        offset = chunk.offset


class ChunkSpeech:
    """One chunk of text's speech: its decoding (``utterance``, at most ``steps`` decoder steps) and the codec
    streaming its codes as they come, starting ``offset`` seconds in. The utterance's very first frame (``first``:
    the request's first chunk) goes out alone (first audio), then pushes of ``frames_per_chunk`` frames (unset:
    :func:`chunk_frames`). Spoken alone or as a lane beside others (:mod:`ggtts.families.magpie.lanes`)."""

    def __init__(
        self, utterance: Utterance, steps: int, codec: NanoCodec, offset: float, frames_per_chunk: int | None,
        first: bool,
    ) -> None:  # fmt: skip
        self.utterance, self.steps = utterance, steps
        self.stream, self.rate, self.codebook_size = codec.stream(), codec.cfg.sample_rate, codec.cfg.codebook_size
        self.offset, self.frames_per_chunk, self.first = offset, frames_per_chunk, first
        self.pending: list[torch.Tensor] = []
        self.pushed = 0  # frames this chunk's stream has decoded

    def on_frame(self, codes: torch.Tensor) -> list[Audio]:
        """A decoder step's codes (C, n) -> the audio they complete (none while a push is filling)."""
        out = []
        if self.first:  # the utterance's first frame goes out at once (first audio)
            self.first = False
            out.append(self._push([codes[:, :1]]))
            self.pushed += 1
            codes = codes[:, 1:]
        self.pending.append(codes)
        waiting = sum(c.shape[1] for c in self.pending)
        if waiting >= (self.frames_per_chunk or chunk_frames(self.pushed)):
            out.append(self._push(self.pending))
            self.pushed += waiting
            self.pending = []
        return out

    def on_end(self) -> list[Audio]:
        """The audio of the frames not pushed yet."""
        if not self.pending or not sum(c.shape[1] for c in self.pending):
            return []
        out = [self._push(self.pending)]
        self.pending = []
        return out

    def _codec_codes(self, pending: list[torch.Tensor]) -> torch.Tensor:
        """Generated codes as the codec takes them. A frame kept under a non-default EOS rule (``*_all``,
        ``*_zero_cb``) can hold EOS in some codebook: NeMo's FSQ decodes such a code wrapped around the codebook
        (its digits modulo the levels), which is the code modulo the codebook size; so here too (the codec's is the
        model's: checked at load)."""
        codes = torch.cat(pending, dim=1)
        size = self.codebook_size
        return torch.where(codes >= size, codes % size, codes)

    def _push(self, codes: list[torch.Tensor]) -> Audio:
        audio = Audio(self.stream.push(self._codec_codes(codes)).cpu().numpy(), self.rate,
                      offset=self.offset)  # fmt: skip
        self.offset += audio.duration
        return audio
