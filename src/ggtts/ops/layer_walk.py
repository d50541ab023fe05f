"""The layers of a module that a loader may swap for ones holding a file's stored weights."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

__all__ = ["weight_layers"]


def weight_layers(
    module: nn.Module, kinds: type | tuple[type, ...], gguf_name: Callable[[str], str]
) -> Iterator[tuple[nn.Module, str, Any, str]]:
    """Each layer of ``module`` (at any depth) that is one of ``kinds``: its parent, its attribute name there, the
    layer (typed ``Any``: one of ``kinds``), and the file's name of its weight (``gguf_name`` of ``path.weight``).
    The layers are listed before the first is yielded, so the caller may swap each as it comes."""
    for parent_name, parent in list(module.named_modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, kinds):
                path = f"{parent_name}.{child_name}" if parent_name else child_name
                yield parent, child_name, child, gguf_name(f"{path}.weight")
