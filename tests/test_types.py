"""The whole package type-checks: mypy over src/ggtts (pyproject's [tool.mypy]), clean. mypy runs beside the other
tests from the session's start (tests/type_check.py)."""

from __future__ import annotations

import pytest

from time_limit import scaled
from type_check import TYPE_CHECK

MYPY_LIMIT_S = 1800  # a hang-catcher: mypy takes a minute or two


def test_mypy_finds_nothing_in_the_package(request: pytest.FixtureRequest) -> None:
    check = request.config.stash.get(TYPE_CHECK, None)
    assert check is not None, "tests/conftest.py starts mypy when this test is collected"
    status, output = check.result(scaled(MYPY_LIMIT_S))
    assert status == 0, output
    assert "Success: no issues found" in output
