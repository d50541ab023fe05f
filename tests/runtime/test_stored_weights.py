"""Linear layers computing from stored GGUF blocks (ggml's kernels) against the float maths of the same blocks.

The expected values come from ``gguf``'s own dequantizers (llama.cpp's Python package, independent of ggml's C
kernels), multiplied in float64. ggml converts the activations to the weight type's dot-product companion (Q8_0 or
Q8_1 blocks for the legacy types, Q8_K for the K-quants, F16 / BF16 for those), so the error allowed per type is
the rounding of that conversion: stated below, relative to the output's size.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest
import torch
from _blocks import quantize
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf import quants as gguf_quants

from ggtts.gguf import GGUFFile
from ggtts.ops import ggml_kernels
from ggtts.ops.stored_weights import StoredEmbedding, StoredLinear, stored_weights_plan, use_stored_weights

# relative error ||y - ref|| / ||ref|| allowed, from converting the activations; measured on AMD EPYC (AVX-512):
# F16 2.5e-4, BF16 1.8e-3, legacy types 5-6e-3, K-quants 7-9e-3 (a wrong block, scale or row is 1e-1 and more)
TOLERANCE = {
    T.F16: 1e-3,  # activations rounded to F16
    T.BF16: 6e-3,  # activations rounded to BF16 (8 bits of mantissa)
    T.Q8_0: 1.5e-2,  # activations as Q8_0 blocks
    T.Q5_0: 1.5e-2,
    T.Q5_1: 1.5e-2,  # activations as Q8_1 blocks
    T.Q4_0: 1.5e-2,
    T.Q4_1: 1.5e-2,
    T.Q4_K: 1.5e-2,  # activations as Q8_K blocks
    T.Q5_K: 1.5e-2,
    T.Q6_K: 1.5e-2,
}
N_OUT, N_IN = 48, 512  # the inner size holds whole K-quant super-blocks (256)


def widened(raw: np.ndarray, qtype: T) -> np.ndarray:
    if qtype == T.F16:
        return raw.view(np.float16).astype(np.float64)
    return gguf_quants.dequantize(raw, qtype).astype(np.float64)


def write_weights(path: Path, tensors: dict[str, tuple[np.ndarray, T]]) -> GGUFFile:
    w = GGUFWriter(path, "test")
    for name, (raw, qtype) in tensors.items():
        if qtype == T.F16:
            w.add_tensor(name, raw.view(np.float16))
        else:
            w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return GGUFFile(path)


@pytest.fixture(scope="module")
def weight() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N_OUT, N_IN)).astype(np.float32)


@pytest.mark.parametrize("qtype", list(TOLERANCE), ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 7])  # one decoding step; a prompt (ggml takes another path for M > 1)
def test_linear_matches_widened_weights(qtype: T, rows: int, weight: np.ndarray, tmp_path: Path) -> None:
    raw = quantize(weight, qtype)
    gguf = write_weights(tmp_path / "w.gguf", {"w": (raw, qtype)})
    assert gguf.info("w").type == qtype
    layer = StoredLinear(*_stored(gguf, "w"), bias=False)
    # x86 CPUs with AVX2 get Q4_0 and Q4_K interleaved (llama.cpp's repack): both layouts are what is tested here
    # (ARM CPUs interleave by other rules, not checked here)
    if platform.machine().lower() in ("x86_64", "amd64"):
        interleaved = qtype in ggml_kernels.REPACKED_TYPES and bool(ggml_kernels.kernels().ggml_cpu_has_avx2())
        assert layer.matmul.repacked == interleaved
    x = torch.from_numpy(np.random.default_rng(rows).standard_normal((rows, N_IN)).astype(np.float32))
    got = layer(x).double().numpy()
    ref = x.double().numpy() @ widened(raw, qtype).T
    error = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert error < TOLERANCE[qtype], f"{qtype.name}: relative error {error:.2e}"
    # and the weights really are the stored ones, not some float copy: a float32 product of the unquantized
    # weight differs from the stored type's by more than the kernel's own rounding for the low-bit types
    if qtype in (T.Q4_0, T.Q4_1):
        exact = x.double().numpy() @ weight.astype(np.float64).T
        assert np.linalg.norm(got - exact) / np.linalg.norm(exact) > 3 * error


@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q5_0, T.Q4_0], ids=lambda t: t.name)
def test_block_products_are_exact_for_rounded_activations(qtype: T, weight: np.ndarray, tmp_path: Path) -> None:
    """For weights whose activations ggml rounds to Q8_0 blocks, the result is the float product of the rounded
    operands (gguf's Q8_0 quantizer for the activations), to float32 summation noise: integer block sums are exact."""
    raw = quantize(weight, qtype)
    layer = StoredLinear(*_stored(write_weights(tmp_path / "w.gguf", {"w": (raw, qtype)}), "w"), bias=False)
    x = np.random.default_rng(3).standard_normal((5, N_IN)).astype(np.float32)
    x_q8 = gguf_quants.dequantize(gguf_quants.quantize(x, T.Q8_0), T.Q8_0).astype(np.float64)
    ref = x_q8 @ widened(raw, qtype).T
    got = layer(torch.from_numpy(x)).double().numpy()
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5


def _stored(gguf: GGUFFile, name: str) -> tuple[np.ndarray, T, int, int]:
    info = gguf.info(name)
    return gguf.raw(name).reshape(info.shape[0], -1), info.type, info.shape[0], info.shape[1]


def test_bias_leading_dimensions_and_dtype(weight: np.ndarray, tmp_path: Path) -> None:
    raw = quantize(weight, T.Q8_0)
    gguf = write_weights(tmp_path / "w.gguf", {"w": (raw, T.Q8_0)})
    layer = StoredLinear(*_stored(gguf, "w"), bias=True)
    with torch.no_grad():
        layer.bias.copy_(torch.arange(N_OUT, dtype=torch.float32))
    x = torch.randn(2, 3, N_IN, generator=torch.Generator().manual_seed(0))
    got = layer(x)
    assert got.shape == (2, 3, N_OUT)
    flat = layer(x.reshape(6, N_IN)).reshape(2, 3, N_OUT)
    torch.testing.assert_close(got, flat)
    no_bias = got - torch.arange(N_OUT, dtype=torch.float32)
    ref = torch.from_numpy(x.double().numpy() @ widened(raw, T.Q8_0).T).float()
    assert float((no_bias - ref).detach().norm() / ref.norm()) < TOLERANCE[T.Q8_0]
    assert layer(x.half()).dtype == torch.float16
    assert layer(torch.zeros(0, N_IN)).shape == (0, N_OUT)


def test_embedding_rows_and_tied_projection(weight: np.ndarray, tmp_path: Path) -> None:
    raw = quantize(weight, T.Q4_0)
    gguf = write_weights(tmp_path / "w.gguf", {"table": (raw, T.Q4_0)})
    table = StoredEmbedding(*_stored(gguf, "table"))
    ids = torch.tensor([[3, 0, 47], [3, 3, 1]])
    rows = table(ids)
    assert rows.shape == (2, 3, N_IN)
    full = widened(raw, T.Q4_0)
    np.testing.assert_array_equal(rows.double().numpy(), full[ids.numpy()])  # the same rows, exactly
    with pytest.raises(IndexError, match="out of range"):
        table(torch.tensor([N_OUT]))
    x = torch.randn(1, N_IN, generator=torch.Generator().manual_seed(1))
    ref = x.double().numpy() @ full.T
    got = table.as_linear()(x).double().numpy()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < TOLERANCE[T.Q4_0]


def test_swap_keeps_float32_and_foreign_layers(weight: np.ndarray, tmp_path: Path) -> None:
    raw = quantize(weight, T.Q8_0)
    f32 = np.ascontiguousarray(weight[:, :64])
    gguf = write_weights(tmp_path / "w.gguf", {"a.weight": (raw, T.Q8_0), "b.weight": (f32.view(np.uint8), T.F32)})
    module = torch.nn.Module()
    module.a = torch.nn.Linear(N_IN, N_OUT)
    module.b = torch.nn.Linear(64, N_OUT)
    module.c = torch.nn.Linear(N_IN, N_OUT)  # not in the file: the strict loader's business
    consumed = use_stored_weights(module, gguf)
    assert consumed == {"a.weight"}
    assert isinstance(module.a, StoredLinear) and module.a.bias is not None
    assert type(module.b) is torch.nn.Linear and type(module.c) is torch.nn.Linear


def test_plan_says_why_weights_are_widened(monkeypatch: pytest.MonkeyPatch) -> None:
    assert stored_weights_plan("cpu").stored
    assert not stored_weights_plan("cpu", requested=False).stored
    gpu = stored_weights_plan("cuda")
    assert not gpu.stored and "cuda" in (gpu.reason or "")
    monkeypatch.setattr(ggml_kernels, "_load", lambda: "ggml-python is not installed: install it")
    missing = stored_weights_plan("cpu")
    assert not missing.stored and "not installed" in (missing.reason or "")


def test_threads_take_turns_on_the_shared_pool(weight: np.ndarray, tmp_path: Path) -> None:
    """ggml keeps a running graph's state in its thread pool: two threads multiplying at once (two models served
    together) must each get their own, correct results."""
    import threading

    gguf = write_weights(
        tmp_path / "w.gguf", {"a": (quantize(weight, T.Q8_0), T.Q8_0), "b": (quantize(weight, T.Q4_0), T.Q4_0)}
    )
    layers = [StoredLinear(*_stored(gguf, name), bias=False) for name in ("a", "b")]
    xs = [torch.randn(3, N_IN, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    expected = [layer(x) for layer, x in zip(layers, xs, strict=True)]
    wrong: list[int] = []

    def work(i: int) -> None:
        for _ in range(200):
            if not torch.equal(layers[i](xs[i]), expected[i]):
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_stored_bytes_that_do_not_fit_the_shape_are_refused(weight: np.ndarray) -> None:
    raw = quantize(weight, T.Q8_0)
    with pytest.raises(ValueError, match=r"stored bytes for a 48 x 256 Q8_0 weight"):
        ggml_kernels.MatMul(raw, T.Q8_0, N_OUT, N_IN // 2)
    with pytest.raises(ValueError, match="contiguous bytes"):
        ggml_kernels.MatMul(raw[:, ::2], T.Q8_0, N_OUT, N_IN)
    layer = ggml_kernels.MatMul(raw, T.Q8_0, N_OUT, N_IN)
    with pytest.raises(ValueError, match="CPU kernels got a tensor on meta"):
        layer(torch.empty(1, N_IN, device="meta"))


def test_a_ggml_python_of_another_version_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """ggtts writes ggml-python's ctypes structures: another version is refused before anything is called."""
    import sys
    import types

    fake = types.ModuleType("ggml")
    fake.__version__ = "0.0.1"  # type: ignore[attr-defined]
    fake.ggml = types.ModuleType("ggml.ggml")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ggml", fake)
    monkeypatch.setitem(sys.modules, "ggml.ggml", fake.ggml)  # type: ignore[attr-defined]
    ggml_kernels._load.cache_clear()
    try:
        reason = ggml_kernels.unavailable_reason()
    finally:
        ggml_kernels._load.cache_clear()
        monkeypatch.undo()
        assert ggml_kernels.unavailable_reason() is None  # the real one loads again
    assert reason == (
        f"ggml-python 0.0.1 is installed; ggtts needs {ggml_kernels.GGML_PYTHON_VERSION}: {ggml_kernels.INSTALL_HINT}"
    )
