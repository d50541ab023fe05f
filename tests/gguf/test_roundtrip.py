"""Write -> read round trips, checked against the `gguf` package's own quantize/dequantize."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf import quants as gq

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile, ModelWriter, OutType, choose_type

SHAPE = (48, 256)  # inner dimension a multiple of every block size (32 and 256)


def _weights(seed: int = 0, shape: tuple[int, ...] = SHAPE) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 0.5


@pytest.mark.parametrize("out_type", list(OutType))
def test_writer_roundtrip_every_type(tmp_path, out_type):
    w = _weights()
    bias = torch.linspace(-1, 1, SHAPE[0])
    path = tmp_path / f"m-{out_type.value}.gguf"
    mw = ModelWriter(path, "kokoro", out_type)
    mw.add("kokoro.n_token", 178)
    mw.add("kokoro.voices", ["a", "b"])
    mw.add("kokoro.some_float", 0.25)
    mw.add("kokoro.flag", True)
    stored = mw.add_tensor("blk.0.proj.weight", w)
    mw.add_tensor("blk.0.proj.bias", bias)
    mw.write()

    g = GGUFFile(path)
    assert g.architecture == "kokoro"
    assert g.metadata["kokoro.n_token"] == 178
    assert g.metadata["kokoro.voices"] == ["a", "b"]
    assert g.metadata["kokoro.some_float"] == pytest.approx(0.25)
    assert g.metadata["kokoro.flag"] is True
    assert g.metadata["general.file_type"] == int(out_type.file_type)
    assert g.info("blk.0.proj.weight").type == out_type.ggml_type == stored
    assert g.info("blk.0.proj.bias").type == GGMLQuantizationType.F32  # biases stay F32

    got = g.tensor("blk.0.proj.weight")
    assert got.shape == SHAPE and got.dtype == torch.float32
    torch.testing.assert_close(g.tensor("blk.0.proj.bias"), bias, rtol=0, atol=0)
    if out_type is OutType.F32:
        torch.testing.assert_close(got, w, rtol=0, atol=0)
        return
    # the reference: the gguf package quantizing and dequantizing the same values itself
    ref_bytes = gq.quantize(w.numpy(), out_type.ggml_type) if out_type is not OutType.F16 else None
    if ref_bytes is not None:
        ref = gq.dequantize(ref_bytes, out_type.ggml_type).reshape(SHAPE)
    else:
        ref = w.numpy().astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got.numpy(), ref)
    # half a rounding step of each type, relative to the largest value (a block's scale is at most the maximum's)
    tolerance = {
        OutType.F16: 1e-3,
        OutType.BF16: 1e-2,
        OutType.Q8_0: 2e-2,
        OutType.Q5_1: 3.5e-2,
        OutType.Q5_0: 3.5e-2,
        OutType.Q4_1: 7e-2,
        OutType.Q4_0: 7e-2,
    }[out_type]
    assert (got - w).abs().max().item() <= tolerance * w.abs().max().item()


QUANT_TYPES = sorted(gq._type_traits, key=lambda t: t.name)


@pytest.mark.parametrize("qtype", QUANT_TYPES, ids=lambda t: t.name)
def test_reader_dequantizes_like_gguf_package(tmp_path, qtype):
    """Files written with llama.cpp's own writer, in every block type, read back as the gguf package decodes them.

    The blocks are random bytes (the gguf package cannot quantize to every type), so the comparison covers the
    reader's handling of each type's block layout, shapes and offsets; NaN/inf from random scales compare equal.
    """
    block, type_size = gq.GGML_QUANT_SIZES[qtype]
    rows, cols = 6, 2 * 256
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(rows, cols // block * type_size), dtype=np.uint8)
    path = tmp_path / f"{qtype.name}.gguf"
    writer = GGUFWriter(path, "test")
    writer.add_tensor("t", raw, raw_dtype=qtype)
    writer.add_tensor("after", np.arange(5, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    g = GGUFFile(path)
    got = g.tensor("t")
    assert got.shape == (rows, cols)
    with np.errstate(all="ignore"):
        ref = gq.dequantize(raw, qtype).reshape(rows, cols)
    np.testing.assert_array_equal(got.numpy(), ref)
    np.testing.assert_array_equal(g.tensor("after").numpy(), np.arange(5, dtype=np.float32))


def test_type_choice_rules():
    assert choose_type("x.weight", (64, 64), OutType.Q8_0) == GGMLQuantizationType.Q8_0
    assert choose_type("x.weight", (64, 48), OutType.Q8_0) == GGMLQuantizationType.F32  # 48 % 32 != 0
    assert choose_type("x.weight", (16, 16), OutType.F16) == GGMLQuantizationType.F32  # too small
    assert choose_type("x.bias", (4096,), OutType.F16) == GGMLQuantizationType.F32
    assert choose_type("blk.0.attn_norm.weight", (64, 64), OutType.BF16) == GGMLQuantizationType.F32
    assert choose_type("x.weight", (64, 64), OutType.F32) == GGMLQuantizationType.F32


def test_tensor_shape_check_names_tensor(tmp_path):
    path = tmp_path / "s.gguf"
    mw = ModelWriter(path, "kokoro")
    mw.add_tensor("a.weight", torch.zeros(4, 8))
    mw.write()
    g = GGUFFile(path)
    with pytest.raises(Exception, match=r"tensor 'a.weight' has shape \[4, 8\], expected \[8, 4\]"):
        g.tensor("a.weight", shape=(8, 4))
    with pytest.raises(Exception, match=r"missing tensor 'b\.weight'"):
        g.tensor("b.weight")


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    path = tmp_path / "out.gguf"
    mw = ModelWriter(path, "kokoro")
    mw.add_tensor("a.weight", torch.zeros(4, 8))

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(mw.meta, "write_tensors_to_file", boom)
    with pytest.raises(OSError, match="disk full"):
        mw.write()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out_type", list(OutType))
def test_deferred_tensors_write_the_same_file(tmp_path, out_type):
    """A tensor given as Deferred (read when the file is written) is stored exactly as the same tensor given
    eagerly, for every type (sizes announced up front match what is written)."""
    from ggtts.gguf.write import Deferred

    rng = np.random.default_rng(1)
    tensors = {"blk.0.proj.weight": rng.standard_normal((64, 256)), "blk.0.proj.bias": rng.standard_normal(64)}
    files = []
    for lazy in (False, True):
        mw = ModelWriter(tmp_path / f"{lazy}.gguf", "test", out_type)
        for name, t in tensors.items():
            mw.add_tensor(name, Deferred(t.shape, lambda t=t: t) if lazy else t)
        files.append(mw.write().read_bytes())
    assert files[0] == files[1]


def test_a_deferred_tensor_that_cannot_be_read_names_it(tmp_path):
    from ggtts.errors import ConversionError
    from ggtts.gguf.write import Deferred

    def missing() -> np.ndarray:
        raise FileNotFoundError(2, "No such file or directory", "shard-2.safetensors")

    mw = ModelWriter(tmp_path / "m.gguf", "test")
    mw.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
    mw.add_tensor("b.weight", Deferred((4, 32), missing))
    with pytest.raises(ConversionError, match=r"tensor 'b\.weight': cannot read it"):
        mw.write()
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (Linux's /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_tensor_read_as_floats_does_not_stay_resident_beside_its_copy(tmp_path):
    """Loading copies each tensor out of the memory map (GGUFFile.tensor); the stored bytes' pages are then given
    back, so a loaded model is not counted twice (measured: a 357M Magpie f32 file's load peaked at 2.4 GB, now
    1.4 GB). A tensor read again is read correctly."""
    w = _weights(shape=(1024, 2048))  # 8 MiB
    path = tmp_path / "big.gguf"
    mw = ModelWriter(path, "kokoro", OutType.F32)
    mw.add_tensor("big.weight", w)
    mw.write()
    g = GGUFFile(path)
    before = _resident_kib(path.resolve())
    g.raw("big.weight").sum()  # the bytes, read through the map: resident
    assert _resident_kib(path.resolve()) - before > 6 * 1024
    copy = g.tensor("big.weight")
    assert _resident_kib(path.resolve()) - before < 64
    assert torch.equal(copy, w) and torch.equal(g.tensor("big.weight"), w)


def _in_mapping_of(path: Path, tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s memory lies in one of this process's mappings of ``path`` (Linux's /proc/self/maps)."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            start, end = (int(a, 16) for a in fields[0].split("-"))
            if fields[-1] == str(path) and start <= address < end:
                return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_float32_tensor_is_handed_out_in_place(tmp_path, monkeypatch):
    """GGUFFile.mapped: float32 comes back as the file's own pages (no copy: a model's weights stay the page
    cache's, shared with other mappings), each time a mapping of its own: a write to one is its alone (not another
    mapping's, not tensor()'s, not the file's), and release() leaves it. Small tensors, other types, a file
    replaced at its path since it was opened, and every tensor under GGTTS_MMAP=0 are copies."""
    w = _weights(shape=(1024, 2048))  # 8 MiB: whole pages inside it
    path, half = tmp_path / "f32.gguf", tmp_path / "f16.gguf"
    for p, out_type in ((path, OutType.F32), (half, OutType.F16)):
        mw = ModelWriter(p, "kokoro", out_type)
        mw.add_tensor("big.weight", w)
        mw.add_tensor("small.bias", torch.linspace(-1, 1, 256))  # 1 KiB
        mw.write()
    g = GGUFFile(path)
    a, b = g.mapped("big.weight"), g.mapped("big.weight")
    assert torch.equal(a, w) and _in_mapping_of(path.resolve(), a) and _in_mapping_of(path.resolve(), b)
    a[512, 7] = 123.0  # a page in the middle of the tensor
    g.release("big.weight")  # drops the shared map's pages: not this mapping's
    assert float(a[512, 7]) == 123.0 and torch.equal(b, w) and torch.equal(g.tensor("big.weight"), w)
    assert torch.equal(GGUFFile(path).tensor("big.weight"), w)  # the file as written
    small = g.mapped("small.bias")
    assert not _in_mapping_of(path.resolve(), small) and torch.equal(small, torch.linspace(-1, 1, 256))
    g16 = GGUFFile(half)
    copy = g16.mapped("big.weight")
    assert not _in_mapping_of(half.resolve(), copy) and torch.equal(copy, g16.tensor("big.weight"))
    monkeypatch.setenv("GGTTS_MMAP", "0")
    assert not _in_mapping_of(path.resolve(), GGUFFile(path).mapped("big.weight"))
    monkeypatch.delenv("GGTTS_MMAP")
    opened = GGUFFile(path)  # then another file renamed over its path, as ggtts writes files
    mw = ModelWriter(path, "kokoro", OutType.F32)
    mw.add_tensor("big.weight", w * 2)
    mw.add_tensor("small.bias", torch.zeros(256))
    mw.write()
    old = opened.mapped("big.weight")
    assert torch.equal(old, w) and not _in_mapping_of(path.resolve(), old)  # the file it read, copied


def test_a_file_cut_short_since_it_was_opened_is_one_error(tmp_path):
    """Reading a mapping past the file's end kills the process (SIGBUS): mapped() refuses it first."""
    path = tmp_path / "cut.gguf"
    mw = ModelWriter(path, "kokoro", OutType.F32)
    mw.add_tensor("big.weight", _weights(shape=(256, 512)))
    mw.write()
    g = GGUFFile(path)
    os.truncate(path, g.info("big.weight").offset + 1000)
    with pytest.raises(GGUFError, match=r"the file was cut short since it was opened \(tensor 'big\.weight'"):
        g.mapped("big.weight")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_module_loaded_on_the_cpu_reads_the_files_pages(tmp_path):
    """The strict loader gives a module built on the meta device the file's float32 pages themselves (its small
    tensors copied)."""
    from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf

    path = tmp_path / "linear.gguf"
    mw = ModelWriter(path, "kokoro", OutType.F32)
    mw.add_tensor("weight", _weights(shape=(256, 512)))
    mw.add_tensor("bias", torch.linspace(-1, 1, 256))
    mw.write()
    with empty_modules():
        layer = torch.nn.Linear(512, 256)
    load_module_from_gguf(layer, GGUFFile(path))
    assert torch.equal(layer.weight, _weights(shape=(256, 512)))
    assert _in_mapping_of(path.resolve(), layer.weight) and not _in_mapping_of(path.resolve(), layer.bias)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_mapped_tensors_hold_no_file_descriptor_each(tmp_path):
    """Twenty mapped weights: no descriptor held for any mapping beyond the GGUFFile's own (a
    process's limit is often 1,024: a few models of a few hundred tensors would reach it); each mapping is gone with
    its last tensor."""
    from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf

    path = tmp_path / "stack.gguf"
    mw = ModelWriter(path, "kokoro", OutType.F32)
    for i in range(20):
        mw.add_tensor(f"{i}.weight", _weights(seed=i, shape=(128, 128)))  # 64 KiB each: mapped
    mw.write()
    with empty_modules():
        stack = torch.nn.Sequential(*(torch.nn.Linear(128, 128, bias=False) for _ in range(20)))
    before = len(os.listdir("/proc/self/fd"))
    gguf = GGUFFile(path)
    load_module_from_gguf(stack, gguf)
    assert all(_in_mapping_of(path.resolve(), layer.weight) for layer in stack)
    assert len(os.listdir("/proc/self/fd")) <= before + 1  # the GGUFFile's map
    del gguf, stack
    import gc

    gc.collect()
    with open("/proc/self/maps") as f:
        assert not any(line.rstrip().endswith(str(path.resolve())) for line in f)
    assert len(os.listdir("/proc/self/fd")) <= before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="maps through libc (Linux)")
def test_a_tensor_that_cannot_be_mapped_is_one_error(tmp_path, monkeypatch):
    """mmap refused (out of address space, a limit on mappings): one GGUFError naming the tensor and why."""
    import ctypes
    import errno

    import ggtts.gguf.read as read

    path = tmp_path / "w.gguf"
    mw = ModelWriter(path, "kokoro", OutType.F32)
    mw.add_tensor("big.weight", _weights(shape=(256, 512)))
    mw.write()

    def refused(fd: int, offset: int, length: int) -> None:
        ctypes.set_errno(errno.ENOMEM)
        return None

    monkeypatch.setattr(read, "_map_privately", refused)
    with pytest.raises(GGUFError, match=r"cannot map tensor 'big\.weight' into memory \(Cannot allocate memory\)"):
        GGUFFile(path).mapped("big.weight")
