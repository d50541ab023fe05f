"""A GPU that runs out of memory (torch's ``OutOfMemoryError``, raised here as CUDA raises it) is one clear error: a
server that cannot load or warm up a model stops at start naming it and what to try, a request the GPU has no memory
for is a 503 with Retry-After (the server goes on), and a command is one line and a non-zero exit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ggtts
from ggtts import api
from ggtts.errors import DeviceMemoryError
from ggtts.runtime.device import device_memory_error

CUDA_SAYS = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is "
    "free. Including non-PyTorch memory, this process has 78.11 GiB memory in use. Of the allocated memory 77.2 GiB "
    "is allocated by PyTorch. See documentation for Memory Management (https://pytorch.org/docs/stable/notes/cuda.html)"
)


def test_torchs_out_of_memory_becomes_one_sentence() -> None:
    error = device_memory_error(torch.cuda.OutOfMemoryError(CUDA_SAYS), "loading model 'x'", "load fewer")
    assert isinstance(error, DeviceMemoryError)
    assert str(error) == (
        "loading model 'x' ran out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.19 GiB of which 1.06 GiB is free); load fewer"
    )
    assert device_memory_error(RuntimeError("CUDA error: an illegal memory access"), "x", "y") is None
    assert device_memory_error(MemoryError(), "x", "y") is None  # the host's memory: not this
    try:  # raised while handling it, or from it: still it
        try:
            raise torch.cuda.OutOfMemoryError(CUDA_SAYS)
        except RuntimeError as inner:
            raise RuntimeError("the step failed") from inner
    except RuntimeError as outer:
        wrapped = device_memory_error(outer, "x", "y")
    assert wrapped is not None and "Tried to allocate 2.00 GiB" in str(wrapped)
    try:  # another error raised "from None" while handling one: not it
        try:
            raise torch.cuda.OutOfMemoryError(CUDA_SAYS)
        except RuntimeError:
            raise ValueError("bad input") from None
    except ValueError as other:
        assert device_memory_error(other, "x", "y") is None


class Model:
    def __init__(self, warm_up: Exception | None = None) -> None:
        self.error = warm_up

    def warm_up(self) -> None:
        if self.error is not None:
            raise self.error


def test_a_server_whose_model_does_not_fit_stops_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.server import load_models

    monkeypatch.setattr(api, "load", lambda source: Model(torch.cuda.OutOfMemoryError(CUDA_SAYS)))
    with pytest.raises(
        DeviceMemoryError, match=r"loading model 'big' \(copy 1 of 2\) ran out of GPU memory.*--replicas"
    ):
        load_models(["big=b.gguf"], replicas=2)

    def load(source: str) -> Model:
        raise torch.cuda.OutOfMemoryError(CUDA_SAYS)  # moving the weights to the GPU

    monkeypatch.setattr(api, "load", load)
    with pytest.raises(DeviceMemoryError, match="loading model 'a' ran out of GPU memory"):
        load_models(["a=a.gguf"])
    monkeypatch.setattr(api, "load", lambda source: Model(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):  # anything else is not dressed up as memory
        load_models(["a=a.gguf"])


def test_a_request_the_gpu_has_no_memory_for_is_a_503() -> None:
    from ggtts.server.speaking import synthesis_error

    error = synthesis_error(torch.cuda.OutOfMemoryError(CUDA_SAYS))
    assert error.status == 503 and error.code == "out_of_memory" and error.headers == {"Retry-After": "5"}
    assert error.message.startswith("synthesis ran out of GPU memory (CUDA out of memory. Tried to allocate")
    assert synthesis_error(RuntimeError("boom")).status == 500


def test_a_command_out_of_gpu_memory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ggtts.cli import main

    class Speaker:
        sample_rate = 16_000

        def synthesize(self, *args: Any, **kwargs: Any) -> Any:
            raise torch.cuda.OutOfMemoryError(CUDA_SAYS)

    monkeypatch.setattr(ggtts, "load", lambda *a, **k: Speaker())
    assert main(["speak", "hello", "-o", str(tmp_path / "out.wav")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" not in err[0], err
    assert "ggtts speak ran out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB" in err[0]
    assert "--device cpu" in err[0]
