"""Copies of GGUF files with a few things changed, for the tests that feed damaged model files to the loaders."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import torch

from ggtts.gguf import GGUFFile, ModelWriter


def variant(
    src: Path,
    dst: Path,
    meta: dict[str, Any] | None = None,
    tensors: dict[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    drop: Collection[str] = (),
) -> Path:
    """A copy of ``src`` with some metadata values changed, some tensors changed (each by a function) and the
    metadata keys or tensors named in ``drop`` left out."""
    g = GGUFFile(src)
    writer = ModelWriter(dst, g.architecture)
    for key, value in {**g.metadata, **(meta or {})}.items():
        if key not in ("general.architecture", "general.file_type", *drop):
            writer.add(key, value)
    for name in g.names():
        if name not in drop:
            writer.add_tensor(name, (tensors or {}).get(name, lambda t: t)(g.tensor(name)))
    return writer.write()


def poison(value: float, at: int = 3) -> Callable[[torch.Tensor], torch.Tensor]:
    """A change that writes ``value`` at flat position ``at`` (modulo the tensor's size)."""

    def change(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t.view(-1)[at % t.numel()] = value
        return t

    return change
