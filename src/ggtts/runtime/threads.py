"""How many threads torch computes with, and how they wait for each other: chosen once, as a command starts.

torch's CPU build runs its thread pool on OpenMP, whose threads spin while they wait at the end of each parallel
region. On a quiet machine that saves the cost of waking them (Kokoro is 10-15 % faster than with sleeping
threads); on a busy one (more runnable threads than cores: two ggtts processes, a build, a test suite) a
spinning thread holds a core that the thread everyone waits for needs, and work slows down several times
(docs/benchmarks.md, "A busy machine": Kokoro 2.9x slower spinning, 1.7x sleeping, next to two busy loops on 2
cores). So a command that starts on a busy machine makes its threads sleep when they wait
(``OMP_WAIT_POLICY=PASSIVE``), and one that starts on a quiet machine lets them spin.

The servers (``serve``, ``wyoming``) do not judge by the load they start under: they outlive it (a server started at
boot, or right after other work, read a busy load average and made its threads sleep for its whole life: Piper's
first audio through ``ggtts wyoming`` came 30-60 % later, measured). They leave libgomp's own default: spin a
while, then sleep (and spin very little once it manages more threads than there are cores).

- ``--threads N`` (``speak``, ``serve``, ``wyoming``; ``batch`` has it per worker) or ``$GGTTS_THREADS`` sets
  the number of torch threads (default: torch's, one per physical core).
- ``$OMP_WAIT_POLICY`` set by the user (``ACTIVE`` or ``PASSIVE``) is left as it is.

Only the command line decides this: ``import ggtts`` changes nothing in a program's environment.
"""

from __future__ import annotations

import argparse
import os
import sys

from ggtts.errors import InputError

THREADS_ENV = "GGTTS_THREADS"
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_from_env() -> int | None:
    """``$GGTTS_THREADS`` as a positive number, None when unset; an InputError naming it otherwise."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if not value:
        return None
    threads = _whole_threads(value)
    if threads is None:
        raise InputError(f"${THREADS_ENV} must be a whole number of threads, 1 or more; it is {value!r}")
    return threads


def machine_is_busy(threads: int | None = None) -> bool:
    """Whether the work already running (the 1-minute load average) and ``threads`` more (default: one per CPU)
    would be more than the CPUs can run at once."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return False
    cpus = usable_cpus()
    return load + (threads or cpus) > cpus + 0.5


def choose_wait_policy(threads: int | None = None) -> str | None:
    """Before torch is imported: threads that sleep when the machine is busy (see the module's notes). Returns
    the policy set, or None when it was left alone (set by the user, or a quiet machine)."""
    if WAIT_POLICY_ENV in os.environ or "torch" in sys.modules:  # too late once torch is loaded
        return None
    if not machine_is_busy(threads):
        return None
    os.environ[WAIT_POLICY_ENV] = "PASSIVE"
    return "PASSIVE"


def set_threads(threads: int | None) -> None:
    """torch's intra-op threads: ``threads``, else ``$GGTTS_THREADS``, else torch's default."""
    threads = threads or threads_from_env()
    if threads:
        import torch

        torch.set_num_threads(threads)


def models_on_their_threads() -> int:
    """For the servers, before their models load: torch's threads go to the models' own threads (each model
    synthesizes on a thread of its own, :class:`ggtts.server.worker.ModelWorker`) and the main thread (loading,
    the event loop) keeps one, so that only the models' threads make OpenMP teams. libgomp throttles its threads'
    spinning once it manages more threads than there are cores: a team made by the main thread beside a model
    thread's own made synthesis 25 % slower (docs/benchmarks.md, Wyoming servers). Returns the count for the
    models' threads (torch's until now)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    return threads


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch threads for the command (read by :func:`configure`)."""
    parser.add_argument(
        "--threads",
        type=_positive_threads,
        default=None,
        metavar="N",
        help=f"torch threads (default: ${THREADS_ENV}, else one per physical core); threads sleep rather than "
        f"spin while they wait when the machine is busy as the command starts (${WAIT_POLICY_ENV} overrides)",
    )


def configure(threads: int | None, *, serving: bool = False) -> None:
    """At a command's start, before torch is loaded: how threads wait (by the machine's load, but for a server:
    ``serving``), then how many."""
    threads = threads or threads_from_env()
    if not serving:
        choose_wait_policy(threads)
    set_threads(threads)


def _positive_threads(value: str) -> int:
    value = value.strip()
    threads = _whole_threads(value)
    if threads is None:
        raise argparse.ArgumentTypeError(f"must be a whole number of threads, 1 or more, not {value!r}")
    return threads


def _whole_threads(value: str) -> int | None:
    """``value`` as a thread count, 1 or more; None when it is not one ("²" is a digit that int() refuses)."""
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        return None
    return int(value)
