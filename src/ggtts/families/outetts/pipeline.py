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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.audio import Audio
from ggtts.errors import GGTTSError, GGUFError, InputError
from ggtts.families.base import TTSModel, check_text, find_beside
from ggtts.families.outetts import FAMILY, MAX_CHARS, OuteTTSOptions
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
from ggtts.runtime.frames import generate_tokens
from ggtts.runtime.sampling import Sampler, SamplingParams
from ggtts.runtime.streaming import DEFAULT_CHUNK, DEFAULT_LEFT, DEFAULT_LOOKAHEAD, WindowedDecoder

DEFAULT_MAX_NEW_TOKENS = 4096  # llama-tts's n_predict
SILENCE_START_S = 0.25  # llama-tts zeroes the first 0.25 s (a click); never past the end of short audio
NEWLINE = "\n"
# llama-tts samples from the top 4 tokens at temperature 1 (its only sampler)
DEFAULT_SAMPLING = SamplingParams(temperature=1.0, top_k=4)

# per-call options: what generate_codes reads, what synthesize adds, and stream's windowing on top
STREAM_OPTIONS = frozenset(FAMILY.option_names())
SYNTHESIZE_OPTIONS = STREAM_OPTIONS - {"chunk_codes", "left_context", "lookahead"}
GENERATE_OPTIONS = SYNTHESIZE_OPTIONS - {"vocoder", "silence_start_s"}


def check_options(options: dict[str, Any], known: frozenset[str]) -> None:
    """InputError for an option this call does not take (see :meth:`Family.check_options`)."""
    FAMILY.check_options(options, sorted(known))


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


