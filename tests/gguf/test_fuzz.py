"""Fuzzing the GGUF reader: a damaged file opens and reads, or fails with one GGUFError; nothing else escapes.

Small valid files are written by llama.cpp's own writer (``gguf.GGUFWriter``: metadata of every value type,
arrays of numbers, strings and arrays, tensors in F32, F16, BF16, Q8_0 and I32) and by ggtts's ``ModelWriter``,
then damaged: bytes flipped, counts, lengths, type codes, dimensions and offsets overwritten with huge or invalid
values (their positions found by the ``gguf`` package's reader on the valid file), truncated, extended with junk.
Opening, reading every metadata value, listing the tensors and dequantizing each one must either work or raise
:class:`GGUFError`. Each attempt runs under a time limit and a limit on Python/numpy allocations, so a count of
2**63 that the reader tries to honour (a loop, an allocation) fails the test instead of hanging the machine.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFEndian, GGUFReader, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile, ModelWriter
from time_limit import time_limit

SECONDS_PER_FILE = 10  # a tiny file parses in milliseconds; a reader looping over a huge count never ends
MAX_ALLOCATED = 64 << 20  # bytes of Python and numpy memory one tiny file may need at its peak
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Values written over a count, a length, a type code, a dimension or an offset.
HUGE = [0, 1, 2, 3, 31, 255, 0x7FFF_FFFF, 0xFFFF_FFFF, 1 << 32, 1 << 62, 1 << 63, (1 << 64) - 1]


# ---- valid files ----------------------------------------------------------------------------------------------
def _write_with_gguf_package(path: Path, endianess: GGUFEndian = GGUFEndian.LITTLE) -> Path:
    """Every metadata value type, nested arrays, and tensors of several storage types (llama.cpp's writer)."""
    rng = np.random.default_rng(0)
    w = GGUFWriter(path, "fuzz", endianess=endianess)
    w.add_uint8("fuzz.u8", 200)
    w.add_int8("fuzz.i8", -100)
    w.add_uint16("fuzz.u16", 60000)
    w.add_int16("fuzz.i16", -30000)
    w.add_uint32("fuzz.u32", 4_000_000_000)
    w.add_int32("fuzz.i32", -2_000_000_000)
    w.add_float32("fuzz.f32", 0.25)
    w.add_uint64("fuzz.u64", 1 << 60)
    w.add_int64("fuzz.i64", -(1 << 60))
    w.add_float64("fuzz.f64", 1e-300)
    w.add_bool("fuzz.bool", True)
    w.add_string("fuzz.str", "héllo wörld")
    w.add_array("fuzz.ints", [1, 2, 3, 4])
    w.add_array("fuzz.floats", [0.5, -1.5])
    w.add_array("fuzz.strs", ["a", "bc", "déf"])
    w.add_array("fuzz.bools", [True, False, True])
    w.add_key_value("fuzz.nested", [[1, 2], [3]], GGUFValueType.ARRAY, sub_type=GGUFValueType.ARRAY)
    w.add_tensor("t.f32", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("t.f16", rng.standard_normal((2, 4)).astype(np.float16))
    w.add_tensor("t.i32", np.arange(6, dtype=np.int32).reshape(2, 3))
    q8 = rng.integers(0, 256, size=(2, 34), dtype=np.uint8)  # 2 rows of one Q8_0 block (32 values, 34 bytes)
    q8[:, 1] = 0x3C  # f16 block scales of 1.0, so the values are finite
    q8[:, 0] = 0
    w.add_tensor("t.q8_0", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    bf16 = rng.integers(0, 1 << 16, size=(1, 4), dtype=np.uint16).view(np.uint8)
    w.add_tensor("t.bf16", bf16, raw_dtype=GGMLQuantizationType.BF16)
    w.add_tensor("t.scalar", np.array([7.0], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_with_model_writer(path: Path) -> Path:
    mw = ModelWriter(path, "kokoro", "q8_0")
    mw.add("kokoro.n_token", 178)
    mw.add("kokoro.voices", ["af_a", "am_b"])
    mw.add("kokoro.eps", 1e-5)
    mw.add("kokoro.flag", False)
    mw.add_tensor("a.weight", np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32))  # Q8_0
    mw.add_tensor("a.bias", np.ones(32, dtype=np.float32))
    mw.add_tensor("voice.af_a", np.zeros((2, 1, 8), dtype=np.float32))
    mw.write()
    return path


def _number_slots(path: Path) -> list[tuple[int, int]]:
    """(offset, width) of every 4- or 8-byte number in the header: counts, string and array lengths, value and
    tensor type codes, dimension counts, dimensions, tensor offsets (found by the ``gguf`` package's reader)."""
    reader = GGUFReader(path)
    base = reader.data.__array_interface__["data"][0]
    slots = {(8, 8), (16, 8)}  # the tensor and metadata counts
    fields = [*reader.fields.values(), *(t.field for t in reader.tensors)]
    for field in fields:
        for part in field.parts:
            if part.size == 1 and part.itemsize in (4, 8):
                slots.add((part.__array_interface__["data"][0] - base, part.itemsize))
    return sorted(slots)


class Base:
    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        self.slots = _number_slots(path)
        self.header_end = GGUFReader(path).data_offset


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    folder = tmp_path_factory.mktemp("fuzz-bases")
    paths = [_write_with_gguf_package(folder / "gguf.gguf"), _write_with_model_writer(folder / "ggtts.gguf")]
    for path in paths:
        _read_everything(path)  # the undamaged files read cleanly
    return [Base(p) for p in paths]


def _flat(value: object) -> list[object]:
    """Nested lists flattened, as the ``gguf`` package's reader returns arrays of arrays."""
    return [x for v in value for x in _flat(v)] if isinstance(value, list) else [value]


@pytest.mark.parametrize("endianess", [GGUFEndian.LITTLE, GGUFEndian.BIG], ids=["little", "big"])
def test_valid_files_read_as_the_gguf_package_reads_them(tmp_path: Path, endianess: GGUFEndian) -> None:
    """The control for the damage below: undamaged files give exactly what llama.cpp's own reader gives."""
    paths = [_write_with_gguf_package(tmp_path / "gguf.gguf", endianess)]
    if endianess == GGUFEndian.LITTLE:
        paths.append(_write_with_model_writer(tmp_path / "ggtts.gguf"))
    for path in paths:
        ours, theirs = GGUFFile(path), GGUFReader(path)
        expected = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
        assert list(ours.metadata) == list(expected)
        for key, value in expected.items():
            assert _flat(ours.metadata[key]) == _flat(value), key
        assert ours.metadata["general.architecture"] in ("fuzz", "kokoro")
        assert [t.name for t in theirs.tensors] == ours.names()
        for t in theirs.tensors:
            info = ours.info(t.name)
            assert (info.type, info.offset, info.n_bytes) == (t.tensor_type, t.data_offset, t.n_bytes)
            np.testing.assert_array_equal(ours.raw(t.name), t.data)
    g = GGUFFile(paths[0])
    assert g.metadata["fuzz.nested"] == [[1, 2], [3]] and g.metadata["fuzz.bools"] == [True, False, True]
    assert g.metadata["fuzz.str"] == "héllo wörld" and g.metadata["fuzz.u64"] == 1 << 60
    np.testing.assert_array_equal(g.tensor("t.i32").numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


# ---- reading under limits -------------------------------------------------------------------------------------
def _read_everything(path: Path) -> None:
    g = GGUFFile(path)
    repr(g.metadata)
    _ = g.version
    for key in g.metadata:
        g.get(key)
    for info in g.infos():
        assert info.offset + info.n_bytes <= path.stat().st_size
        tensor = g.tensor(info.name)
        assert tuple(tensor.shape) == info.shape
        g.raw(info.name)


def check_reads_or_fails_cleanly(path: Path) -> None:
    """Open and read all of ``path``: fine, or a GGUFError naming the file; anything else fails the test."""
    tracemalloc.start()
    try:
        with time_limit(SECONDS_PER_FILE, "reading one tiny file"):
            _read_everything(path)
    except GGUFError as e:
        message = str(e)
        assert message.startswith(f"{path}: "), message
        assert "\n" not in message, message
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MAX_ALLOCATED, f"reading a {path.stat().st_size}-byte file allocated {peak >> 20} MiB"


# ---- damage ---------------------------------------------------------------------------------------------------
@st.composite
def damaged(draw: st.DrawFn, bases: list[Base]) -> bytes:
    base = draw(st.sampled_from(bases))
    data = bytearray(base.data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["number", "number", "flip", "header_byte", "truncate", "append"]))
        if kind == "number":  # a count, length, type code, dimension or offset set to something absurd
            at, width = draw(st.sampled_from(base.slots))
            value = draw(st.sampled_from(HUGE) | st.integers(0, (1 << (8 * width)) - 1))
            old = int.from_bytes(data[at : at + width], "little")
            value = draw(st.sampled_from([value, old + 1, max(old - 1, 0), old * 2]))
            data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "header_byte" and data:  # any byte of the metadata and tensor table
            at = draw(st.integers(0, min(base.header_end, len(data)) - 1))
            data[at] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


@FUZZ
@given(data=st.data())
def test_damaged_files_read_or_fail_with_a_gguf_error(bases: list[Base], tmp_path: Path, data: st.DataObject) -> None:
    path = tmp_path / "damaged.gguf"
    path.write_bytes(data.draw(damaged(bases)))
    check_reads_or_fails_cleanly(path)


@FUZZ
@given(junk=st.binary(min_size=0, max_size=256))
def test_junk_after_a_valid_header_start(tmp_path: Path, junk: bytes) -> None:
    """The magic, a supported version, any counts, then anything."""
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<I", 3) + junk)
    check_reads_or_fails_cleanly(path)


# ---- targeted damage: every number slot set to every huge value ---------------------------------------------
def test_every_number_slot_set_to_every_huge_value(bases: list[Base], tmp_path: Path) -> None:
    """Exhaustive over the header's numbers (a few thousand files), so no slot is left to chance."""
    path = tmp_path / "slot.gguf"
    for base in bases:
        for at, width in base.slots:
            for value in HUGE:
                data = bytearray(base.data)
                data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
                path.write_bytes(bytes(data))
                check_reads_or_fails_cleanly(path)


def test_every_truncation_of_the_header(bases: list[Base], tmp_path: Path) -> None:
    path = tmp_path / "short.gguf"
    for base in bases:
        for size in range(base.header_end + 1):
            path.write_bytes(base.data[:size])
            check_reads_or_fails_cleanly(path)


@pytest.mark.parametrize(
    ("case", "changes", "message"),
    [
        ("kv_count", {"kv_count": 1 << 63}, r"count of metadata entries is 9223372036854775808"),
        ("tensor_count", {"tensor_count": 1 << 63}, r"count of tensors is 9223372036854775808"),
        ("array_length", {"array_length": 1 << 63}, r"the length of metadata 'kokoro\.voices' is 9223372036854775808"),
        ("string_length", {"string_length": 1 << 63}, r"metadata 'general\.architecture' claims 9223372036854775808"),
        ("n_dims", {"n_dims": 0xFFFF_FFFF}, r"tensor 'a\.weight' has 4294967295 dimensions; GGUF allows at most 4"),
        ("dim", {"dim0": 1 << 63}, r"tensor 'a\.weight' has dimensions \[9223372036854775808, 32\], too many"),
        (
            "empty_but_huge",
            {"dim0": 0, "dim1": 1 << 62},
            r"tensor 'a\.weight' has dimensions \[0, 4611686018427387904\]",
        ),
        ("offset", {"offset": (1 << 64) - 1}, r"tensor 'a\.weight' \(Q8_0, 1088 bytes at offset \d+\) extends past"),
    ],
)
def test_huge_numbers_are_named_without_allocating(
    bases: list[Base], tmp_path: Path, case: str, changes: dict[str, int], message: str
) -> None:
    """A count of 2**63 is refused by name, quickly and without trying to allocate it."""
    base = bases[1]  # ModelWriter's file: its fields, by name
    src = tmp_path / "valid.gguf"
    src.write_bytes(base.data)
    reader = GGUFReader(src)
    a = next(t for t in reader.tensors if t.name == "a.weight").field
    dims_at = a.offset + 8 + len("a.weight") + 4
    at_of = {
        "kv_count": (16, 8),
        "tensor_count": (8, 8),
        "array_length": (reader.fields["kokoro.voices"].offset + 8 + len("kokoro.voices") + 4 + 4, 8),
        "string_length": (reader.fields["general.architecture"].offset + 8 + len("general.architecture") + 4, 8),
        "n_dims": (dims_at - 4, 4),
        "dim0": (dims_at, 8),
        "dim1": (dims_at + 8, 8),
        "offset": (dims_at + 8 * 2 + 4, 8),
    }
    data = bytearray(base.data)
    for slot, value in changes.items():
        at, width = at_of[slot]
        data[at : at + width] = value.to_bytes(width, "little")
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(bytes(data))
    check_reads_or_fails_cleanly(path)
    with pytest.raises(GGUFError, match=message):
        _read_everything(path)
