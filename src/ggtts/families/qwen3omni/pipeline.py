"""Qwen3-Omni: text -> the thinker's tokens (and, in ``mode="chat"``, its answer) -> the talker and code predictor
(:mod:`.generate`) -> code2wav -> 24 kHz audio, streamed a few frames at a time.

``mode="say"`` (default) speaks the text as written: the chat is laid out as if the thinker had answered the text
with itself, so only the thinker's tokenizer and token embeddings are read (a 30B thinker file costs its embedding
table's pages, not its weights). ``mode="chat"`` runs the thinker (greedy) on the text and speaks its answer; a
thinker whose weights do not fit in memory is refused up front. Long text is spoken sentence by sentence (chunks
of at most :data:`CHUNK_WORDS` words), each chunk a fresh chat. Code2wav streams with each layer's state, so the
streamed audio is its one-shot decoding of the frames (upstream decodes in chunks of 300 frames after 25 of
context, which differs from one-shot past 300 frames; :func:`ggtts.models.qwen3omni_code2wav` reports by how much).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ggtts.audio import Audio
from ggtts.errors import GGUFError, InputError
from ggtts.families.base import (
    MAX_SEED,
    AudioStream,
    NothingToSay,
    Request,
    TTSModel,
    VoiceMix,
    find_beside,
    not_found_beside,
    read_first,
)
from ggtts.families.qwen3omni import FAMILY, REPLY_TOKENS, TALKER_ARCH, Qwen3OmniOptions, audio_encoder_beside
from ggtts.families.qwen3omni.generate import TalkerSampling, decoded_frames, talker_decoder
from ggtts.families.qwen3omni.prompt import AUDIO_MARKERS, AudioIds, TalkerInputs, chat_prompt, talker_inputs
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniThinker as ThinkerKeys
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.qwen2.tokenizer import BPETokenizer
from ggtts.models.qwen3omni_code2wav.model import Code2Wav, StreamingDecoder
from ggtts.models.qwen3omni_talker.config import Sampling
from ggtts.models.qwen3omni_talker.model import Talker, TalkerStack
from ggtts.ops.stored_experts import DENSE_ROWS
from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights
from ggtts.runtime.lanes import LaneLoop, speeches_in_lanes
from ggtts.text.sentences import sentence_chunks

CHUNK_WORDS = 60  # a chunk of text spoken as one chat turn (about 20 s of speech)
DEFAULT_VOICE = "ethan"  # transformers' generate() default speaker
# a talker stream's speech decoder pushes its first frame alone, then 4, then chunk_frames (12 by default) at a time:
# pushes of these sizes are graphs where its steps are (any push is made of them)
DECODER_GRAPH_FRAMES = (12, 4, 2, 1)
WARM_UP_FRAMES = 2  # a warm-up's frames where there is nothing to capture
WARM_UP_CHUNKS = 2  # a warm-up stream's chunks: its first frame alone, then the next few (the talker's steps run)
RAMP_FRAMES = 4  # the push after the first frame: audio keeps coming while code2wav reaches its best push size
TALKER_MAX_LEN = 8192  # talker positions allocated per chunk at most (prompt + frames)


def chunk_size(decoded: int, first: bool, most: int) -> int:
    """Frames the next push to code2wav takes: the utterance's very first frame alone (first audio), then
    :data:`RAMP_FRAMES`, then ``most`` (a push of 12-25 frames costs code2wav least per frame: about 0.26-0.29 of
    real time at the published shape on 2 cores, against 0.44 in pushes of 4 and 0.64 of 1)."""
    if first:
        return 1
    return min(most, RAMP_FRAMES) if decoded < 1 + RAMP_FRAMES else most


class ThinkerEmbedding(nn.Module):
    """The thinker's token embedding table alone (``token_embd``), as stored (memory-mapped) where ggml runs."""

    def __init__(self, gguf: GGUFFile, device: str) -> None:
        super().__init__()
        name = f"{ThinkerKeys.TOKEN_EMBD}.weight"
        info = gguf.info(name)
        with empty_modules():
            rows, width = info.shape
            self.token_embd = nn.Embedding(rows, width)
        plan = stored_weights_plan(device)
        consumed = use_planned_weights(plan, self, gguf)
        keep = {name} - consumed
        load_module_from_gguf(self, gguf, ignore=set(gguf.names()) - keep, device=device)

    def forward(self, ids: list[int]) -> torch.Tensor:
        weight = getattr(self.token_embd, "weight", None)  # a stored table has none: it lives on the CPU
        device = weight.device if isinstance(weight, torch.Tensor) else "cpu"
        return self.token_embd(torch.tensor(ids, dtype=torch.long, device=device)).float()  # (N, thinker dim)


