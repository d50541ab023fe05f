"""A worker process that ends with the process that started it, however that one ends (``kill -9`` included).

An orphan would go on holding a model's memory and a share of the CPU on a machine whose owner believes the work is
over: ``ggtts batch``'s workers (:mod:`ggtts.batch.local`) and ``ggtts bench``'s
(:mod:`ggtts.measure.kokoro.bench_worker`) call :func:`exit_with` as they start.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

PARENT_POLL_S = 0.5  # how often a worker looks whether its parent is still there


def exit_with(parent: int, before_exit: Callable[[], None] | None = None) -> None:
    """End this process (at once, as a kill would) when process ``parent`` is no longer its parent: it died, and
    this one was handed to another (init, a subreaper). A thread polls, so a worker busy in its work or blocked on
    a queue notices too; the parent's pid is passed in, so a parent that died before the poll began is seen.

    ``before_exit``: called first, on that thread (to remove what the parent would have removed on its way out)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        try:
            if before_exit is not None:
                before_exit()
        finally:
            os._exit(1)

    threading.Thread(target=watch, name="ggtts-parent-watch", daemon=True).start()
