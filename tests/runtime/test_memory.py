from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CODE = "from ggtts.runtime.memory import tune_allocator; print(tune_allocator(), tune_allocator())"


def _run(env_value: str | None) -> str:
    import os

    env = dict(os.environ)
    env.pop("GGTTS_MALLOPT", None)
    if env_value is not None:
        env["GGTTS_MALLOPT"] = env_value
    return subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, check=True).stdout


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_allocator_tuned_once_on_glibc() -> None:
    assert _run(None).split() == ["True", "True"]


def test_opt_out() -> None:
    assert _run("0").split() == ["False", "False"]
