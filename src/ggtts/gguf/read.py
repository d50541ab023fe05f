"""Memory-mapped GGUF reader: typed metadata and lazily dequantized torch tensors.

The header is parsed by :mod:`ggtts.gguf.parse`, which checks every count, length and offset against the file;
this module checks each tensor's type and extent, so a bad file is one clear sentence (:class:`GGUFError`) instead
of a deep numpy traceback, and hands tensors to torch as float (dequantized by llama.cpp's own ``gguf`` package).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from ggtts.errors import GGUFError
from ggtts.gguf.parse import (
    GGUF_MAGIC,
    HEADER_BYTES,
    ByteOrder,
    Header,
    RawTensor,
    parse_header,
    shown,
    stored_bytes,
    tensor_type,
)

if TYPE_CHECKING:
    import torch

__all__ = ["GGUF_MAGIC", "HEADER_BYTES", "GGUFFile", "TensorInfo", "dequantizable_types", "widen"]

MADV_POPULATE_READ = 22  # Linux's madvise: map a range's pages now (not in Python's mmap module before 3.13)
MAPPED_MIN_BYTES = 64 << 10  # mapped(): smaller tensors are copied (a mapping of their own costs more than that)
MMAP_ENV = "GGTTS_MMAP"  # "0": mapped() copies every tensor (a file that may be rewritten in place while in use)


@functools.cache
def _libc() -> ctypes.CDLL:
    """libc's mmap, munmap and madvise (Linux): mappings made here hold no file descriptor of their own, as each
    of Python's ``mmap`` objects does (a model of a few hundred tensors would hold as many)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.restype = ctypes.c_int
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def _map_privately(fd: int, offset: int, length: int) -> ctypes.Array[ctypes.c_char] | None:
    """``length`` bytes of the file from ``offset`` (a multiple of the page size), mapped privately (copy-on-write)
    and unmapped when the returned buffer (and whatever views it, numpy arrays, torch tensors) is gone; None where
    the mapping fails (``ctypes.get_errno()`` says why)."""
    libc = _libc()
    address = libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, offset)
    if address is None or address == ctypes.c_void_p(-1).value:
        return None
    pages = (ctypes.c_char * length).from_address(address)
    # not at the interpreter's exit (the system takes the mapping back): an exit handler may still read a weight
    weakref.finalize(pages, libc.munmap, address, length).atexit = False
    return pages


def mapping_wanted() -> bool:
    """Whether :meth:`GGUFFile.mapped` may hand out the file's pages (``$GGTTS_MMAP`` is not ``0``)."""
    return os.environ.get(MMAP_ENV, "1") != "0"


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


def widen(
    data: np.ndarray, qtype: GGMLQuantizationType, byte_order: ByteOrder = "<", out: np.ndarray | None = None
) -> np.ndarray:
    """Stored values as float32: ``data`` as :meth:`GGUFFile.raw` gives it (or any whole rows of it, or the same
    as bytes); block types come back with their last dimension counted in values, not bytes. ``out``: for plain
    types and BF16, a float32 array of as many values to write them into (returned)."""
    if qtype in _PLAIN_TYPES:
        values = data.view(np.dtype(_PLAIN_TYPES[qtype]).newbyteorder(byte_order))
        out = np.empty(values.shape, np.float32) if out is None else out
        np.copyto(out, values.reshape(out.shape), casting="unsafe")
        return out
    if qtype == GGMLQuantizationType.BF16:
        # bf16 is the top half of a float32: the raw 16-bit words widened in place, without a detour through floats
        halves = data.view(np.dtype(np.uint16).newbyteorder(byte_order))
        out = np.empty(halves.shape, np.float32) if out is None else out
        bits = out.view(np.uint32)
        np.copyto(bits, halves.reshape(out.shape))
        bits <<= 16
        return out
    with np.errstate(all="ignore"):  # damaged scales decode to inf or NaN, which the caller checks
        return gguf_quants.dequantize(data, qtype)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: GGMLQuantizationType
    shape: tuple[int, ...]  # torch order (outermost first), as the tensor is handed out
    n_bytes: int
    offset: int  # absolute byte offset in the file


