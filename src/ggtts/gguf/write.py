"""GGUF writer shared by every converter: tensor type choice, metadata, and an atomic write.

The file is written under a temporary name next to the target and renamed at the end, so a failed conversion
never leaves a half-written file under the requested name.

A tensor may be given as a :class:`Deferred` (its shape, and how to get it): it is read, encoded and written when
the file is written, one at a time, and dropped at once. Converters of large checkpoints (the 30B Qwen3-Omni
thinker is 60 GB in bfloat16, 120 GB as float32) pass every tensor so, and convert in the memory of one tensor
instead of the whole model's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
from gguf import quants as gguf_quants

from ggtts.errors import ConversionError
from ggtts.fsutil import atomic_output
from ggtts.gguf import keys

if TYPE_CHECKING:
    import torch

# Tensors with fewer elements than this stay F32: quantizing them saves nothing and costs accuracy.
MIN_QUANT_ELEMENTS = 1024


class OutType(StrEnum):
    """The ``--type`` choices of the converters: llama.cpp's legacy block types, quantized by ``gguf``'s port of
    ggml's reference quantizers (the same bytes ``llama-quantize`` writes for these types)."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    Q8_0 = "q8_0"
    Q5_1 = "q5_1"
    Q5_0 = "q5_0"
    Q4_1 = "q4_1"
    Q4_0 = "q4_0"

    @property
    def ggml_type(self) -> GGMLQuantizationType:
        return _GGML_TYPE[self]

    @property
    def file_type(self) -> LlamaFileType:
        return _FILE_TYPE[self]


_GGML_TYPE = {
    OutType.F32: GGMLQuantizationType.F32,
    OutType.F16: GGMLQuantizationType.F16,
    OutType.BF16: GGMLQuantizationType.BF16,
    OutType.Q8_0: GGMLQuantizationType.Q8_0,
    OutType.Q5_1: GGMLQuantizationType.Q5_1,
    OutType.Q5_0: GGMLQuantizationType.Q5_0,
    OutType.Q4_1: GGMLQuantizationType.Q4_1,
    OutType.Q4_0: GGMLQuantizationType.Q4_0,
}
_FILE_TYPE = {
    OutType.F32: LlamaFileType.ALL_F32,
    OutType.F16: LlamaFileType.MOSTLY_F16,
    OutType.BF16: LlamaFileType.MOSTLY_BF16,
    OutType.Q8_0: LlamaFileType.MOSTLY_Q8_0,
    OutType.Q5_1: LlamaFileType.MOSTLY_Q5_1,
    OutType.Q5_0: LlamaFileType.MOSTLY_Q5_0,
    OutType.Q4_1: LlamaFileType.MOSTLY_Q4_1,
    OutType.Q4_0: LlamaFileType.MOSTLY_Q4_0,
}


# Below 8 bits: for autoregressive language models (their linear layers run as stored); convolutional vocoders are
# widened to float at load and lose quality for no speed, so their converters refuse these types.
LOW_BIT_TYPES = frozenset({OutType.Q5_1, OutType.Q5_0, OutType.Q4_1, OutType.Q4_0})


def refuse_low_bit(out_type: OutType | str, what: str) -> None:
    """ConversionError when ``out_type`` is one of :data:`LOW_BIT_TYPES` for a model that should not use them."""
    if OutType(out_type) in LOW_BIT_TYPES:
        raise ConversionError(
            f"--type {OutType(out_type).value} is not offered for {what} (a convolutional model: it would lose "
            "quality and gain no speed); use q8_0, bf16, f16 or f32"
        )


def choose_type(name: str, shape: tuple[int, ...], out_type: OutType) -> GGMLQuantizationType:
    """The stored type of one tensor under ``out_type``.

    Norms, biases and other 1-D tensors, tiny tensors, and tensors whose inner dimension is not a multiple of the
    block size stay F32.
    """
    target = out_type.ggml_type
    if target == GGMLQuantizationType.F32:
        return target
    numel = int(np.prod(shape)) if shape else 1
    if len(shape) < 2 or numel < MIN_QUANT_ELEMENTS or keys.is_norm_or_bias(name):
        return GGMLQuantizationType.F32
    block = gguf_quants.GGML_QUANT_SIZES[target][0]
    if shape[-1] % block:
        return GGMLQuantizationType.F32
    return target


