"""A Hugging Face checkpoint directory read lazily: ``config.json`` and the tensors of its ``.safetensors`` shards.

A Qwen3-Omni checkpoint is 70 GB: :class:`LazyTensors` maps each tensor name to its shard and reads a tensor only
when it is indexed (``safetensors.safe_open``), so a converter that writes one part of the model reads only that
part, and (with :class:`~ggtts.gguf.write.Deferred` tensors) one tensor at a time as the file is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import ConversionError


class LazyTensors(Mapping[str, torch.Tensor]):
    """Checkpoint tensor name -> tensor (float32), read from its shard on each access."""

    def __init__(self, shards: list[Path]) -> None:
        from safetensors import SafetensorError, safe_open

        self._where: dict[str, Path] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}  # from the headers, read once here
        for shard in shards:
            try:
                with safe_open(str(shard), framework="pt") as f:
                    for name in f.keys():  # noqa: SIM118 - safe_open is no mapping
                        self._where[name] = shard
                        self._shapes[name] = tuple(f.get_slice(name).get_shape())
            except SafetensorError as e:
                raise ConversionError(f"{shard}: not a readable safetensors file ({e})") from None

    def __getitem__(self, name: str) -> torch.Tensor:
        from safetensors import safe_open

        shard = self._where[name]
        with safe_open(str(shard), framework="pt") as f:
            return f.get_tensor(name).to(torch.float32)

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of ``name`` from its shard's header, without reading the tensor."""
        return self._shapes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


class HFCheckpoint:
    """``config.json`` (parsed), the directory (for tokenizer files) and the lazily read tensors."""

    def __init__(self, sources: list[Path], what: str) -> None:
        if len(sources) != 1 or not sources[0].is_dir():
            raise ConversionError(f"give the {what} checkpoint's directory (config.json and *.safetensors)")
        self.dir = sources[0]
        config = self.dir / "config.json"
        if not config.is_file():
            raise ConversionError(f"{self.dir}: no config.json; not a Hugging Face checkpoint directory")
        try:
            self.config: dict[str, Any] = json.loads(config.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConversionError(f"{config}: not valid JSON ({e})") from None
        shards = sorted(self.dir.glob("*.safetensors"))
        if not shards:
            raise ConversionError(f"{self.dir}: no .safetensors weights")
        self.tensors = LazyTensors(shards)


def sub_config(config: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    """``config[name]``, which must be a dict (a ConversionError naming ``where`` otherwise)."""
    value = config.get(name)
    if not isinstance(value, dict):
        raise ConversionError(f"{where}: config.json has no '{name}' section")
    return value
