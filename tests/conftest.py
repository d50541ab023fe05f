from __future__ import annotations

import os

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# In a pytest-xdist worker (below), torch's threads sleep when they wait, as ggtts's own commands' do on a busy
# machine (ggtts.runtime.threads): two workers' thread pools share the cores, and spinning ones would hold a core the
# other worker needs. Set before torch loads; the worker's subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# With GGTTS_NO_SKIP=1 (.ci/run sets it) a test or a test module that skips fails instead: a parity test that skips
# for want of its reference package is a test that did not run, and must not pass silently.
NO_SKIP_VARIABLE = "GGTTS_NO_SKIP"


def _no_skip() -> bool:
    return os.environ.get(NO_SKIP_VARIABLE) == "1"


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped ({reason}), and {NO_SKIP_VARIABLE}=1 makes every skip a failure"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if _no_skip() and report.skipped and not hasattr(report, "wasxfail"):
        _as_failure(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if _no_skip() and report.outcome == "skipped":
        _as_failure(report)


# The run is shared by two pytest-xdist workers (`-n auto --dist loadscope` in pyproject.toml; docs/testing.md): each
# test folder is one unit of work, run whole by one worker, so the session fixtures a folder shares (a tiny model,
# the real export converted, a running server) are built once. Units are handed out longest first, so that no worker
# is left with a long one at the end: the seconds below were measured on a quiet 2-core AMD EPYC (2026-11-28, one
# process; server and qwen3omni again after Qwen3-Omni's audio chat came); a unit not listed comes after them, in
# collection order.
UNIT_SECONDS = {
    "e2e": 155,
    "batch": 153,
    "server": 160,
    "test_types.py": 60,  # mypy over the package, one core
    "convert": 87,
    "text": 77,
    "cli": 68,
    "parity": 64,
    "piper": 70,
    "outetts": 51,
    "magpie": 50,
    "models": 50,
    "qwen3omni": 80,
    "measure": 27,
}
WORKERS = 2  # two workers whatever the machine: each one's torch uses every core, its threads sleeping when idle


def _unit(nodeid: str) -> str:
    """The unit of a test: its folder under tests/, or its file for a test directly in tests/."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[-1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest units first (the order the workers take them in); collection order within a unit."""
    order = {unit: rank for rank, unit in enumerate(sorted(UNIT_SECONDS, key=UNIT_SECONDS.__getitem__, reverse=True))}
    items.sort(key=lambda item: order.get(_unit(item.nodeid), len(order)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", WORKERS))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's scope scheduling with the folder as the scope (its own ``loadgroup`` marks do not reach the
    controller under pytest 9, whose node ids are no longer rewritten)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return ByUnit(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    import type_check

    type_check.start_if_selected(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    import type_check

    type_check.stop(config)
