"""Another project's kernel, guarded: ``examples/toy-kernel`` on the CPU.

The example (a ``toy_attention`` package with no ``kernels/`` of its own, and a suite
naming ``toy_attention.ops:attention``) is copied into a fresh git repository and
committed; the working tree is then left alone, or its kernel is changed (a wrong
result, a 4x slowdown), and ``guard compare --against HEAD`` judges it, each arm's
module imported from its own tree. The slowdown is 4x, timed in 4 rounds an arm and up
to 10 while a case is undecided, so that a loaded two-core machine decides it (3 rounds
once left it inconclusive at 3.76x); the verdict is the guard's own, no timing is
asserted here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from conftest import git as _git

EXAMPLE = ROOT / "examples" / "toy-kernel"
KERNEL = "toy_attention.ops:attention"
OPS = Path("toy_attention") / "ops.py"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The example as a repository of its own, committed (HEAD is the baseline)."""
    repo = tmp_path / "toy"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", "results"))
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "toy kernel")
    return repo


def _guard(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``guard ARGS`` in ``repo``, this checkout's guard on the path (as installed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-m", "guard", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _compare(repo: Path, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    proc = _guard(
        repo,
        "compare",
        "--against",
        "HEAD",
        "--suite",
        "guard.yaml",
        "--json",
        "-q",
        "--out",
        str(tmp_path / "results.json"),
        *extra,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), proc.stdout + proc.stderr


def _plant(repo: Path, body: str) -> None:
    """Wrap the committed kernel: ``attention`` becomes ``body`` over the original."""
    path = repo / OPS
    path.write_text(
        path.read_text()
        + "\n\n_attention = attention\n\n\ndef attention(q, k, v, **kw):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
    )


def test_the_example_is_a_project_without_kernels_package():
    suite = yaml.safe_load((EXAMPLE / "guard.yaml").read_text())
    assert suite["kernels"] == [KERNEL]
    assert not (EXAMPLE / "kernels").exists()
    assert (EXAMPLE / "README.md").is_file()


def test_unchanged_tree_passes(project, tmp_path):
    code, doc, out = _compare(project, tmp_path)
    assert code == 0, out
    assert doc["headline"].startswith("PASS"), doc["headline"]
    assert {c["verdict"] for c in doc["cases"]} == {"unchanged"}, doc["cases"]
    assert all("identical" in c["reason"] for c in doc["cases"]), doc["cases"]
    assert any("same git tree" in n for n in doc["notes"]), doc["notes"]
    assert not _git(project, "worktree", "list").strip().count("\n")  # worktree removed


def test_a_change_elsewhere_is_checked_and_timed_but_not_failed(project, tmp_path):
    """A change beside the kernel (the README): both trees are measured, correct, and
    the kernel is not called slower (a PASS, or NO VERDICT on a busy CPU; never FAIL)."""
    (project / "README.md").write_text((project / "README.md").read_text() + "\nmore\n")
    code, doc, out = _compare(project, tmp_path)
    assert code in (0, 2), out
    assert {c["verdict"] for c in doc["cases"]} <= {"unchanged", "inconclusive"}, doc["cases"]


def test_a_wrong_result_fails(project, tmp_path):
    _plant(project, "return _attention(q, k, v, **kw) * 1.01")
    code, doc, out = _compare(project, tmp_path)
    assert code == 1, out
    assert "wrong results" in doc["headline"], doc["headline"]
    assert all(c["case_verdict"] == "wrong" and c["fails"] for c in doc["cases"]), doc["cases"]


def test_a_large_slowdown_is_a_regression(project, tmp_path):
    _plant(
        project,
        "for _ in range(3):\n    _attention(q, k, v, **kw)\nreturn _attention(q, k, v, **kw)",
    )
    # Three rounds an arm (the CPU plan) left it undecided once on a loaded machine
    # (3.76x [.., 5.32]): four, extended to ten while a case is undecided.
    code, doc, out = _compare(project, tmp_path, "--rounds", "4", "--max-rounds", "10")
    assert code == 1, out
    verdicts = [c["verdict"] for c in doc["cases"]]
    assert "regression" in verdicts, doc["cases"]
    assert all(c["case_verdict"] != "wrong" for c in doc["cases"]), doc["cases"]  # correct, slower


def test_a_module_that_fails_to_import_is_a_build_failure(project, tmp_path):
    """The import error is the case's, with its message; the guard does not crash."""
    (project / OPS).write_text("import no_such_module_here\n")
    proc = _guard(project, "check", "--suite", "guard.yaml", "--json", "-q", "--out",
                  str(tmp_path / "r.json"))  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    cases = json.loads((tmp_path / "r.json").read_text())["guard"]["cases"]
    assert {c["status"] for c in cases} == {"build_failed"}, cases
    assert "No module named 'no_such_module_here'" in cases[0]["reason"], cases[0]
    assert "toy_attention/ops.py" in cases[0]["worker_output"]


def test_a_module_from_outside_the_tree_is_refused(project, tmp_path):
    """A name that resolves to the guard's own tree (or any installed package) is not
    the project's code: refused as a build failure, never measured."""
    suite = yaml.safe_load((project / "guard.yaml").read_text())
    suite["kernels"] = ["guard.measure.reference:attention"]
    suite["kernel_options"] = {}
    (project / "outside.yaml").write_text(yaml.safe_dump(suite))
    proc = _guard(project, "check", "--suite", "outside.yaml", "--json", "-q", "--out",
                  str(tmp_path / "r.json"))  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    first = json.loads((tmp_path / "r.json").read_text())["guard"]["cases"][0]
    assert first["status"] == "build_failed"
    assert f"not from {project.resolve()}" in first["reason"], first["reason"]


def test_an_ignored_build_output_is_not_a_cache(project: Path) -> None:
    """A local run's shortcut (the same git tree in both: decided without measuring)
    forgives the caches a run leaves, never an ignored file the kernel may import."""
    from guard.ops import trees as ops_trees

    (project / ".gitignore").write_text("__pycache__/\n*.so\n.pytest_cache/\n")
    _git(project, "add", ".gitignore")
    _git(project, "commit", "-q", "-m", "ignore build outputs")
    cache = project / "toy_attention" / "__pycache__"
    cache.mkdir()
    (cache / "ops.cpython-311.pyc").write_bytes(os.urandom(16))
    (project / ".pytest_cache").mkdir()
    (project / ".pytest_cache" / "README.md").write_text("cache\n")
    head = _git(project, "rev-parse", "HEAD:").strip()
    assert ops_trees.folder_tree(project, ignored_count=False) == head
    (project / "toy_attention" / "_fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\0" * 8)
    assert ops_trees.folder_tree(project, ignored_count=False) == ""
    assert ops_trees.folder_tree(project) == ""  # the PR's checkout: nothing ignored counts
