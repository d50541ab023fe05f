"""``GGTTS_NO_SKIP=1`` (set by .ci/run) turns every skip, of a test or of a whole module, into a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_skips():
    pytest.skip("its reference package is missing")

def test_runs():
    pass
"""
SKIPPING_MODULE = """
import pytest

pytest.importorskip("ggtts_no_such_reference_package")

def test_never_collected():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text(encoding="utf-8"))
    return pytester


def test_a_skip_passes_by_default(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GGTTS_NO_SKIP", raising=False)
    suite.makepyfile(test_one=SKIPPING)
    suite.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=1)


def test_a_skip_fails_under_no_skip(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGTTS_NO_SKIP", "1")
    suite.makepyfile(test_one=SKIPPING)
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*its reference package is missing*GGTTS_NO_SKIP=1 makes every skip a failure*"])


def test_a_skipped_module_fails_under_no_skip(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGTTS_NO_SKIP", "1")
    suite.makepyfile(test_mod=SKIPPING_MODULE)
    result = suite.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ggtts_no_such_reference_package*GGTTS_NO_SKIP=1*"])
