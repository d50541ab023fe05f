"""Convolutions through the DFT (:mod:`ggtts.models.layers.fft_conv`) and the channels-last layers that use them:
the same outputs as the direct convolution to float rounding (about 1e-6 of the peak; 1e-5 allowed) for every
padding, dilation and length, whole blocks or not, read in place or from a piece at an end; short inputs and other
dtypes direct; spectra that follow the weights; and the layers chosen (wide kernels, a spectrum within the memory
budget)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers import fft_conv
from ggtts.models.layers.channels_last import ChannelsLastConv1d, channels_last, channels_last_convolutions
from ggtts.models.layers.channels_last import fft_convolutions as use_fft

TOLERANCE = 1e-5  # of the output's peak; measured 1e-6 to 2e-6


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize(
    ("c_in", "c_out", "kernel", "dilation", "padding", "steps", "n"),
    [
        (16, 12, 11, 1, 5, 1000, 64),  # "same", as Kokoro's resblocks
        (16, 12, 11, 3, 15, 777, 64),  # dilated, a length no whole number of blocks
        (8, 8, 7, 5, 15, 500, 32),
        (8, 8, 7, 2, 6, 501, 32),  # subsequences of different lengths
        (8, 4, 7, 1, 0, 300, 32),  # no padding: shorter output
        (8, 4, 7, 1, 9, 300, 32),  # more padding than the span: longer output
        (8, 4, 11, 1, 5, 20, 64),  # shorter than one block
        (8, 4, 11, 5, 40, 30, 32),  # dilated, more padding than input
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_convolve_gives_the_direct_convolution(
    c_in: int, c_out: int, kernel: int, dilation: int, padding: int, steps: int, n: int, bias: bool
) -> None:
    torch.manual_seed(steps + kernel)
    weight = torch.randn(c_out, c_in, kernel) / (c_in * kernel) ** 0.5
    b = torch.randn(c_out) if bias else None
    x = torch.randn(c_in, steps)
    want = F.conv1d(x[None], weight, b, padding=padding, dilation=dilation)[0].T
    got = fft_conv.convolve(x.T.contiguous(), fft_conv.spectrum(weight, n), b, padding, dilation)
    assert got.shape == want.shape and got.is_contiguous()
    assert _relative(got, want) < TOLERANCE


@pytest.mark.parametrize("dilation", [1, 3])
def test_convolve_in_pieces(monkeypatch: pytest.MonkeyPatch, dilation: int) -> None:
    """A long signal goes a piece of blocks at a time (here 3 blocks a piece, the last piece short; the pieces
    between the ends read in place): the same output."""
    torch.manual_seed(4)
    weight, b, x = torch.randn(8, 8, 11) / 9, torch.randn(8), torch.randn(8, 2000)
    padding = 5 * dilation
    want = F.conv1d(x[None], weight, b, padding=padding, dilation=dilation)[0].T
    monkeypatch.setattr(fft_conv, "PIECE_STEPS", 3 * 54 * dilation)  # n = 64: 54 outputs a block
    got = fft_conv.convolve(x.T.contiguous(), fft_conv.spectrum(weight, 64), b, padding, dilation)
    assert _relative(got, want) < TOLERANCE


def test_convolve_with_pieces_inside_the_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """More padding than a "same" convolution's, over several pieces: the last piece (and, with more, the first)
    lies wholly in the zeros around x."""
    torch.manual_seed(6)
    weight, x = torch.randn(4, 4, 7), torch.randn(4, 400)
    monkeypatch.setattr(fft_conv, "PIECE_STEPS", 2 * 58)  # n = 64: 58 outputs a block
    for padding in (50, 300):
        want = F.conv1d(x[None], weight, padding=padding)[0].T
        got = fft_conv.convolve(x.T.contiguous(), fft_conv.spectrum(weight, 64), None, padding)
        assert got.shape == want.shape and _relative(got, want) < TOLERANCE


def test_odd_blocks_and_inputs_shorter_than_the_kernel_are_refused() -> None:
    with pytest.raises(ValueError, match="even number"):
        fft_conv.spectrum(torch.randn(2, 2, 7), 33)
    with pytest.raises(ValueError, match="shorter than the kernel"):
        fft_conv.convolve(torch.randn(5, 2), fft_conv.spectrum(torch.randn(2, 2, 7), 32), None, 0)


def test_convolve_reads_a_view_where_it_starts() -> None:
    """A time-major view into a larger tensor, no padding, a whole number of blocks (nothing to pad at all)."""
    torch.manual_seed(5)
    weight, whole = torch.randn(4, 4, 7), torch.randn(300, 4)
    x = whole[5 : 5 + 10 * 26 + 6]  # n = 32: 26 outputs a block, 10 blocks
    want = F.conv1d(x.T[None], weight)[0].T
    assert _relative(fft_conv.convolve(x, fft_conv.spectrum(weight, 32), None, 0), want) < TOLERANCE


def test_convolve_fails_with_the_kernel_the_wrong_way_round() -> None:
    """The check above can fail: the kernel's plain spectrum (a convolution, not a layer's correlation) is far off,
    and one tap of one channel pair 1 % off is over the tolerance (7e-5 measured)."""
    torch.manual_seed(3)
    weight, x = torch.randn(6, 6, 7), torch.randn(6, 400)
    want = F.conv1d(x[None], weight, padding=3)[0].T
    kernel = fft_conv.spectrum(weight, 64)
    flipped = fft_conv.spectrum(weight.flip(-1), 64)
    assert _relative(fft_conv.convolve(x.T.contiguous(), flipped, None, 3), want) > 0.1
    one_off = weight.clone()
    one_off[0, 0, 3] *= 1.01  # one tap of one channel pair 1 % off
    assert _relative(fft_conv.convolve(x.T.contiguous(), fft_conv.spectrum(one_off, 64), None, 3), want) > TOLERANCE
    assert _relative(fft_conv.convolve(x.T.contiguous(), kernel, None, 3), want) < TOLERANCE


def test_a_block_too_short_for_the_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        fft_conv.spectrum(torch.randn(2, 2, 11), 8)


def test_block_lengths_cover_the_span_and_keep_to_the_budget() -> None:
    assert fft_conv.block_length(10, 128, 128) == 64  # four spans or more, from 64
    assert fft_conv.block_length(30, 128, 128) == 128
    assert fft_conv.block_length(50, 128, 128) == 128  # 256's spectrum (17 MB) is over the budget: two spans
    assert fft_conv.block_length(10, 256, 256) == 32  # at 256 channels 64 would keep 17 MB
    assert fft_conv.block_length(30, 256, 256) is None  # no length of two spans or more fits
    for span, c in [(10, 128), (50, 128), (10, 256), (6, 64)]:
        n = fft_conv.block_length(span, c, c)
        assert n is not None and n >= 2 * (span + 1)
        assert fft_conv.spectrum_bytes(n, c, c) <= fft_conv.SPECTRUM_BUDGET


def _layer(kernel: int, dilation: int, channels: int = 16) -> nn.Conv1d:
    torch.manual_seed(kernel * 10 + dilation)
    return nn.Conv1d(channels, channels, kernel, dilation=dilation, padding=(kernel - 1) * dilation // 2)


@pytest.mark.parametrize("dilation", [1, 5])
def test_a_layer_runs_long_inputs_through_the_fft_and_short_ones_directly(dilation: int) -> None:
    layer = _layer(11, dilation)
    with torch.no_grad():
        channels_last_convolutions(layer)
        assert use_fft(layer) == 1
        assert isinstance(layer, ChannelsLastConv1d) and layer.fft_length == 64
        long_x = channels_last(torch.randn(1, 16, fft_conv.MIN_BLOCKS * 54))  # n = 64: 54 outputs a block
        short_x = channels_last(torch.randn(1, 16, fft_conv.MIN_BLOCKS * 54 - 1))
        got_long, got_short = layer(long_x), layer(short_x)
        assert "_fft_cache" in layer.__dict__  # the long one went through the FFT
        layer.fft_length = None
        direct_long, direct_short = layer(long_x), layer(short_x)
    assert got_long.is_contiguous(memory_format=torch.channels_last) and got_long.shape == direct_long.shape
    assert 0 < _relative(got_long, direct_long) < TOLERANCE  # another order of the same sums
    assert torch.equal(got_short, direct_short)  # under MIN_BLOCKS blocks: the direct convolution itself


def test_the_spectrum_follows_the_weights() -> None:
    """New weight values (a test scaling them in place, a state dict loaded) reach the next call."""
    layer = _layer(11, 1)
    x = channels_last(torch.randn(1, 16, 6000))
    with torch.no_grad():
        channels_last_convolutions(layer)
        use_fft(layer)
        layer(x)  # the spectrum, made
        assert "_fft_cache" in layer.__dict__
        layer.weight.mul_(2.0)
        layer.bias.add_(1.0)
        got = layer(x).squeeze(2)
        want = F.conv1d(x.squeeze(2), layer.weight, layer.bias, padding=5)
    assert _relative(got, want) < TOLERANCE


def test_bfloat16_layers_and_batches_stay_direct() -> None:
    layer = _layer(11, 1)
    batch = channels_last(torch.randn(2, 16, 6000))
    with torch.no_grad():
        channels_last_convolutions(layer, torch.bfloat16)
        use_fft(layer)
        layer(channels_last(torch.randn(1, 16, 6000)))  # bfloat16 products
        layer2 = _layer(11, 1)
        channels_last_convolutions(layer2)
        use_fft(layer2)
        layer2(batch)  # two rows
    assert "_fft_cache" not in layer.__dict__ and "_fft_cache" not in layer2.__dict__


def test_the_layers_chosen() -> None:
    """Kernels of 7 and more, dilated or not, stride 1 and one group only, a spectrum within the budget."""
    block = nn.Sequential(
        _layer(7, 1), _layer(11, 1, channels=256), _layer(7, 3), _layer(11, 5), _layer(3, 1),
        _layer(11, 1, channels=512), nn.Conv1d(16, 16, 11, stride=2), nn.Conv1d(16, 16, 11, groups=2),
    )  # fmt: skip
    channels_last_convolutions(block)
    assert use_fft(block) == 4
    assert [getattr(layer, "fft_length", None) for layer in block] == [64, 32, 64, 64, None, None, None, None]


def test_a_compiled_layer_holds_no_guard_on_the_length() -> None:
    """Under ``torch.compile`` the layer runs directly (no spectrum made, the direct convolution's outputs) over
    lengths on both sides of the FFT's threshold, and compiles no more often than a layer without the FFT (it asks
    whether it is compiling before it looks at the length, so a compiled graph need not guard on it; seen failing
    when the layer does not ask: the FFT traced into the graph)."""
    from torch._dynamo.testing import CompileCounter

    def frames(fft: bool) -> int:
        layer = _layer(11, 1)
        with torch.no_grad():
            channels_last_convolutions(layer)
            if fft:
                use_fft(layer)
            torch._dynamo.reset()
            counter = CompileCounter()
            compiled = torch.compile(layer, backend=counter, dynamic=True)
            for steps in (100, 300, 6000, 9000):
                x = channels_last(torch.randn(1, 16, steps))
                want = F.conv1d(x.squeeze(2), layer.weight, layer.bias, padding=5)[:, :, None]
                assert _relative(compiled(x), want) < TOLERANCE
        assert "_fft_cache" not in layer.__dict__
        return counter.frame_count

    assert frames(fft=True) == frames(fft=False)
