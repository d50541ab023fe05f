"""Per-stage comparison of our code2wav with transformers' ``Qwen3OmniMoeCode2Wav`` (for parity tests and the
``ggtts parity`` table). Both models have the same submodule names, so each stage is one forward hook on each.
Nothing here imports transformers: the upstream module is passed in.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ggtts.models.qwen3omni_code2wav.model import Code2Wav

AUDIO = "audio"


def stage_names(model: Code2Wav) -> list[str]:
    """The submodules compared, in order: the transformer, each upsampling stage's ConvNeXt block, the decoder's
    input convolution, each decoder block, and the output convolution (before the clamp)."""
    cfg = model.cfg
    names = ["pre_transformer"] + [f"upsample.{i}.1" for i in range(len(cfg.upsampling_ratios))]
    names += [f"decoder.{i}" for i in range(len(cfg.upsample_rates) + 1)]
    return [*names, f"decoder.{len(cfg.upsample_rates) + 2}"]


def _tensor(out: Any) -> torch.Tensor:
    out = getattr(out, "last_hidden_state", out)  # transformers' transformer returns a ModelOutput
    if out.dim() == 4:  # ggtts's channels-last decoder: (B, C, 1, T) -> (B, C, T)
        out = out.squeeze(2)
    return out.detach().float().clone()


@contextmanager
def captured(model: nn.Module, names: list[str]) -> Iterator[dict[str, torch.Tensor]]:
    outputs: dict[str, torch.Tensor] = {}

    def hook(name: str) -> Any:
        return lambda module, args, out: outputs.__setitem__(name, _tensor(out))

    handles = [model.get_submodule(n).register_forward_hook(hook(n)) for n in names]
    try:
        yield outputs
    finally:
        for h in handles:
            h.remove()


def stage_outputs(
    ours: Code2Wav, upstream: nn.Module, codes: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Every stage's output (and the audio, under ``"audio"``) of ours and of upstream on ``codes`` (B, Q, N)."""
    names = stage_names(ours)
    with captured(ours, names) as mine, captured(upstream, names) as theirs:
        mine[AUDIO] = ours(codes).float()
        with torch.no_grad():
            theirs[AUDIO] = upstream(codes).float()
    return mine, theirs


def code2wav_parity_rows(ours: Code2Wav, upstream: nn.Module, codes: torch.Tensor) -> list[tuple[str, float]]:
    """``(stage, max |ours - upstream|)`` per stage, then for the audio; a stage whose shapes differ gives inf."""
    mine, theirs = stage_outputs(ours, upstream, codes)
    rows = []
    for name in [*stage_names(ours), AUDIO]:
        a, b = mine[name], theirs[name]
        rows.append((name, float((a - b).abs().max()) if a.shape == b.shape and a.numel() else float("inf")))
    return rows
