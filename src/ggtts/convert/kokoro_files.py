"""``ggtts convert kokoro SOURCES``: pick the Kokoro converter by the kinds of files given."""

from __future__ import annotations

from pathlib import Path

from ggtts.errors import ConversionError
from ggtts.gguf.write import refuse_low_bit


def _by_suffix(sources: list[Path]) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for src in sources:
        if not src.exists():
            raise ConversionError(f"{src}: no such file")
        groups.setdefault(src.suffix.lower(), []).append(src)
    return groups


def _one(groups: dict[str, list[Path]], suffix: str, what: str) -> Path | None:
    found = groups.get(suffix, [])
    if len(found) > 1:
        raise ConversionError(f"give one {what} ({suffix}), got {len(found)}")
    return found[0] if found else None


def convert_kokoro(sources: list[Path], out: Path, out_type: str) -> Path:
    refuse_low_bit(out_type, "Kokoro")
    groups = _by_suffix(sources)
    config = _one(groups, ".json", "config.json")
    onnx = _one(groups, ".onnx", "ONNX model")
    pth = _one(groups, ".pth", "checkpoint")
    voices = groups.get(".pt", []) + groups.get(".npz", [])
    if (onnx is None) == (pth is None):
        raise ConversionError("give exactly one Kokoro model: a hexgrad .pth (with config.json) or an .onnx export")
    if not voices:
        raise ConversionError("give at least one voicepack (.pt or .npz)")
    if onnx is not None:
        from ggtts.convert.kokoro_onnx import convert_onnx

        convert_onnx(onnx, voices, out, out_type=out_type, config_json=config)
        return out
    if config is None:
        raise ConversionError("a .pth checkpoint needs its config.json")
    from ggtts.convert.kokoro_pth import convert_pth

    assert pth is not None
    convert_pth(pth, config, voices, out, out_type)
    return out
