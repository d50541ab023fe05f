"""hexgrad's ``kokoro.KModel`` built offline and loaded with a folded state dict (test helper)."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

import torch

from ggtts.convert.kokoro_onnx import KOKORO_V1_CONFIG


def build_kmodel(vocab: Mapping[str, int], disable_complex: bool = True) -> torch.nn.Module:
    """A randomly initialised ``kokoro.KModel`` with Kokoro v1.0's config, without any download."""
    from kokoro import KModel

    config = {**json.loads(json.dumps(KOKORO_V1_CONFIG)), "vocab": dict(vocab)}
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)  # KModel loads nothing from it
        return KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty), disable_complex=disable_complex)


@contextlib.contextmanager
def no_source_noise() -> Iterator[None]:
    """Zero the random initial phase and noise of upstream's harmonic source, as kokoro-onnx's export does."""
    with (
        mock.patch("torch.rand", lambda *a, **k: torch.zeros(*a, **{x: y for x, y in k.items() if x != "generator"})),
        mock.patch("torch.randn_like", lambda t, **k: torch.zeros_like(t)),
    ):
        yield


@torch.no_grad()
def run_kmodel(
    model: torch.nn.Module, tokens: torch.Tensor, ref_s: torch.Tensor, durations: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``KModel``'s forward at batch 1 returning (audio, frames per token, unrounded durations).

    ``durations`` replaces the predicted frame counts, so that two runs can be compared sample by sample.
    """
    n = tokens.shape[1]
    lengths = torch.tensor([n])
    mask = torch.zeros(1, n, dtype=torch.bool)  # no padding at batch 1
    bert_out = model.bert(tokens, attention_mask=(~mask).int())
    d_en = model.bert_encoder(bert_out).transpose(-1, -2)  # (1, hidden, T)
    s_prosody, s_timbre = ref_s[:, 128:], ref_s[:, :128]
    d = model.predictor.text_encoder(d_en, s_prosody, lengths, mask)
    x, _ = model.predictor.lstm(d)
    raw = torch.sigmoid(model.predictor.duration_proj(x)).sum(-1).squeeze(0)  # (T,)
    frames = torch.round(raw).clamp(min=1).long() if durations is None else durations.long()
    align = torch.repeat_interleave(torch.eye(n), frames, dim=1).unsqueeze(0)  # (1, T, frames)
    f0, noise = model.predictor.F0Ntrain(d.transpose(-1, -2) @ align, s_prosody)
    asr = model.text_encoder(tokens, lengths, mask) @ align
    audio = model.decoder(asr, f0, noise, s_timbre).squeeze()
    return audio, frames, raw