AudioInput = str | os.PathLike[str] | bytes | np.ndarray  # a sound file's path or bytes, or 16 kHz mono samples


@dataclass
class ChatReply:
    """The thinker's answer: its text (known when :meth:`Qwen3OmniPipeline.chat` returns) and, unless it was not
    wanted, the talker's speech of it streamed chunk by chunk (iterating ``audio`` runs the talker)."""

    text: str
    tokens: list[int]  # the answer's tokens, its final <|im_end|> included when it ended so
    audio: Iterator[Audio]
    prompt_tokens: int = 0  # the chat prompt's length, audio placeholders included
    finished: bool = True  # ended by the thinker, not by max_reply_tokens


class Qwen3OmniPipeline(TTSModel):
    family = FAMILY

    def __init__(
        self,
        gguf: GGUFFile,
        talker: GGUFFile,
        device: str = "cpu",
        precision: str = "float32",
        mmproj: GGUFFile | None = None,
    ) -> None:
        self.path, self.talker_path, self.device = gguf.path, talker.path, device
        self.mmproj_path = mmproj.path if mmproj is not None else None
        self._mmproj = mmproj
        self._encoder: Any = None  # the audio encoder, loaded on the first question that is audio
        self.thinker_gguf = gguf
        self.tokenizer = BPETokenizer.from_gguf(gguf)
        self.embedding = ThinkerEmbedding(gguf, device)
        self.talker = Talker.from_gguf(talker, device)
        self.code2wav = Code2Wav.from_gguf(talker, device, precision=precision)
        if self.talker.cfg.thinker_dim != self.embedding.token_embd.embedding_dim:
            raise GGUFError(
                f"{talker.path}: the talker takes {self.talker.cfg.thinker_dim}-wide thinker states, but "
                f"{gguf.path} embeds tokens {self.embedding.token_embd.embedding_dim} wide: not a matching pair"
            )
        cfg, codebook = self.talker.cfg, self.code2wav.cfg.codebook_size
        first_codes = cfg.codec_vocab - cfg.suppressed_tail  # what the talker may draw, EOS apart
        if cfg.cp_vocab > codebook or first_codes > codebook or cfg.codec_eos < first_codes:
            raise GGUFError(
                f"{talker.path}: the talker draws codes 0..{first_codes - 1} and the code predictor "
                f"0..{cfg.cp_vocab - 1} (EOS {cfg.codec_eos}), but code2wav decodes 0..{codebook - 1}: not a "
                "matching talker and code2wav"
            )
        self.sample_rate = self.code2wav.cfg.sample_rate
        self._thinker: Any = None  # loaded on the first mode="chat" request
        self._thinker_lock = threading.Lock()
        self.lanes: LaneLoop[Audio] | None = None  # utterances spoken together (the ``parallel`` load option)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> Qwen3OmniPipeline:
        """``options``: ``talker`` (a qwen3omni-talker GGUF path; default: the only one beside the thinker);
        ``precision``: ``"float32"`` (default) or ``"bfloat16"``, code2wav's decoder convolutions in bfloat16 where
        the device has it natively (:meth:`Code2Wav.prepare`)."""
        from ggtts.ops.precision import check_precision

        talker = options.pop("talker", None)
        precision = options.pop("precision", "float32")
        mmproj_path = options.pop("mmproj", None)
        parallel = int(options.pop("parallel", 1))
        if options:
            known = ", ".join(FAMILY.load_option_names())
            raise InputError(f"unknown option '{next(iter(options))}' for Qwen3-Omni; known: {known}")
        check_precision(precision, device)
        path = talker if talker is not None else find_beside(Path(gguf.path), TALKER_ARCH)
        if path is None:
            raise InputError(
                f"{gguf.path}: Qwen3-Omni speaks through its talker: put the qwen3omni-talker GGUF beside the "
                "thinker or name it with --talker / talker=" + not_found_beside(Path(gguf.path), TALKER_ARCH)
            )
        talker_gguf = GGUFFile(path)
        if talker_gguf.architecture != TALKER_ARCH:
            raise GGUFError(f"{path}: the talker must be a '{TALKER_ARCH}' GGUF, not '{talker_gguf.architecture}'")
        named = mmproj_path is not None
        if not named:
            mmproj_path = audio_encoder_beside(Path(gguf.path))
        mmproj = None
        if mmproj_path is not None:
            from ggtts.models.qwen3omni_audio.config import AudioConfig

            mmproj = GGUFFile(mmproj_path)
            try:
                AudioConfig.from_gguf(mmproj)  # a clear error now for a named file that is not this audio encoder
            except GGUFError:
                if named:
                    raise
                mmproj = None  # another model's mmproj beside the thinker (a vision one, say): not its ears
        model = cls(gguf, talker_gguf, device, precision, mmproj)
        model.use_lanes(talker_lanes(model.talker, parallel))
        static_decoder(model.talker, model.code2wav, model.code2wav.cfg.num_quantizers, model.lanes)
        return model

    @property
    def parallel_streams(self) -> int:
        return 1 if self.lanes is None else self.lanes.max_lanes

    @property
    def voices(self) -> list[str]:
        return list(self.talker.cfg.speakers)

    @property
    def default_voice(self) -> str | None:
        return DEFAULT_VOICE if DEFAULT_VOICE in self.talker.cfg.speakers else super().default_voice

    def info(self) -> dict[str, Any]:
        out = {**super().info(), "talker": str(self.talker_path)}
        if self.mmproj_path is not None:
            out["mmproj"] = str(self.mmproj_path)
        return out

    def warm_up(self) -> None:
        warm_talker(self.talker, lambda **options: self.stream("Hello.", **options), self.code2wav)

    # ---- requests ----------------------------------------------------------------------------------------------
    def resolve_voice(self, voice: str | None) -> VoiceMix | None:
        return super().resolve_voice(speaker_name(voice, self.voices))

    def sampling(self, o: Qwen3OmniOptions) -> TalkerSampling:
        return talker_sampling(self.talker.cfg.sampling, self.talker.cfg.cp_sampling, o)

    def run(self, request: Request[Qwen3OmniOptions]) -> AudioStream:
        o = request.options
        text = self.said_plainly(request.text, o.normalization) if o.mode == "say" else request.text
        self._check_companions(o)
        if not any(ch.isalnum() for ch in text):
            raise NothingToSay(request.text)
        speaker = self._speaker(request.voice)
        params = self.sampling(o)
        chunks = sentence_chunks(text, CHUNK_WORDS) if o.mode == "say" else [text.strip()]
        if o.system is not None and o.mode != "chat":
            raise InputError("system= is the thinker's prompt: it applies to mode=chat only")
        if o.max_reply_tokens != REPLY_TOKENS and o.mode != "chat":
            raise InputError("max_reply_tokens= bounds the thinker's reply: it applies to mode=chat only")
        if o.mode == "chat":
            self._load_thinker()
        return self._stream(chunks, speaker, params, o.mode, o.system, o.chunk_frames, o.max_reply_tokens)

    # ---- listening ---------------------------------------------------------------------------------------------
    def audio_ids(self) -> AudioIds:
        """The thinker's audio markers, by their text in its vocabulary (as llama.cpp's mtmd finds them)."""
        found = [self.tokenizer.token_to_id.get(marker) for marker in AUDIO_MARKERS]
        missing = [m for m, i in zip(AUDIO_MARKERS, found, strict=True) if i is None]
        if missing:
            raise GGUFError(f"{self.path}: the thinker's vocabulary has no {missing[0]}: it cannot take audio")
        start, pad, end = (int(i) for i in found if i is not None)
        return AudioIds(start, pad, end)

    def _load_encoder(self) -> Any:
        with self._thinker_lock:
            if self._encoder is None:
                if self._mmproj is None:
                    raise InputError(
                        f"{self.path}: to hear audio Qwen3-Omni needs its audio encoder: put the mmproj GGUF "
                        "(ggtts convert qwen3omni-mmproj, or llama.cpp's) beside the thinker or name it with "
                        "--mmproj / mmproj="
                    )
                from ggtts.models.qwen3omni_audio.model import AudioEncoder

                encoder = AudioEncoder.from_gguf(self._mmproj, self.device)
                if encoder.cfg.out_dim != self.embedding.token_embd.embedding_dim:
                    raise GGUFError(
                        f"{self.mmproj_path}: the audio encoder projects to {encoder.cfg.out_dim}, but the thinker "
                        f"{self.path} is {self.embedding.token_embd.embedding_dim} wide: not a matching pair"
                    )
                self._encoder = encoder
            return self._encoder

    def listen(self, audio: AudioInput) -> torch.Tensor:
        """The thinker's rows for ``audio`` (a sound file's path or bytes, or 16 kHz mono samples): the encoder's
        output ``(n, thinker dim)``, one row per audio placeholder."""
        from ggtts.models.qwen3omni_audio.features import check_samples, log_mel, read_audio

        encoder = self._load_encoder()
        samples = check_samples(audio) if isinstance(audio, np.ndarray) else read_audio(audio)
        return encoder(log_mel(samples, encoder.cfg.n_mel))

    def chat(
        self,
        text: str = "",
        *,
        audio: AudioInput | None = None,
        voice: str | VoiceMix | None = None,
        speak: bool = True,
        **options: Any,
    ) -> ChatReply:
        """The thinker answers ``audio`` (a question spoken), ``text``, or both (the audio first, as a chat message
        whose parts are audio then text); the answer's text is ready when this returns, its speech streams from
        ``reply.audio`` (empty when ``speak`` is false). ``options``: the family's (``system``, ``max_reply_tokens``,
        the talker's sampling...)."""
        if audio is None and not (isinstance(text, str) and text.strip()):
            raise InputError("give the question as text, audio, or both")
        request = self.request(text, voice, 1.0, streaming=True, text_optional=True, **{**options, "mode": "chat"})
        o: Qwen3OmniOptions = request.options
        self._check_companions(o)
        cfg = self.talker.cfg
        thinker = self._load_thinker()

        def encode(s: str) -> list[int]:
            return self.tokenizer.encode(s, parse_special=False)

        heard_rows: torch.Tensor | None = None
        span: list[int] | None = None
        if audio is not None:
            ids = self.audio_ids()
            heard_rows = self.listen(audio)
            span = ids.span(int(heard_rows.shape[0]))
        prompt = chat_prompt(encode, cfg, request.text.strip(), o.system, audio=span)
        if len(prompt) + o.max_reply_tokens > thinker.cfg.context_length:
            raise InputError(
                f"the question takes {len(prompt)} of the thinker's {thinker.cfg.context_length} positions, too many "
                f"to answer in up to {o.max_reply_tokens} tokens: ask with shorter audio or text"
            )
        embeddings, placed = None, []
        if heard_rows is not None:
            placed = [i for i, t in enumerate(prompt) if t == ids.pad]
            embeddings = thinker.embed(torch.tensor([prompt], device=heard_rows.device)).clone()
            embeddings[0, placed] = heard_rows.to(embeddings.dtype)
        from ggtts.runtime.cancel import check_cancelled

        layer = cfg.accept_hidden_layer
        reply, hidden = thinker.answer(
            prompt, o.max_reply_tokens, [cfg.im_end], embeddings=embeddings,
            hidden_layers=(layer,) if placed else (), before_step=check_cancelled,
        )  # fmt: skip
        if len(reply) < 2:
            raise InputError("the thinker's answer is empty: nothing to say")
        heard = {i: hidden[layer][i] for i in placed} if placed else None
        words = self.tokenizer.decode([t for t in reply if t != cfg.im_end])
        speaker = self._speaker(request.voice)
        speech: Iterator[Audio] = iter(())
        if speak:
            params = self.sampling(o)

            def said(i: int, at: float) -> FrameSpeech:
                return self._speech(prompt, reply, speaker, params, i, at, o.chunk_frames, heard)

            speech = self._speak(said, 0, 0.0)
        return ChatReply(words, reply, speech, len(prompt), reply[-1] == cfg.im_end)

    def _speaker(self, mix: VoiceMix | None) -> int:
        """The talker's speaker id for a resolved voice (the first speaker when none)."""
        return self.talker.cfg.speakers[mix.single if mix is not None and mix.single else self.voices[0]]

    def _check_companions(self, o: Qwen3OmniOptions) -> None:
        """A request naming a talker or an audio encoder names the ones loaded (they are chosen at load)."""
        for name, asked, loaded in (("talker", o.talker, self.talker_path), ("mmproj", o.mmproj, self.mmproj_path)):
            if asked is not None and (loaded is None or Path(asked).resolve() != Path(loaded).resolve()):
                raise InputError(
                    f"{name} {asked} differs from the one loaded ({loaded}): it is chosen at load "
                    f"(ggtts.load(..., {name}=PATH), --{name})"
                )

    def _load_thinker(self) -> Any:
        with self._thinker_lock:  # two first chat requests at once load it once
            if self._thinker is None:
                from ggtts.models.qwen3omnimoe.model import Thinker, check_fits

                check_fits(self.thinker_gguf, device=self.device)
                self._thinker = Thinker.from_gguf(self.thinker_gguf, self.device)
            return self._thinker

    def _reply(self, prompt: list[int], text: str, mode: str, limit: int) -> list[int]:
        cfg = self.talker.cfg
        if mode == "say":
            return [*self.tokenizer.encode(text, parse_special=False), cfg.im_end]
        thinker = self._load_thinker()
        from ggtts.runtime.cancel import check_cancelled

        # a server's given-up request stops between tokens (the thinker loads on first use, after the server made
        # the pipeline's other models cancellable module by module)
        return list(thinker.greedy(prompt, limit, eos_ids=[cfg.im_end], before_step=check_cancelled))

    def _stream(
        self,
        chunks: list[str],
        speaker: int,
        params: TalkerSampling,
        mode: str,
        system: str | None,
        frames_per_chunk: int,
        reply_tokens: int,
    ) -> AudioStream:
        cfg = self.talker.cfg

        def encode(s: str) -> list[int]:
            return self.tokenizer.encode(s, parse_special=False)

        def said(i: int) -> tuple[list[int], list[int]]:
            """Chunk ``i``'s chat prompt and the reply to speak (the thinker's answer in mode chat)."""
            prompt = chat_prompt(encode, cfg, chunks[i], system)
            reply = self._reply(prompt, chunks[i], mode, reply_tokens)
            if len(reply) < 2:
                if mode == "chat":
                    raise InputError("the thinker's answer is empty: nothing to say")
                raise NothingToSay(chunks[i])
            return prompt, reply

        def speech(i: int, offset: float) -> FrameSpeech:
            return self._speech(*said(i), speaker, params, i, offset, frames_per_chunk)

        if self.lanes is not None and mode == "say":  # (no thinker to wait for: each chunk made on the loop's thread)
            return speeches_in_lanes(self.lanes, len(chunks), speech)
        return self._chunks(len(chunks), said, speaker, params, frames_per_chunk)

    def _chunks(
        self, n: int, said: Callable[[int], tuple[list[int], list[int]]], speaker: int, params: TalkerSampling,
        frames_per_chunk: int,
    ) -> Generator[Audio, None, None]:  # fmt: skip
        """Each chunk's reply made here, on the caller's thread (the thinker's answer in mode chat), then spoken."""
        offset = 0.0
        for i in range(n):
            prompt, reply = said(i)

            def speech(j: int, at: float, prompt: list[int] = prompt, reply: list[int] = reply) -> FrameSpeech:
                return self._speech(prompt, reply, speaker, params, j, at, frames_per_chunk)

            offset = yield from self._speak(speech, i, offset)

    def _speech(
        self,
        prompt: list[int],
        reply: list[int],
        speaker: int,
        params: TalkerSampling,
        index: int,
        offset: float,
        frames_per_chunk: int,
        heard: Mapping[int, torch.Tensor] | None = None,
    ) -> FrameSpeech:
        """The talker's speech of ``reply`` to ``prompt`` (chunk ``index`` of a request, starting ``offset`` seconds
        in)."""
        inputs = talker_inputs(self.talker, self.embedding, prompt, reply, speaker, heard)
        return FrameSpeech(self.talker, inputs, self.code2wav.fresh_stream(), self.sample_rate, params, index, offset,
                           frames_per_chunk)  # fmt: skip

    def _speak(
        self, speech: Callable[[int, float], FrameSpeech], index: int, offset: float
    ) -> Generator[Audio, None, float]:
        """Chunk ``index``'s speech (``speech(index, offset)`` builds it) streamed, in the model's lanes where it
        has them; returns the offset after it."""
        if self.lanes is not None:
            return (yield from speeches_in_lanes(self.lanes, 1, lambda _i, at: speech(index, at), offset))
        return (yield from speak_frames(speech(index, offset)))


