"""OuteTTS: text -> Qwen2 (``qwen2`` GGUF) -> audio-code tokens -> WavTokenizer (``wavtokenizer-dec`` GGUF)
-> audio.

Two files make one voice: the language model is what ``ggtts.load`` opens; the vocoder is found next to it
(the
only ``wavtokenizer-dec`` GGUF in the same folder), or given with ``.with_vocoder(path)`` or ``vocoder=`` per
call.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.audio import Audio
from ggtts.errors import GGTTSError, GGUFError, InputError
from ggtts.families.base import (
    AudioStream,
    NothingToSay,
    Request,
    TTSModel,
    UnknownVoiceError,
    VoiceMix,
    find_beside,
    not_found_beside,
    read_first,
)
from ggtts.families.outetts import FAMILY, OuteTTSOptions
from ggtts.families.outetts.prompt import (
    CODE_TOKEN,
    OuteTTSVersion,
    Speaker,
    build_prompt,
    default_speaker,
    version_from_chat_template,
)
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Tokenizer as TK
from ggtts.gguf.keys import WavTokenizerDec
from ggtts.models.qwen2.model import Qwen2Model
from ggtts.models.qwen2.tokenizer import BPETokenizer
from ggtts.models.wavtokenizer.config import DEFAULT_SAMPLE_RATE
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder
from ggtts.runtime.frames import TokenDecoder, decode_frames
from ggtts.runtime.lanes import LaneLoop, TokenLanes
from ggtts.runtime.sampling import Sampler, SamplingParams
from ggtts.runtime.streaming import WindowedDecoder

NEWLINE = "\n"
WARM_UP_CODES = 2  # the warm-up's codes: the prompt and a step or two run


def find_vocoder(model_path: Path) -> Path | None:
    """The only ``wavtokenizer-dec`` GGUF in the model's folder, if there is exactly one."""
    return find_beside(model_path, WavTokenizerDec.ARCH)


class CodeTable:
    """LM token ids of ``<|N|>`` tokens -> audio codes, read from the vocabulary (no hard-coded offsets)."""

    def __init__(self, tokenizer: BPETokenizer) -> None:
        self.code_of: dict[int, int] = {}
        for tid, piece in enumerate(tokenizer.tokens):
            m = CODE_TOKEN.fullmatch(piece)
            if m and tid in tokenizer.control_ids | set(tokenizer.special.values()):
                self.code_of[tid] = int(m.group(1))

    def codes(self, tokens: list[int], n_vocab: int) -> tuple[list[int], int]:
        """Audio codes in ``tokens`` below ``n_vocab``, and how many were out of the vocoder's range."""
        found = [self.code_of[t] for t in tokens if t in self.code_of]
        kept = [c for c in found if c < n_vocab]
        return kept, len(found) - len(kept)


class SpeakerFileAsVoice(UnknownVoiceError):
    """A speaker file named as a voice: it is a load option."""

    def __init__(self, path: str, voices: list[str]) -> None:
        super().__init__(path, voices)
        self.args = (
            f"a speaker file is given at load, not as a voice: ggtts.load(..., speaker={path!r}) or --speaker; "
            f"voices now: {', '.join(voices)}",
        )


