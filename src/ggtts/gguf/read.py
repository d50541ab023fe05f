"""Memory-mapped GGUF reader: typed metadata and lazily dequantized torch tensors.

Parsing is done by llama.cpp's own ``gguf`` package; this module adds the checks that turn a bad file into one
clear sentence (:class:`GGUFError`) instead of a deep numpy traceback, and hands tensors to torch as float.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf import quants as gguf_quants
from gguf.gguf_reader import READER_SUPPORTED_VERSIONS, ReaderField

from ggtts.errors import GGUFError

if TYPE_CHECKING:
    import torch

GGUF_MAGIC = b"GGUF"
HEADER_BYTES = 24  # magic (4) + version (4) + tensor count (8) + metadata count (8)

# Plain numeric storage types handed to torch as they are (then cast to float32).
_PLAIN_TYPES: dict[GGMLQuantizationType, type[np.generic]] = {
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


def dequantizable_types() -> frozenset[GGMLQuantizationType]:
    """Every tensor type this reader turns into float: plain types plus whatever ``gguf`` can dequantize."""
    return frozenset(_PLAIN_TYPES) | frozenset(gguf_quants._type_traits)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: GGMLQuantizationType
    shape: tuple[int, ...]  # torch order (outermost first), as the tensor is handed out
    n_bytes: int
    offset: int  # absolute byte offset in the file


class _CheckedReader(GGUFReader):
    """``GGUFReader`` that validates tensor types and bounds before building its memory-mapped views."""

    def _build_tensors(self, start_offs: int, fields: list[ReaderField]) -> None:
        file_size = len(self.data)
        known = {int(t) for t in GGMLQuantizationType}
        for field in fields:
            _len, name_data, _n_dims, dims, raw_dtype, offset_tensor = field.parts
            name = bytes(name_data).decode("utf-8", errors="replace")
            raw = int(raw_dtype[0])
            if raw not in known:
                raise GGUFError(f"tensor '{name}' has unknown tensor type id {raw}")
            qtype = GGMLQuantizationType(raw)
            if qtype not in dequantizable_types():
                raise GGUFError(
                    f"tensor '{name}' has unsupported tensor type {qtype.name}; supported: "
                    + ", ".join(sorted(t.name for t in dequantizable_types()))
                )
            n_elems = int(np.prod(dims.astype(np.uint64))) if len(dims) else 1
            block, type_size = GGML_QUANT_SIZES[qtype]
            if len(dims) and int(dims[0]) % block:
                raise GGUFError(
                    f"tensor '{name}' has inner dimension {int(dims[0])}, not a multiple of the "
                    f"{qtype.name} block size {block}"
                )
            n_bytes = n_elems * type_size // block
            start = start_offs + int(offset_tensor[0])
            if start + n_bytes > file_size:
                raise GGUFError(
                    f"tensor '{name}' ({qtype.name}, {n_bytes} bytes at offset {start}) extends past the end "
                    f"of the file ({file_size} bytes): the file is truncated or corrupt"
                )
        super()._build_tensors(start_offs, fields)


def _field_value(field: ReaderField) -> Any:
    value = field.contents()
    if field.types and field.types[0] == GGUFValueType.BOOL:
        return bool(value)
    return value


class _Missing:
    """The default of a required key (a typed getter without a default)."""


_MISSING = _Missing()


class GGUFFile:
    """A GGUF file opened through a memory map.

    ``metadata`` maps keys to Python values (int, float, bool, str, or lists of them). ``tensor(name)`` returns a
    float32 torch tensor, dequantized on demand, so only the tensors asked for are ever materialised.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._reader = self._open(self.path)
        self.version = int(self._reader.fields["GGUF.version"].parts[0][0])
        self.metadata: dict[str, Any] = {
            k: _field_value(f) for k, f in self._reader.fields.items() if not k.startswith("GGUF.")
        }
        self._tensors = {t.name: t for t in self._reader.tensors}

    @staticmethod
    def _open(path: Path) -> GGUFReader:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise GGUFError(f"{path}: no such file") from None
        except OSError as e:
            raise GGUFError(f"{path}: cannot read ({e.strerror})") from None
        if path.is_dir():
            raise GGUFError(f"{path}: is a directory, not a GGUF file")
        if size == 0:
            raise GGUFError(f"{path}: the file is empty")
        try:
            with path.open("rb") as f:
                head = f.read(HEADER_BYTES)
        except OSError as e:
            raise GGUFError(f"{path}: cannot read ({e.strerror})") from None
        if head[:4] != GGUF_MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (it does not start with the magic bytes 'GGUF')")
        if size < HEADER_BYTES:
            raise GGUFError(f"{path}: the header is truncated ({size} of {HEADER_BYTES} bytes)")
        version = int.from_bytes(head[4:8], "little")
        if version not in READER_SUPPORTED_VERSIONS:
            raise GGUFError(
                f"{path}: unsupported GGUF version {version} (supported: "
                + ", ".join(str(v) for v in READER_SUPPORTED_VERSIONS)
                + ")"
            )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return _CheckedReader(path, "r")
        except GGUFError as e:
            raise GGUFError(f"{path}: {e}") from None
        except (IndexError, ValueError, KeyError, OverflowError, UnicodeDecodeError, MemoryError) as e:
            raise GGUFError(
                f"{path}: the metadata or tensor table is truncated or corrupt ({type(e).__name__}: {e})"
            ) from None

    # ---- metadata -------------------------------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GGUFError(f"{self.path}: metadata has no 'general.architecture'")
        return arch

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def require(self, key: str) -> Any:
        if key not in self.metadata:
            raise GGUFError(f"{self.path}: missing metadata key '{key}'")
        return self.metadata[key]

    # typed getters: the value, or ``default`` when the key is absent (no default: it is required); a value of
    # the wrong type is a GGUFError naming the key
    def get_int(self, key: str, default: int | _Missing = _MISSING) -> int:
        value = self._typed(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong_type(key, value, "an integer")
        return value

    def get_float(self, key: str, default: float | _Missing = _MISSING) -> float:
        value = self._typed(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong_type(key, value, "a number")
        return float(value)

    def get_str(self, key: str, default: str | _Missing = _MISSING) -> str:
        value = self._typed(key, default)
        if not isinstance(value, str):
            raise self._wrong_type(key, value, "a string")
        return value

    def get_list(self, key: str, default: list[Any] | _Missing = _MISSING) -> list[Any]:
        value = self._typed(key, default)
        if not isinstance(value, list):
            raise self._wrong_type(key, value, "an array")
        return value

    def _typed(self, key: str, default: Any) -> Any:
        if key in self.metadata:
            return self.metadata[key]
        if isinstance(default, _Missing):
            raise GGUFError(f"{self.path}: missing metadata key '{key}'")
        return default

    def _wrong_type(self, key: str, value: Any, expected: str) -> GGUFError:
        shown = repr(value) if len(repr(value)) < 40 else repr(value)[:37] + "..."
        return GGUFError(f"{self.path}: metadata key '{key}' should be {expected}, not {shown}")

    # ---- tensors --------------------------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        t = self._tensor_entry(name)
        return TensorInfo(
            name=name,
            type=t.tensor_type,
            shape=tuple(int(d) for d in reversed(t.shape.tolist())),
            n_bytes=int(t.n_bytes),
            offset=int(t.data_offset),
        )

    def infos(self) -> Iterator[TensorInfo]:
        for name in self._tensors:
            yield self.info(name)

    def _tensor_entry(self, name: str) -> Any:
        try:
            return self._tensors[name]
        except KeyError:
            raise GGUFError(f"{self.path}: missing tensor '{name}'") from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes or values exactly as stored (a read-only memory-mapped view)."""
        return self._tensor_entry(name).data

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Dequantize one tensor to a float32 torch tensor (torch dimension order).

        With ``shape`` the tensor's shape is checked, and a mismatch is an error naming the tensor.
        """
        entry = self._tensor_entry(name)
        info = self.info(name)
        if shape is not None and tuple(shape) != info.shape:
            raise GGUFError(f"{self.path}: tensor '{name}' has shape {list(info.shape)}, expected {list(shape)}")
        qtype = entry.tensor_type
        if qtype in _PLAIN_TYPES:
            array = np.asarray(entry.data, dtype=np.float32)
        elif qtype == GGMLQuantizationType.BF16:
            # bf16 is the top half of a float32: widen the raw 16-bit words without a detour through numpy floats
            words = np.asarray(entry.data).view(np.uint16).astype(np.uint32) << 16
            array = words.view(np.float32)
        else:
            array = gguf_quants.dequantize(entry.data, qtype)
        import torch  # here, not at the top: reading a file's metadata (`ggtts info`, recognising it) needs none

        # a private, writable copy: the memory map stays read-only and torch owns what it gets
        return torch.from_numpy(np.array(array, dtype=np.float32, copy=True).reshape(info.shape))
