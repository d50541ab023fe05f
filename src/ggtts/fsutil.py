"""File output: check early that a target can be written, then write it atomically (under a temporary name beside
the target, renamed into place on success)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ggtts.errors import GGTTSError, OutputError  # (OutputError is imported from here too)

PART_SUFFIX = ".part"  # the temporary file's suffix while it is written


def _default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _part_prefix(target: Path) -> str:
    """The start of the name of ``target``'s temporary file while :func:`atomic_output` writes it."""
    return f".{target.name}."


def remove_stale_parts_of(targets: Iterable[Path]) -> None:
    """The temporary files a writer of ``targets`` killed outright (``kill -9``) left beside them: theirs only."""
    for target in targets:
        for part in target.parent.glob(f"{glob.escape(_part_prefix(target))}*{PART_SUFFIX}"):
            with contextlib.suppress(OSError):
                part.unlink()


def _nearest_existing(directory: Path) -> Path:
    """``directory`` or its nearest ancestor that exists (what ``mkdir(parents=True)`` would create under)."""
    while not directory.exists() and directory.parent != directory:
        directory = directory.parent
    return directory


def check_writable(target: str | os.PathLike[str], *, new_folders: bool = False) -> None:
    """An :class:`OutputError` unless :func:`atomic_output` can write ``target``; run it before any long work.

    ``target`` must not be a directory, and its folder must exist (as for any command-line tool: a mistyped folder
    is not made; ``new_folders``: its nearest existing ancestor, for a folder the caller makes, as ``batch --out``
    does) and be a directory in which a file can really be made: one is created and removed, which catches
    read-only mounts and places like ``/sys`` that permission bits do not tell about.
    """
    target = Path(target)
    try:
        is_dir = target.is_dir()
        where = _nearest_existing(target.parent)
        where_is_dir = where.is_dir()
    except OSError as e:  # a name too long, a folder that cannot be searched
        raise OutputError(f"{target}: cannot write the output ({e.strerror or e})") from None
    if is_dir:
        raise OutputError(f"{target}: cannot write the output: it is a directory")
    if not where_is_dir:
        raise OutputError(f"{target}: cannot write the output: {where} is not a directory")
    if where != target.parent and not new_folders:
        raise OutputError(f"{target}: cannot write the output: there is no folder {target.parent} (make it first)")
    try:
        fd, name = tempfile.mkstemp(prefix=_part_prefix(target), suffix=PART_SUFFIX, dir=where)
    except OSError as e:
        raise OutputError(
            f"{target}: cannot write the output: cannot create a file in {where} ({e.strerror})"
        ) from None
    os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)


@contextlib.contextmanager
def atomic_output(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it becomes ``target``, on failure it is removed.

    A failure never leaves a half-written file under the requested name, and readers never see one. A file system
    error (no space, read-only, not a directory) is an :class:`OutputError` naming ``target``.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=_part_prefix(target), suffix=PART_SUFFIX, dir=target.parent)
    except OSError as e:
        raise OutputError(f"{target}: cannot write the output ({e.strerror or e})") from e
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, _default_mode())  # mkstemp creates 0600; the result should look like any new file
        yield tmp
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and not isinstance(e, GGTTSError):
            raise OutputError(f"{target}: cannot write the output ({e.strerror or e})") from e
        raise


def cache_dir() -> Path:
    """ggtts's one cache folder: ``$GGTTS_HOME``, else ``$XDG_CACHE_HOME/ggtts``, else ``~/.cache/ggtts``."""
    if home := os.environ.get("GGTTS_HOME"):
        return Path(home).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "ggtts"
    return Path.home() / ".cache" / "ggtts"


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def missing_file_error(text: str, what: str) -> None:
    """An InputError where ``text`` (an argument that is a file's path or the ``what`` itself) reads as a file's
    name (a suffix of letters, as ``codes.txt``) and no such file is there: a mistyped name, not bad ``what``."""
    from ggtts.errors import InputError

    if "\n" in text:
        return
    suffix = Path(text).suffix[1:]
    if suffix.isascii() and suffix.isalpha() and not names_a_file(Path(text)):
        raise InputError(f"{text}: no such file (give {what} as a file that is there, or as the {what} themselves)")


def names_a_file(path: Path) -> bool:
    """Whether ``path`` is a file; False where it cannot name one (too long for a file name, say: an argument that
    holds the data itself), where ``Path.is_file`` would raise."""
    try:
        return path.is_file()
    except OSError:
        return False
