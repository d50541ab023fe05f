"""``ggtts bench``: the benchmark of the model file's family, which its record names (Kokoro's:
:mod:`ggtts.measure.kokoro.bench`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ggtts.errors import GGTTSError, InputError
from ggtts.runtime.lifetime import signals_interrupt


def run(args: argparse.Namespace) -> int:
    from ggtts.api import resolve_model_path
    from ggtts.families import family_for
    from ggtts.families.base import import_target
    from ggtts.gguf import GGUFFile

    if args.plot is not None:  # before any work (building the default model is some)
        check_plot_path(args.plot)
    with signals_interrupt():
        model_path = resolve_model_path(args.model)
        family = family_for(GGUFFile(model_path))
        if family.bench is None:
            raise GGTTSError(f"{model_path}: no benchmark for the {family.name} family yet")
        status: int = import_target(family.bench)(args, model_path)
    return status


def check_plot_path(path: str) -> str:
    """The image format ``--plot PATH`` names by its suffix (one matplotlib writes), once PATH can be written; else one
    error naming what is wrong."""
    from ggtts.fsutil import check_writable

    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ModuleNotFoundError:
        raise GGTTSError("--plot needs the Python package 'matplotlib', which is not installed") from None
    formats = {f: name for f, name in FigureCanvasBase.get_supported_filetypes().items() if f != "pgf"}  # (LaTeX)
    choices = ", ".join(f".{f}" for f in sorted(formats))
    suffix = Path(path).suffix.lower().removeprefix(".")
    if not suffix:
        raise InputError(f"{path}: --plot needs the image format as the file's suffix ({choices})")
    if suffix not in formats:
        raise InputError(f"{path}: --plot cannot draw '.{suffix}' images; use one of {choices}")
    check_writable(path)
    return suffix


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
