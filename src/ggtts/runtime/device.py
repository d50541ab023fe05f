"""Which torch device a model runs on: ``auto`` (CUDA where this torch has it, else the CPU), ``cpu``, ``cuda`` or
``cuda:N``. The name is checked without importing torch (a command line checks it before any work); resolving it
asks torch."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from ggtts.errors import DeviceMemoryError, InputError

AUTO = "auto"
DEVICE_NAMES = "auto, cpu, cuda, cuda:N"
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device_name(value: object) -> str:
    """``value`` if it names a device ggtts runs on; else an InputError naming the ones there are."""
    if not isinstance(value, str) or not _DEVICE.match(value):
        raise InputError(f"unknown device {value!r}; use one of {DEVICE_NAMES}")
    return value


def resolve_device(value: str) -> str:
    """The device to load on: ``auto`` becomes ``cuda`` where torch has CUDA, else ``cpu``; a CUDA device asked for
    where there is none (or not that many) is one InputError saying so."""
    import torch

    name = check_device_name(value)
    has_cuda = torch.cuda.is_available()
    if name == AUTO:
        return "cuda" if has_cuda else "cpu"
    if name.startswith("cuda"):
        if not has_cuda:
            build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a build without CUDA")
            raise InputError(f"device {name} asked for, but there is no CUDA GPU here ({build}); use --device cpu")
        index, count = int(name.partition(":")[2] or 0), torch.cuda.device_count()
        if index >= count:
            gpus = f"{count} CUDA GPU{'' if count == 1 else 's'}"
            raise InputError(f"device {name} asked for, but this machine has {gpus} (cuda:0 to cuda:{count - 1})")
    return name


NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")  # there when an NVIDIA driver is loaded (Linux)


def device_note(asked: str, device: str) -> str | None:
    """What a command line says once about the device, where there is something to say: the GPU it runs on, or
    that an NVIDIA GPU is here but this torch cannot use it. Nothing for the CPU on a machine without a GPU."""
    import torch

    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        return f"running on cuda:{index} ({torch.cuda.get_device_name(index)})"
    if asked == AUTO and NVIDIA_DRIVER.exists():
        why = "a build without CUDA" if not torch.version.cuda else "CUDA unavailable to it"
        return f"running on the CPU: an NVIDIA GPU is here, but torch {torch.__version__} is {why}"
    return None


def choose_device(asked: str | None, say: Callable[[str], None]) -> str:
    """The device a command line loads on (``asked``; None: auto), with :func:`device_note` said once."""
    asked = asked or AUTO
    device = resolve_device(asked)
    note = device_note(asked, device)
    if note is not None:
        say(note)
    return device


def device_memory_error(exc: BaseException, what: str, advice: str) -> DeviceMemoryError | None:
    """``exc`` as one clear error where it is, or was raised from, torch's out-of-memory error of a GPU (None
    otherwise): ``what`` ran out of the GPU's memory, torch's first words on it (what it tried to allocate, what was
    free), then ``advice``."""
    torch = sys.modules.get("torch")  # (not imported: nothing ran on a GPU)
    if torch is None:
        return None
    seen: set[int] = set()
    cause: BaseException | None = exc
    while (
        cause is not None and id(cause) not in seen
    ):  # torch.cuda's name for it: torch 2.4 has no torch.OutOfMemoryError
        if isinstance(cause, torch.cuda.OutOfMemoryError):
            said = " ".join(str(cause).split())
            said = ". ".join(said.split(". ")[:3]).rstrip(".")  # "CUDA out of memory. Tried to allocate ... is free"
            return DeviceMemoryError(f"{what} ran out of GPU memory ({said}); {advice}")
        seen.add(id(cause))
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return None
