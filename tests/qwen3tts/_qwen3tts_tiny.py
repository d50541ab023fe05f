"""A tiny Qwen3-TTS checkpoint built with qwen-tts's classes, converted by ggtts to llama.cpp's two files, and
qwen-tts's greedy generate on it (what the parity and pipeline tests compare against)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from ggtts.convert.qwen3tts_hf import convert_qwen3tts, mmproj_path
from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
from ggtts.families.qwen3omni.prompt import TalkerInputs
from ggtts.families.qwen3tts.prompt import ROLE, instruct_text, talker_inputs
from ggtts.gguf import GGUFFile
from ggtts.measure.qwen3omni.parity import _ForcedPick, forced_codes, frame_forcings
from ggtts.models.qwen2.tokenizer import BPETokenizer
from ggtts.models.qwen3tts.config import MIN_FRAMES
from ggtts.models.qwen3tts.decoder import SpeechDecoder
from ggtts.models.qwen3tts.model import Talker

TIE = 1e-4  # a greedy pick of ours that differs from upstream's by at most this logit margin is a near-tie


def need_qwen_tts() -> None:
    if importlib.util.find_spec("qwen_tts") is None:  # imported by the builder, with placeholders for sox, torchaudio
        pytest.skip("needs qwen-tts (pip install --no-deps qwen-tts-hf==0.1.1.post1)")


class Built:
    def __init__(self, work: Path, model_type: str = "custom_voice") -> None:
        from ggtts.measure.qwen3tts.upstream import build_tiny_checkpoint

        self.work = work
        self.upstream, self.up_decoder = build_tiny_checkpoint(work / "ckpt", model_type)
        self.path = convert_qwen3tts([work / "ckpt"], work / "tiny.gguf", "f32")
        self.talker_file, self.mmproj_file = GGUFFile(self.path), GGUFFile(mmproj_path(self.path))
        self.talker = Talker.from_gguf(self.talker_file, self.mmproj_file)
        self.decoder = SpeechDecoder.from_gguf(self.mmproj_file)
        self.tokenizer = BPETokenizer.from_gguf(self.talker_file)
        from tokenizers import Tokenizer

        self.hf_tokenizer = Tokenizer.from_file(str(work / "ckpt" / "tokenizer.json"))

    def upstream_ids(self, text: str) -> torch.Tensor:
        return torch.tensor([self.hf_tokenizer.encode(f"{ROLE}{text}<|im_end|>\n{ROLE}").ids])

    def inputs(
        self, text: str, language: str, speaker: str | None, non_streaming: bool = True, instruct: str | None = None
    ) -> TalkerInputs:
        role = self.tokenizer.encode(ROLE, parse_special=True)
        ids = self.tokenizer.encode(text, parse_special=False)
        instruct_ids = self.tokenizer.encode(instruct_text(instruct), parse_special=True) if instruct else None
        return talker_inputs(self.talker, role, ids, language, speaker, non_streaming=non_streaming,
                             instruct_ids=instruct_ids)  # fmt: skip

    def generate(
        self, text: str, language: str, speaker: str | None, non_streaming: bool, frames: int,
        instruct: str | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:  # fmt: skip
        """qwen-tts's greedy generate: its codes (1, 16, N) and what it handed the talker's generate."""
        extra = {}
        if instruct is not None:
            extra["instruct_ids"] = [torch.tensor([self.hf_tokenizer.encode(instruct_text(instruct)).ids])]
        return self.greedy(text, frames, languages=[language], speakers=[speaker], non_streaming_mode=non_streaming,
                           **extra)  # fmt: skip

    def greedy(self, text: str, frames: int, **inputs: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        """qwen-tts's ``generate`` on ``text``, greedy, for ``frames`` frames, with more of its ``inputs``: its codes
        (1, 16, N) and the arguments it handed the talker's generate (the prompt it built)."""
        model = self.upstream
        seen: dict[str, Any] = {}
        original = model.talker.generate

        def capture(**kwargs: Any) -> Any:
            seen.update(kwargs)
            return original(**kwargs)

        model.talker.generate = capture
        try:
            with torch.no_grad():
                codes, _ = model.generate(input_ids=[self.upstream_ids(text)], max_new_tokens=frames + 1,
                                          do_sample=False, subtalker_dosample=False, **inputs)  # fmt: skip
        finally:
            del model.talker.generate
        return codes[0].T.unsqueeze(0), seen


def clone_generate(
    built: Built, text: str, embedding: torch.Tensor, frames: int,
    reference: tuple[str, torch.Tensor] | None = None, non_streaming: bool = False,
) -> tuple[torch.Tensor, dict[str, Any]]:  # fmt: skip
    """qwen-tts's greedy voice cloning (``generate_voice_clone``'s defaults: the text streamed in): in x-vector mode,
    or with ``reference`` (the recording's text and codes ``(frames, 16)``) in ICL mode. Its codes (1, 16, N) and
    what it handed the talker's generate."""
    prompt: dict[str, Any] = {"ref_spk_embedding": [embedding], "x_vector_only_mode": [reference is None],
                              "icl_mode": [reference is not None], "ref_code": None}  # fmt: skip
    extra: dict[str, Any] = {}
    if reference is not None:
        ref_text, ref_codes = reference
        prompt["ref_code"] = [ref_codes]
        extra["ref_ids"] = [torch.tensor([built.hf_tokenizer.encode(f"{ROLE}{ref_text}<|im_end|>\n").ids])]
    return built.greedy(text, frames, languages=["english"], voice_clone_prompt=prompt,
                        non_streaming_mode=non_streaming, **extra)  # fmt: skip


def forced_greedy(
    talker: Talker, inputs: TalkerInputs, codes: torch.Tensor, frames: int
) -> tuple[torch.Tensor, list[int]]:
    """Ours, greedy and teacher-forced along upstream's greedy ``codes`` (1, 16, N) past near-ties (:data:`TIE`):
    the codes ours drew (to compare with ``codes``) and the frames where a near-tie was forgiven."""
    cfg = talker.cfg
    first, rest = frame_forcings(codes, TIE)
    pickers = (_ForcedPick(first, cfg.sampling), _ForcedPick(rest, cfg.cp_sampling))
    greedy = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=frames)
    n = len(list(generate_frames(talker, inputs, greedy, pickers=pickers, min_frames=MIN_FRAMES)))
    return forced_codes(first, rest, n, cfg.n_codebooks), first.near_ties + rest.near_ties


class Recorder:
    """A pick (the talker's or the code predictor's) that keeps the logits it is shown and answers the given codes
    in turn: generation teacher-forced along known frames."""

    def __init__(self, codes: Sequence[int]) -> None:
        self.codes: Iterator[int] = iter(codes)
        self.seen: list[torch.Tensor] = []

    def __call__(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> int:
        self.seen.append(logits.detach().float().clone())
        return next(self.codes)

    @classmethod
    def along(cls, frames: list[list[int]]) -> tuple[Recorder, Recorder]:
        """The talker's and the code predictor's recorders for ``frames``."""
        return cls([f[0] for f in frames]), cls([c for f in frames for c in f[1:]])
