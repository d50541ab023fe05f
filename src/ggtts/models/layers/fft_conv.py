"""Wide 1-D convolutions through the DFT (overlap-save), for long signals on a CPU: Kokoro's vocoder.

A convolution of kernel ``k`` from ``C_in`` to ``C_out`` channels costs ``k * C_in * C_out`` multiply-adds per output
step when computed directly, as oneDNN does. Over blocks of ``n`` input steps it is, per frequency of the blocks'
real DFT, one ``(blocks, C_in) @ (C_in, C_out)`` complex product: ``4 (n / 2 + 1) / (n - k + 1)`` real multiply-adds
per ``C_in * C_out`` and output step, about 2.4 for ``k = 11`` at ``n = 64`` against 11. The transforms are matrix
products too (the DFT's cosines and sines, ``(n + 2) * n`` per channel and block in, ``(n + 2) * (n - k + 1)`` out):
at these block lengths dearer in multiply-adds than an FFT, cheaper in time, for they run as one batched product
each with no reordering of the blocks between steps (``torch.fft`` over the blocks' time axis spent more time in
copies than in the transforms). A dilated kernel (taps ``dilation`` steps apart) is the same kernel over each of
the ``dilation`` interleaved subsequences (steps ``r, r + d, r + 2d, ...``): the same spectrum, the same blocks.

On Kokoro's shapes on a 2-core AMD EPYC Zen 3 (AVX2), against oneDNN's direct convolution: kernel 11 1.9-2.4x
faster at 128 and 256 channels (dilated by 3 or 5: 1.5-1.95x), kernel 7 1.35-1.6x (dilated: 1.06-1.45x), kernel 3
slower (it stays direct); 2.1x still for kernel 11 over 18 blocks. Magpie's nano codec, whose direct convolutions
ran half as fast again, stays direct; so does Piper's decoder (32 and 64 channels: slower through the DFT).

The sums are those of the convolution, in float32, in another order: an output differs from the direct one by float
rounding (about 1e-6 of the peak, measured), as two direct kernels may. The kernel's spectrum
(``(n / 2 + 1) * C_in * C_out`` complex numbers: 4.3 MB at 128 channels and ``n = 64``, six times the weight) is
made on first use and kept, made again whenever the weight changes; the signal goes a few thousand steps at a time,
so what is in flight stays a few MB whatever its length.
"""

from __future__ import annotations

import math

import torch

__all__ = ["MIN_BLOCKS", "Spectrum", "block_length", "convolve", "spectrum", "spectrum_bytes"]

# an input shorter than this many blocks (all subsequences together) runs directly: below it the transforms and
# the per-call work cost about what the products save (measured on Kokoro's shapes: kernel 11 at 256 channels still
# 2.2x faster over 18 blocks)
MIN_BLOCKS = 16
MIN_LENGTH = 64  # the DFT length chosen first: at least this, and at least LENGTH_PER_SPAN kernel spans
LENGTH_PER_SPAN = 4  # so that most of each block is output
MIN_LENGTH_PER_SPAN = 2  # a length shrunk to fit the memory budget still covers this many spans
SPECTRUM_BUDGET = 10 << 20  # bytes a layer's spectrum may keep (n / 2 + 1) * C_in * C_out * 8: else it runs directly
COMPLEX_BYTES = 8
PIECE_STEPS = 4096  # output steps computed together: their blocks' spectra stay within the caches


