"""The GGUF header, parsed with every number checked before it is used.

Counts, string and array lengths, value and tensor type codes, dimensions and offsets all come from the file; each
is checked against the bytes that are really there before anything is read, looped over or allocated, so a damaged
file is one sentence naming the file and the field (:class:`GGUFError`), never a struct or numpy traceback, an
endless loop or a 2**63-element allocation. The layout is GGUF v2/v3 as llama.cpp writes it (``gguf.GGUFWriter``),
in either byte order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType
from gguf.gguf_reader import READER_SUPPORTED_VERSIONS

from ggtts.errors import GGUFError

GGUF_MAGIC = b"GGUF"
HEADER_BYTES = 24  # magic (4) + version (4) + tensor count (8) + metadata count (8)
SUPPORTED_VERSIONS = tuple(READER_SUPPORTED_VERSIONS)
ALIGNMENT_KEY = "general.alignment"
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 8  # arrays of arrays nest at most this deep (llama.cpp itself reads no nested arrays)
# A tensor's element count, zero dimensions counted as one, stays below this: far above any real tensor (whose
# count the file's size bounds anyway), low enough that numpy and torch can shape even an empty one in 8-byte items.
MAX_ELEMENTS = 1 << 48

# The smallest encoding of each kind of entry: a count claiming more entries than the remaining bytes could hold
# is refused before the first one is read.
_STRING_MIN_BYTES = 8  # its u64 length
_ARRAY_MIN_BYTES = 12  # its u32 item type and u64 length
_KV_MIN_BYTES = 8 + 4 + 1  # key length, value type, the smallest value
_TENSOR_INFO_MIN_BYTES = 8 + 4 + 4 + 8  # name length, dimension count, type, offset

_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
    GGUFValueType.BOOL: "?",
}
ByteOrder = Literal["<", ">"]  # struct and numpy prefixes: little- and big-endian
_VALUE_TYPES = {int(t): t for t in GGUFValueType}
_TENSOR_TYPES = {int(t): t for t in GGMLQuantizationType}


MAX_SHOWN_NAME = 80  # characters of a key or tensor name quoted in an error message


def shown(name: str) -> str:
    """A name from the file, fit for a one-line message: control characters escaped, long names cut."""
    if not name.isprintable():
        name = name.encode("unicode_escape").decode("ascii")
    return name if len(name) <= MAX_SHOWN_NAME else name[: MAX_SHOWN_NAME - 3] + "..."


class CorruptHeader(Exception):
    """What is wrong, without the file name (the caller adds it)."""


@dataclass(frozen=True)
class RawTensor:
    """One tensor-table entry as stored: ggml dimension order (innermost first), offset from the data start."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int


@dataclass(frozen=True)
class Header:
    version: int
    byte_order: ByteOrder
    metadata: dict[str, Any]
    tensors: list[RawTensor]
    alignment: int
    data_offset: int  # where tensor offsets count from


class _Cursor:
    """Reads the header front to back; every read is checked against the bytes left."""

    def __init__(self, data: memoryview, pos: int, order: ByteOrder) -> None:
        self.data, self.pos, self.order, self.size = data, pos, order, len(data)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n > self.left:
            raise CorruptHeader(
                f"{what} needs {n} bytes at offset {self.pos}, past the end of the file ({self.size} bytes)"
            )
        start, self.pos = self.pos, self.pos + n
        return self.data[start : self.pos]

    def unpack(self, fmt: str, what: str) -> Any:
        raw = self.take(struct.calcsize(fmt), what)
        return struct.unpack(self.order + fmt, raw)[0]

    def u32(self, what: str) -> int:
        return int(self.unpack("I", what))

    def u64(self, what: str) -> int:
        return int(self.unpack("Q", what))

    def count(self, what: str, min_bytes: int) -> int:
        """A u64 count of entries at least ``min_bytes`` each, refused when the file cannot hold them."""
        n = self.u64(what)
        if n * min_bytes > self.left:
            raise CorruptHeader(f"{what} is {n}, more than the {self.left} bytes left in the file could hold")
        return n

    def string(self, what: str) -> str:
        n = self.u64(f"the length of {what}")
        if n > self.left:
            raise CorruptHeader(f"{what} claims {n} bytes, more than the {self.left} left in the file")
        try:
            return str(self.take(n, what), "utf-8")
        except UnicodeDecodeError:
            raise CorruptHeader(f"{what} is not valid UTF-8") from None

    def value_type(self, what: str) -> GGUFValueType:
        raw = self.u32(f"the value type of {what}")
        if raw not in _VALUE_TYPES:
            raise CorruptHeader(f"{what} has unknown value type id {raw}")
        return _VALUE_TYPES[raw]

    def value(self, vtype: GGUFValueType, what: str, depth: int = 0) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype == GGUFValueType.ARRAY:
            return self.array(what, depth + 1)
        value = self.unpack(_SCALAR_FORMATS[vtype], what)
        return bool(value) if vtype == GGUFValueType.BOOL else value

    def array(self, what: str, depth: int) -> list[Any]:
        if depth > MAX_ARRAY_DEPTH:
            raise CorruptHeader(f"{what} nests arrays more than {MAX_ARRAY_DEPTH} deep")
        itype = self.value_type(f"the items of {what}")
        fmt = _SCALAR_FORMATS.get(itype)
        if fmt is None:  # strings or arrays: one at a time
            min_bytes = _STRING_MIN_BYTES if itype == GGUFValueType.STRING else _ARRAY_MIN_BYTES
            n = self.count(f"the length of {what}", min_bytes)
            return [self.value(itype, what, depth) for _ in range(n)]
        width = struct.calcsize(fmt)
        n = self.count(f"the length of {what}", width)
        raw = self.take(n * width, what)
        if itype == GGUFValueType.BOOL:
            return [b != 0 for b in raw]
        return list(struct.unpack(f"{self.order}{n}{fmt}", raw))


