"""Reading a NeMo ``.nemo`` checkpoint without NeMo: a tar (or gzipped tar) of ``model_config.yaml``,
``model_weights.ckpt`` (a torch state dict) and the artifacts the config names as ``nemo:<file>`` (phoneme
dictionaries, speaker maps). Every failure is one line naming the file and what is wrong with it."""

from __future__ import annotations

import io
import posixpath
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import ConversionError

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
ARTIFACT_PREFIX = "nemo:"
MAX_CONFIG_DEPTH = 64  # nesting plus interpolation hops: a loop of ${...} references stops here
TAR_MAGIC = (257, b"ustar")  # offset and bytes of the POSIX tar magic in the first header
GZIP_MAGIC = b"\x1f\x8b"  # NeMo can also write gzip-compressed archives
_INTERPOLATION = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")
_READ_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)


def one_line(e: BaseException) -> str:
    """An exception as one line (tarfile's and torch's messages run over several)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _starts_like_an_archive(path: Path) -> bool:
    with path.open("rb") as f:
        head = f.read(512)
    offset, magic = TAR_MAGIC
    return head[offset : offset + len(magic)] == magic or head.startswith(GZIP_MAGIC)


def resolve(node: Any, root: dict[str, Any], path: Path, depth: int = 0) -> Any:
    """OmegaConf's ``${a.b}`` interpolations (a whole value, from the config's root) replaced by their values."""
    if depth > MAX_CONFIG_DEPTH:
        raise ConversionError(f"{path}: {CONFIG} nests or refers to itself too deeply")
    if isinstance(node, dict):
        return {k: resolve(v, root, path, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, root, path, depth + 1) for v in node]
    if isinstance(node, str) and (m := _INTERPOLATION.fullmatch(node)):
        value: Any = root
        for part in m.group(1).split("."):
            if not isinstance(value, dict) or part not in value:
                raise ConversionError(f"{path}: {CONFIG} refers to '{node}', which it does not define")
            value = value[part]
        return resolve(value, root, path, depth + 1)
    return node


@dataclass
class NemoArchive:
    path: Path
    config: dict[str, Any]  # interpolations resolved
    members: dict[str, tarfile.TarInfo]  # top-level name -> member
    _tar: tarfile.TarFile

    def read(self, name: str) -> bytes:
        """The bytes of the top-level member ``name``; one clear error if it is missing or cut short."""
        member = self.members.get(name)
        if member is None:
            raise ConversionError(f"{self.path}: the .nemo archive has no {name}: is this a NeMo model file?")
        try:
            handle = self._tar.extractfile(member)
            data = handle.read() if handle is not None else b""
        except _READ_ERRORS as e:
            raise ConversionError(f"{self.path}: the .nemo archive is truncated or damaged ({one_line(e)})") from None
        if len(data) != member.size:
            raise ConversionError(f"{self.path}: {name} in the .nemo archive is truncated")
        return data

    def artifact_text(self, ref: str) -> str:
        """The text of the artifact a config value names (``nemo:abc_dict.txt``)."""
        name = ref[len(ARTIFACT_PREFIX) :] if ref.startswith(ARTIFACT_PREFIX) else Path(ref).name
        if name not in self.members:
            raise ConversionError(f"{self.path}: the config names {ref!r}, which the archive does not hold")
        try:
            return self.read(name).decode("utf-8")
        except UnicodeDecodeError:
            raise ConversionError(f"{self.path}: {name} in the archive is not UTF-8 text") from None

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights' tensors (``torch.load(weights_only=True)``: tensors and plain containers only)."""
        data = self.read(WEIGHTS)
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # a damaged zip, or pickled objects beyond tensors
            raise ConversionError(
                f"{self.path}: {WEIGHTS} is not a readable state dict, is it truncated? ({one_line(e)})"
            ) from None
        if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
            state = state["state_dict"]
        if not isinstance(state, dict):
            raise ConversionError(f"{self.path}: {WEIGHTS} holds no state dict of tensors")
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> NemoArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_nemo(path: Path) -> NemoArchive:
    """Open ``path`` and parse its config; one clear ConversionError if it is no readable ``.nemo`` checkpoint."""
    import yaml  # gguf's dependency too

    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    tar = None
    try:
        tar = tarfile.open(path, "r:*")  # noqa: SIM115 - the NemoArchive keeps it open and closes it
        members = {posixpath.normpath(m.name): m for m in tar.getmembers() if m.isfile()}
    except _READ_ERRORS as e:
        if tar is not None:
            tar.close()
            raise ConversionError(f"{path}: the .nemo archive is truncated or damaged ({one_line(e)})") from None
        if not _starts_like_an_archive(path):  # tarfile's reason lists every compression it tried
            raise ConversionError(f"{path}: not a .nemo archive (a tar file)") from None
        raise ConversionError(f"{path}: the .nemo archive is truncated or damaged") from None
    archive = NemoArchive(path, {}, members, tar)
    try:
        config = yaml.safe_load(archive.read(CONFIG))
    except yaml.YAMLError as e:
        archive.close()
        raise ConversionError(f"{path}: {CONFIG} is not valid YAML ({type(e).__name__})") from None
    except ConversionError:
        archive.close()
        raise
    if not isinstance(config, dict):
        archive.close()
        raise ConversionError(f"{path}: {CONFIG} is not a mapping of settings")
    archive.config = resolve(config, config, path)
    return archive


def target_class(config: dict[str, Any]) -> str:
    """The model class a NeMo config was saved from (``MagpieTTSModel``), or ``""``."""
    return str(config.get("target", "")).rsplit(".", 1)[-1]
