"""Weights written as GGUF blocks for the runtime tests: by gguf's quantizers (llama.cpp's Python port of ggml's
reference code) where it has one, else by ggml's own (the K-quants, IQ4), through ggtts's kernels library."""

from __future__ import annotations

import ctypes

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from ggtts.ops import ggml_kernels


def quantize(w: np.ndarray, qtype: T) -> np.ndarray:
    """Stored bytes of the 2-D ``w`` as ``qtype`` (F16 as its halves' bytes)."""
    if qtype == T.F16:
        return w.astype(np.float16).view(np.uint8)
    traits = gguf_quants._type_traits.get(qtype)
    if traits is not None and "quantize_blocks" in vars(traits):
        return gguf_quants.quantize(w, qtype)
    lib = ggml_kernels.kernels()
    n_out, n_in = w.shape
    out = np.empty((n_out, lib.ggml_row_size(int(qtype), n_in)), dtype=np.uint8)
    src = np.ascontiguousarray(w, dtype=np.float32)
    lib.ggml_quantize_chunk(
        int(qtype),
        src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        out.ctypes.data_as(ctypes.c_void_p),
        0,
        n_out,
        n_in,
        None,
    )
    return out
