"""Watchdogs for tests of work that must not hang or blow up: a block that runs too long, a wait for an event.

Not a timing: the limits are set far above the work's normal time, to turn a hang or a quadratic blow-up into a
failure with a message instead of a stuck test run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

# One factor for every hang-catching limit in the suite (watchdogs, waits for an event, subprocess timeouts): the
# limits are minutes, far above the normal time even on a busy 2-core machine; GGTTS_TEST_TIMEOUT_SCALE=3 gives a
# much slower machine three times as long. No limit is a measurement: a correct program never comes near one.
TIMEOUT_SCALE_VARIABLE = "GGTTS_TEST_TIMEOUT_SCALE"


def scaled(seconds: float) -> float:
    """``seconds`` times the suite's timeout factor (``$GGTTS_TEST_TIMEOUT_SCALE``, default 1)."""
    return seconds * float(os.environ.get(TIMEOUT_SCALE_VARIABLE, "1"))


def wait_for(
    condition: Callable[[], bool],
    what: str,
    *,
    process: subprocess.Popen[str] | None = None,
    limit_s: float = 600,
    poll_s: float = 0.01,
) -> None:
    """Wait until ``condition()`` holds: an event (a file appearing, a record written), not a moment. Fails when
    ``process`` ends first, or after ``scaled(limit_s)`` (a hang)."""
    deadline = time.monotonic() + scaled(limit_s)
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise TooSlow(f"{what} did not happen within {scaled(limit_s):.0f} s: a hang")
        time.sleep(poll_s)


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
    seconds = round(scaled(seconds))
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