class OuteTTS(TTSModel):
    family = FAMILY

    def __init__(self, lm: Qwen2Model, tokenizer: BPETokenizer, gguf: GGUFFile, device: str = "cpu") -> None:
        self.lm, self.tokenizer, self.device = lm, tokenizer, device
        self.version = version_from_chat_template(gguf.get(TK.CHAT_TEMPLATE))
        self.eos = gguf.get(TK.EOS_ID)
        self.end_tokens = {t for t in (self.eos, tokenizer.token_to_id.get("<|im_end|>")) if t is not None}
        self.codes = CodeTable(tokenizer)
        self.vocoder: WavTokenizerDecoder | None = None
        self.sample_rate = DEFAULT_SAMPLE_RATE  # the vocoder's, once one is attached
        self._speakers: dict[str, Speaker] = {default_speaker().name: default_speaker()}
        self.path = gguf.path

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> OuteTTS:
        """``options``: ``vocoder`` (a wavtokenizer-dec GGUF path; default: the only one beside the model),
        ``precision`` (``"bfloat16"``: the language model in bfloat16, where the device has it natively), ``compile``
        (on CUDA: the decode step compiled by ``torch.compile`` before it is captured as a CUDA graph)."""
        from ggtts.runtime.precision import check_precision

        vocoder = options.pop("vocoder", None)
        precision = check_precision(options.pop("precision", "float32"), device)
        compile_steps = bool(options.pop("compile", False))
        if options:
            known = ", ".join(FAMILY.load_option_names())
            raise InputError(f"unknown option '{next(iter(options))}' for OuteTTS; known: {known}")
        on_cpu = torch.device(device).type != "cuda"
        if on_cpu and (compile_steps or precision != "float32"):
            what = "compile" if compile_steps else f"precision {precision}"
            raise InputError(
                f"{what} is for OuteTTS on CUDA; on the CPU each step already runs as one ggml graph on the file's own "
                "weight types"
            )
        dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
        lm = Qwen2Model.from_gguf(gguf, device, dtype=dtype, compile_steps=compile_steps)
        model = cls(lm, BPETokenizer.from_gguf(gguf), gguf, device)
        if vocoder is None:
            vocoder = find_vocoder(Path(gguf.path))
        if vocoder is not None:
            model.with_vocoder(vocoder)
        return model

    def with_vocoder(self, path: str | os.PathLike[str]) -> OuteTTS:
        g = GGUFFile(path)
        if g.architecture != WavTokenizerDec.ARCH:
            raise GGUFError(f"{path}: a vocoder must be a '{WavTokenizerDec.ARCH}' GGUF, not '{g.architecture}'")
        self.vocoder = WavTokenizerDecoder.from_gguf(g, self.device)
        self.sample_rate = self.vocoder.cfg.sample_rate
        return self

    # ---- voices --------------------------------------------------------------------------------------------
    @property
    def voices(self) -> list[str]:
        return list(self._speakers)

    def add_speaker(self, path: str | os.PathLike[str]) -> str:
        speaker = Speaker.from_json(path)
        self._speakers[speaker.name] = speaker
        return speaker.name

    def _speaker(self, voice: str | None) -> Speaker:
        if voice is None:
            return next(iter(self._speakers.values()))
        if voice in self._speakers:
            return self._speakers[voice]
        if voice.endswith(".json"):
            return Speaker.from_json(voice)
        raise InputError(f"unknown voice '{voice}'; choose one of {', '.join(self.voices)} or give a speaker .json")

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

    def generate_codes(self, text: str, voice: str | None = None, **options: Any) -> Iterator[list[int]]:
        """Yield new audio codes as the language model produces them (``progress``: a bar over tokens).

        Takes :meth:`stream`'s options, so one set serves both; the decoding ones have no effect here.
        """
        check_options(options, STREAM_OPTIONS)
        speaker = self._speaker(voice)
        version = OuteTTSVersion(options["version"]) if options.get("version") else speaker.version or self.version
        prompt, guide = self.prompt_tokens(check_text(text, MAX_CHARS), speaker, version)
        room = self.lm.cfg.context_length - len(prompt)
        if room < 1:
            raise InputError(f"the prompt is {len(prompt)} tokens; the model's context is {self.lm.cfg.context_length}")
        max_new = min(int(options.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)), room)
        sampler = Sampler(_sampling(options), device=self.device)
        cache = self.lm.new_cache(len(prompt) + max_new)
        rewrite = self._guide(guide) if options.get("guide_tokens", False) else None
        n_vocab = self.vocoder.cfg.n_vocab if self.vocoder is not None else 1 << 31
        dropped = 0
        tokens = generate_tokens(
            self.lm,
            prompt,
            cache,
            sampler,
            max_new_tokens=max_new,
            stop_tokens=self.end_tokens,
            rewrite=rewrite,
            device=self.device,
        )
        bar = None
        if options.get("progress"):
            from tqdm import tqdm

            bar = tqdm(total=max_new, desc="speaking", unit="token", leave=False)
        try:
            for token in tokens:
                if bar is not None:
                    bar.update()
                codes, n_bad = self.codes.codes([token], n_vocab)
                dropped += n_bad
                if codes:
                    yield codes
        finally:
            if bar is not None:
                bar.close()
        if dropped:
            warnings.warn(f"dropped {dropped} generated code(s) outside the vocoder's 0..{n_vocab - 1}", stacklevel=2)

    def _require_vocoder(self, options: dict[str, Any]) -> WavTokenizerDecoder:
        if options.get("vocoder"):
            self.with_vocoder(options["vocoder"])
        if self.vocoder is None:
            raise GGTTSError(
                f"{self.path}: OuteTTS needs a WavTokenizer vocoder: put one wavtokenizer-dec .gguf "
                "next to the "
                "model, or pass vocoder=PATH"
            )
        return self.vocoder

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        """Audio chunks while generating (windowed decoding; see :mod:`ggtts.runtime.streaming`)."""
        check_options(options, STREAM_OPTIONS)
        FAMILY.check_speed(speed)
        vocoder = self._require_vocoder(options)
        windowed = WindowedDecoder(
            lambda c: vocoder(c.to(self.device)).cpu(),
            vocoder.cfg.hop_length,
            chunk=int(options.get("chunk_codes", DEFAULT_CHUNK)),
            left=int(options.get("left_context", DEFAULT_LEFT)),
            lookahead=int(options.get("lookahead", DEFAULT_LOOKAHEAD)),
        )
        silence = int(float(options.get("silence_start_s", SILENCE_START_S)) * self.sample_rate)
        with torch.inference_mode():
            for codes in self.generate_codes(text, voice, **options):
                for piece in windowed.push(codes):
                    silence, piece = _silence(piece, silence)
                    yield Audio(piece.numpy(), self.sample_rate)
            for piece in windowed.flush():
                silence, piece = _silence(piece, silence)
                yield Audio(piece.numpy(), self.sample_rate)

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Audio:
        """One-shot: generate every code, then decode them all at once (exactly hop samples per code)."""
        check_options(options, SYNTHESIZE_OPTIONS)
        FAMILY.check_speed(speed)
        vocoder = self._require_vocoder(options)
        codes = [c for chunk in self.generate_codes(text, voice, **options) for c in chunk]
        audio = decode_codes(vocoder, codes)
        silence = int(float(options.get("silence_start_s", SILENCE_START_S)) * self.sample_rate)
        audio[: min(silence, len(audio))] = 0.0
        return Audio(audio, self.sample_rate)


def _silence(piece: torch.Tensor, remaining: int) -> tuple[int, torch.Tensor]:
    n = min(remaining, piece.shape[0])
    if n:
        piece = piece.clone()
        piece[:n] = 0.0
    return remaining - n, piece


def _sampling(options: dict[str, Any]) -> SamplingParams:
    d = DEFAULT_SAMPLING
    return SamplingParams(
        temperature=float(options.get("temperature", d.temperature)),
        top_k=int(options.get("top_k", d.top_k)),
        top_p=float(options.get("top_p", d.top_p)),
        min_p=float(options.get("min_p", d.min_p)),
        repetition_penalty=float(options.get("repetition_penalty", d.repetition_penalty)),
        repetition_window=int(options.get("repetition_window", d.repetition_window)),
        seed=int(options.get("seed", OuteTTSOptions.seed)),  # seeded by default: a run is reproducible
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
