"""Stopping synthesis that nobody waits for any more, in the middle of a chunk.

A server request whose client left, or whose time ran out, must free the model at once: a long chunk can take
seconds, and the next request waits for it. Work runs inside ``with cancellable(token):`` on its thread; from
another thread ``token.cancel()`` makes that work raise :class:`Cancelled` at its next cancellation point:

- every call of a torch module of a model made cancellable with :func:`make_cancellable` (the server does it
  once for each model it serves, at start): a forward pre-hook on each of that model's own modules, so a chunk
  stops within one layer's time. Other modules, and models nobody made cancellable (the CLI's, a library
  user's), carry no hook and pay nothing;
- :func:`check_cancelled`, which loops outside torch call (the generation loop before each step, the text
  frontend between lines of text).

The token is the only state, and it is scoped to one thread and one ``with`` block: code that runs without one
is never interrupted, even through a hooked module.
"""

from __future__ import annotations

import contextlib
import threading
import types
import weakref
from collections.abc import Iterator
from typing import Any

_local = threading.local()
_hook_lock = threading.Lock()
_hooked: weakref.WeakSet[Any] = weakref.WeakSet()  # modules with the hook, so none gets it twice


class Cancelled(Exception):
    """The work was cancelled through its :class:`CancelToken` (the reason says why)."""


class CancelToken:
    """Set once from any thread; checked by the work it was given to."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = "cancelled"

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)


def check_cancelled() -> None:
    """Raise :class:`Cancelled` if this thread's current token (if any) has been cancelled."""
    token: CancelToken | None = getattr(_local, "token", None)
    if token is not None:
        token.check()


def _before_forward(module: Any, args: Any) -> None:
    check_cancelled()


def torch_modules(owner: object, depth: int = 3) -> list[Any]:
    """The torch modules ``owner`` holds: in its attributes, and theirs, ``depth`` objects deep (lists, tuples
    and dict values included); each module once, with its submodules."""
    import torch

    found: dict[int, torch.nn.Module] = {}
    seen: set[int] = set()

    def visit(value: object, left: int) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.nn.Module):
            for module in value.modules():
                found.setdefault(id(module), module)
        elif left > 0 and isinstance(value, list | tuple):
            for item in value:
                visit(item, left - 1)
        elif left > 0 and isinstance(value, dict):
            for item in value.values():
                visit(item, left - 1)
        elif left > 0 and not isinstance(value, type | types.ModuleType) and hasattr(value, "__dict__"):
            for item in vars(value).values():
                visit(item, left - 1)

    visit(owner, depth)
    return list(found.values())


def make_cancellable(owner: object) -> int:
    """Make each call of the torch modules ``owner`` holds (:func:`torch_modules`) a cancellation point; once
    per module, however often it is asked. Returns how many modules got the hook now."""
    with _hook_lock:
        added = 0
        for module in torch_modules(owner):
            if module not in _hooked:
                module.register_forward_pre_hook(_before_forward)
                _hooked.add(module)
                added += 1
        return added


@contextlib.contextmanager
def cancellable(token: CancelToken) -> Iterator[None]:
    """Run the block so that ``token.cancel()`` stops it at its next cancellation point."""
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        token.check()
        yield
    finally:
        _local.token = previous
