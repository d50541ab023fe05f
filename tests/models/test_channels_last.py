"""The channels-last convolution drop-ins (:mod:`ggtts.models.layers.channels_last`): over a ``(B, C, 1, T)``
time-major layout they give what the plain 1-D layers give (float32: the same maths, rounding aside), keep the
layout, follow weight changes, and still take 3-D inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.channels_last import (
    ChannelsLastConv1d,
    ChannelsLastConvTranspose1d,
    channels_last,
    channels_last_convolutions,
    narrow_convolution,
)

LAYERS = [
    nn.Conv1d(6, 5, 3, padding=1),
    nn.Conv1d(6, 5, 7, dilation=3, padding=9),  # a dilated "same" convolution, as Piper's resblocks
    nn.Conv1d(6, 6, 5, stride=2, padding=2, groups=3, bias=False),
    nn.Conv1d(6, 5, 1),  # pointwise: a matrix product over the time-major rows
    nn.ConvTranspose1d(6, 4, 16, stride=8, padding=4),  # HiFi-GAN's upsampling
    nn.ConvTranspose1d(6, 4, 5, stride=3, padding=1, output_padding=2, dilation=2),
]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda m: repr(m))
def test_drop_ins_give_the_plain_layers_output(layer: nn.Module) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 6, 41)
    with torch.no_grad():
        want = layer(x)
        assert channels_last_convolutions(layer) == 1
        assert type(layer) in (ChannelsLastConv1d, ChannelsLastConvTranspose1d)
        got = layer(channels_last(x))
        flat = layer(x)  # a 3-D input: the plain convolution
    assert got.shape == (*want.shape[:2], 1, want.shape[2])
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.squeeze(2), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(flat, want, rtol=1e-5, atol=1e-5)


def test_bfloat16_products_and_float32_activations() -> None:
    torch.manual_seed(1)
    layer = nn.Conv1d(8, 8, 3, padding=1)
    x = torch.randn(1, 8, 50)
    with torch.no_grad():
        want = layer(x)
        channels_last_convolutions(layer, torch.bfloat16)
        got = layer(channels_last(x)).squeeze(2)
    assert got.dtype == torch.float32
    error = float((got - want).norm() / want.norm())
    assert 0 < error < 2e-2, error  # bfloat16's rounding, not more


def test_the_copies_follow_the_weights() -> None:
    """New weight values (a test scaling them in place, a state dict loaded) reach the next call."""
    torch.manual_seed(2)
    layer = nn.Conv1d(4, 4, 3, padding=1)
    x = channels_last(torch.randn(1, 4, 20))
    channels_last_convolutions(layer)
    with torch.no_grad():
        layer(x)  # the copies, made
        layer.weight.mul_(2.0)
        layer.bias.add_(1.0)
        got = layer(x).squeeze(2)
        want = F.conv1d(x.squeeze(2), layer.weight, layer.bias, padding=1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert set(layer.state_dict()) == {"weight", "bias"}  # the copies are not the layer's state


@pytest.mark.parametrize("path", ["bfloat16 copies", "float32 through the FFT", "bfloat16 drop-in"])
def test_a_weight_replaced_twice_is_copied_again(path: str) -> None:
    """``weight.data = ...`` moves no version counter; a replaced weight's memory could be taken by the next one at
    the same address, so each layer holds the tensor it copied (seen failing without: the old copies used)."""
    from ggtts.models.layers.bfloat16 import to_bfloat16
    from ggtts.models.layers.channels_last import fft_convolutions

    torch.manual_seed(1)
    layer = nn.Conv1d(16, 16, 11, padding=5).requires_grad_(False)
    if path == "bfloat16 drop-in":
        to_bfloat16(layer)
        x = torch.randn(1, 16, 300)
    else:
        channels_last_convolutions(layer, torch.bfloat16 if path == "bfloat16 copies" else None)
        if path == "float32 through the FFT":
            fft_convolutions(layer)
        x = channels_last(torch.randn(1, 16, 2000))
    for seed in range(10):
        layer(x)
        layer.weight.data = torch.zeros(16, 16, 11)  # the weight copied is let go (unless held)...
        layer.weight.data = torch.randn(16, 16, 11, generator=torch.Generator().manual_seed(seed))  # ...and reused
        got = layer(x).reshape(1, 16, -1).float()
        want = F.conv1d(x.reshape(1, 16, -1).double(), layer.weight.double(), layer.bias.double(), padding=5)
        assert float((got - want).abs().max()) < 0.02 * float(want.abs().max())  # bfloat16's rounding at most


def test_only_zero_padded_layers_are_turned() -> None:
    block = nn.Sequential(nn.Conv1d(2, 2, 3, padding=1, padding_mode="reflect"), nn.Conv1d(2, 2, 1), nn.ReLU())
    assert channels_last_convolutions(block) == 1
    assert type(block[0]) is nn.Conv1d and type(block[1]) is ChannelsLastConv1d


def test_one_copy_of_the_weights_in_their_own_dtype() -> None:
    """Computing in the weights' dtype, the parameter views the 4-D copy (no second copy in memory); in bfloat16
    the float32 parameter stays as it is; layers under ``keep`` compute in their weights' own dtype."""
    torch.manual_seed(3)
    block = nn.Sequential(nn.Conv1d(4, 4, 3, padding=1), nn.ConvTranspose1d(4, 4, 4, stride=2), nn.Conv1d(4, 1, 1))
    channels_last_convolutions(block[:1])
    w4, _ = block[0]._copies()
    assert block[0].weight.data_ptr() == w4.data_ptr()
    channels_last_convolutions(block[1:], torch.bfloat16, keep=(block[2],))
    assert block[1]._copies()[0].dtype == torch.bfloat16 and block[1].weight.dtype == torch.float32
    assert block[1].weight.data_ptr() != block[1]._copies()[0].data_ptr()
    assert block[2]._copies()[0].dtype == torch.float32 and block[2].compute_dtype is None


