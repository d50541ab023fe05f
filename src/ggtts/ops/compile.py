"""``torch.compile`` for a model's hot path, with a clean fall back to eager execution.

Inductor fuses the elementwise work between convolutions (normalisation, activations, residual adds) into a few
loops instead of one pass over memory per operation. It compiles once per process on first use (tens of seconds
on 2 cores; its on-disk cache in the system's temporary directory makes later processes' compiles shorter), with
dynamic shapes, so inputs of other lengths reuse the same code. On CPU it needs a C++ compiler; where there is
none, or where compiling fails for any other reason, :class:`CompiledOrEager` says so once in the log and runs the
function eagerly from then on: the same results, at eager speed.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

__all__ = ["CompiledOrEager", "compiler_missing"]

CXX_CANDIDATES = ("g++", "c++", "clang++")  # what inductor's CPU backend can build with


def compiler_missing(device: torch.device | str = "cpu") -> str | None:
    """Why ``torch.compile`` cannot build code for ``device`` here, or None when it can try."""
    if torch.device(device).type != "cpu":
        return None  # GPU kernels are built by Triton, which ships with torch
    wanted = os.environ.get("CXX")
    found = shutil.which(wanted) if wanted else next(filter(None, map(shutil.which, CXX_CANDIDATES)), None)
    if found is None:
        return f"no C++ compiler found ({wanted or ', '.join(CXX_CANDIDATES)}), which torch.compile needs on CPU"
    return None


def compiler_errors() -> tuple[type[BaseException], ...]:
    """The exceptions by which dynamo and inductor say they could not compile (not errors of the inputs)."""
    from torch._dynamo import exc as dynamo
    from torch._inductor import exc as inductor

    return (
        dynamo.BackendCompilerFailed,  # inductor's errors arrive as this (InductorError is one)
        dynamo.InternalTorchDynamoError,
        dynamo.Unsupported,
        inductor.CppCompileError,
        inductor.InvalidCxxCompiler,
    )


class CompiledOrEager:
    """``fn`` compiled by ``torch.compile`` (dynamic shapes unless ``dynamic=False``: a step of fixed shapes), or
    ``fn`` itself where that cannot be done.

    The first call compiles (so may a call whose shapes need another compile). If compiling fails
    (:func:`compiler_errors`), that is logged once, the call is made again eagerly, and every later call is eager.
    Any other error (a bad input, memory) is raised as it is and compiling stays on. The model's weights are taken
    as fixed once compiled."""

    def __init__(
        self, fn: Callable[..., Any], what: str, device: torch.device | str = "cpu", *, dynamic: bool = True
    ) -> None:
        self.fn, self.what = fn, what
        self.compiled: Callable[..., Any] | None = None
        reason = compiler_missing(device)
        if reason is not None:
            log.warning("%s runs eagerly: %s", what, reason)
        else:
            self.compiled = torch.compile(fn, dynamic=dynamic)

    @property
    def active(self) -> bool:
        """Whether calls still go through the compiled code."""
        return self.compiled is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self.compiled  # read once: another thread may turn it off meanwhile
        if compiled is not None:
            try:
                return compiled(*args, **kwargs)
            except compiler_errors() as e:
                if self.compiled is not None:
                    log.warning("%s runs eagerly: torch.compile failed (%s: %s)", self.what, type(e).__name__, e)
                    self.compiled = None
        return self.fn(*args, **kwargs)