def speaker_name(voice: str | None, voices: list[str]) -> str | None:
    """``voice`` as the model spells it, where it differs only in case (upstream looks speakers up in lower
    case)."""
    if voice is None:
        return None
    return {v.lower(): v for v in voices}.get(voice.lower(), voice)


class TalkerOptions(Protocol):
    """A family's per-call options that set the talker's sampling (frozen dataclasses: read-only)."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def max_frames(self) -> int: ...
    @property
    def seed(self) -> int: ...


def talker_sampling(defaults: Sampling, code_predictor: Sampling, o: TalkerOptions) -> TalkerSampling:
    """A request's sampling: the file's ``defaults`` where the options leave a value out; temperature 0 is greedy
    throughout (the code predictor follows the talker, as upstream)."""
    temperature = defaults.temperature if o.temperature is None else float(o.temperature)
    talker = Sampling(
        temperature=temperature or 1.0,
        top_k=defaults.top_k if o.top_k is None else int(o.top_k),
        top_p=defaults.top_p if o.top_p is None else float(o.top_p),
        repetition_penalty=defaults.repetition_penalty if o.repetition_penalty is None else float(o.repetition_penalty),
    )
    return TalkerSampling(temperature == 0, talker, code_predictor, o.max_frames, o.seed)


class FrameStream(Protocol):
    frames: int

    def push(self, codes: torch.Tensor) -> torch.Tensor: ...

    def close(self) -> None: ...


def static_decoder(
    talker: TalkerStack, decoder: StreamingDecoder, codebooks: int, lanes: LaneLoop[Audio] | None
) -> None:
    """Where the talker's steps (or lanes) are graphs over fixed tensors (CUDA), its speech decoder's pushes are
    graphs too (:meth:`StreamingDecoder.use_static_streams`): a stream's first frame alone, then pushes of
    :data:`DECODER_GRAPH_FRAMES`; as many streams at once as the model's lanes (one without)."""
    if talker.static is not None or talker.lanes is not None:  # (lanes over fixed caches take the steps' place)
        streams = 1 if lanes is None else lanes.max_lanes
        decoder.use_static_streams(codebooks, DECODER_GRAPH_FRAMES, capture=talker.static_capture, streams=streams)


