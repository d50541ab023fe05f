"""The OuteTTS converter reads Hugging Face weights with ``safetensors.safe_open``: every dtype a checkpoint
uses comes back as float32, and a damaged file is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ggtts.convert.outetts_hf import read_safetensors
from ggtts.errors import ConversionError


def test_each_dtype_comes_back_as_float32(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "a.f32": torch.randn(3, 4, generator=g),
        "b.f16": torch.randn(5, generator=g).half(),
        "c.bf16": torch.randn(2, 2, generator=g).bfloat16(),
    }
    save_file(tensors, str(tmp_path / "m.safetensors"))
    got = dict(read_safetensors(tmp_path / "m.safetensors"))
    assert sorted(got) == sorted(tensors)
    for name, tensor in tensors.items():
        assert got[name].dtype == torch.float32
        assert torch.equal(got[name], tensor.float())


def test_a_damaged_file_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ConversionError, match=r"bad\.safetensors: not a readable safetensors file"):
        list(read_safetensors(bad))