def test_weights_loaded_in_inference_mode() -> None:
    """A model loaded and prepared under ``torch.inference_mode`` (inference tensors have no version counter)."""
    torch.manual_seed(4)
    x = torch.randn(1, 3, 30)
    with torch.inference_mode():
        layer = nn.Conv1d(3, 2, 5, padding=2)
        want = layer(x)
        channels_last_convolutions(layer)
        got = layer(channels_last(x)).squeeze(2)
        again = layer(channels_last(x)).squeeze(2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, got, rtol=0, atol=0)


def test_prepared_under_inference_mode_the_parameter_stays_a_normal_tensor() -> None:
    """Copies made under ``torch.inference_mode`` are inference tensors: the parameter does not become a view of one
    (it could no longer take part in ordinary tensor code)."""
    torch.manual_seed(5)
    layer = nn.Conv1d(3, 2, 5, padding=2)
    x = torch.randn(1, 3, 30)
    with torch.inference_mode():
        channels_last_convolutions(layer)
        got = layer(channels_last(x)).squeeze(2)
    assert not layer.weight.is_inference()
    with torch.no_grad():
        torch.testing.assert_close(got, F.conv1d(x, layer.weight, layer.bias, padding=2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("c_out", "kernel", "padding", "bias"), [(1, 7, 3, False), (22, 7, 3, True), (3, 5, 2, True), (2, 3, 0, False)]
)
def test_a_narrow_convolution_over_the_time_major_rows(c_out: int, kernel: int, padding: int, bias: bool) -> None:
    """A vocoder's last layer (Piper's conv_post: 32 channels to 1, kernel 7; Kokoro's: to 22, with a bias)
    straight from the time-major layout: the 1-D convolution's output to float rounding (measured 1e-7 of the
    peak), batches included; one tap off by 1 % is seen, and so is a bias left out."""
    torch.manual_seed(c_out * 10 + kernel)
    layer = nn.Conv1d(8, c_out, kernel, padding=padding, bias=bias)
    x = torch.randn(2, 8, 500)
    with torch.no_grad():
        want = layer(x)
        got = narrow_convolution(channels_last(x), layer)
        assert got.shape == want.shape
        assert float((got - want).abs().max()) < 1e-5 * float(want.abs().max())
        layer.weight[0, 3, kernel // 2] *= 1.01
        assert float((narrow_convolution(channels_last(x), layer) - want).abs().max()) > 1e-5 * float(want.abs().max())
        layer.weight[0, 3, kernel // 2] /= 1.01
        if bias:
            layer.bias = None
            assert float((narrow_convolution(channels_last(x), layer) - want).abs().max()) > 1e-2


@pytest.mark.parametrize(
    "layer", [nn.Conv1d(4, 1, 3, stride=2), nn.Conv1d(4, 1, 3, dilation=2), nn.Conv1d(4, 2, 3, groups=2)], ids=repr
)
def test_a_narrow_convolution_refuses_what_it_does_not_compute(layer: nn.Conv1d) -> None:
    with pytest.raises(ValueError, match="stride 1, no dilation, one group"):
        narrow_convolution(channels_last(torch.randn(1, 4, 50)), layer)
