"""GGUF blocks decoded by torch (:mod:`ggtts.ops.block_decode`, what a GPU runs to widen a stored weight per
product) against ``gguf``'s own dequantizers (llama.cpp's Python package, a port of ggml's reference code): the
same float32 numbers, to the bit, for every type covered, on blocks of every bit pattern (random bytes, the scales
random finite halves) and on blocks a quantizer wrote (ggml's own, through ggtts's kernels library, for the
K-quants and IQ4; gguf's for the legacy types)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _blocks import quantize
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from ggtts.ops.block_decode import DECODED_TYPES, LAYOUTS, decode, grid, split

ROWS, COLS = 6, 512  # two K-quant super-blocks a row, sixteen 32-value blocks


def _random_blocks(qtype: T, rng: np.random.Generator) -> np.ndarray:
    """``(ROWS, bytes)`` of random blocks, each float16 field a random finite scale (signs included)."""
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (ROWS, COLS // block, size), dtype=np.uint8)
    start = 0
    for field in LAYOUTS[qtype]:
        if field.kind == "f16":
            halves = (rng.standard_normal(raw.shape[:2]) * 0.05).astype(np.float16)
            raw[:, :, start : start + 2] = halves.view(np.uint8).reshape(*raw.shape[:2], 2)
        start += field.size
    return raw.reshape(ROWS, -1)


def _quantized(qtype: T, rng: np.random.Generator) -> np.ndarray:
    return quantize(rng.standard_normal((ROWS, COLS)).astype(np.float32), qtype)


def _want(raw: np.ndarray, qtype: T) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(gguf_quants.dequantize(raw, qtype), dtype=np.float32))


def _decoded(raw: np.ndarray, qtype: T, rows: slice | torch.Tensor = slice(None)) -> torch.Tensor:
    fields = {name: torch.from_numpy(a) for name, a in split(raw, qtype, ROWS, COLS).items()}
    picked = {n: t[rows] if isinstance(rows, slice) else t.index_select(0, rows) for n, t in fields.items()}
    return decode(qtype, picked, COLS, grid(qtype))


@pytest.mark.parametrize("qtype", DECODED_TYPES, ids=lambda t: t.name)
def test_every_bit_pattern_decodes_to_gguf_dequantize(qtype: T) -> None:
    raw = _random_blocks(qtype, np.random.default_rng(int(qtype)))
    want = _want(raw, qtype)
    got = _decoded(raw, qtype)
    assert got.dtype == torch.float32 and got.shape == (ROWS, COLS)
    assert torch.equal(got, want)
    assert torch.equal(_decoded(raw, qtype, slice(2, 5)), want[2:5])
    ids = torch.tensor([5, 0, 3, 3])
    assert torch.equal(_decoded(raw, qtype, ids), want[ids])
    fields = split(raw, qtype, ROWS, COLS)
    assert sum(a.nbytes for a in fields.values()) == raw.nbytes  # the stored bytes, no more


@pytest.mark.parametrize("qtype", DECODED_TYPES, ids=lambda t: t.name)
def test_quantized_weights_decode_to_gguf_dequantize(qtype: T) -> None:
    raw = _quantized(qtype, np.random.default_rng(100 + int(qtype)))
    assert torch.equal(_decoded(raw, qtype), _want(raw, qtype))


def test_types_it_does_not_decode_are_named() -> None:
    raw = np.zeros((ROWS, COLS * 2), np.uint8)
    with pytest.raises(ValueError, match="F16 blocks are not decoded by torch"):
        split(raw, T.F16, ROWS, COLS)
    with pytest.raises(ValueError, match="Q4_K rows of 96 values are not whole blocks of 256"):
        split(np.zeros((ROWS, 54), np.uint8), T.Q4_K, ROWS, 96)


@pytest.mark.parametrize("qtype", DECODED_TYPES, ids=lambda t: t.name)
def test_a_decode_traces_whole(qtype: T) -> None:
    """What a captured CUDA graph or ``torch.compile`` needs: one graph, no break (no value read on the host, no
    tensor made from host data), for a band of rows and for gathered ones."""
    import torch._dynamo as dynamo

    raw = _random_blocks(qtype, np.random.default_rng(7))
    fields = {name: torch.from_numpy(a) for name, a in split(raw, qtype, ROWS, COLS).items()}
    table, ids = grid(qtype), torch.tensor([4, 1])

    def band() -> torch.Tensor:
        return decode(qtype, {n: t[1:4] for n, t in fields.items()}, COLS, table)

    def gathered() -> torch.Tensor:
        return decode(qtype, {n: t.index_select(0, ids) for n, t in fields.items()}, COLS, table)

    dynamo.reset()
    for traced in (band, gathered):
        explained = dynamo.explain(traced)()
        assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    assert torch.equal(torch.compile(gathered, backend="eager")(), _want(raw, qtype)[ids])
