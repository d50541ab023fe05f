"""``ggtts bench``: the benchmark of the model file's family, which its record names (Kokoro's:
:mod:`ggtts.measure.kokoro.bench`)."""

from __future__ import annotations

import argparse

from ggtts.errors import GGTTSError


def run(args: argparse.Namespace) -> int:
    from ggtts.api import resolve_model_path
    from ggtts.families import family_for
    from ggtts.families.base import import_target
    from ggtts.gguf import GGUFFile

    model_path = resolve_model_path(args.model)
    family = family_for(GGUFFile(model_path))
    if family.bench is None:
        raise GGTTSError(f"{model_path}: no benchmark for the {family.name} family yet")
    status: int = import_target(family.bench)(args, model_path)
    return status


def cpu_model() -> str:
    """The processor's name from /proc/cpuinfo ("unknown" elsewhere): benchmarks print it beside their figures."""
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
