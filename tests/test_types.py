"""The whole package type-checks: mypy over src/ggtts (pyproject's [tool.mypy]), clean, and so do the uses of its
public API in tests/api_types (a wrong annotation there is an error in a caller's code). mypy runs beside the other
tests (tests/type_check.py)."""

from __future__ import annotations

import pytest

from time_limit import scaled
from type_check import TYPE_CHECK, TypeCheck

MYPY_LIMIT_S = 1800  # a hang-catcher: mypy takes a minute or two


def test_mypy_finds_nothing_in_the_package(request: pytest.FixtureRequest) -> None:
    check = request.config.stash.get(TYPE_CHECK, None)
    if check is None:  # a pytest-xdist worker: started now, at the worker's own priority (tests/type_check.py)
        check = request.config.stash[TYPE_CHECK] = TypeCheck(niceness=0)
    status, output = check.result(scaled(MYPY_LIMIT_S))
    assert status == 0, output
    assert "Success: no issues found" in output
