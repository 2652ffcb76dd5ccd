"""Worker processes on the CPU: lifetime, blame, timed-output checks, logs, worktrees, and
"no gated measurement, no verdict".

Fault kernels (tests/fault_kernels.py) leave children behind, hang, exit, turn NaN after
their first call, or flood stderr. Nothing here asserts a duration: the waits only keep a
broken guard from hanging the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, make_case, make_run
from test_cli import _git

from guard import core
from guard.cli import main
from guard.compare import Comparison, compare_runs
from guard.errors import ExitCode
from guard.results import UNAVAILABLE

FAULTS = ["--fault-module", "fault_kernels", "--worker-path", str(TESTS)]

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes"
)


def write_suite(
    tmp_path: Path,
    kernels: list[str],
    gate: list[str] | None = None,
    timeout: float = 60,
    rounds: int = 2,
) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "schema_version: 1\nname: procs\n"
        f"kernels: {json.dumps(kernels)}\ngate: {json.dumps(kernels if gate is None else gate)}\n"
        'threshold: "median:10%"\n'
        f"cpu_timing: {{rounds: {rounds}, max_rounds: {rounds}, samples_per_round: 3,"
        f" sample_target_ms: 1, warmup_ms: 1, case_timeout_s: {timeout}}}\n"
        "cases:\n  - {shape: [1, 2, 24, 16], causal: true}\n"
    )
    return path


def _repo(tmp_path: Path) -> Path:
    """A git repository holding a copy of the kernels package, one commit."""
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    for name in ("__init__.py", "registry.py", "reference.py", "sdpa.py"):
        shutil.copy(ROOT / "kernels" / name, repo / "kernels" / name)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    return repo


# --------------------------------------------------------------------------- 5. worktrees


def test_worktree_removes_its_whole_temporary_folder(tmp_path, monkeypatch):
    repo = _repo(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with core.worktree("HEAD", repo) as tree:
        assert (tree / "kernels" / "registry.py").exists()
    assert list(scratch.iterdir()) == []
    assert _git(repo, "worktree", "list").strip().count("\n") == 0


# --------------------------------------------------------------------------- 6. no verdict


def _no_verdict(comparison: Comparison) -> None:
    assert comparison.exit_code == ExitCode.BAD_INPUT
    assert comparison.headline.startswith("NO VERDICT: no gated case was measured ("), (
        comparison.headline
    )


def test_no_cases_is_no_verdict():
    empty = make_run({})
    comparison = compare_runs(empty, empty)
    _no_verdict(comparison)
    assert "no cases" in comparison.headline


def test_all_cases_unavailable_is_no_verdict(rng):
    from conftest import synthetic_rounds

    a, b = make_case("s1"), make_case("s2", kernel="sdpa", gate=False)
    rounds = {a: synthetic_rounds(rng, 1e-3), b: synthetic_rounds(rng, 1e-3)}
    base = make_run(rounds)
    cand = make_run(rounds, status={a.id: UNAVAILABLE, b.id: UNAVAILABLE})
    comparison = compare_runs(base, cand)
    _no_verdict(comparison)
    assert "unavailable" in comparison.headline
    # An ungated case alone measured is no verdict either.
    only_ungated = compare_runs(base, make_run(rounds, status={a.id: UNAVAILABLE}))
    _no_verdict(only_ungated)
    # A gated case compared gives a verdict.
    assert compare_runs(base, make_run(rounds)).exit_code == ExitCode.PASS


def test_empty_pytest_benchmark_files_are_no_verdict(tmp_path, capsys):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps({"benchmarks": []}))
    comparison = core.compare_files(tmp_path / "a.json", tmp_path / "b.json")
    _no_verdict(comparison)
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert "NO VERDICT: no gated case was measured" in capsys.readouterr().out


def test_compare_against_on_a_cpu_without_gated_kernels_is_no_verdict(tmp_path):
    """Only SDPA (not gated) runs on the CPU; the gated kernel needs a GPU."""
    repo = _repo(tmp_path)
    suite = write_suite(tmp_path, ["sdpa", "sdpa_flash"], gate=["sdpa_flash"])
    cmd = [sys.executable, "-m", "guard", "compare", "--against", "HEAD", "--suite", str(suite)]
    proc = subprocess.run(
        [*cmd, "-q", "--json", "--out", str(tmp_path / "r.json")],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["headline"].startswith("NO VERDICT: no gated case was measured"), doc["headline"]
    assert doc["exit_code"] == 2
