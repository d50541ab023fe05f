"""A watchdog for tests of work that must not blow up: raise in the test when a block runs too long.

Not a timing: the limits are set far above the work's normal time, to turn a hang or a quadratic blow-up into a
failure with a message instead of a stuck test run.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class TooSlow(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int, what: str = "the block") -> Iterator[None]:
    """Raise :class:`TooSlow` in the block after ``seconds`` (SIGALRM; where there is none, no limit)."""

    def expire(signum: int, frame: object) -> None:
        raise TooSlow(f"{what} took more than {seconds} s")

    if not hasattr(signal, "SIGALRM"):
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
