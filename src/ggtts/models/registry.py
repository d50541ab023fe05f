"""``general.architecture`` -> the class that builds a ready-to-use model from a GGUF file."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ggtts.errors import UnsupportedArchitectureError

if TYPE_CHECKING:
    from ggtts.api import TTSModel
    from ggtts.gguf import GGUFFile

T = TypeVar("T", bound="type[TTSModel]")

# Modules that register architectures when imported; imported lazily so `ggtts info` stays fast.
_PROVIDERS: tuple[str, ...] = ("ggtts.pipelines.kokoro", "ggtts.pipelines.outetts")
_REGISTRY: dict[str, type[TTSModel]] = {}


def register(arch: str) -> Callable[[T], T]:
    def deco(cls: T) -> T:
        if arch in _REGISTRY and _REGISTRY[arch] is not cls:
            raise ValueError(f"architecture '{arch}' registered twice")
        _REGISTRY[arch] = cls
        return cls

    return deco


def _import_providers() -> None:
    for module in _PROVIDERS:
        importlib.import_module(module)


def supported_architectures() -> list[str]:
    _import_providers()
    return sorted(_REGISTRY)


def model_class(arch: str, *, source: object = "") -> type[TTSModel]:
    _import_providers()
    try:
        return _REGISTRY[arch]
    except KeyError:
        where = f"{source}: " if source else ""
        raise UnsupportedArchitectureError(
            f"{where}unsupported architecture '{arch}'; supported: {', '.join(sorted(_REGISTRY))}"
        ) from None


def build(gguf: GGUFFile, device: str = "cpu", **options: Any) -> TTSModel:
    cls = model_class(gguf.architecture, source=gguf.path)
    return cls.from_gguf(gguf, device=device, **options)
