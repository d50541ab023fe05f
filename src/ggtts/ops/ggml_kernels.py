"""ggml's CPU matrix multiplication, called on weights exactly as a GGUF file stores them.

ggml is the tensor library under llama.cpp; its CPU kernels multiply F16, BF16, the legacy block types (Q4_0 ..
Q8_0), the K-quants and the i-quants without widening the weights to float32 (activations are converted to the
weight type's companion format, e.g. Q8_0 blocks for Q4_0 weights, as llama.cpp does). We reach them through
``ggml-python`` (the ``quant`` extra), which builds ggml from source for the machine it installs on, so the
kernels use the instructions this CPU has (AVX2, AVX-512, VNNI) and no other.

One :class:`MatMul` is one ``y = x @ W.T`` with ``W`` fixed and the rows of ``x`` varying: it builds a tiny ggml
graph per row count once, then each call only points the graph at the input and output buffers and runs it on a
shared thread pool sized like torch's (``torch.get_num_threads()``).
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import torch
from gguf import GGMLQuantizationType

__all__ = ["KernelsUnavailable", "MatMul", "kernels", "multiplies", "unavailable_reason"]

INSTALL_HINT = "install ggtts's quant extra (`pip install 'ggtts[quant]'`, which builds ggml for this machine)"
GGML_PYTHON_VERSION = "0.0.45"  # the pin in pyproject.toml's quant extra
GRAPH_NODES = 4  # one mul_mat and its inputs
GRAPHS_PER_WEIGHT = 8  # row counts kept per weight (decoding uses one; prompts add a few)
# ggml's spin level between graphs when it is built with its own thread pool (0: its threads sleep at once, leaving
# the cores to torch's work in between); an OpenMP build of ggml (the default) leaves waiting to the OpenMP runtime
THREAD_POLL = 0
GGML_STATUS_SUCCESS = 0
REPACK_BUFFER_NAME = b"CPU_REPACK"
GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR = 3, 4
_LOG_CALLBACK: Any = None
# types whose interleaved layouts (where ggml has one for the CPU) the tests cover; ggml also interleaves IQ4_NL,
# MXFP4 and Q2_K on some CPUs, which are left as stored here
REPACKED_TYPES = frozenset({GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_K})
# float32 weights stay with torch (already the compute type); F64 and the integer types are never weights
_NOT_MULTIPLIED = frozenset(GGMLQuantizationType[name] for name in ("F32", "F64", "I8", "I16", "I32", "I64"))


K = TypeVar("K")
V = TypeVar("V")


class KernelsUnavailable(RuntimeError):
    """ggml's kernels cannot be used here (not installed, or the library does not load)."""


@functools.cache
def _load() -> ModuleType | str:
    """The ggml-python module, initialised; or why it cannot be had."""
    global _LOG_CALLBACK
    try:
        import ggml  # type: ignore[import-not-found,unused-ignore]
        from ggml import ggml as lib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return f"ggml-python is not installed: {INSTALL_HINT}"
    except (OSError, RuntimeError) as e:  # the shared library is there but does not load
        return f"ggml's library does not load ({e}): reinstall ggml-python on this machine"
    version = getattr(ggml, "__version__", "unknown")
    if version != GGML_PYTHON_VERSION:  # its ctypes structures must match the ones this module writes
        return f"ggml-python {version} is installed; ggtts needs {GGML_PYTHON_VERSION}: {INSTALL_HINT}"
    callback = lib.ggml_log_callback(_log)
    lib.ggml_log_set(callback, None)
    _LOG_CALLBACK = callback  # kept referenced: ggml calls it for the life of the process
    lib.ggml_cpu_init()
    return lib


def _log(level: int, text: bytes | None, _user_data: Any) -> None:
    """ggml's messages: its warnings and errors go to standard error, its debug and info lines (one per repacked
    tensor) nowhere."""
    if text and level in (GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR):
        sys.stderr.write(f"ggml: {text.decode(errors='replace')}")


def unavailable_reason() -> str | None:
    """None when ggml's kernels are usable, else one sentence saying why not."""
    loaded = _load()
    return loaded if isinstance(loaded, str) else None


def kernels() -> ModuleType:
    loaded = _load()
    if isinstance(loaded, str):
        raise KernelsUnavailable(loaded)
    return loaded


@functools.cache
def multiplies(qtype: GGMLQuantizationType) -> bool:
    """Whether ggml's CPU backend multiplies weights stored as ``qtype`` directly (F32 is left to torch)."""
    if qtype in _NOT_MULTIPLIED:
        return False
    if unavailable_reason() is not None:
        return False
    lib = kernels()
    try:
        traits = lib.ggml_get_type_traits_cpu(int(qtype)).contents
    except (ValueError, AttributeError):
        return False
    return bool(traits.vec_dot)