def spectrum_bytes(n: int, c_in: int, c_out: int) -> int:
    return (n // 2 + 1) * c_in * c_out * COMPLEX_BYTES


def block_length(span: int, c_in: int, c_out: int) -> int | None:
    """The DFT length for a kernel of ``span + 1`` taps between these channels: the smallest power of two of at
    least :data:`MIN_LENGTH` and ``LENGTH_PER_SPAN * (span + 1)``, halved while its spectrum is over
    :data:`SPECTRUM_BUDGET` and the half still covers ``MIN_LENGTH_PER_SPAN`` spans (at 256 channels a kernel of 11
    takes 32: a 9 MB spectrum, and as fast there as 64, whose spectrum is twice that); None where no length fits
    the budget."""
    n = MIN_LENGTH
    while n < LENGTH_PER_SPAN * (span + 1):
        n *= 2
    while spectrum_bytes(n, c_in, c_out) > SPECTRUM_BUDGET and n // 2 >= MIN_LENGTH_PER_SPAN * (span + 1):
        n //= 2
    return n if spectrum_bytes(n, c_in, c_out) <= SPECTRUM_BUDGET else None


class Spectrum:
    """A kernel ready for :func:`convolve`: the spectrum of the kernel, reversed (a convolution layer correlates),
    over blocks of ``n`` steps, laid out ``(n // 2 + 1, C_in, C_out)``; with the real DFT's matrices over those
    blocks: ``forward`` ``(2 (n // 2 + 1), n)`` (real parts' rows, then imaginary parts'), ``inverse``
    ``(n - span, 2 (n // 2 + 1))`` (only the block's first ``n - span`` steps, the whole ones)."""

    def __init__(self, weights: torch.Tensor, n: int, span: int) -> None:
        self.weights, self.n, self.span = weights, n, span
        self.valid = n - span  # outputs per block
        self.forward, self.inverse = _transforms(n, self.valid, weights.real.dtype, weights.device)

    @property
    def out_channels(self) -> int:
        return int(self.weights.shape[2])


def _transforms(n: int, valid: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The real DFT of ``n`` points as a matrix, and the inverse's first ``valid`` rows (``torch.fft.irfft``'s
    sums: each bin but the first and the last counted twice, their imaginary parts not at all)."""
    bins = n // 2 + 1
    steps, freqs = torch.arange(n, dtype=torch.float64), torch.arange(bins, dtype=torch.float64)
    angle = (2 * math.pi / n) * torch.outer(freqs, steps)  # (bins, n)
    forward = torch.cat([angle.cos(), -angle.sin()])  # X_f = sum_t x_t exp(-2 pi i f t / n)
    weight = torch.full((bins,), 2.0, dtype=torch.float64)
    weight[0] = weight[-1] = 1.0  # n is even: the last bin is the Nyquist one
    back = angle[:, :valid].T  # (valid, bins)
    inverse = torch.cat([back.cos() * weight, -back.sin() * weight], dim=1) / n
    return forward.to(device=device, dtype=dtype), inverse.to(device=device, dtype=dtype)


def spectrum(weight: torch.Tensor, n: int) -> Spectrum:
    """``weight`` (C_out, C_in, k) float32 -> its :class:`Spectrum` over blocks of ``n`` steps (taps one step
    apart: a dilated layer's goes through :func:`convolve` with its dilation).

    The transform of ``k`` taps is one matrix product with the DFT's cosines and sines at the taps' positions: 1.6
    ms a layer at 128 channels, 12 ms at 256 (mostly the page faults of its new memory), where ``rfft`` over the
    padded kernels took about twice that."""
    c_out, c_in, k = weight.shape
    span = k - 1
    if n <= span:
        raise ValueError(f"a block of {n} steps cannot hold a kernel of {k} taps")
    if n % 2:
        raise ValueError(f"blocks of an even number of steps only (the last bin is the Nyquist one), not {n}")
    bins = n // 2 + 1
    # correlating with w is convolving with w reversed: the conjugate of w's spectrum, sum_j w_j exp(+2 pi i f j / n)
    angle = (2 * math.pi / n) * torch.outer(torch.arange(bins, dtype=torch.float64),
                                            torch.arange(k, dtype=torch.float64))  # fmt: skip
    basis = torch.cat([angle.cos(), angle.sin()]).to(device=weight.device, dtype=weight.dtype)  # (2 bins, k)
    taps = weight.detach().permute(2, 1, 0).reshape(k, c_in * c_out)  # (k, C_in * C_out)
    parts = basis @ taps  # (2 bins, C_in * C_out): real parts, then imaginary
    return Spectrum(torch.complex(parts[:bins], parts[bins:]).view(bins, c_in, c_out), n, span)


def convolve(
    x: torch.Tensor, kernel: Spectrum, bias: torch.Tensor | None, padding: int, dilation: int = 1
) -> torch.Tensor:
    """``x`` (T, C_in) time-major float32 -> (T + 2 * padding - span * dilation, C_out) contiguous: the convolution
    with ``padding`` zeros at each end, stride 1 and taps ``dilation`` steps apart, as ``F.conv1d`` over ``x.T``
    gives it (transposed). Each of the ``dilation`` interleaved subsequences is convolved on its own, in blocks of
    ``n`` steps reading ``n - span`` new ones; :data:`PIECE_STEPS` output steps at a time, so what is in flight stays
    a few MB however long ``x`` is, read from ``x`` where it is (only a piece at an end is copied, with its zeros)."""
    steps, c_in = x.shape
    x = x.contiguous()
    n, valid, span, d = kernel.n, kernel.valid, kernel.span, dilation
    bins = n // 2 + 1
    out_steps = steps + 2 * padding - span * d
    if out_steps < 1:
        raise ValueError(f"{steps} steps padded by {padding} are shorter than the kernel's {span * d + 1}")
    longest = -(-out_steps // d)  # output steps of the longest subsequence
    blocks = -(-longest // valid)  # per subsequence
    out = torch.empty(blocks, valid, d, kernel.out_channels, dtype=x.dtype, device=x.device)  # step (b, j, r)
    per_piece = max(1, PIECE_STEPS // (valid * d))
    for first in range(0, blocks, per_piece):
        count = min(per_piece, blocks - first)
        # block b of subsequence r reads x's steps (b * valid + j) * d + r - padding, j < n: zeros outside x
        lo = first * valid * d - padding
        hi = ((first + count) * valid + span) * d - padding
        if lo >= 0 and hi <= steps:
            source, at = x, x.storage_offset() + lo * c_in
        else:  # a piece at an end: its steps of x copied (none, where it lies in the padding), zeros around them
            source = x.new_zeros(hi - lo, c_in)
            start, end = max(lo, 0), min(hi, steps)
            if end > start:
                source[start - lo : end - lo] = x[start:end]
            at = 0
        windows = torch.as_strided(source, (d, count, n, c_in), (c_in, valid * d * c_in, d * c_in, 1), at)
        parts = torch.matmul(kernel.forward, windows)  # (d, count, 2 bins, C_in): real parts, then imaginary
        spectra = torch.complex(parts[:, :, :bins], parts[:, :, bins:]).view(d * count, bins, c_in)
        products = torch.bmm(spectra.transpose(0, 1), kernel.weights)  # (bins, d * count, C_out): one per frequency
        parts = torch.view_as_real(products).permute(1, 3, 0, 2).reshape(d * count, 2 * bins, -1)
        y = torch.matmul(kernel.inverse, parts).view(d, count, valid, -1)  # each block's whole steps
        target = out[first : first + count].permute(2, 0, 1, 3)  # (d, count, valid, C_out)
        if bias is None:
            target.copy_(y)
        else:
            torch.add(y, bias, out=target)
    return out.view(-1, kernel.out_channels)[:out_steps]
