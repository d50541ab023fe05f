"""Wide 1-D convolutions through the FFT (overlap-save), for long signals on a CPU: Kokoro's vocoder.

A convolution of kernel ``k`` from ``C_in`` to ``C_out`` channels costs ``k * C_in * C_out`` multiply-adds per output
step when computed directly, as oneDNN does. Over blocks of ``n`` input steps it is, per frequency of the blocks'
real FFT, one ``(blocks, C_in) @ (C_in, C_out)`` complex product: ``4 (n / 2 + 1) / (n - k + 1)`` real multiply-adds
per ``C_in * C_out`` and output step, about 2.4 for ``k = 11`` at ``n = 64`` against 11, plus the FFTs (``C_in +
C_out`` transforms of ``n`` points per block). In Kokoro's vocoder on a 2-core AMD EPYC (AVX2) that made a kernel-11
convolution about 2x faster at 128 and 256 channels and a kernel-7 one 1.2-1.5x, and the whole synthesis
1.15-1.2x; narrow kernels and short signals stay direct, where the transforms cost more than they save (and dilated
kernels, which need longer blocks for their taps: no gain measured there). Magpie's nano codec, whose direct
convolutions ran half as fast again, got slower: it stays direct.

The sums are those of the convolution, in float32, in another order: an output differs from the direct one by float
rounding (about 1e-6 of the peak, measured), as two direct kernels may. The kernel's spectrum
(``(n / 2 + 1) * C_in * C_out`` complex numbers: 4.3 MB at 128 channels and ``n = 64``, six times the weight) is
made on first use and kept, made again whenever the weight changes; the signal goes a few thousand steps at a time,
so what is in flight stays a few MB whatever its length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["MIN_BLOCKS", "Spectrum", "block_length", "convolve", "spectrum", "spectrum_bytes"]

# an input shorter than this many blocks runs directly: the kernel's spectrum, made at a layer's first FFT, costs
# about as much as the FFT saves over 100 blocks at 256 channels (12 ms, page faults mostly; 1.6 ms at 128), so a
# short utterance in a fresh process (a one-shot `ggtts speak`) does not pay for spectra it hardly uses
MIN_BLOCKS = 100
MIN_LENGTH = 64  # the FFT length chosen first: at least this, and at least LENGTH_PER_SPAN kernel spans
LENGTH_PER_SPAN = 4  # so that most of each block is output
MIN_LENGTH_PER_SPAN = 2  # a length shrunk to fit the memory budget still covers this many spans
SPECTRUM_BUDGET = 10 << 20  # bytes a layer's spectrum may keep (n / 2 + 1) * C_in * C_out * 8: else it runs directly
COMPLEX_BYTES = 8
PIECE_STEPS = 16384  # output steps computed together: at 128 channels about 30 MB in flight


def spectrum_bytes(n: int, c_in: int, c_out: int) -> int:
    return (n // 2 + 1) * c_in * c_out * COMPLEX_BYTES


def block_length(span: int, c_in: int, c_out: int) -> int | None:
    """The FFT length for a kernel spanning ``span + 1`` input steps (``(k - 1) * dilation + 1``) between these
    channels: the smallest power of two of at least :data:`MIN_LENGTH` and ``LENGTH_PER_SPAN * (span + 1)``, halved
    while its spectrum is over :data:`SPECTRUM_BUDGET` and the half still covers ``MIN_LENGTH_PER_SPAN`` spans
    (at 256 channels a kernel of 11 takes 32: a 9 MB spectrum, and as fast there as 64, whose spectrum is twice
    that); None where no length fits the budget."""
    n = MIN_LENGTH
    while n < LENGTH_PER_SPAN * (span + 1):
        n *= 2
    while spectrum_bytes(n, c_in, c_out) > SPECTRUM_BUDGET and n // 2 >= MIN_LENGTH_PER_SPAN * (span + 1):
        n //= 2
    return n if spectrum_bytes(n, c_in, c_out) <= SPECTRUM_BUDGET else None


class Spectrum:
    """A kernel ready for :func:`convolve`: the spectrum of the kernel, reversed (a convolution layer correlates),
    over blocks of ``n`` steps, laid out ``(n // 2 + 1, C_in, C_out)``."""

    def __init__(self, weights: torch.Tensor, n: int, span: int) -> None:
        self.weights, self.n, self.span = weights, n, span
        self.valid = n - span  # outputs per block

    @property
    def out_channels(self) -> int:
        return int(self.weights.shape[2])


def spectrum(weight: torch.Tensor, dilation: int, n: int) -> Spectrum:
    """``weight`` (C_out, C_in, k) float32 -> its :class:`Spectrum` over blocks of ``n`` steps.

    The transform of ``k`` taps is one matrix product with the DFT's cosines and sines at the taps' positions: 1.6
    ms a layer at 128 channels, 12 ms at 256 (mostly the page faults of its new memory), where ``rfft`` over the
    padded kernels took about twice that."""
    c_out, c_in, k = weight.shape
    span = (k - 1) * dilation
    if n <= span:
        raise ValueError(f"a block of {n} steps cannot hold a kernel spanning {span + 1}")
    bins = n // 2 + 1
    # correlating with w is convolving with w reversed: the conjugate of w's spectrum, sum_j w_j exp(+2 pi i f t_j / n)
    angle = (2 * math.pi / n) * torch.outer(torch.arange(bins, dtype=torch.float64),
                                            torch.arange(k, dtype=torch.float64) * dilation)  # fmt: skip
    basis = torch.cat([angle.cos(), angle.sin()]).to(device=weight.device, dtype=weight.dtype)  # (2 bins, k)
    taps = weight.detach().permute(2, 1, 0).reshape(k, c_in * c_out)  # (k, C_in * C_out)
    parts = basis @ taps  # (2 bins, C_in * C_out): real parts, then imaginary
    return Spectrum(torch.complex(parts[:bins], parts[bins:]).view(bins, c_in, c_out), n, span)


def convolve(x: torch.Tensor, kernel: Spectrum, bias: torch.Tensor | None, padding: int) -> torch.Tensor:
    """``x`` (T, C_in) time-major float32 -> (T + 2 * padding - span, C_out) contiguous: the convolution with
    ``padding`` zeros at each end and stride 1, as ``F.conv1d`` over ``x.T`` gives it (transposed). The blocks go
    :data:`PIECE_STEPS` output steps at a time, so the spectra in flight stay a few MB however long ``x`` is."""
    steps, c_in = x.shape
    n, valid, span = kernel.n, kernel.valid, kernel.span
    out_steps = steps + 2 * padding - span
    blocks = -(-out_steps // valid)
    # padded so that every block is whole: block b reads steps b * valid .. b * valid + n
    padded = F.pad(x, (0, 0, padding, blocks * valid + span - steps - padding)).contiguous()
    origin = padded.storage_offset()  # (as_strided counts from the storage's start)
    out = torch.empty(blocks * valid, kernel.out_channels, dtype=x.dtype, device=x.device)
    per_piece = max(1, PIECE_STEPS // valid)
    for first in range(0, blocks, per_piece):
        count = min(per_piece, blocks - first)
        windows = torch.as_strided(padded, (count, n, c_in), (valid * c_in, c_in, 1), origin + first * valid * c_in)
        spectra = torch.fft.rfft(windows, dim=1)  # (count, n // 2 + 1, C_in)
        products = torch.empty(count, n // 2 + 1, kernel.out_channels, dtype=spectra.dtype, device=x.device)
        torch.bmm(spectra.transpose(0, 1), kernel.weights, out=products.transpose(0, 1))  # a product per frequency
        y = torch.fft.irfft(products, n=n, dim=1)  # (count, n, C_out): the first ``valid`` steps of each are whole
        target = out[first * valid : (first + count) * valid].view(count, valid, -1)
        if bias is None:
            target.copy_(y[:, :valid])
        else:
            torch.add(y[:, :valid], bias, out=target)
    return out[:out_steps]
