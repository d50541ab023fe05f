"""Cancellation is scoped: only the modules of a model made cancellable stop, only inside a ``cancellable``
block whose token was cancelled; every other module call runs untouched."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from ggtts.runtime.cancel import Cancelled, CancelToken, cancellable, make_cancellable, torch_modules


@dataclass
class Parts:
    decoder: torch.nn.Module = field(default_factory=lambda: torch.nn.Sequential(torch.nn.Linear(4, 4)))


@dataclass
class Holder:
    encoder: torch.nn.Module = field(default_factory=lambda: torch.nn.Linear(4, 4))
    stages: list[Any] = field(default_factory=lambda: [torch.nn.Linear(4, 4)])
    parts: dict[str, Parts] = field(default_factory=lambda: {"vocoder": Parts()})


def test_the_modules_a_model_holds_are_found_once_each() -> None:
    holder = Holder()
    holder.stages.append(holder.encoder)  # the same module twice
    found = torch_modules(holder)
    assert len(found) == 4  # encoder, the stage, the decoder Sequential and its Linear
    assert {id(m) for m in found} == {
        id(holder.encoder), id(holder.stages[0]), id(holder.parts["vocoder"].decoder),
        id(holder.parts["vocoder"].decoder[0]),
    }  # fmt: skip


def test_only_a_cancellable_models_modules_stop_and_only_inside_the_scope() -> None:
    model, other = Holder(), Holder()
    assert make_cancellable(model) == 4
    assert make_cancellable(model) == 0  # once per module
    x = torch.randn(1, 4)
    model.parts["vocoder"].decoder(x)  # outside any scope: runs

    token = CancelToken()
    with pytest.raises(Cancelled, match="client left"), cancellable(token):
        model.encoder(x)  # the token is not cancelled yet: runs
        token.cancel("client left")
        other.encoder(x)  # another model's module carries no hook: runs
        model.parts["vocoder"].decoder(x)  # stops here
    model.encoder(x)  # the scope is over: runs again


def test_a_token_cancelled_from_another_thread_stops_the_model_within_a_layer() -> None:
    model = Holder()
    make_cancellable(model)
    token, calls = CancelToken(), []
    started = threading.Event()

    def work() -> None:
        with cancellable(token):
            while True:
                model.encoder(torch.randn(1, 4))
                calls.append(1)
                started.set()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(60)
    token.cancel("time limit")
    thread.join(60)
    assert not thread.is_alive() and len(errors) == 1 and isinstance(errors[0], Cancelled)
