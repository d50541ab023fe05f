"""The public API: ``load`` a model by file or built-in name; the interface every family's model implements."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import MAX_SPEED, MIN_SPEED, AudioStream, TTSModel, check_speed, check_text
from ggtts.gguf import GGUFFile

DEFAULT_MODEL = "kokoro"

__all__ = ["DEFAULT_MODEL", "MAX_SPEED", "MIN_SPEED", "AudioStream", "TTSModel", "check_speed", "check_text", "load"]


def builtin_names() -> dict[str, str]:
    """Built-in model names -> "module:function" building their GGUF, as the family records declare them."""
    from ggtts.families import families

    return {name: target for family in families() for name, target in family.builtins.items()}


def resolve_model_path(path_or_name: str | os.PathLike[str] | None) -> Path:
    """A GGUF path for a file path or a built-in model name (``kokoro``, the default; ``piper-joe``, ...)."""
    if path_or_name is not None and not isinstance(path_or_name, str | os.PathLike):
        raise InputError(f"a model is a GGUF file's path or a built-in name, got {type(path_or_name).__name__}")
    name = DEFAULT_MODEL if path_or_name is None else os.fspath(path_or_name)
    if not isinstance(name, str):  # (a PathLike of bytes)
        raise InputError(f"a model's path must be text, got {type(name).__name__}")
    builtins = builtin_names()
    if name in builtins:
        from ggtts.families.base import import_target

        built: Path = import_target(builtins[name])()
        return built
    path = Path(name).expanduser()
    if not path.exists() and not path.suffix:
        raise GGTTSError(f"unknown model '{name}': give a .gguf file or a built-in name ({', '.join(builtins)})")
    return path


def load(path_or_name: str | os.PathLike[str] | None = None, device: str = "auto", **options: Any) -> TTSModel:
    """Load a model from a GGUF file, or the built-in default (``"kokoro"``, or no argument).

    ``device``: ``"auto"`` (CUDA where this torch has it, else the CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    ``options`` are the family's load options (its record's ``load_options``: ``precision=`` for Kokoro, say) and
    companion files (``vocoder=`` for OuteTTS); an unknown one, or a bad value, is an InputError before any
    weight is read. ``lexicon=`` (every family's): a pronunciation lexicon, a file's path or ``{written: said}``
    (:mod:`ggtts.text.lexicon`). The file's family is found from its metadata.
    """
    from ggtts.families import family_for
    from ggtts.runtime.device import resolve_device
    from ggtts.runtime.memory import tune_allocator
    from ggtts.text.lexicon import as_lexicon

    options = {key: value for key, value in options.items() if value is not None}  # (None: not given, as per call)
    gguf = GGUFFile(resolve_model_path(path_or_name))
    family = family_for(gguf)
    family.check_load_options({"device": device, **options})
    device = resolve_device(device)
    tune_allocator()
    lexicon = as_lexicon(options.pop("lexicon", None))  # every family's: the model reads it, no loader does
    model = family.model_class().from_gguf(gguf, device=device, **options)
    model.lexicon = lexicon
    return model