def warm_talker(
    talker: TalkerStack, stream: Callable[..., Iterator[Audio]], decoder: StreamingDecoder | None = None
) -> None:
    """A talker family's warm-up (``stream(**options)``: a short text's speech). Where the talker's steps are graphs
    over fixed tensors (CUDA), the first chunks of a stream with the request defaults, sampled, then greedy (the
    rest of each left unspoken): each cache capacity and each sampling setting has graphs of its own, made
    (captured) at their first use, so those of a request with the default frame budget are made here, not in the
    first request; so are the speech ``decoder``'s fixed-tensor streams, as many as streams decode at once.
    Elsewhere (nothing to capture) a greedy stream of a few frames."""
    if talker.static is None and talker.lanes is None:
        read_first(stream(temperature=0, max_frames=WARM_UP_FRAMES), WARM_UP_FRAMES)
        return
    for options in ({}, {"temperature": 0}):
        read_first(stream(**options), WARM_UP_CHUNKS)
    if decoder is not None and decoder.static is not None:
        decoder.static.prepare(1)


def talker_lanes(talker: TalkerStack, parallel: int) -> LaneLoop[Audio] | None:
    """The lane loop of a model loaded with ``parallel`` > 1 (its utterances' frames made together). Where the
    talker's steps are graphs over fixed caches (CUDA) its lanes are too: one graph for every lane's talker step,
    one for their code predictor's frames (:meth:`TalkerStack.use_static_lanes`)."""
    if parallel <= 1:
        return None
    from ggtts.families.qwen3omni.lanes import TalkerLanes

    if talker.static is None:
        return LaneLoop(TalkerLanes(talker), parallel)
    talker.use_static_lanes(parallel, capture=talker.static_capture, compile=talker.static_compile)
    # a prompt of up to DENSE_ROWS rows at a lane's start is one graph: the others' next frame waits for one replay
    return LaneLoop(TalkerLanes(talker, prefill_chunk=DENSE_ROWS), parallel)


