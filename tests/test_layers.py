"""The package's layers (``[tool.importlinter]`` in pyproject.toml, docs/architecture.md) hold: no module imports
from a layer above its own, and nothing a model speaks through imports the public API back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")
grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[1]
SHIPPING = ("ggtts.families", "ggtts.convert", "ggtts.text", "ggtts.runtime", "ggtts.models", "ggtts.ops")


def test_no_module_imports_a_layer_above_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # where pyproject.toml is
    status = importlinter_cli.lint_imports(config_filename=os.fspath(ROOT / "pyproject.toml"), no_cache=True)
    assert status == importlinter_cli.EXIT_STATUS_SUCCESS, "a layer is broken: the report above names the import"


def test_nothing_a_model_speaks_through_imports_the_package_root() -> None:
    # import-linter's forbidden contract cannot name the root package alone (it would forbid every module)
    graph = grimp.build_graph("ggtts", cache_dir=None)
    offenders = [
        module
        for module in sorted(graph.modules)
        if module.startswith(SHIPPING) and "ggtts" in graph.find_modules_directly_imported_by(module)
    ]
    assert not offenders, f"these import ggtts (the public API) back: {offenders}"
