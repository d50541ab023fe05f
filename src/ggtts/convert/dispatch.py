"""``ggtts convert NAME SRC... -o OUT``: the converter named NAME by one of the family records."""

from __future__ import annotations

from pathlib import Path

from ggtts.errors import ConversionError


def converter_names() -> dict[str, str]:
    """``ggtts convert`` names -> the family that owns each converter."""
    from ggtts.families import families

    return {name: family.name for family in families() for name in family.converters}


def convert(name: str, sources: list[Path], out: Path, out_type: str) -> Path:
    from ggtts.families import family_named

    if out.suffix.lower() != ".gguf":
        raise ConversionError(f"{out}: the output file must end in .gguf")
    owners = converter_names()
    if name not in owners:
        raise ConversionError(f"unknown model family '{name}'; choose one of {', '.join(owners)}")
    return family_named(owners[name]).converter(name)(sources, out, out_type)
