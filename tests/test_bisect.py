"""``guard bisect`` on the CPU: a repository of 16 commits whose kernels hold one planted
slowdown (the reference kernel computing its output three times from commit 11 on).
Each step is a real paired comparison of two worktrees, decided by the guard's rule."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import git as _git

from guard import bisect, core
from guard.base.errors import BadInput
from guard.cli import main

SLOW_FROM = 11  # the commit (1-based) that plants the slowdown
SUITE = """\
schema_version: 1
name: bisect
kernels: [reference]
gate: [reference]
threshold: "median:20%"
cpu_timing: {rounds: 4, max_rounds: 12, samples_per_round: 5, sample_target_ms: 2, warmup_ms: 1,
             margin: 0.05}
cases:
  - {shape: [1, 4, 128, 32], causal: false, dtype: float32}
"""
SLOW = '''
_fast_attention = attention


def attention(q, k, v, *, causal=False, scale=None):  # type: ignore[no-redef]
    """Planted: the same output, computed three times."""
    for _ in range(2):
        _fast_attention(q, k, v, causal=causal, scale=scale)
    return _fast_attention(q, k, v, causal=causal, scale=scale)
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """16 commits after a first one; commit SLOW_FROM plants the slowdown."""
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    (repo / "kernels").mkdir(parents=True)
    for name in ("__init__.py", "registry.py", "reference.py", "sdpa.py"):
        shutil.copy(ROOT / "kernels" / name, repo / "kernels" / name)
    (repo / "suite.yaml").write_text(SUITE)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    commits = []
    reference = repo / "kernels" / "reference.py"
    for i in range(1, 17):
        text = reference.read_text() + f"\n# revision {i}\n"
        if i == SLOW_FROM:
            text += SLOW
        reference.write_text(text)
        _git(repo, "commit", "-qam", f"revision {i}")
        commits.append(_git(repo, "rev-parse", "HEAD").strip())
    return repo, commits


def test_bisect_names_the_planted_commit(repo: tuple[Path, list[str]], monkeypatch) -> None:
    root, commits = repo
    monkeypatch.chdir(root)
    suite = core.open_suite(root / "suite.yaml")
    lines: list[str] = []
    result = bisect.bisect(
        suite, "HEAD~16", "HEAD", opts=core.MeasureOptions(device="cpu"), repo=root,
        progress=lines.append,
    )  # fmt: skip
    assert result.first_bad == commits[SLOW_FROM - 1], (lines, result)
    assert len(result.probes) <= 6  # the ends, then log2(16) halvings
    assert result.step > 2.0
    assert "first slower commit: " + commits[SLOW_FROM - 1] in bisect.describe(result, root)


def test_a_range_without_a_step_is_refused(repo: tuple[Path, list[str]], monkeypatch, capsys):
    root, _ = repo
    monkeypatch.chdir(root)
    with pytest.raises(BadInput, match="nothing to bisect"):
        bisect.bisect(
            core.open_suite(root / "suite.yaml"), "HEAD~16", "HEAD~9",
            opts=core.MeasureOptions(device="cpu"), repo=root,
        )  # fmt: skip
    assert main(["bisect", "reference/b1-h4-s128-d32-full-float32", "--good", "HEAD",
                 "--bad", "HEAD~3", "--suite", "suite.yaml", "--device", "cpu"]) == 2  # fmt: skip
    assert "is not an ancestor" in capsys.readouterr().err


def test_a_bisection_is_recorded_where_the_history_names_it(tmp_path: Path) -> None:
    import report_data as data

    from guard import cli_bisect
    from guard.store import history

    db = tmp_path / "h.sqlite"
    for run in data.history_runs(n=10, step_at=6, factor=1.1):
        history.append(run, db)
    case = "triton_flash/b1-h8-s512-d64-full"
    t = history.trend(db, case)
    good, bad = t.step_range(t.steps[0])
    culprit = "d" * 40
    found = bisect.Bisection(good, bad, culprit, (culprit,), (), 1.1)
    cli_bisect.record(str(db), [case], found)
    t = history.trend(db, case)
    assert t.attribution(t.steps[0]) == f"made by {culprit[:10]}"
