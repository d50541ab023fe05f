"""Piper stage by stage against piper-tts's VITS modules: the same ids and noise into both, each stage fed the
upstream output of the one before (so an error shows where it starts):

    encoder (prior means and log-scales) -> log-durations -> frames -> flow -> decoder -> end to end

End to end runs ``SynthesizerTrn.infer`` with torch's global generator seeded and ours with a generator seeded
the same: both draw the duration noise, then the prior noise, in the same order and shapes, so the same audio
comes out with the noise on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from ggtts.measure.parity import StageResult, compare
from ggtts.models.piper.model import PiperModel

# (dtype, tolerance on max |ours - upstream| / max |upstream|); float32 against float32 in another order of
# summation (the relative-position terms are gathered, not padded and reshaped). Seen on the tiny voices: at most
# 5e-7 in every stage, the decoder bit for bit; a 1 % error in one weight moves its stage by 1e-4 or more.
TOLERANCES: dict[str, tuple[str, float]] = {
    "encoder.mean": ("f32", 1e-5),
    "encoder.log_scale": ("f32", 1e-5),
    "durations.log": ("f32", 1e-5),
    "durations.frames": ("f32", 0.0),
    "flow": ("f32", 1e-5),
    "decoder": ("f32", 1e-5),
    "end_to_end": ("f32", 1e-5),
}


@torch.no_grad()
def stages(
    upstream: Any,
    ours: PiperModel,
    ids: torch.Tensor,
    *,
    speaker: int | None = None,
    noise_scale: float = 0.667,
    length_scale: float = 1.0,
    noise_w: float = 0.8,
    seed: int = 0,
) -> list[StageResult]:
    """``upstream``: piper's ``SynthesizerTrn``; ``ids``: (1, T) phoneme ids."""
    lengths = torch.tensor([ids.shape[1]])
    sid = torch.tensor([speaker or 0]) if ours.cfg.gin else None
    g = upstream.emb_g(sid).unsqueeze(-1) if sid is not None else None
    results = []

    x, m_p, logs_p, x_mask = upstream.enc_p(ids, lengths)
    _, mean, log_scale, _, _ = ours.encode(ids, speaker)
    results.append(compare("encoder.mean", mean, m_p, TOLERANCES))
    results.append(compare("encoder.log_scale", log_scale, logs_p, TOLERANCES))

    noise = torch.randn(1, 2, ids.shape[1], generator=torch.Generator().manual_seed(seed)) * noise_w
    if ours.cfg.stochastic_durations:
        torch.manual_seed(seed)  # upstream draws the same noise from the global generator
        log_w = upstream.dp(x, x_mask, g=g, reverse=True, noise_scale=noise_w)
    else:
        log_w = upstream.dp(x, x_mask, g=g)
    our_log_w = ours.dp(x, x_mask, g, noise)
    results.append(compare("durations.log", our_log_w, log_w, TOLERANCES))
    frames = torch.ceil(torch.exp(log_w) * x_mask * length_scale)
    our_frames = ours.durations(x, x_mask, g, noise_w, length_scale, torch.Generator().manual_seed(seed))
    results.append(compare("durations.frames", our_frames, frames[:, 0], TOLERANCES))

    repeats = frames[0, 0].long()
    z_p = torch.repeat_interleave(m_p, repeats, dim=2)
    z_p = z_p + torch.randn(z_p.shape, generator=torch.Generator().manual_seed(seed + 1)) * noise_scale  # any noise
    y_mask = torch.ones(1, 1, z_p.shape[2])
    z = upstream.flow(z_p, y_mask, g=g, reverse=True)
    results.append(compare("flow", ours.flow.reverse(z_p, y_mask, g), z, TOLERANCES))
    results.append(compare("decoder", ours.dec(z, g)[:, 0], upstream.dec(z, g=g)[:, 0], TOLERANCES))

    torch.manual_seed(seed)
    audio = upstream.infer(
        ids, lengths, sid=sid, noise_scale=noise_scale, length_scale=length_scale, noise_scale_w=noise_w
    )[0][:, 0]
    ours_audio = ours.synthesize(
        ids,
        noise_scale=noise_scale,
        length_scale=length_scale,
        noise_w=noise_w,
        speaker=speaker,
        generator=torch.Generator().manual_seed(seed),
    ).audio
    results.append(compare("end_to_end", ours_audio, audio, TOLERANCES))
    return results


def piper_parity() -> list[StageResult]:
    """``ggtts parity piper``: each tiny voice (:data:`~ggtts.measure.piper.upstream.VOICES`) built with piper's
    code, exported to ONNX as piper does, converted and loaded; every stage with the noise on, named
    ``<voice>/<stage>``."""
    import tempfile
    import warnings

    from ggtts.gguf import GGUFFile
    from ggtts.measure.piper.upstream import TINY_IDS, VOICES, build_upstream, write_voice
    from ggtts.models.piper.load import load_piper

    ids = torch.tensor([TINY_IDS])
    results = []
    with tempfile.TemporaryDirectory(prefix="ggtts-parity-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's tracer warnings
        for name, voice in VOICES.items():
            folder = Path(tmp) / name
            folder.mkdir()
            upstream = build_upstream(voice)
            ours = load_piper(GGUFFile(write_voice(upstream, voice, folder)))
            speaker = voice.n_speakers - 1 if voice.n_speakers > 1 else None
            for r in stages(upstream, ours, ids, speaker=speaker, seed=3):
                results.append(dataclasses.replace(r, stage=f"{name}/{r.stage}"))
    return results
