"""The list of model families. Adding one = a new package here (its record in ``__init__``) + one line below.

Each record (:class:`~ggtts.families.base.Family`) is light to import: its pipeline, models and converters are
named as ``"module:name"`` and imported only when used, so ``ggtts info`` and ``ggtts --help`` stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ggtts.errors import ConversionError, UnsupportedArchitectureError
from ggtts.families import kokoro, magpie, outetts, piper, qwen3omni, qwen3tts
from ggtts.families.base import Family

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile

_FAMILIES: list[Family] = [
    kokoro.FAMILY,
    outetts.FAMILY,
    magpie.FAMILY,
    qwen3omni.FAMILY,
    piper.FAMILY,
    qwen3tts.FAMILY,
]


def families() -> list[Family]:
    return list(_FAMILIES)


def register_family(family: Family) -> Family:
    """Add a family (a plug-in, or a test's toy family); its name must be new."""
    if any(f.name == family.name for f in _FAMILIES):
        raise ValueError(f"a family named '{family.name}' is registered already")
    _FAMILIES.append(family)
    return family


def unregister_family(name: str) -> None:
    _FAMILIES[:] = [f for f in _FAMILIES if f.name != name]


def family_named(name: str) -> Family:
    for family in _FAMILIES:
        if family.name == name:
            return family
    raise UnsupportedArchitectureError(f"unknown model family '{name}'; choose one of {', '.join(names())}")


def names() -> list[str]:
    return [f.name for f in _FAMILIES]


def supported_architectures() -> list[str]:
    return sorted({a for f in _FAMILIES for a in f.architectures})


def claiming(architecture: str) -> list[Family]:
    return [f for f in _FAMILIES if architecture in f.architectures]


def family_for(gguf: GGUFFile) -> Family:
    """The family whose model this file is, from its metadata alone; one clear error when none is."""
    arch = gguf.architecture
    candidates = claiming(arch)
    if not candidates:
        raise UnsupportedArchitectureError(
            f"{gguf.path}: unsupported architecture '{arch}'; supported: {', '.join(supported_architectures())}"
        )
    reasons = []
    for family in candidates:
        reason = family.recognize(gguf)
        if reason is None:
            return family
        reasons.append(reason)
    raise UnsupportedArchitectureError(f"{gguf.path}: {'; '.join(reasons)}")


def converter_names() -> dict[str, str]:
    """``ggtts convert`` names -> the family that owns each converter."""
    return {name: family.name for family in _FAMILIES for name in family.converters}


def convert(name: str, sources: list[Path], out: Path, out_type: str) -> Path:
    """``ggtts convert NAME SRC... -o OUT``: the converter named NAME by one of the records."""
    if out.suffix.lower() != ".gguf":
        raise ConversionError(f"{out}: the output file must end in .gguf")
    owners = converter_names()
    if name not in owners:
        raise ConversionError(f"unknown model family '{name}'; choose one of {', '.join(owners)}")
    return family_named(owners[name]).converter(name)(sources, out, out_type)


__all__ = [
    "Family",
    "claiming",
    "convert",
    "converter_names",
    "families",
    "family_for",
    "family_named",
    "names",
    "register_family",
    "supported_architectures",
    "unregister_family",
]
