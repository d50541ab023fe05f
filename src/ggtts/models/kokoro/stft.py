"""Exact inverse STFT in real arithmetic: one transposed convolution with a windowed inverse-DFT basis.

It computes what ``torch.istft(mag * exp(1j * phase), n_fft, hop, window=hann, center=True)`` computes
(one-sided spectrum: DC and Nyquist bins counted once, the others twice; overlap-add normalised by the
summed squared window), without complex tensors, in one pass over the frames.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

WINDOW_FLOOR = 1e-11  # torch.istft's bound below which the window envelope counts as zero


def _inverse_basis(n_fft: int, window: torch.Tensor) -> torch.Tensor:
    """(2 * n_bins, 1, n_fft) float64: rows for the real parts of bins 0..n_bins-1, then for their imaginary parts."""
    n_bins = n_fft // 2 + 1
    k = torch.arange(n_bins, dtype=torch.float64)[:, None]
    n = torch.arange(n_fft, dtype=torch.float64)[None, :]
    angle = 2 * math.pi * k * n / n_fft
    weight = torch.full((n_bins, 1), 2.0, dtype=torch.float64)
    weight[0] = 1.0
    if n_fft % 2 == 0:
        weight[-1] = 1.0  # the Nyquist bin has no mirror image
    real = weight * torch.cos(angle) / n_fft
    imag = -weight * torch.sin(angle) / n_fft
    imag[0] = 0.0  # irfft ignores the imaginary parts of DC ...
    if n_fft % 2 == 0:
        imag[-1] = 0.0  # ... and of Nyquist
    window64 = window.to(torch.float64)[None, :]
    return torch.cat([real * window64, imag * window64])[:, None, :]  # float64: the caller casts


class InverseSTFT(nn.Module):
    """(B, n_bins, frames) magnitude and phase -> (B, hop * (frames - 1)) samples; Hann window, centred.

    It holds no tensors of its own (nothing to load or to save): the window and the basis are built once per
    device and dtype on first use (float32 as the model runs; float64 for exact comparisons).
    """

    def __init__(self, n_fft: int, hop_length: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self._constants: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def constants(
        self, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(window (n_fft,), basis (2 * n_bins, 1, n_fft), squared window (1, 1, n_fft)) on ``device``."""
        key = (device, dtype)
        if key not in self._constants:
            window = torch.hann_window(self.n_fft, periodic=True, dtype=dtype)
            basis = _inverse_basis(self.n_fft, window).to(dtype)
            square = (window * window)[None, None]
            self._constants[key] = (window.to(device), basis.to(device), square.to(device))
        return self._constants[key]

    def window(self, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return self.constants(device, dtype)[0]

    def forward(self, magnitude: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        spectrum = torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)  # (B, 2F, T)
        return self.from_spectrum(spectrum)

    def from_spectrum(self, spectrum: torch.Tensor) -> torch.Tensor:
        """``spectrum``: (B, 2 * n_bins, frames), real parts then imaginary parts."""
        _, basis, window_sq = self.constants(spectrum.device, spectrum.dtype)
        frames = spectrum.shape[-1]
        signal = F.conv_transpose1d(spectrum, basis, stride=self.hop_length)  # (B, 1, n_fft + hop * (T - 1))
        ones = torch.ones(1, 1, frames, dtype=spectrum.dtype, device=spectrum.device)
        envelope = F.conv_transpose1d(ones, window_sq, stride=self.hop_length)  # (1, 1, same)
        start = self.n_fft // 2
        end = signal.shape[-1] - start
        envelope = envelope[..., start:end]
        if bool((envelope.abs() < WINDOW_FLOOR).any()):
            raise ValueError("inverse STFT: the window overlap-add is zero somewhere (hop too large for the window)")
        return (signal[..., start:end] / envelope).squeeze(1)
