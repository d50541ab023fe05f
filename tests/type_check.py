"""mypy over the package in a process of its own, started as the test session starts and read by
tests/test_types.py at its turn: it needs one core for a minute or two, which the tests leave idle much of the time
(it runs at a lower priority, so it takes what they leave). ``pytest tests/test_types.py`` alone starts it too."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NICENESS = 10
# the package, and uses of its public API that must type-check (pyproject's [tool.mypy] files)
CHECKED = (ROOT / "src" / "ggtts", ROOT / "tests" / "api_types" / "public_api.py")


class TypeCheck:
    def __init__(self, niceness: int = NICENESS) -> None:
        self.cache = tempfile.mkdtemp(prefix="ggtts-mypy-")  # a fresh cache: every module checked, as in CI
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                   self.cache, *map(str, CHECKED)]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with contextlib.suppress(OSError):  # set from here: a preexec_fn is unsafe where threads run
            os.setpriority(os.PRIO_PROCESS, self.process.pid, niceness)

    def result(self, timeout_s: float) -> tuple[int, str]:
        """mypy's exit status and output, once it has finished."""
        output, _ = self.process.communicate(timeout=timeout_s)
        return self.process.returncode, output

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.cache, ignore_errors=True)


TYPE_CHECK = pytest.StashKey[TypeCheck]()


def start_if_selected(session: pytest.Session) -> None:
    """Start the check when the session will run tests/test_types.py. Not in a pytest-xdist worker: every worker
    collects every test, and the one that runs tests/test_types.py starts the check then, on the core the other
    worker leaves."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.path.name == "test_types.py" for item in session.items):
        session.config.stash[TYPE_CHECK] = TypeCheck()


def stop(config: pytest.Config) -> None:
    check = config.stash.get(TYPE_CHECK, None)
    if check is not None:
        check.stop()
