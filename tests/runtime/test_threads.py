"""Thread count and wait policy, chosen as a command starts (ggtts.runtime.threads)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ggtts.errors import InputError
from ggtts.runtime import threads


@pytest.fixture
def torch_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """As at a command's start (this test process has torch loaded already)."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delenv(threads.WAIT_POLICY_ENV, raising=False)


def _load(monkeypatch: pytest.MonkeyPatch, load: float, cpus: int = 2) -> None:
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threads, "usable_cpus", lambda: cpus)


@pytest.mark.usefixtures("torch_not_loaded")
@pytest.mark.parametrize(
    ("load", "wanted", "policy"),
    [
        (0.1, None, None),  # quiet: threads spin (torch's default)
        (1.2, None, "PASSIVE"),  # a core's worth of other work, two threads more: they sleep when they wait
        (1.2, 1, None),  # one thread beside it fits
        (3.5, 1, "PASSIVE"),
    ],
)
def test_threads_sleep_when_the_machine_is_busy(
    monkeypatch: pytest.MonkeyPatch, load: float, wanted: int | None, policy: str | None
) -> None:
    _load(monkeypatch, load)
    assert threads.choose_wait_policy(wanted) == policy
    assert threads.os.environ.get(threads.WAIT_POLICY_ENV) == policy


@pytest.mark.usefixtures("torch_not_loaded")
def test_a_policy_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 10.0)
    monkeypatch.setenv(threads.WAIT_POLICY_ENV, "ACTIVE")
    assert threads.choose_wait_policy() is None
    assert threads.os.environ[threads.WAIT_POLICY_ENV] == "ACTIVE"


def test_nothing_changes_once_torch_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # noqa: F401

    monkeypatch.delenv(threads.WAIT_POLICY_ENV, raising=False)
    _load(monkeypatch, 10.0)
    assert threads.choose_wait_policy() is None
    assert threads.WAIT_POLICY_ENV not in threads.os.environ


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "²"])
def test_a_bad_thread_count_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(threads.THREADS_ENV, value)
    with pytest.raises(InputError, match=threads.THREADS_ENV):
        threads.threads_from_env()


def test_the_commands_take_a_thread_count() -> None:
    script = (
        "import torch, sys; from ggtts.runtime import threads; threads.configure(None); print(torch.get_num_threads())"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], env={**_env(), threads.THREADS_ENV: "1"}, capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout.split() == ["1"], run.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "ggtts.cli", "speak", "Hi.", "--threads", "0"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--threads: must be a whole number" in bad.stderr
    env_bad = subprocess.run(
        [sys.executable, "-m", "ggtts.cli", "cache", "--path"],
        env={**_env(), threads.THREADS_ENV: "lots"},
        capture_output=True,
        text=True,
    )
    assert env_bad.returncode == 1 and env_bad.stderr.count("\n") == 1 and threads.THREADS_ENV in env_bad.stderr


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def test_the_servers_give_torchs_threads_to_each_models_thread() -> None:
    """In a process of its own (the counts are the process's): after the hand-over the main thread keeps one torch
    thread and makes no OpenMP team; each model's thread has the count the process had; a worker given no count
    keeps what it finds."""
    script = """
import asyncio, torch
from ggtts.runtime import threads
from ggtts.server.worker import ModelWorker
torch.set_num_threads(2)
handed = threads.models_on_their_threads()
async def counts():
    given, left = ModelWorker("a", object(), 1, handed), ModelWorker("b", object(), 1)
    return [given.executor.submit(torch.get_num_threads).result(), left.executor.submit(torch.get_num_threads).result()]
print(handed, torch.get_num_threads(), *asyncio.run(counts()), torch.get_num_threads())
"""
    run = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    handed, main, model, other, main_after = run.stdout.split()
    assert (handed, main, model, main_after) == ("2", "1", "2", "1"), run.stdout
    assert other in ("1", "2"), run.stdout  # torch's own choice for a thread nobody set


@pytest.mark.usefixtures("torch_not_loaded")
def test_a_server_does_not_judge_by_the_load_it_starts_under(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 3.5)
    threads.configure(None, serving=True)
    assert threads.WAIT_POLICY_ENV not in threads.os.environ  # libgomp's own default: spin a while, then sleep
    threads.configure(None)
    assert threads.os.environ[threads.WAIT_POLICY_ENV] == "PASSIVE"


@pytest.mark.parametrize(("argv", "serving"), [(["serve", "--max-queue", "-1"], True), (["cache", "--path"], False)])
def test_the_servers_are_configured_as_servers(monkeypatch: pytest.MonkeyPatch, argv: list[str], serving: bool) -> None:
    from ggtts import cli

    seen: list[bool] = []
    monkeypatch.setattr(threads, "configure", lambda _threads, *, serving=False: seen.append(serving))
    cli.main(argv)
    assert seen == [serving]
