"""Fill an ``nn.Module`` from a GGUF file whose tensor names are the module's parameter names.

Loading is strict: a tensor the module needs and the file lacks, or a tensor in the file the module has no
place
for, is an error naming the tensor. The one shape transform allowed is llama.cpp's broadcast layout for
per-channel
vectors: ``(C, 1)`` (ggml ``{1, C}``) is accepted for a ``(C,)`` parameter.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile


def _fit(name: str, tensor: torch.Tensor, want: torch.Size, gguf: GGUFFile) -> torch.Tensor:
    if tensor.shape == want:
        return tensor
    if len(want) == 1 and tensor.shape == (want[0], 1):  # llama.cpp stores conv biases and norms as (C, 1)
        return tensor.reshape(want)
    raise GGUFError(f"{gguf.path}: tensor '{name}' has shape {list(tensor.shape)}, expected {list(want)}")


def load_module_from_gguf(
    module: nn.Module,
    gguf: GGUFFile,
    *,
    optional: Iterable[str] = (),
    ignore: Iterable[str] = (),
) -> set[str]:
    """Copy every parameter/persistent buffer of ``module`` from the same-named GGUF tensor.

    ``optional`` names may be missing from the file (they are returned so the caller can act, e.g. tie
    weights);
    ``ignore`` names may be present in the file without a place in the module. Returns the missing optional
    names.
    """
    optional_set, ignore_set = set(optional), set(ignore)
    state = module.state_dict()
    file_names = set(gguf.names())
    missing = [n for n in state if n not in file_names and n not in optional_set]
    if missing:
        raise GGUFError(
            f"{gguf.path}: missing tensor '{missing[0]}'"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    unexpected = sorted(file_names - set(state) - ignore_set)
    if unexpected:
        raise GGUFError(f"{gguf.path}: unexpected tensor '{unexpected[0]}' for this architecture")
    absent = {n for n in optional_set if n not in file_names}
    with torch.no_grad():
        for name, target in state.items():
            if name in absent:
                continue
            value = _fit(name, gguf.tensor(name), target.shape, gguf)
            target.copy_(value)  # cast to the module's dtype
    return absent
