"""The whole package type-checks: mypy over src/ggtts (pyproject's [tool.mypy]), clean."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_nothing_in_the_package(tmp_path: Path) -> None:
    from mypy import api

    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path),
                                      str(ROOT / "src" / "ggtts")])  # fmt: skip
    assert status == 0, stdout + stderr
    assert "Success: no issues found" in stdout