class FrameSpeech:
    """One chunk's speech: the talker's decoder for ``inputs`` (chunk ``index`` of a request, starting ``offset``
    seconds in) and its audio, ``stream`` decoding the frames as they come (:func:`chunk_size` frames a push). Spoken
    alone (:func:`speak_frames`) or as a lane beside others (:mod:`ggtts.families.qwen3omni.lanes`); its
    :attr:`offset` is the one after the audio made so far."""

    def __init__(
        self, talker: TalkerStack, inputs: TalkerInputs, stream: FrameStream, rate: int, params: TalkerSampling,
        index: int, offset: float, frames_per_chunk: int, min_frames: int = 0,
    ) -> None:  # fmt: skip
        room = min(TALKER_MAX_LEN, talker.max_len) - inputs.prefill.shape[1] - 1
        if room < 1:
            raise InputError(f"a chunk of text is too long for the talker's {talker.max_len} positions")
        seed = (params.seed + index) % (MAX_SEED + 1)
        run = TalkerSampling(**{**params.__dict__, "seed": seed, "max_frames": min(params.max_frames, room)})
        self.decoder = talker_decoder(talker, inputs, run, min_frames=min_frames)
        self.stream, self.rate, self.index, self.offset = stream, rate, index, offset
        self.frames_per_chunk = frames_per_chunk
        self.pending: list[list[int]] = []
        self.start = stream.frames  # a stream may go on from frames that are not spoken (a voice's recording)

    def on_frame(self, frame: list[int]) -> list[Audio]:
        self.pending.append(frame)
        first = not self.offset and not self.index
        if len(self.pending) < chunk_size(self.stream.frames - self.start, first, self.frames_per_chunk):
            return []
        return self._flush()

    def on_end(self) -> list[Audio]:
        """The audio of the frames not pushed yet (none: nothing); the stream is then done (a static stream's fixed
        tensors free for another)."""
        try:
            return self._flush()
        finally:
            self.close()

    def close(self) -> None:
        """No more pushes (the end, or the utterance given up): the stream's fixed tensors, where it has any, are
        free for another."""
        self.stream.close()

    def _flush(self) -> list[Audio]:
        if not self.pending:
            return []
        codes = torch.tensor(self.pending, dtype=torch.long).T.unsqueeze(0)  # (1, Q, n)
        self.pending = []
        samples = self.stream.push(codes)[0, 0].float().cpu().numpy()
        if not np.isfinite(samples).all():
            raise GGUFError("synthesis produced non-finite audio (inf or NaN): are the model's weights damaged?")
        audio = Audio(samples, self.rate, offset=self.offset)
        self.offset += audio.duration
        return [audio]


def speak_frames(speech: FrameSpeech) -> Generator[Audio, None, float]:
    """``speech`` spoken alone, its audio as it comes; returns the offset after it."""
    for frame in decoded_frames(speech.decoder):
        yield from speech.on_frame(frame)
    yield from speech.on_end()
    return speech.offset