def new_context(owner: object, size: int) -> Any:
    """A ggml context of ``size`` bytes for tensor and graph descriptions only (their data lives elsewhere),
    freed when ``owner`` is."""
    lib = kernels()
    ctx = lib.ggml_init(lib.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True))
    if not ctx:
        raise KernelsUnavailable("ggml could not create a context")
    weakref.finalize(owner, lib.ggml_free, ctx)
    return ctx


def cached(graphs: OrderedDict[K, V], key: K, build: Callable[[], V], keep: int) -> V:
    """``graphs[key]``, built on a miss; beyond ``keep`` entries the least recently used one goes."""
    graph = graphs.get(key)
    if graph is None:
        graph = graphs[key] = build()
        if len(graphs) > keep:
            graphs.popitem(last=False)
    else:
        graphs.move_to_end(key)
    return graph


@dataclass(frozen=True)
class _Pool:
    address: int
    lock: threading.Lock  # ggml keeps the running graph's state in its pool: one graph at a time per pool


class _ThreadPools:
    """One ggml thread pool per thread count, shared by every weight and graph (created on first use)."""

    def __init__(self) -> None:
        self._pools: dict[int, _Pool] = {}
        self._lock = threading.Lock()

    def get(self, n_threads: int) -> _Pool:
        with self._lock:
            pool = self._pools.get(n_threads)
            if pool is None:
                lib = kernels()
                params = lib.ggml_threadpool_params_default(n_threads)
                params.poll = THREAD_POLL
                address = lib.ggml_threadpool_new(ctypes.byref(params))
                if not address:
                    raise KernelsUnavailable(f"ggml could not start a pool of {n_threads} threads")
                pool = self._pools[n_threads] = _Pool(int(address), threading.Lock())
            return pool


_POOLS = _ThreadPools()


def compute(graph: Any, plans: dict[int, Any], n_threads: int) -> None:
    """Run ``graph`` on the shared pool of ``n_threads`` threads (``plans`` caches its plan per thread count).

    Graphs from any thread (two models served at once, a torch-path call beside a graph-path one) take turns on a
    pool: ggml keeps a running graph's state in it."""
    lib = kernels()
    pool = _POOLS.get(n_threads)
    plan = plans.get(n_threads)
    if plan is None:
        plan = plans[n_threads] = lib.ggml_graph_plan(graph, n_threads, pool.address)
    with pool.lock:
        plan.work_data = ctypes.cast(_WORK.at_least(plan.work_size), ctypes.POINTER(ctypes.c_uint8))
        status = lib.ggml_graph_compute(graph, ctypes.byref(plan))
    if status != GGML_STATUS_SUCCESS:
        raise RuntimeError(f"ggml could not compute a graph (status {status})")


class _WorkBuffer(threading.local):
    """Scratch memory for ggml (activations converted to the weight's dot-product format), one per thread."""

    def __init__(self) -> None:
        self.array = np.empty(0, dtype=np.uint8)

    def at_least(self, n_bytes: int) -> int:
        if self.array.nbytes < n_bytes:
            self.array = np.empty(max(n_bytes, 2 * self.array.nbytes), dtype=np.uint8)
        return int(self.array.ctypes.data)


_WORK = _WorkBuffer()


class _Graph:
    """``out (m, N) = x (m, K) @ W.T`` as a ggml graph whose input and output pointers are set per call."""

    def __init__(self, weight: Any, n_in: int, rows: int) -> None:
        lib = kernels()
        ctx = new_context(self, 2 * lib.ggml_tensor_overhead() + lib.ggml_graph_overhead_custom(GRAPH_NODES, False))
        self.x = lib.ggml_new_tensor_2d(ctx, lib.GGML_TYPE_F32, n_in, rows).contents
        out_ptr = lib.ggml_mul_mat(ctx, weight, ctypes.pointer(self.x))  # the weight lives in MatMul's context
        self.out = out_ptr.contents
        self.graph = lib.ggml_new_graph_custom(ctx, GRAPH_NODES, False)
        lib.ggml_build_forward_expand(self.graph, out_ptr)
        self._plans: dict[int, Any] = {}

    def run(self, x_ptr: int, out_ptr: int, n_threads: int) -> None:
        self.x.data, self.out.data = x_ptr, out_ptr
        compute(self.graph, self._plans, n_threads)


def cpu_device() -> int:
    lib = kernels()
    return int(lib.ggml_backend_reg_dev_get(lib.ggml_backend_cpu_reg(), 0))


@functools.cache
def cpu_buffer_type() -> int:
    """ggml's plain CPU buffer type (through the device: ggml-python's ``ggml_backend_cpu_buffer_type`` binding
    declares a result type that truncates the pointer)."""
    return int(kernels().ggml_backend_dev_buffer_type(cpu_device()))


