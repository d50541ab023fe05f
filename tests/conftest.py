from __future__ import annotations

import os

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

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


def pytest_collection_finish(session: pytest.Session) -> None:
    import type_check

    type_check.start_if_selected(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    import type_check

    type_check.stop(config)
