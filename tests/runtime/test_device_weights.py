"""Weights kept on a GPU as the file stores them (:mod:`ggtts.ops.device_weights`), run here on the CPU: the same
torch code. The expected values are ``gguf``'s own dequantizers (llama.cpp's Python package): a stored weight
widened for a product must be exactly the weight a load would widen, so a model gives the widened model's outputs
while holding only the file's bytes."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _blocks import quantize
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf import quants as gguf_quants
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.ops import device_weights
from ggtts.ops.device_weights import (
    DEVICE_TYPES,
    DeviceStoredEmbedding,
    DeviceStoredExperts,
    DeviceStoredLinear,
    DeviceStoredWeight,
    use_device_experts,
    use_device_weights,
)
from ggtts.ops.stored_experts import Experts, gathers_rows
from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights

N_OUT, N_IN = 40, 256  # eight 32-value blocks a row, or one K-quant super-block


def _stored(w: np.ndarray, qtype: T) -> np.ndarray:
    return quantize(w, qtype)


def _widened(raw: np.ndarray, qtype: T) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(gguf_quants.dequantize(raw, qtype), dtype=np.float32))


@pytest.fixture(scope="module")
def weight() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N_OUT, N_IN)).astype(np.float32)


@pytest.mark.parametrize("qtype", DEVICE_TYPES, ids=lambda t: t.name)
def test_widened_weights_are_the_dequantizers_and_cost_the_files_bytes(qtype: T, weight: np.ndarray) -> None:
    raw = _stored(weight, qtype)
    stored = DeviceStoredWeight(raw, qtype, N_OUT, N_IN)
    want = _widened(raw, qtype)
    assert torch.equal(stored.widened(torch.float32), want)
    assert torch.equal(stored.widened(torch.bfloat16), want.to(torch.bfloat16))  # through float32, as a load does
    assert torch.equal(stored.widened(torch.float32, 7, 19), want[7:19])
    assert stored.stored_bytes() == raw.nbytes
    extra = 0 if stored.grid is None else stored.grid.nbytes  # IQ4's 16 values
    assert sum(b.numel() * b.element_size() for b in stored.buffers()) == raw.nbytes + extra
    stored.to(torch.float64)  # a model's dtype change leaves the blocks (and the IQ4 table) as they are
    assert all(not b.is_floating_point() for b in stored.buffers())
    assert torch.equal(stored.widened(torch.float32), want)
    x = torch.randn(3, 5, N_IN)
    linear = DeviceStoredLinear(raw, qtype, N_OUT, N_IN, bias=True)
    nn.init.normal_(linear.bias)
    assert torch.equal(linear(x), F.linear(x, want, linear.bias))
    table = DeviceStoredEmbedding(raw, qtype, N_OUT, N_IN)
    ids = torch.tensor([[0, 39, 7], [7, 3, 1]])
    assert torch.equal(table(ids), want[ids])
    assert torch.equal(table.as_linear()(x), F.linear(x, want))


def test_a_large_weight_is_widened_a_band_at_a_time(weight: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _stored(weight, T.Q8_0)
    stored = DeviceStoredWeight(raw, T.Q8_0, N_OUT, N_IN)
    x = torch.randn(2, N_IN)
    whole = stored(x)
    monkeypatch.setattr(device_weights, "CHUNK_ELEMENTS", 7 * N_IN)  # bands of 7 rows (the last of 5)
    assert stored.bands()[-1] == (35, 40) and len(stored.bands()) == 6
    banded = stored(x)  # the same products, summed in another blocking by the matrix kernel (measured 3e-6)
    torch.testing.assert_close(banded, whole, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(banded, F.linear(x, _widened(raw, T.Q8_0)), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q4_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_expert_stacks_widen_the_picked_experts(qtype: T) -> None:
    """A decoding step (one row: its k experts gathered) and a prompt (rows grouped by expert) give what the float
    stack gives."""
    n_expert, n_out = 6, 16
    stack = np.random.default_rng(1).standard_normal((n_expert, n_out, N_IN)).astype(np.float32)
    raw = _stored(stack.reshape(n_expert * n_out, N_IN), qtype)
    stored = DeviceStoredExperts(raw, qtype, n_expert, n_out, N_IN)
    floats = Experts(n_expert, n_out, N_IN)
    floats.weight.data = _widened(raw, qtype).reshape(n_expert, n_out, N_IN)
    floats.gather = True
    step_ids = torch.tensor([[4, 0, 2]])
    x = torch.randn(1, 1, N_IN)
    assert torch.equal(stored(x, step_ids), floats(x, step_ids))
    prompt_ids = torch.tensor([[4, 0, 2], [1, 4, 5], [0, 3, 2], [5, 1, 4]])
    xs = torch.randn(4, 3, N_IN)
    floats.gather = False
    assert torch.equal(stored(xs, prompt_ids), floats(xs, prompt_ids))


@pytest.mark.parametrize("stored", [False, True], ids=["float", "q8_0"])
def test_a_prompt_through_every_expert_gives_the_loops_products(stored: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a GPU runs for a short prompt (every row through every expert, the picks kept: no host round trip per
    expert) against the loop over the experts hit, for inputs shared by a row's picks and one per pick; a stored
    stack widened a band of experts at a time."""
    n_expert, n_out, n_in = 6, 16, 96  # three Q8_0 blocks a row, as before the K-quants widened N_IN
    stack = np.random.default_rng(2).standard_normal((n_expert * n_out, n_in)).astype(np.float32)
    raw = _stored(stack, T.Q8_0)
    experts: nn.Module
    if stored:
        monkeypatch.setattr(device_weights, "CHUNK_ELEMENTS", 4 * n_out * n_in)  # bands of 4 experts, then 2
        experts = DeviceStoredExperts(raw, T.Q8_0, n_expert, n_out, n_in)
    else:
        experts = Experts(n_expert, n_out, n_in)
        experts.weight.data = _widened(raw, T.Q8_0).reshape(n_expert, n_out, n_in)
    ids = torch.tensor([[4, 0, 2], [1, 4, 5], [0, 3, 2], [5, 1, 4], [3, 3, 0]])
    g = torch.Generator().manual_seed(3)
    for x in (torch.randn(5, 1, n_in, generator=g), torch.randn(5, 3, n_in, generator=g)):
        experts.dense = False
        loop = experts(x, ids)
        experts.dense = True
        torch.testing.assert_close(experts(x, ids), loop, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stored", [False, True], ids=["float", "q8_0"])
def test_a_few_rows_picks_gathered_give_the_loops_products(stored: bool) -> None:
    """Where the experts are gathered (a GPU's static steps), a few rows (a GPU's lanes of a few streams) have
    their picks gathered while that moves fewer bytes than every expert once (``gathers_rows``), with no host
    round trip: the loop's products, for inputs shared by a row's picks and one per pick."""
    n_expert, n_out, n_in, k = 40, 16, 96, 3
    stack = np.random.default_rng(4).standard_normal((n_expert * n_out, n_in)).astype(np.float32)
    raw = _stored(stack, T.Q8_0)
    loop = Experts(n_expert, n_out, n_in)
    loop.weight.data = _widened(raw, T.Q8_0).reshape(n_expert, n_out, n_in)
    loop.dense = False
    experts: nn.Module = DeviceStoredExperts(raw, T.Q8_0, n_expert, n_out, n_in) if stored else copy.deepcopy(loop)
    experts.gather = True
    experts.dense = None
    assert gathers_rows(4, k, n_expert) and not gathers_rows(5, k, n_expert)
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, n_expert, (4, k), generator=g)
    for x in (torch.randn(4, 1, n_in, generator=g), torch.randn(4, k, n_in, generator=g)):
        with mock.patch.object(torch, "unique", side_effect=AssertionError("a host round trip")):
            got = experts(x, ids)
        torch.testing.assert_close(got, loop(x, ids), rtol=1e-5, atol=1e-5)


