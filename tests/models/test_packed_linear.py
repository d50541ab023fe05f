"""PackedLinear: nn.Linear's outputs through oneDNN with the weight packed once, on the CPU, and F.linear elsewhere."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.packed_linear import PackedLinear, _available, packed_linears

pytestmark = pytest.mark.skipif(not _available(), reason="this torch has no oneDNN")


def _pair(seed: int = 0, dim_in: int = 96, dim_out: int = 160) -> tuple[nn.Linear, PackedLinear]:
    torch.manual_seed(seed)
    plain = nn.Linear(dim_in, dim_out).requires_grad_(False)
    packed = nn.Linear(dim_in, dim_out).requires_grad_(False)
    packed.load_state_dict(plain.state_dict())
    assert packed_linears(packed) == 1
    assert isinstance(packed, PackedLinear)
    return plain, packed  # type: ignore[return-value]


def _exact(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x.double(), layer.weight.double(), layer.bias.double())


@pytest.mark.parametrize("shape", [(1, 96), (7, 96), (300, 96), (2, 5, 96)])
def test_same_sums_as_linear_to_float_rounding(shape: tuple[int, ...]) -> None:
    plain, packed = _pair()
    x = torch.randn(*shape)
    want = _exact(plain, x)
    got = packed(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    scale = float(want.abs().max())
    # float32's own error on these sums (F.linear's) is ~1e-7 of the scale; a wrong weight, bias or layout is O(1)
    assert float((got.double() - want).abs().max()) < 2e-6 * scale
    assert float((plain(x).double() - want).abs().max()) < 2e-6 * scale
    assert "_packed_cache" in packed.__dict__  # through oneDNN, not F.linear


def test_packs_once_and_again_when_the_weight_changes() -> None:
    plain, packed = _pair()
    x = torch.randn(7, 96)
    packed(x)
    first = packed.__dict__["_packed_cache"][1]
    packed(x)
    assert packed.__dict__["_packed_cache"][1] is first  # kept between calls
    with torch.no_grad():
        packed.weight.mul_(-2.0)  # in place: the version counter moves
        plain.weight.mul_(-2.0)
    want = _exact(plain, x)
    assert float((packed(x).double() - want).abs().max()) < 2e-6 * float(want.abs().max())
    packed.weight = nn.Parameter(torch.zeros(160, 96), requires_grad=False)  # a new tensor
    assert float(packed(x).sub(packed.bias).abs().max()) == 0.0


def test_inference_weights_pack_and_the_state_dict_is_unchanged() -> None:
    plain, _ = _pair()
    with torch.inference_mode():
        inference = nn.Linear(96, 160).requires_grad_(False)
        inference.load_state_dict(plain.state_dict())
        packed_linears(inference)
        x = torch.randn(7, 96)
        got = inference(x)
    want = _exact(plain, x)
    assert float((got.double() - want).abs().max()) < 2e-6 * float(want.abs().max())
    assert "_packed_cache" in inference.__dict__
    assert list(inference.state_dict()) == ["weight", "bias"]  # the packed copy is not a part of it


def test_a_weight_replaced_is_packed_again() -> None:
    """``weight.data = ...`` moves no version counter; the address changes, and the tensor packed is held, so a new
    one cannot take its address (seen failing without holding it: stale outputs in most tries)."""
    plain, packed = _pair()
    x = torch.randn(7, 96)
    for seed in range(20):
        packed(x)
        packed.weight.data = torch.zeros(160, 96)  # the weight packed is let go (unless held)...
        packed.weight.data = torch.randn(160, 96, generator=torch.Generator().manual_seed(seed))  # ...and reused
        plain.weight.data = packed.weight.data.clone()
        want = _exact(plain, x)
        assert float((packed(x).double() - want).abs().max()) < 2e-6 * float(want.abs().max())


def test_biases_oneDNN_would_misread_and_other_settings_run_f_linear() -> None:
    _, packed = _pair()
    x = torch.randn(7, 96)
    packed.bias = nn.Parameter(torch.randn(320)[::2], requires_grad=False)  # strided
    assert not packed.bias.is_contiguous()
    assert torch.equal(packed(x), F.linear(x, packed.weight, packed.bias))  # F.linear's own sums
    packed.bias = nn.Parameter(torch.randn(160), requires_grad=False)
    with torch.backends.mkldnn.flags(enabled=False):
        assert torch.equal(packed(x), F.linear(x, packed.weight, packed.bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert packed(x).dtype == torch.bfloat16  # as nn.Linear under autocast
    assert "_packed_cache" not in packed.__dict__
    packed.bias.requires_grad_(True)
    packed(x).sum().backward()  # a bias being trained: F.linear, with its backward
    assert packed.bias.grad is not None and "_packed_cache" not in packed.__dict__


def test_copies_and_pickles_pack_again() -> None:
    _, packed = _pair()
    x = torch.randn(7, 96)
    want = packed(x)
    assert "_packed_cache" in packed.__dict__
    for copy_ in (copy.deepcopy(packed), pickle.loads(pickle.dumps(packed))):
        assert isinstance(copy_, PackedLinear) and "_packed_cache" not in copy_.__dict__
        assert torch.equal(copy_(x), want)
    assert "_packed_cache" in packed.__dict__  # the original keeps its own


def test_other_inputs_run_f_linear() -> None:
    _, packed = _pair()
    x64 = torch.randn(7, 96, dtype=torch.float64)
    packed.double()
    assert torch.equal(packed(x64), F.linear(x64, packed.weight, packed.bias))  # float64: F.linear's own sums
    assert "_packed_cache" not in packed.__dict__
    packed.float().requires_grad_(True)
    x = torch.randn(7, 96, requires_grad=True)
    packed(x).sum().backward()  # training: F.linear, with its backward
    assert packed.weight.grad is not None and x.grad is not None
    assert "_packed_cache" not in packed.__dict__


def test_kokoro_on_the_cpu_packs_its_bert(tmp_path: Path) -> None:
    pytest.importorskip("kokoro")
    import ggtts
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    tts = ggtts.load(str(write_tiny_gguf(tmp_path / "tiny.gguf", name="tiny")))
    model = tts.model  # type: ignore[attr-defined]
    packed = [n for n, m in model.named_modules() if isinstance(m, PackedLinear)]
    assert packed and all(n.startswith(("bert.", "bert_encoder")) for n in packed)
    assert "bert_encoder" in packed
    tts.synthesize("hˈI ðˈɛɹ.", phonemes=True)
    assert "_packed_cache" in model.bert_encoder.__dict__  # the products went through the packed weight
