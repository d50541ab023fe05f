"""Every kind of bad GGUF file gets one clear line naming the file and the problem, via `ggtts info`."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader

from ggtts.cli import main
from ggtts.families import family_for
from ggtts.gguf import GGUFFile, ModelWriter


def _valid(path: Path, arch: str = "kokoro") -> Path:
    mw = ModelWriter(path, arch)
    mw.add("kokoro.n_token", 178)
    mw.add("kokoro.voices", ["af_test"])
    mw.add_tensor("a.weight", torch.ones(8, 32))
    mw.add_tensor("b.weight", torch.ones(4, 32))
    mw.write()
    return path


def _tensor_info_offsets(path: Path, name: str) -> tuple[int, int]:
    """Byte offsets of the tensor's type id and data offset fields in its tensor-info record."""
    reader = GGUFReader(path)
    t = next(t for t in reader.tensors if t.name == name)
    type_at = t.field.offset + 8 + len(name.encode()) + 4 + 8 * len(t.shape)
    return type_at, type_at + 4


def _patch(path: Path, at: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def make_not_gguf(p: Path) -> None:
    p.write_text("this is a text file, not a model\n")


def make_empty(p: Path) -> None:
    p.write_bytes(b"")


def make_truncated_header(p: Path) -> None:
    _truncate(_valid(p), 12)


def make_truncated_metadata(p: Path) -> None:
    _valid(p)
    reader = GGUFReader(p)
    _truncate(p, reader.fields["kokoro.voices"].offset + 10)


def make_truncated_tensor_data(p: Path) -> None:
    _valid(p)
    _truncate(p, p.stat().st_size - 16)


def make_wrong_version(p: Path) -> None:
    _patch(_valid(p), 4, struct.pack("<I", 99))


def make_tensor_past_end(p: Path) -> None:
    _valid(p)
    _, offset_at = _tensor_info_offsets(p, "a.weight")
    _patch(p, offset_at, struct.pack("<Q", 1 << 40))


def make_unsupported_type(p: Path) -> None:
    _valid(p)
    type_at, _ = _tensor_info_offsets(p, "a.weight")
    _patch(p, type_at, struct.pack("<I", int(GGMLQuantizationType.Q8_K)))


def make_unknown_type_id(p: Path) -> None:
    _valid(p)
    type_at, _ = _tensor_info_offsets(p, "a.weight")
    _patch(p, type_at, struct.pack("<I", 250))


CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("not_gguf", make_not_gguf, r"not a GGUF file"),
    ("empty", make_empty, r"the file is empty"),
    ("truncated_header", make_truncated_header, r"the header is truncated \(12 of 24 bytes\)"),
    ("truncated_metadata", make_truncated_metadata, r"metadata or tensor table is truncated or corrupt"),
    ("truncated_tensor_data", make_truncated_tensor_data, r"tensor 'b.weight' .* extends past the end of the file"),
    ("wrong_version", make_wrong_version, r"unsupported GGUF version 99 \(supported: 2, 3\)"),
    ("tensor_past_end", make_tensor_past_end, r"tensor 'a.weight' .* extends past the end of the file"),
    ("unsupported_type", make_unsupported_type, r"tensor 'a.weight' has unsupported tensor type Q8_K"),
    ("unknown_type_id", make_unknown_type_id, r"tensor 'a.weight' has unknown tensor type id 250"),
]


@pytest.mark.parametrize(("case", "make", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_file_gets_one_clear_line(tmp_path, capsys, case, make, message):
    path = tmp_path / f"{case}.gguf"
    make(path)
    status = main(["info", str(path)])
    _, err = capsys.readouterr()
    assert status != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert str(path) in lines[0]
    assert pytest.importorskip("re").search(message, lines[0]), lines[0]


def test_unreadable_file(tmp_path, capsys, monkeypatch):
    path = _valid(tmp_path / "locked.gguf")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads files whatever their mode: the system's refusal is played here
        real_open = Path.open

        def refuse(self: Path, *args, **kwargs):
            if self == path:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", refuse)
    assert main(["info", str(path)]) != 0
    assert "locked.gguf: cannot read (Permission denied)" in capsys.readouterr().err


def test_directory_is_not_a_gguf_file(tmp_path, capsys):
    assert main(["info", str(tmp_path)]) != 0
    assert "is a directory, not a GGUF file" in capsys.readouterr().err


def test_missing_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nope.gguf")]) != 0
    assert "nope.gguf: no such file" in capsys.readouterr().err


def test_unknown_architecture_lists_supported(tmp_path, capsys):
    path = _valid(tmp_path / "llama.gguf", arch="llama")
    with pytest.raises(Exception, match=r"unsupported architecture 'llama'; supported: .*kokoro"):
        family_for(GGUFFile(path))
    assert main(["speak", "hello", "-m", str(path), "-o", str(tmp_path / "x.wav")]) != 0
    err = capsys.readouterr().err
    assert "unsupported architecture 'llama'; supported:" in err and "kokoro" in err
    assert not (tmp_path / "x.wav").exists()


def test_info_on_written_file(tmp_path, capsys):
    path = _valid(tmp_path / "ok.gguf")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "architecture: kokoro" in out
    assert "voices (1): af_test" in out
    assert "kokoro.n_token = 178" in out
    assert "tensors: 2 (F32 2)" in out
    assert "tensor data: 1.5 KiB (1536 bytes)" in out
