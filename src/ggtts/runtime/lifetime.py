"""How ggtts's processes end: a worker process with the process that started it, however that one ends (``kill
-9`` included, :func:`exit_with`); a command killed or hung up on as if interrupted (:func:`signals_interrupt`).

An orphan would go on holding a model's memory and a share of the CPU on a machine whose owner believes the work is
over: ``ggtts batch``'s workers (:mod:`ggtts.batch.local`) and ``ggtts bench``'s
(:mod:`ggtts.measure.kokoro.bench_worker`) call :func:`exit_with` as they start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

PARENT_POLL_S = 0.5  # how often a worker looks whether its parent is still there
# a kill (SIGTERM: ``kill``, ``timeout``, a service manager) and a closed terminal (SIGHUP) end a command as Ctrl-C
INTERRUPTING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


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


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the block, as Ctrl-C does, so what the block holds is cleaned
    up on the way out (a benchmark's worker process and folder, a file being written: by default these signals end
    Python at once, cleaning nothing up). A signal ignored when the command started (``nohup``) stays ignored; only
    in the main thread (elsewhere the block runs as it is)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    default = [s for s in INTERRUPTING_SIGNALS if signal.getsignal(s) == signal.SIG_DFL]
    for s in default:
        signal.signal(s, interrupt)
    try:
        yield
    finally:
        for s in default:
            signal.signal(s, signal.SIG_DFL)
