"""Qwen3-TTS's speaker encoder (Base checkpoints): 24 kHz audio -> a speaker embedding (an x-vector as wide as the
talker), which the talker's prompt takes in place of a preset speaker's row.

Features as upstream's ``mel_spectrogram``: the signal reflected by ``(n_fft - hop) / 2`` at each end, an
uncentred STFT (1024-sample periodic Hann window, hop 256), magnitudes ``sqrt(re^2 + im^2 + 1e-9)``, 128 Slaney
mel filters from 0 to 12 kHz, natural log of at least 1e-5. The encoder is ECAPA-TDNN: a TDNN stem, SE-Res2Net
blocks (each a residual of a 1x1 TDNN, a Res2Net split of dilated TDNNs, a 1x1 TDNN and a squeeze-excitation),
multi-layer feature aggregation, attentive statistics pooling and a 1x1 projection. Every convolution pads "same"
by reflection. Module names map to llama.cpp's mmproj names (``a.conv1d.0``, ``a.blk.N.*``, ``a.conv_out``,
``a.asp_*``, ``mm.a.fc``) by :func:`speaker_name`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.qwen3omni_audio.features import mel_filters

SAMPLE_RATE = 24_000
N_FFT = 1024
HOP = 256
N_MEL = 128
F_MAX = 12_000.0
LOG_FLOOR = 1e-5
MAGNITUDE_EPS = 1e-9
STATS_EPS = 1e-12  # attentive statistics pooling: variances floored to it
DEFAULT_DILATIONS = (1, 2, 3, 4, 1)  # the stem, the SE-Res2Net blocks, the aggregation (the published config)


def log_mel(samples: torch.Tensor) -> torch.Tensor:
    """24 kHz mono samples ``(n,)`` -> features ``(1, frames, 128)``, as upstream computes them."""
    x = samples.to(torch.float32).reshape(1, -1)
    pad = (N_FFT - HOP) // 2
    if x.shape[-1] <= pad:
        raise InputError(f"the audio is too short: at least {pad + 1} samples at {SAMPLE_RATE} Hz")
    x = F.pad(x.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(x, N_FFT, HOP, N_FFT, torch.hann_window(N_FFT), center=False, return_complex=True)
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + MAGNITUDE_EPS)
    filters = torch.from_numpy(np.ascontiguousarray(mel_filters(N_MEL, N_FFT, SAMPLE_RATE, F_MAX).T)).float()
    return torch.log(torch.clamp(filters @ magnitude, min=LOG_FLOOR)).transpose(1, 2)


class Tdnn(nn.Module):
    """A convolution padded "same" by reflection, then ReLU."""

    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding="same", padding_mode="reflect")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


class SERes2Net(nn.Module):
    def __init__(self, c_in: int, c_out: int, scale: int, se: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.scale = scale
        self.pw1 = Tdnn(c_in, c_out, 1)
        self.res2 = nn.ModuleList(Tdnn(c_out // scale, c_out // scale, kernel, dilation) for _ in range(scale - 1))
        self.pw2 = Tdnn(c_out, c_out, 1)
        self.se1 = nn.Conv1d(c_out, se, 1)
        self.se2 = nn.Conv1d(se, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pw1(x)
        parts, out = [], torch.empty(0)
        for i, part in enumerate(torch.chunk(h, self.scale, dim=1)):
            out = part if i == 0 else self.res2[i - 1](part if i == 1 else part + out)
            parts.append(out)
        h = self.pw2(torch.cat(parts, dim=1))
        gate = torch.sigmoid(self.se2(F.relu(self.se1(h.mean(dim=2, keepdim=True)))))
        return h * gate + x


def _statistics(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (weights * x).sum(2)
    std = torch.sqrt((weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(STATS_EPS))
    return mean, std


@dataclass(frozen=True)
class SpeakerConfig:
    channels: tuple[int, ...]  # the stem's, each block's, the aggregation's
    kernels: tuple[int, ...]
    dilations: tuple[int, ...]
    scale: int  # Res2Net's split
    se_channels: int
    attention_channels: int
    dim: int  # the embedding's width (the talker's)

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> SpeakerConfig:
        path = str(g.path)

        def shape(name: str) -> tuple[int, ...]:
            if name not in g:
                raise GGUFError(f"{path}: missing tensor '{name}' (the speaker encoder)")
            found = g.info(name).shape
            if len(found) != 3:
                raise GGUFError(f"{path}: tensor '{name}' has shape {list(found)}: not a 1-D convolution's weight")
            return found

        blocks = sorted({int(m[1]) for n in g.names() if (m := re.match(r"a\.blk\.(\d+)\.conv_pw1\.weight$", n))})
        if blocks != list(range(1, len(blocks) + 1)) or not blocks:
            raise GGUFError(f"{path}: the speaker encoder's blocks are not a.blk.1..N")
        scale = 1 + len({n for n in g.names() if re.match(r"a\.blk\.1\.res2\.\d+\.weight$", n)})
        stem = shape("a.conv1d.0.weight")
        channels = (stem[0], *(shape(f"a.blk.{b}.conv_pw1.weight")[0] for b in blocks), shape("a.conv_out.weight")[0])
        kernels = (stem[2], *(shape(f"a.blk.{b}.res2.0.weight")[2] for b in blocks), shape("a.conv_out.weight")[2])
        dilations = tuple(int(d) for d in g.get_list(K.SPEAKER_DILATIONS, list(DEFAULT_DILATIONS)))
        if len(dilations) != len(channels) or stem[1] != N_MEL or any(d < 1 for d in dilations):
            raise GGUFError(f"{path}: the speaker encoder's dilations {list(dilations)} or mel bins {stem[1]} do "
                            f"not fit its {len(channels)} layers")  # fmt: skip
        return cls(
            channels=channels,
            kernels=kernels,
            dilations=dilations,
            scale=scale,
            se_channels=shape("a.blk.1.se_conv1.weight")[0],
            attention_channels=shape("a.asp_tdnn.weight")[0],
            dim=shape("mm.a.fc.weight")[0],
        )


_NAMES = [
    (re.compile(r"^stem\.conv\."), "a.conv1d.0."),
    (re.compile(r"^blocks\.(\d+)\.(pw1|pw2)\.conv\."), None),
    (re.compile(r"^blocks\.(\d+)\.res2\.(\d+)\.conv\."), None),
    (re.compile(r"^blocks\.(\d+)\.(se1|se2)\."), None),
    (re.compile(r"^mfa\.conv\."), "a.conv_out."),
    (re.compile(r"^asp_tdnn\.conv\."), "a.asp_tdnn."),
    (re.compile(r"^asp_attn\."), "a.asp_attn."),
    (re.compile(r"^fc\."), "mm.a.fc."),
]
_PARTS = {"pw1": "conv_pw1", "pw2": "conv_pw2", "se1": "se_conv1", "se2": "se_conv2"}


def speaker_name(module_name: str) -> str:
    """The mmproj's name of a :class:`SpeakerEncoder` parameter."""
    for pattern, fixed in _NAMES:
        m = pattern.match(module_name)
        if not m:
            continue
        rest = module_name[m.end() :]
        if fixed is not None:
            return fixed + rest
        block = int(m[1]) + 1  # a.blk.0 would be the stem's place; llama.cpp counts the blocks from 1
        part = f"res2.{m[2]}" if m[2].isdigit() else _PARTS[m[2]]
        return f"a.blk.{block}.{part}.{rest}"
    raise KeyError(module_name)


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: SpeakerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, k, d = cfg.channels, cfg.kernels, cfg.dilations
        self.stem = Tdnn(N_MEL, c[0], k[0], d[0])
        self.blocks = nn.ModuleList(
            SERes2Net(c[i - 1], c[i], cfg.scale, cfg.se_channels, k[i], d[i]) for i in range(1, len(c) - 1)
        )
        self.mfa = Tdnn(sum(c[1:-1]), c[-1], k[-1], d[-1])
        self.asp_tdnn = Tdnn(c[-1] * 3, cfg.attention_channels, 1)
        self.asp_attn = nn.Conv1d(cfg.attention_channels, c[-1], 1)
        self.fc = nn.Conv1d(c[-1] * 2, cfg.dim, 1)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str | torch.device = "cpu") -> SpeakerEncoder:
        """The speaker encoder of a Base checkpoint's mmproj file (float32; its other tensors left alone)."""
        if K.SPEAKER_STEM not in gguf or gguf.get(K.AUDIO_PROJECTOR_TYPE, None) != K.SPKENC_PROJECTOR:
            raise GGUFError(f"{gguf.path}: no speaker encoder (a Base checkpoint's mmproj has one): this model "
                            "cannot clone a voice")  # fmt: skip
        cfg = SpeakerConfig.from_gguf(gguf)
        with empty_modules():
            model = cls(cfg)
        mine = {n for n in gguf.names() if n.startswith(("a.conv1d.", "a.blk.", "a.conv_out.", "a.asp_", "mm.a."))}
        load_module_from_gguf(model, gguf, gguf_name=speaker_name, ignore=set(gguf.names()) - mine, device=device)
        return model.eval()

    @torch.inference_mode()
    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Features ``(B, frames, 128)`` -> embeddings ``(B, dim)``."""
        x = features.transpose(1, 2)
        outs = []
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        x = self.mfa(torch.cat(outs, dim=1))
        t = x.shape[-1]
        mean, std = _statistics(x, torch.full_like(x[:, :1], 1.0 / t))
        context = torch.cat([x, mean.unsqueeze(2).expand(-1, -1, t), std.unsqueeze(2).expand(-1, -1, t)], dim=1)
        attention = torch.softmax(self.asp_attn(torch.tanh(self.asp_tdnn(context))), dim=2)
        mean, std = _statistics(x, attention)
        return self.fc(torch.cat([mean, std], dim=1).unsqueeze(2)).squeeze(-1)

    def embed(self, samples: torch.Tensor) -> torch.Tensor:
        """24 kHz mono samples ``(n,)`` -> the speaker embedding ``(dim,)``."""
        return self(log_mel(samples).to(self.fc.weight.device))[0]
