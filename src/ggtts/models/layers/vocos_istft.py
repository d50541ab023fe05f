"""Inverse STFT with "same" padding (Vocos / WavTokenizer ``ISTFT(padding="same")``).

``torch.istft`` only trims ``n_fft // 2`` samples at each end (``center=True``); a vocoder that predicts one
STFT
frame per token wants exactly ``hop`` samples per frame, so the overlap-added signal is trimmed by
``(win - hop) / 2`` at each end instead. The result is divided by the overlap-added squared window (the window
envelope), as ``torch.istft`` does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MAX_LOG_MAGNITUDE_CLIP = 1e2  # Vocos/WavTokenizer clip exp(log-magnitude) to this before the iSTFT


class ISTFT(nn.Module):
    """Complex spectrogram ``(B, n_fft/2+1, T)`` -> waveform ``(B, T * hop)``.

    The window is a periodic Hann window of ``n_fft`` samples (``torch.hann_window``), like upstream.
    """

    window: torch.Tensor

    def __init__(self, n_fft: int, hop_length: int) -> None:
        super().__init__()
        if (n_fft - hop_length) % 2:
            raise ValueError(f"n_fft - hop_length must be even for 'same' padding, got {n_fft} - {hop_length}")
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.pad = (n_fft - hop_length) // 2
        self.register_buffer("window", torch.hann_window(n_fft, periodic=True), persistent=False)

    def overlap_add(self, frames: torch.Tensor) -> torch.Tensor:
        """Overlap-add frames ``(B, n_fft, T)`` at ``hop`` spacing -> ``(B, (T - 1) * hop + n_fft)``."""
        n_frames = frames.shape[-1]
        length = (n_frames - 1) * self.hop_length + self.n_fft
        folded = F.fold(frames, output_size=(1, length), kernel_size=(1, self.n_fft), stride=(1, self.hop_length))
        return folded[:, 0, 0, :]  # (B, length)

    def envelope(self, n_frames: int) -> torch.Tensor:
        """Overlap-added squared window of ``n_frames`` frames, trimmed: ``(n_frames * hop,)``."""
        window_sq = self.window.square()[None, :, None].expand(1, self.n_fft, n_frames)
        env = self.overlap_add(window_sq.contiguous())[0]
        return env[self.pad : env.shape[0] - self.pad]

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        if spec.dim() != 3:
            raise ValueError(f"expected a (batch, bins, frames) spectrogram, got shape {tuple(spec.shape)}")
        n_frames = spec.shape[-1]
        frames = torch.fft.irfft(spec, n=self.n_fft, dim=1, norm="backward")  # (B, n_fft, T)
        frames = frames * self.window[None, :, None]
        audio = self.overlap_add(frames)
        audio = audio[:, self.pad : audio.shape[-1] - self.pad]  # (B, T * hop)
        return audio / self.envelope(n_frames)


def log_polar_to_complex(x: torch.Tensor) -> torch.Tensor:
    """Head output ``(B, n_fft + 2, T)`` = [log-magnitude; phase] -> complex ``(B, n_fft/2+1, T)``."""
    log_mag, phase = x.chunk(2, dim=1)
    mag = torch.exp(log_mag).clamp(max=MAX_LOG_MAGNITUDE_CLIP)
    return torch.polar(mag, phase)
