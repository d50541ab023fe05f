"""Stopping synthesis that nobody waits for any more, in the middle of a chunk.

A server request whose client left, or whose time ran out, must free the model at once: a long chunk can take
seconds, and the next request waits for it. Work runs inside ``with cancellable(token):`` on its thread; from
another thread ``token.cancel()`` makes that work raise :class:`Cancelled` at its next cancellation point:

- every ``torch.nn.Module`` call on that thread (a forward pre-hook, installed once, the first time a
  cancellable scope is entered; outside such a scope it costs one thread-local lookup per module call, and a
  process that never enters one, such as the CLI, never has it), so a chunk stops within one layer's time;
- :func:`check_cancelled`, which loops outside torch call (the text frontend, between lines of text).

The token is the only state, and it is scoped to one thread and one ``with`` block: code that runs without one
is never interrupted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_local = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False


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


def install_hook() -> None:
    """Make every torch module call a cancellation point (once per process; imports torch). A server calls it at
    start, so that no request pays torch's import inside its time limit."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        from torch.nn.modules.module import register_module_forward_pre_hook

        register_module_forward_pre_hook(_before_forward)
        _hook_installed = True


@contextlib.contextmanager
def cancellable(token: CancelToken) -> Iterator[None]:
    """Run the block so that ``token.cancel()`` stops it at its next cancellation point."""
    install_hook()
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        token.check()
        yield
    finally:
        _local.token = previous