class OuteTTS(TTSModel):
    family = FAMILY

    def __init__(self, lm: Qwen2Model, tokenizer: BPETokenizer, gguf: GGUFFile, device: str = "cpu") -> None:
        self.lm, self.tokenizer, self.device = lm, tokenizer, device
        self.version = version_from_chat_template(gguf.get(TK.CHAT_TEMPLATE))
        self.eos = gguf.get(TK.EOS_ID)
        self.end_tokens = {t for t in (self.eos, tokenizer.token_to_id.get("<|im_end|>")) if t is not None}
        self.codes = CodeTable(tokenizer)
        self.vocoder: WavTokenizerDecoder | None = None
        self.vocoder_path: Path | None = None
        self.sample_rate = DEFAULT_SAMPLE_RATE  # the vocoder's, once one is attached
        self._speakers: dict[str, Speaker] = {default_speaker().name: default_speaker()}
        self.path = gguf.path
        self.lanes: LaneLoop[Audio] | None = None  # utterances decoded together (the ``parallel`` load option)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> OuteTTS:
        """``options``: ``vocoder`` (a wavtokenizer-dec GGUF path; default: the only one beside the model),
        ``precision`` (``"bfloat16"``: the language model in bfloat16, where the device has it natively), ``compile``
        (on CUDA: the decode step compiled by ``torch.compile`` before it is captured as a CUDA graph)."""
        from ggtts.ops.precision import dtype_of

        FAMILY.check_load_on(options, device)
        vocoder = options.pop("vocoder", None)
        speaker = options.pop("speaker", None)
        precision = options.pop("precision", "float32")
        compile_steps = bool(options.pop("compile", False))
        parallel = int(options.pop("parallel", 1))
        if options:
            known = ", ".join(FAMILY.load_option_names())
            raise InputError(f"unknown option '{next(iter(options))}' for OuteTTS; known: {known}")
        on_cpu = torch.device(device).type != "cuda"
        lm = Qwen2Model.from_gguf(gguf, device, dtype=dtype_of(precision), compile_steps=compile_steps)
        model = cls(lm, BPETokenizer.from_gguf(gguf), gguf, device)
        if vocoder is None:
            vocoder = find_vocoder(Path(gguf.path))
        if vocoder is not None:
            model.with_vocoder(vocoder)
        if speaker is not None:
            model.add_speaker(speaker, default=True)
        if parallel > 1:
            if not on_cpu:  # each step of all the streams one captured graph over fixed caches of `parallel` rows
                lm.use_static_lanes(parallel, compile=compile_steps)
            model.use_lanes(LaneLoop(TokenLanes(lm, device), parallel))
        return model

    def with_vocoder(self, path: str | os.PathLike[str]) -> OuteTTS:
        g = GGUFFile(path)
        if g.architecture != WavTokenizerDec.ARCH:
            raise GGUFError(f"{path}: a vocoder must be a '{WavTokenizerDec.ARCH}' GGUF, not '{g.architecture}'")
        self.vocoder = WavTokenizerDecoder.from_gguf(g, self.device)
        self.vocoder_path = Path(path)
        self.sample_rate = self.vocoder.cfg.sample_rate
        return self

    @property
    def parallel_streams(self) -> int:
        return 1 if self.lanes is None else self.lanes.max_lanes

    # ---- voices --------------------------------------------------------------------------------------------
    @property
    def voices(self) -> list[str]:
        return list(self._speakers)

    def add_speaker(self, path: str | os.PathLike[str], default: bool = False) -> str:
        """Add a speaker profile (.json) as a voice (the default voice, with ``default``); its name."""
        speaker = Speaker.from_json(path)
        self._speakers.pop(speaker.name, None)
        if default:
            self._speakers = {speaker.name: speaker, **self._speakers}
        else:
            self._speakers[speaker.name] = speaker
        return speaker.name

    def resolve_voice(self, voice: str | None) -> VoiceMix | None:
        if voice is not None and voice not in self._speakers and voice.endswith(".json"):
            raise SpeakerFileAsVoice(voice, self.voices)
        return super().resolve_voice(voice)

    def _speaker(self, voice: VoiceMix | None) -> Speaker:
        if voice is None or voice.single is None:
            return next(iter(self._speakers.values()))
        return self._speakers[voice.single]

    # ---- generation ----------------------------------------------------------------------------------------
    def prompt_tokens(self, text: str, speaker: Speaker, version: OuteTTSVersion) -> tuple[list[int], list[int]]:
        """Prompt token ids, and guides (each word's first token; a newline first if the prompt lacks one)."""
        missing = [t for t in (f"<|{speaker.max_code()}|>", version.separator) if t not in self.tokenizer.special]
        if missing:
            raise InputError(f"speaker '{speaker.name}' needs the token {missing[0]}, which this model lacks")
        prompt = build_prompt(text, speaker, version)
        ids = self.tokenizer.encode(prompt.text)
        guide = [] if prompt.ends_with_newline else self.tokenizer.encode(NEWLINE)[:1]
        guide += [self.tokenizer.encode(w)[0] for w in prompt.words if w]
        return ids, guide

    def _guide(self, guide: list[int]) -> Any:
        newline = self.tokenizer.encode(NEWLINE)[0]
        pending = list(guide)
        state = {"force": True}

        def rewrite(token: int, _generated: object) -> int:
            if pending and state["force"] and token not in self.tokenizer.control_ids and token not in self.end_tokens:
                token = pending.pop(0)
            state["force"] = token == newline
            return token

        return rewrite

    def warm_up(self) -> None:
        """Where the decode steps are graphs over fixed caches (CUDA), the first codes of a request with the
        defaults, the rest left unsaid: the step over the cache capacity of the default token budget (the lanes'
        step, with ``parallel``) is captured at its first use, here then, not in the first request. Elsewhere
        nothing (nothing to capture)."""
        if self.lm.static is not None or self.lm.lanes is not None:
            read_first(self.generate_codes("Hello."), WARM_UP_CODES)

    def generate_codes(self, text: str, voice: str | None = None, **options: Any) -> Iterator[list[int]]:
        """Yield new audio codes as the language model produces them (``progress``: a bar over tokens).

        Takes :meth:`stream`'s options, so one set serves both; the decoding ones have no effect here.
        """
        return self._codes(self.request(text, voice, streaming=True, **options))

    def _codes(self, request: Request[OuteTTSOptions]) -> Iterator[list[int]]:
        return self._utterance_codes(_Utterance(self, request, None))

    @torch.inference_mode()
    def _utterance_codes(self, utterance: _Utterance) -> Iterator[list[int]]:
        bar = None
        if utterance.options.progress:
            from tqdm import tqdm

            bar = tqdm(total=utterance.max_new_tokens, desc="speaking", unit="token", leave=False)
        try:
            for token in decode_frames(utterance.decoder, utterance.max_new_tokens):
                if bar is not None:
                    bar.update()
                codes = utterance.codes_of(token)
                if codes:
                    yield codes
        finally:
            if bar is not None:
                bar.close()
            self.lm.release_cache(utterance.decoder.cache)  # (a row of the lanes' caches on CUDA: free again)
        utterance.warn_dropped(stacklevel=3)  # past this generator and inference_mode's wrapper: who asked

    def _require_vocoder(self, asked: str | None) -> WavTokenizerDecoder:
        if asked and (self.vocoder_path is None or Path(asked).resolve() != self.vocoder_path.resolve()):
            raise InputError(
                f"vocoder {asked} differs from the one loaded ({self.vocoder_path or 'none'}): the vocoder is chosen "
                "at load (ggtts.load(..., vocoder=PATH), --vocoder)"
            )
        if self.vocoder is None:
            raise GGTTSError(
                f"{self.path}: OuteTTS needs a WavTokenizer vocoder: put one wavtokenizer-dec .gguf next to the model, "
                "or load it with vocoder=PATH (--vocoder)" + not_found_beside(Path(self.path), WavTokenizerDec.ARCH)
            )
        return self.vocoder

    def run(self, request: Request[OuteTTSOptions]) -> AudioStream:
        """Streaming: audio chunks while generating (windowed decoding; see :mod:`ggtts.runtime.streaming`).
        Whole: every code generated, then all decoded at once (exactly hop samples per code). With the ``parallel``
        load option the utterance decodes in the model's lane loop (:mod:`ggtts.runtime.lanes`), beside the others
        asked at the same time."""
        vocoder = self._require_vocoder(request.options.vocoder)
        if self.lanes is not None:
            return self.lanes.run(lambda: _Utterance(self, request, vocoder))
        if not request.streaming:
            return self._alone(_Utterance(self, request, vocoder))
        return self._streamed(request, vocoder)

    def _streamed(self, request: Request[OuteTTSOptions], vocoder: WavTokenizerDecoder) -> Generator[Audio, None, None]:
        """The stream; its cache and prompt are made at the first chunk asked for, not before."""
        yield from self._alone(_Utterance(self, request, vocoder))

    def _alone(self, utterance: _Utterance) -> Generator[Audio, None, None]:
        for codes in self._utterance_codes(utterance):
            yield from utterance.audio(codes)
        yield from utterance.on_end()


