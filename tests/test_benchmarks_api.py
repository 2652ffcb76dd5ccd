"""The benchmark scripts use the project's public names only, and each one imports: a
rename in guard/, kernels/ or kernel_reports/ that a script still uses fails here, not
on a GPU machine."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest
from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "__init__.py")
OURS = ("guard", "kernels", "kernel_reports")


def _private_uses(path: Path) -> list[str]:
    """``from <ours> import _x`` and ``<alias of ours>._x`` in one script."""
    tree = ast.parse(path.read_text("utf-8"), str(path))
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            for name in node.names:
                if name.name.startswith("_"):
                    where = f"{path.name}:{node.lineno}"
                    found.append(f"{where}: from {node.module} import {name.name}")
                aliases.add(name.asname or name.name)
        elif isinstance(node, ast.Import):
            for name in node.names:
                if name.name.split(".")[0] in OURS:
                    aliases.add((name.asname or name.name).split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_script_uses_a_private_name_of_the_project() -> None:
    found = [line for path in SCRIPTS for line in _private_uses(path)]
    assert not found, "private names used by benchmark scripts:\n" + "\n".join(found)


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    script = tmp_path / "x.py"
    script.write_text("from guard.measure import runner\nrunner._noop()\n", "utf-8")
    assert _private_uses(script) == ["x.py:2: runner._noop"]


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As the scripts run: `python3 benchmarks/x.py` puts benchmarks/ first on sys.path.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [str(script)])
    importlib.import_module(script.stem)
