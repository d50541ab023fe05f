"""Fill an ``nn.Module`` from a GGUF file: the one strict loader every architecture uses.

A tensor the module needs and the file lacks, a tensor in the file the module has no place for, one of the wrong
shape, or a small one (a norm, a bias: see ``validate.FINITE_CHECK_MAX_ELEMENTS``) holding inf or NaN is an error
naming the tensor. The one shape transform allowed is llama.cpp's broadcast layout for per-channel vectors:
``(C, 1)`` or ``(C, 1, 1)`` (ggml ``{1, C}``, ``{1, 1, C}``) is accepted for a ``(C,)`` parameter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from unittest import mock

import torch
from torch import nn

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.models.layers.validate import check_finite_if_small

# torch.nn.init's functions that modules' reset_parameters call
_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                   "xavier_normal_", "ones_", "zeros_", "constant_", "orthogonal_", "eye_", "dirac_")  # fmt: skip


def _untouched(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    return tensor


@contextlib.contextmanager
def empty_modules() -> Iterator[None]:
    """Build modules whose weights are about to come from a file: on the ``meta`` device (no memory) and with
    ``torch.nn.init`` doing nothing. Random initialisation on ``meta`` is a decomposed operation, and the first one
    in a process imports torch's Python reference operators: 2-3 s of every command's start on a 2-core machine."""
    with contextlib.ExitStack() as stack:
        for name in _INIT_FUNCTIONS:
            stack.enter_context(mock.patch.object(torch.nn.init, name, _untouched))
        stack.enter_context(torch.device("meta"))
        yield


def _fit(name: str, tensor: torch.Tensor, want: torch.Size, gguf: GGUFFile) -> torch.Tensor:
    """The file's tensor ``name`` in the module's shape ``want``, checked finite when small."""
    check_finite_if_small(gguf.path, name, tensor)
    if tensor.shape == want:
        return tensor
    if len(want) == 1 and tensor.shape[:1] == want and set(tensor.shape[1:]) == {1}:
        return tensor.reshape(want)  # llama.cpp stores conv biases and norms as (C, 1) or (C, 1, 1)
    raise GGUFError(f"{gguf.path}: tensor '{name}' has shape {list(tensor.shape)}, expected {list(want)}")


def load_module_from_gguf(
    module: nn.Module,
    gguf: GGUFFile,
    *,
    gguf_name: Callable[[str], str] = lambda name: name,
    optional: Iterable[str] = (),
    ignore: Iterable[str] = (),
    ignore_prefixes: tuple[str, ...] = (),
    device: str | torch.device | None = None,
) -> set[str]:
    """Fill every parameter and persistent buffer of ``module`` from its GGUF tensor, strictly.

    ``gguf_name`` maps a module name to the file's (identity where the module follows the file's names).
    ``optional`` names may be missing from the file (they are returned so the caller can act, e.g. tie weights);
    ``ignore`` names, and names starting with ``ignore_prefixes``, may be in the file without a place in the
    module. A module built on the ``meta`` device gets the file's tensors themselves (on ``device``; on the CPU
    the file's float32 pages in place, :meth:`GGUFFile.mapped`): no memory and no random initialisation is spent on
    weights about to be replaced. Returns the missing optional names.
    """
    optional_set, ignore_set = set(optional), set(ignore)
    state = module.state_dict()
    file_names = set(gguf.names())
    wanted = {name: gguf_name(name) for name in state}
    missing = [f for n, f in wanted.items() if f not in file_names and n not in optional_set]
    if missing:
        raise GGUFError(
            f"{gguf.path}: missing tensor '{missing[0]}'"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    unexpected = sorted(n for n in file_names - set(wanted.values()) - ignore_set if not n.startswith(ignore_prefixes))
    if unexpected:
        raise GGUFError(f"{gguf.path}: unexpected tensor '{unexpected[0]}' for this architecture")
    absent = {n for n in optional_set if wanted.get(n, n) not in file_names}
    # a module on the meta device takes the tensors themselves: on the CPU the file's own pages where it stores
    # float32 (GGUFFile.mapped: no copy, shared with every other mapping of the file), elsewhere a copy moved there
    meta = any(t.is_meta for t in state.values())
    read = gguf.mapped if meta and torch.device(device or "cpu").type == "cpu" else gguf.tensor
    values = {n: _fit(wanted[n], read(wanted[n]), t.shape, gguf) for n, t in state.items() if n not in absent}
    if meta:
        module.load_state_dict({n: v.to(device or "cpu") for n, v in values.items()}, strict=True, assign=True)
        return absent
    with torch.no_grad():
        for name, value in values.items():
            state[name].copy_(value)  # cast to the module's dtype, on its device
    return absent
