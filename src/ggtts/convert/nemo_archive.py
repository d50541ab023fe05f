"""Reading a NeMo ``.nemo`` checkpoint without NeMo: a tar of ``model_config.yaml``, ``model_weights.ckpt`` (a
torch state dict) and the artifacts the config names as ``nemo:<file>`` (phoneme dictionaries, speaker maps)."""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import ConversionError

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
ARTIFACT_PREFIX = "nemo:"


@dataclass
class NemoArchive:
    path: Path
    config: dict[str, Any]
    members: dict[str, tarfile.TarInfo]  # base name -> member
    _tar: tarfile.TarFile

    def artifact(self, ref: str) -> bytes:
        """The bytes of the artifact a config value names (``nemo:abc_dict.txt``)."""
        name = ref[len(ARTIFACT_PREFIX) :] if ref.startswith(ARTIFACT_PREFIX) else Path(ref).name
        member = self.members.get(name)
        if member is None:
            raise ConversionError(f"{self.path}: the config names {ref!r}, which the archive does not hold")
        f = self._tar.extractfile(member)
        if f is None:
            raise ConversionError(f"{self.path}: {name} in the archive is not a regular file")
        return f.read()

    def artifact_text(self, ref: str) -> str:
        return self.artifact(ref).decode("utf-8")

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights (``torch.load(weights_only=True)``: tensors and plain containers only)."""
        member = self.members.get(WEIGHTS)
        if member is None:
            raise ConversionError(f"{self.path}: no {WEIGHTS} in the archive: not a NeMo checkpoint")
        data = self.artifact(WEIGHTS)
        try:
            state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:
            raise ConversionError(f"{self.path}: {WEIGHTS} is not a readable torch checkpoint ({e})") from None
        if isinstance(state, dict) and "state_dict" in state:
            state = state["state_dict"]
        if not isinstance(state, dict):
            raise ConversionError(f"{self.path}: {WEIGHTS} holds no state dict")
        return state

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> NemoArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_nemo(path: Path) -> NemoArchive:
    """Open ``path`` and parse its config; one clear ConversionError if it is no ``.nemo`` checkpoint."""
    import yaml

    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        tar = tarfile.open(path, "r:*")  # noqa: SIM115 - kept open by the NemoArchive, closed by it
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ConversionError(f"{path}: not a .nemo checkpoint (not a readable tar archive: {e})") from None
    if CONFIG not in members:
        tar.close()
        raise ConversionError(f"{path}: no {CONFIG} in the archive: not a NeMo checkpoint")
    raw = tar.extractfile(members[CONFIG])
    try:
        config = yaml.safe_load(raw.read().decode("utf-8")) if raw is not None else None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        tar.close()
        raise ConversionError(f"{path}: {CONFIG} is not valid YAML ({e})") from None
    if not isinstance(config, dict):
        tar.close()
        raise ConversionError(f"{path}: {CONFIG} holds no mapping")
    return NemoArchive(path, config, members, tar)


def target_class(config: dict[str, Any]) -> str:
    """The model class a NeMo config was saved from (``MagpieTTSModel``), or ``""``."""
    return str(config.get("target", "")).rsplit(".", 1)[-1]
