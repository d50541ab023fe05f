"""``GGUFFile``'s typed metadata getters: the value with its type, a default for an absent key, and one clear
error naming the key for a missing required key or a value of the wrong type."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile, ModelWriter


@pytest.fixture
def gguf(tmp_path: Path) -> GGUFFile:
    writer = ModelWriter(tmp_path / "m.gguf", "test")
    writer.add("test.count", 7)
    writer.add("test.eps", 1e-5)
    writer.add("test.name", "seven")
    writer.add("test.names", ["a", "b"])
    writer.add_tensor("w", torch.zeros(2))
    writer.write()
    return GGUFFile(tmp_path / "m.gguf")


def test_values_with_their_types(gguf: GGUFFile) -> None:
    assert gguf.get_int("test.count") == 7 and type(gguf.get_int("test.count")) is int
    assert gguf.get_float("test.eps") == pytest.approx(1e-5) and gguf.get_float("test.count") == 7.0
    assert gguf.get_str("test.name") == "seven"
    assert gguf.get_list("test.names") == ["a", "b"]
    assert gguf.get_int("test.absent", 3) == 3 and gguf.get_str("test.absent", "x") == "x"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.get_int("test.absent"), r"m\.gguf: missing metadata key 'test\.absent'"),
        (lambda g: g.get_int("test.name"), r"metadata key 'test\.name' should be an integer, not 'seven'"),
        (lambda g: g.get_int("test.eps"), r"'test\.eps' should be an integer, not 9\.99999"),  # float32 1e-5
        (lambda g: g.get_float("test.names"), r"'test\.names' should be a number, not \['a', 'b'\]"),
        (lambda g: g.get_str("test.count"), r"'test\.count' should be a string, not 7"),
        (lambda g: g.get_list("test.name"), r"'test\.name' should be an array, not 'seven'"),
    ],
)
def test_missing_or_mistyped_is_one_clear_error(gguf: GGUFFile, call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GGUFError, match=message):
        call(gguf)