def _byte_order(version_bytes: bytes) -> ByteOrder:
    """GGUF has no byte-order flag: a version whose low half is zero was written in the other order."""
    little = int.from_bytes(version_bytes, "little")
    return ">" if little & 0xFFFF == 0 and little else "<"


def parse_header(data: memoryview, path: Path) -> Header:
    """The metadata and tensor table of the GGUF file whose bytes are ``data`` (magic and size already checked)."""
    order = _byte_order(bytes(data[4:8]))
    version = struct.unpack(order + "I", data[4:8])[0]
    if version not in SUPPORTED_VERSIONS:
        raise GGUFError(
            f"{path}: unsupported GGUF version {version} (supported: "
            + ", ".join(str(v) for v in SUPPORTED_VERSIONS)
            + ")"
        )
    cur = _Cursor(data, 8, order)
    try:
        n_tensors = cur.count("the header's count of tensors", _TENSOR_INFO_MIN_BYTES)
        n_kv = cur.count("the header's count of metadata entries", _KV_MIN_BYTES)
        metadata = _metadata(cur, n_kv)
        tensors = _tensor_table(cur, n_tensors)
        alignment = _alignment(metadata)
    except CorruptHeader as e:
        raise GGUFError(f"{path}: the metadata or tensor table is truncated or corrupt ({e})") from None
    data_offset = -(-cur.pos // alignment) * alignment
    return Header(version, order, metadata, tensors, alignment, data_offset)


def _metadata(cur: _Cursor, n: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for i in range(n):
        key = cur.string(f"the key of metadata entry {i}")
        if key in metadata:
            raise CorruptHeader(f"metadata key '{shown(key)}' appears twice")
        what = f"metadata '{shown(key)}'"
        metadata[key] = cur.value(cur.value_type(what), what)
    return metadata


def _tensor_table(cur: _Cursor, n: int) -> list[RawTensor]:
    tensors: list[RawTensor] = []
    seen: set[str] = set()
    for i in range(n):
        name = cur.string(f"the name of tensor {i}")
        what = f"tensor '{shown(name)}'"
        if name in seen:
            raise CorruptHeader(f"{what} appears twice")
        seen.add(name)
        n_dims = cur.u32(f"the dimension count of {what}")
        if n_dims > MAX_DIMS:
            raise CorruptHeader(f"{what} has {n_dims} dimensions; GGUF allows at most {MAX_DIMS}")
        dims = tuple(cur.u64(f"the dimensions of {what}") for _ in range(n_dims))
        elements = 1
        for d in dims:
            elements *= max(d, 1)
        if elements >= MAX_ELEMENTS:
            raise CorruptHeader(f"{what} has dimensions {list(dims)}, too many elements for any file")
        type_id = cur.u32(f"the type of {what}")
        offset = cur.u64(f"the data offset of {what}")
        tensors.append(RawTensor(name, dims, type_id, offset))
    return tensors


def _alignment(metadata: dict[str, Any]) -> int:
    alignment = metadata.get(ALIGNMENT_KEY, GGUF_DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int):
        raise CorruptHeader(f"metadata '{ALIGNMENT_KEY}' should be an integer, not {alignment!r:.40}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise CorruptHeader(f"metadata '{ALIGNMENT_KEY}' is {alignment}, not a power of two")
    return alignment


def tensor_type(raw: RawTensor) -> GGMLQuantizationType | None:
    """The tensor's type, or None for a type id ggml does not define."""
    return _TENSOR_TYPES.get(raw.type_id)


def stored_bytes(dims: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    """Bytes of a tensor with ggml dimensions ``dims`` stored as ``qtype``."""
    elements = 1
    for d in dims:
        elements *= d
    block, type_size = GGML_QUANT_SIZES[qtype]
    return elements // block * type_size
