"""Our "same"-padding iSTFT against torch.istft and against WavTokenizer's own ISTFT module."""

from __future__ import annotations

import pytest
import torch

from ggtts.models.layers.vocos_istft import ISTFT

N_FFT, HOP = 1280, 320  # WavTokenizer 75 tokens/s at 24 kHz


def _spectrum(n_frames: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    real = torch.randn(1, N_FFT // 2 + 1, n_frames, generator=g, dtype=torch.float64)
    imag = torch.randn(1, N_FFT // 2 + 1, n_frames, generator=g, dtype=torch.float64)
    return torch.complex(real, imag)


@pytest.mark.parametrize("n_frames", [1, 2, 7, 40])
def test_exactly_hop_samples_per_frame(n_frames: int) -> None:
    out = ISTFT(N_FFT, HOP).double()(_spectrum(n_frames))
    assert out.shape == (1, n_frames * HOP)
    assert torch.isfinite(out).all()


def test_matches_torch_istft_where_both_are_defined() -> None:
    """torch.istft(center=True) trims n_fft/2 at the start, "same" trims (n_fft - hop)/2: a fixed offset."""
    n_frames = 30
    spec = _spectrum(n_frames, seed=1)
    ours = ISTFT(N_FFT, HOP).double()(spec)[0]
    ref = torch.istft(spec, N_FFT, HOP, N_FFT, torch.hann_window(N_FFT, dtype=torch.float64), center=True)[0]
    offset = N_FFT // 2 - (N_FFT - HOP) // 2  # 160 samples
    # the last frames are where torch.istft's own trimming ends; compare the span both cover
    n = ref.shape[0] - offset
    assert ref[:n].abs().max() > 1e-2  # a real signal, not zeros
    torch.testing.assert_close(ours[offset : offset + n], ref[:n], rtol=0, atol=1e-7)


def test_matches_wavtokenizer_istft() -> None:
    from _wavtokenizer_upstream import load_upstream_decoder

    upstream = load_upstream_decoder().spectral_ops.ISTFT(N_FFT, HOP, N_FFT, padding="same")
    spec = _spectrum(25, seed=2).to(torch.complex64)
    torch.testing.assert_close(ISTFT(N_FFT, HOP)(spec), upstream(spec), rtol=1e-5, atol=1e-5)