def encode_tensor(data: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """``data`` (float) in the storage form of ``qtype``: a float array, or the raw bytes of quantized blocks."""
    data = np.ascontiguousarray(data, dtype=np.float32)
    if qtype == GGMLQuantizationType.F32:
        return data
    if qtype == GGMLQuantizationType.F16:
        return data.astype(np.float16)
    return gguf_quants.quantize(data, qtype)


@dataclass(frozen=True)
class Deferred:
    """A tensor of known ``shape`` that ``produce()`` reads or computes when the file is written."""

    shape: tuple[int, ...]
    produce: Callable[[], torch.Tensor | np.ndarray]


def shape_of(tensors: Mapping[str, Any], name: str) -> tuple[int, ...]:
    """The shape of ``tensors[name]`` without reading it where the mapping can tell (a lazy checkpoint's
    ``shape(name)``); otherwise from the tensor."""
    shape = getattr(tensors, "shape", None)
    if callable(shape):
        return tuple(shape(name))
    return tuple(tensors[name].shape)


def deferred(tensors: Mapping[str, Any], name: str) -> Deferred:
    """``tensors[name]``, read only when the file is written."""
    return Deferred(shape_of(tensors, name), lambda: tensors[name])


def _as_float_array(tensor: torch.Tensor | np.ndarray) -> np.ndarray:
    if not isinstance(tensor, np.ndarray):  # a torch tensor
        return tensor.detach().float().cpu().numpy()
    return np.asarray(tensor, dtype=np.float32)


class _Pending:
    """What ``gguf.GGUFWriter`` holds for a :class:`Deferred` tensor until it writes it: the stored form's shape,
    dtype and size up front, the bytes from ``tofile``."""

    def __init__(self, name: str, tensor: Deferred, qtype: GGMLQuantizationType) -> None:
        self.name, self.source, self.qtype = name, tensor, qtype
        if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            self.dtype = np.dtype(np.float32 if qtype == GGMLQuantizationType.F32 else np.float16)
            self.shape = tensor.shape
        else:
            self.dtype = np.dtype(np.uint8)
            self.shape = tuple(gguf_quants.quant_shape_to_byte_shape(tensor.shape, qtype))
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize

    def tofile(self, fout: Any) -> None:
        try:
            array = _as_float_array(self.source.produce())
        except OSError as e:  # reading the checkpoint, not writing the output, failed: say so
            raise ConversionError(f"tensor '{self.name}': cannot read it ({e.strerror or e})") from e
        if tuple(array.shape) != tuple(self.source.shape):
            raise ConversionError(
                f"tensor '{self.name}' has shape {list(array.shape)}, not the {list(self.source.shape)} announced"
            )
        encoded = encode_tensor(array, self.qtype)
        del array
        assert encoded.nbytes == self.nbytes
        encoded.tofile(fout)


class ModelWriter:
    """Collects metadata and tensors for one GGUF file, then writes it atomically.

    ``meta`` exposes the underlying ``gguf.GGUFWriter`` for its typed ``add_*`` metadata methods.
    """

    def __init__(self, path: str | os.PathLike[str], arch: str, out_type: OutType | str = OutType.F32) -> None:
        self.path = Path(path)
        self.arch = arch
        self.out_type = OutType(out_type)
        self.meta = GGUFWriter(None, arch)
        self.meta.add_file_type(int(self.out_type.file_type))
        self._names: set[str] = set()

    def add(self, key: str, value: Any) -> None:
        """Add a metadata value, typed from the Python value (str, bool, int, float, or a list of them)."""
        if isinstance(value, bool):
            self.meta.add_bool(key, value)
        elif isinstance(value, int):
            self.meta.add_int32(key, value) if value < 0 else self.meta.add_uint32(key, value)
        elif isinstance(value, float):
            self.meta.add_float32(key, value)
        elif isinstance(value, str):
            self.meta.add_string(key, value)
        elif isinstance(value, (list, tuple)):
            self.meta.add_array(key, list(value))
        else:
            raise TypeError(f"metadata '{key}': unsupported value type {type(value).__name__}")

    def add_tensor(
        self,
        name: str,
        tensor: torch.Tensor | np.ndarray | Deferred,
        *,
        qtype: GGMLQuantizationType | None = None,
    ) -> GGMLQuantizationType:
        """Add one tensor; its stored type follows :func:`choose_type` unless ``qtype`` forces one. A
        :class:`Deferred` one is produced and encoded only when the file is written."""
        if name in self._names:
            raise ValueError(f"tensor '{name}' added twice")
        if len(name.encode()) >= keys.MAX_TENSOR_NAME_BYTES:
            raise ValueError(f"tensor name '{name}' is longer than GGUF allows ({keys.MAX_TENSOR_NAME_BYTES - 1})")
        raw: GGMLQuantizationType | None
        if isinstance(tensor, Deferred):
            chosen = qtype if qtype is not None else choose_type(name, tensor.shape, self.out_type)
            pending = _Pending(name, tensor, chosen)
            raw = None if chosen in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) else chosen
            self.meta.add_tensor(name, pending, raw_dtype=raw)  # type: ignore[arg-type]  # array-like enough
            self._names.add(name)
            return chosen
        array = _as_float_array(tensor)
        chosen = qtype if qtype is not None else choose_type(name, tuple(array.shape), self.out_type)
        encoded = encode_tensor(array, chosen)
        raw = None if chosen in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) else chosen
        self.meta.add_tensor(name, encoded, raw_dtype=raw)
        self._names.add(name)
        return chosen

    def write(self, progress: bool | None = None) -> Path:
        """Write everything to a temporary file beside the target, then rename it into place.

        ``progress`` shows a bar over the tensor data (default: when standard error is a terminal)."""
        if progress is None:
            progress = sys.stderr.isatty()
        try:
            with atomic_output(self.path) as tmp:
                self.meta.write_header_to_file(path=tmp)
                self.meta.write_kv_data_to_file()
                self.meta.write_tensors_to_file(progress=progress)
                self.meta.close()
        finally:
            self.meta.close()
        return self.path