def _file(path: Path, weight: np.ndarray) -> GGUFFile:
    w = GGUFWriter(path, "test")
    w.add_tensor("a.weight", _stored(weight, T.Q4_0), raw_dtype=T.Q4_0)
    w.add_tensor("b.weight", weight.astype(np.float16))  # F16: widened by the loader (speed over half the memory)
    w.add_tensor("c.weight", _stored(weight, T.Q8_0), raw_dtype=T.Q8_0)
    w.add_tensor("d.weight", _stored(weight, T.Q4_K), raw_dtype=T.Q4_K)
    w.add_tensor("f.weight", _stored(weight, T.TQ2_0), raw_dtype=T.TQ2_0)  # ternary: widened by the loader
    stack = np.concatenate([weight, weight])  # two experts
    w.add_tensor("e.weight", _stored(stack, T.Q8_0).reshape(2, N_OUT, -1), raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile(path)


def test_a_gpus_plan_swaps_block_layers_only(weight: np.ndarray, tmp_path: Path) -> None:
    gguf = _file(tmp_path / "w.gguf", weight)
    model = nn.Module()
    model.a, model.b, model.c = nn.Linear(N_IN, N_OUT), nn.Linear(N_IN, N_OUT), nn.Embedding(N_OUT, N_IN)
    model.d, model.f = nn.Linear(N_IN, N_OUT), nn.Linear(N_IN, N_OUT)
    model.e = Experts(2, N_OUT, N_IN)
    plan = stored_weights_plan("cuda")
    assert plan.on_device and not plan.stored and plan.device == "cuda" and "kept as stored" in (plan.reason or "")
    plan = dataclasses.replace(plan, device="cpu")  # the GPU's plan, its weights kept on the CPU here
    assert not stored_weights_plan("cuda", requested=False).on_device
    consumed = use_planned_weights(plan, model, gguf) | use_device_experts(model, gguf)
    assert consumed == {"a.weight", "c.weight", "d.weight", "e.weight"}
    assert isinstance(model.a, DeviceStoredLinear) and isinstance(model.c, DeviceStoredEmbedding)
    assert isinstance(model.d, DeviceStoredLinear) and model.d.stored.qtype == T.Q4_K
    assert isinstance(model.b, nn.Linear) and isinstance(model.f, nn.Linear)
    assert isinstance(model.e, DeviceStoredExperts)
    assert model.a.bias is not None  # the bias stays a parameter, for the loader
    model.to(torch.bfloat16)
    assert model.a.stored.qs.dtype == torch.uint8 and model.c(torch.tensor([1])).dtype == torch.bfloat16
    assert use_device_weights(nn.Linear(3, 4), gguf) == set()  # nothing of the file's
    with pytest.raises(ValueError, match="F16 weights are not kept on a device"):
        DeviceStoredWeight(weight.astype(np.float16), T.F16, N_OUT, N_IN)