@functools.cache
def _repack_buffer_type() -> int | None:
    """ggml's CPU_REPACK buffer type: weights copied into it are interleaved for this CPU's widest kernels (Q4_0,
    Q4_K, IQ4_NL with AVX2 or AVX-512 on x86, as llama.cpp does at load); None where this ggml has none."""
    lib = kernels()
    reg = lib.ggml_backend_cpu_reg()
    address = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return None
    extra_bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)
    bufts = extra_bufts(cpu_device())
    i = 0
    while bufts[i]:
        if lib.ggml_backend_buft_name(bufts[i]) == REPACK_BUFFER_NAME:
            return int(bufts[i])
        i += 1
    return None


class _Weight:
    """The weight as a ggml tensor: repacked into a buffer of ggml's when ggml has a faster layout for its type,
    shape and this CPU (``repacked``), else pointing at the stored bytes themselves."""

    def __init__(self, raw: np.ndarray, qtype: GGMLQuantizationType, n_out: int, n_in: int) -> None:
        lib = kernels()
        self.tensor = lib.ggml_new_tensor_2d(new_context(self, lib.ggml_tensor_overhead()), int(qtype), n_in, n_out)
        if lib.ggml_nbytes(self.tensor) != raw.nbytes:
            raise ValueError(f"{raw.nbytes} stored bytes for a {n_out} x {n_in} {qtype.name} weight")
        self.raw: np.ndarray | None = raw
        self.repacked = self._repack(lib, raw, qtype)
        if self.repacked:
            self.raw = None  # ggml holds its own interleaved copy
        else:
            self.tensor.contents.data = raw.ctypes.data

    def _repack(self, lib: ModuleType, raw: np.ndarray, qtype: GGMLQuantizationType) -> bool:
        buft = _repack_buffer_type()
        if buft is None or qtype not in REPACKED_TYPES:
            return False
        size = lib.ggml_nbytes(self.tensor)
        buffer = lib.ggml_backend_buft_alloc_buffer(buft, size)
        if not buffer:
            return False
        free = weakref.finalize(self, lib.ggml_backend_buffer_free, buffer)
        status = lib.ggml_backend_tensor_alloc(buffer, self.tensor, lib.ggml_backend_buffer_get_base(buffer))
        if (
            status != GGML_STATUS_SUCCESS or not self.tensor.contents.extra
        ):  # ggml has no interleaved layout for this type, shape or CPU
            self.tensor.contents.buffer = None
            self.tensor.contents.data = None
            free()
            return False
        lib.ggml_backend_tensor_set(self.tensor, raw.ctypes.data, 0, size)
        return True


class MatMul:
    """``x @ W.T`` for a weight ``W`` of ``n_out`` rows and ``n_in`` columns held as stored bytes ``raw``.

    ``raw`` is typically a read-only view of the memory-mapped file: the weight costs no memory beyond the file's
    pages, or, where ggml repacks it (``repacked``), an interleaved copy of the same size. Inputs are float32
    ``(..., n_in)``; the result is float32 ``(..., n_out)``.
    """

    def __init__(self, raw: np.ndarray, qtype: GGMLQuantizationType, n_out: int, n_in: int) -> None:
        if not multiplies(qtype):
            reason = unavailable_reason()
            raise KernelsUnavailable(reason or f"ggml does not multiply {qtype.name} weights")
        if not raw.flags.c_contiguous:
            raise ValueError("stored weights must be contiguous bytes")
        self.qtype, self.n_out, self.n_in = qtype, n_out, n_in
        self._weight = _Weight(raw, qtype, n_out, n_in)
        self._graphs: OrderedDict[int, _Graph] = OrderedDict()
        self._lock = threading.Lock()  # a graph's pointers are set then used: one call at a time per weight

    @property
    def repacked(self) -> bool:
        return self._weight.repacked

    @property
    def tensor(self) -> Any:
        """The weight as a ggml tensor (for graphs that use it: :mod:`ggtts.models.layers.ggml_stack`)."""
        return self._weight.tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            raise ValueError(f"ggml's CPU kernels got a tensor on {x.device}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.n_in).to(torch.float32).contiguous()  # (M, K); no copy when it already is
        rows = x2.shape[0]
        out = torch.empty(rows, self.n_out, dtype=torch.float32)
        if rows:
            with self._lock:
                graph = cached(
                    self._graphs, rows, lambda: _Graph(self._weight.tensor, self.n_in, rows), GRAPHS_PER_WEIGHT
                )
                graph.run(x2.data_ptr(), out.data_ptr(), torch.get_num_threads())
        return out.reshape(*lead, self.n_out)
