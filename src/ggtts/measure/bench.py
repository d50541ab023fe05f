"""``ggtts bench``: the benchmark of the model file's family, which its record names (Kokoro's:
:mod:`ggtts.families.kokoro.bench`)."""

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