def _tensor_info(path: Path, raw: RawTensor, header: Header, file_size: int) -> TensorInfo:
    """Check one tensor-table entry's type, block layout and extent against the file."""
    qtype = tensor_type(raw)
    if qtype is None:
        raise GGUFError(f"{path}: tensor '{shown(raw.name)}' has unknown tensor type id {raw.type_id}")
    if qtype not in dequantizable_types():
        raise GGUFError(
            f"{path}: tensor '{shown(raw.name)}' has unsupported tensor type {qtype.name}; supported: "
            + ", ".join(sorted(t.name for t in dequantizable_types()))
        )
    block = GGML_QUANT_SIZES[qtype][0]
    inner = raw.dims[0] if raw.dims else 1
    if inner % block:
        raise GGUFError(
            f"{path}: tensor '{shown(raw.name)}' has inner dimension {inner}, not a multiple of the {qtype.name} block "
            f"size {block}"
        )
    n_bytes = stored_bytes(raw.dims, qtype)
    start = header.data_offset + raw.offset
    if start + n_bytes > file_size:
        raise GGUFError(
            f"{path}: tensor '{shown(raw.name)}' ({qtype.name}, {n_bytes} bytes at offset {start}) extends past "
            f"the end of the file ({file_size} bytes): the file is truncated or corrupt"
        )
    return TensorInfo(raw.name, qtype, tuple(reversed(raw.dims)), n_bytes, start)


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
        self._map, self._identity = self._open(self.path)
        header = parse_header(memoryview(self._map), self.path)
        self.version = header.version
        self.alignment = header.alignment
        self.metadata: dict[str, Any] = header.metadata
        self._order = header.byte_order
        infos = (_tensor_info(self.path, raw, header, len(self._map)) for raw in header.tensors)
        self._tensors = {info.name: info for info in infos}

    @staticmethod
    def _open(path: Path) -> tuple[mmap.mmap, tuple[int, int]]:
        """The whole file mapped read-only, and which file it is (device and inode)."""
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
                if head[:4] != GGUF_MAGIC:
                    raise GGUFError(f"{path}: not a GGUF file (it does not start with the magic bytes 'GGUF')")
                if len(head) < HEADER_BYTES:
                    raise GGUFError(f"{path}: the header is truncated ({len(head)} of {HEADER_BYTES} bytes)")
                mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                stat = os.fstat(f.fileno())
                return mapping, (stat.st_dev, stat.st_ino)
        except OSError as e:
            raise GGUFError(f"{path}: cannot read ({e.strerror})") from None
        except ValueError as e:  # mmap of a file emptied since stat
            raise GGUFError(f"{path}: cannot map the file into memory ({e})") from None

    @property
    def byte_order(self) -> ByteOrder:
        """``"<"`` for little-endian files (all llama.cpp writes), ``">"`` for big-endian ones."""
        return self._order

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
        try:
            return self._tensors[name]
        except KeyError:
            raise GGUFError(f"{self.path}: missing tensor '{name}'") from None

    def infos(self) -> Iterator[TensorInfo]:
        yield from self._tensors.values()

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes or values exactly as stored (a read-only memory-mapped view): plain types as their
        numbers in torch order, block types as bytes with the last dimension counted in bytes."""
        info = self.info(name)
        if info.type in _PLAIN_TYPES:
            dtype = np.dtype(_PLAIN_TYPES[info.type]).newbyteorder(self._order)
            count, shape = info.n_bytes // dtype.itemsize, info.shape
        else:
            dtype = np.dtype(np.uint8)
            count, shape = info.n_bytes, gguf_quants.quant_shape_to_byte_shape(info.shape or (1,), info.type)
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=info.offset).reshape(shape)

    def release(self, name: str) -> None:
        """Unmap the whole pages of a tensor's bytes from this process (they come back from the page cache if
        read again): for weights copied elsewhere at load, so their memory is not counted twice."""
        info = self.info(name)
        start = -(-info.offset // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (info.offset + info.n_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, start, end - start)
            # what is read again is read a row at a time (embedding lookups): no read-ahead around each one
            self._map.madvise(mmap.MADV_RANDOM, start, end - start)

    def mapped(self, name: str) -> torch.Tensor:
        """The tensor as a float32 torch tensor, in place where the file stores float32 in this machine's byte
        order: the file's own pages, mapped for this tensor alone, privately (copy-on-write: read from the page
        cache and shared with every other mapping of the file, in this process or another; a write changes only
        this mapping's copy of the page written, never the file nor another tensor), read in now. A small tensor
        (under :data:`MAPPED_MIN_BYTES`), any other type or byte order, and every tensor while ``$GGTTS_MMAP`` is
        ``0`` are copies, as :meth:`tensor` makes them; so is a tensor of a file since replaced at its path.

        The pages are the file's until written: a file rewritten in place while the tensor lives changes it, and
        one cut short makes reading it fatal (SIGBUS); one found cut short now is a GGUFError. ggtts replaces files
        by renaming a new one over them (the old pages stay the old file's), never in place."""
        info = self.info(name)
        native = self._order == ("<" if sys.byteorder == "little" else ">")
        plain = info.type == GGMLQuantizationType.F32 and native and info.offset % 4 == 0
        wanted = plain and info.n_bytes >= MAPPED_MIN_BYTES and sys.platform.startswith("linux") and mapping_wanted()
        fd = self._reopen() if wanted else None
        if fd is None:
            return self.tensor(name)
        import torch

        start = info.offset - info.offset % mmap.PAGESIZE
        length = info.offset + info.n_bytes - start
        cut_short = GGUFError(
            f"{self.path}: the file was cut short since it was opened (tensor '{name}' lies past its end)"
        )
        try:  # the mapping keeps the file open itself: the descriptor is closed at once
            if os.fstat(fd).st_size < info.offset + info.n_bytes:
                raise cut_short
            pages = _map_privately(fd, start, length)
        finally:
            os.close(fd)
        if pages is None:
            raise GGUFError(f"{self.path}: cannot map tensor '{name}' into memory ({os.strerror(ctypes.get_errno())})")
        view = np.frombuffer(memoryview(pages).cast("B"), np.float32, info.n_bytes // 4, info.offset - start)
        # Linux 5.14 on: every page mapped now, not a fault at a time at first use. EFAULT: the file was cut short
        # since it was opened, and reading the pages would kill the process (older kernels: EINVAL; pages come later)
        if _libc().madvise(ctypes.addressof(pages), length, MADV_POPULATE_READ) and ctypes.get_errno() == errno.EFAULT:
            raise cut_short
        return torch.from_numpy(view.reshape(info.shape))

    def _reopen(self) -> int | None:
        """The file this GGUFFile read, opened again by its path (the caller closes it), or None where the path now
        names another file or cannot be opened."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        stat = os.fstat(fd)
        if (stat.st_dev, stat.st_ino) != self._identity:
            os.close(fd)
            return None
        return fd

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """Dequantize one tensor to a float32 torch tensor (torch dimension order).

        With ``shape`` the tensor's shape is checked, and a mismatch is an error naming the tensor.
        """
        info = self.info(name)
        if shape is not None and tuple(shape) != info.shape:
            raise GGUFError(f"{self.path}: tensor '{name}' has shape {list(info.shape)}, expected {list(shape)}")
        import torch  # here, not at the top: reading a file's metadata (`ggtts info`, recognising it) needs none

        # a private, writable copy: the memory map stays read-only and torch owns what it gets
        raw = self.raw(name)
        if info.type in _PLAIN_TYPES or info.type == GGMLQuantizationType.BF16:
            # widened straight into memory torch allocates: numpy's own large arrays ask the kernel for huge pages,
            # and where it cannot give them (memory fragmented) each fault tries to compact first: Kokoro's 327 MB
            # took 0.43-0.84 s so on a 2-core machine, 0.25-0.31 s without (and torch's tensors never ask)
            copy = torch.empty(info.shape, dtype=torch.float32)
            widen(raw, info.type, self._order, out=copy.numpy())
        else:  # block types: gguf's dequantization makes the array; copied again only where it is not one already
            array = widen(raw, info.type, self._order)
            copy = torch.from_numpy(np.require(array, np.float32, ["C", "W", "O"]).reshape(info.shape))
        self.release(name)  # the stored bytes, read once: not kept resident beside the copy
        return copy