class _Utterance:
    """One utterance: its prompt, cache, sampler and token loop (:class:`~ggtts.runtime.frames.TokenDecoder`), and its
    audio: codes windowed into chunks as they come (streaming) or decoded at the end. Decoded alone
    (:meth:`OuteTTS._alone`) or as a lane beside others (:class:`~ggtts.runtime.lanes.LaneLoop`)."""

    def __init__(self, model: OuteTTS, request: Request[OuteTTSOptions], vocoder: WavTokenizerDecoder | None) -> None:
        o = self.options = request.options
        speaker = model._speaker(request.voice)
        version = OuteTTSVersion(o.version) if o.version else speaker.version or model.version
        said = model.said_plainly(request.text, o.normalization)
        if not any(ch.isalnum() for ch in said):  # (what process_text would find too, named as the user wrote it)
            raise NothingToSay(request.text)
        prompt, guide = model.prompt_tokens(said, speaker, version)
        room = model.lm.cfg.context_length - len(prompt)
        if room < 1:
            raise InputError(
                f"the prompt is {len(prompt)} tokens; the model's context is {model.lm.cfg.context_length}"
            )
        self.max_new_tokens = max_new = min(o.max_new_tokens, room)
        sampler = Sampler(_sampling(o), device=model.device)
        cache = model.lm.new_cache(len(prompt) + max_new)
        rewrite = model._guide(guide) if o.guide_tokens else None
        self.decoder = TokenDecoder(model.lm, prompt, cache, sampler, stop_tokens=model.end_tokens, rewrite=rewrite,
                                    device=model.device)  # fmt: skip
        self.table = model.codes
        known = vocoder or model.vocoder  # (codes alone, generate_codes: the loaded vocoder's range, if any)
        self.n_vocab = known.cfg.n_vocab if known is not None else 1 << 31
        self.dropped, self.warned = 0, False
        self.vocoder, self.device, self.sample_rate = vocoder, model.device, model.sample_rate
        self.silence = int(o.silence_start_s * self.sample_rate)
        self.kept: list[int] = []  # the codes, when the audio is decoded at the end
        self.windowed: WindowedDecoder | None = None
        if request.streaming and vocoder is not None:
            self.windowed = WindowedDecoder(
                lambda c: vocoder(c.to(self.device)).cpu(),
                vocoder.cfg.hop_length,
                chunk=o.chunk_codes,
                left=o.left_context,
                lookahead=o.lookahead,
            )

    def codes_of(self, token: int) -> list[int]:
        codes, n_bad = self.table.codes([token], self.n_vocab)
        self.dropped += n_bad
        return codes

    def warn_dropped(self, stacklevel: int = 2) -> None:
        if self.dropped and not self.warned:
            self.warned = True
            warnings.warn(
                f"dropped {self.dropped} generated code(s) outside the vocoder's 0..{self.n_vocab - 1}",
                stacklevel=stacklevel + 1,
            )

    def audio(self, codes: list[int]) -> list[Audio]:
        """The audio that new codes complete (streaming: the chunks they finish; whole: none until the end)."""
        if self.windowed is None:
            self.kept += codes
            return []
        with torch.inference_mode():
            return [self._chunk(piece) for piece in self.windowed.push(codes)]

    def on_frame(self, token: int) -> list[Audio]:
        codes = self.codes_of(token)
        return self.audio(codes) if codes else []

    def on_end(self) -> list[Audio]:
        self.warn_dropped()
        if self.windowed is None:
            assert self.vocoder is not None
            audio = decode_codes(self.vocoder, self.kept)
            audio[: min(self.silence, len(audio))] = 0.0
            return [Audio(audio, self.sample_rate)]
        with torch.inference_mode():
            return [self._chunk(piece) for piece in self.windowed.flush()]

    def _chunk(self, piece: torch.Tensor) -> Audio:
        self.silence, piece = _silence(piece, self.silence)
        return Audio(piece.numpy(), self.sample_rate)


def _silence(piece: torch.Tensor, remaining: int) -> tuple[int, torch.Tensor]:
    n = min(remaining, piece.shape[0])
    if n:
        piece = piece.clone()
        piece[:n] = 0.0
    return remaining - n, piece


def _sampling(o: OuteTTSOptions) -> SamplingParams:
    return SamplingParams(
        temperature=o.temperature,
        top_k=o.top_k,
        top_p=o.top_p,
        min_p=o.min_p,
        repetition_penalty=o.repetition_penalty,
        repetition_window=o.repetition_window,
        seed=o.seed,  # seeded by default: a run is reproducible
    )


def decode_codes(vocoder: WavTokenizerDecoder, codes: list[int]) -> np.ndarray:
    """Codes -> float32 samples, ``hop`` per code; no codes give empty audio; bad codes: InputError."""
    if not codes:
        return np.zeros(0, dtype=np.float32)
    bad = [c for c in codes if not 0 <= c < vocoder.cfg.n_vocab]
    if bad:
        raise InputError(f"audio code {bad[0]} is out of range: this vocoder has codes 0..{vocoder.cfg.n_vocab - 1}")
    device = next(vocoder.parameters()).device
    with torch.inference_mode():
        audio = vocoder(torch.tensor([codes], dtype=torch.long, device=device))[0]
    return audio.float().cpu().numpy()
