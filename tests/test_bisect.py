"""``guard bisect`` on the CPU: a repository of 16 commits whose kernels hold one planted
slowdown (the reference kernel computing its output three times from commit 11 on).
Each step is a real paired comparison of two worktrees, decided by the guard's rule."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import git as _git

from guard.base.errors import BadInput
from guard.commands import bisect as cli_bisect
from guard.commands.main import main
from guard.ops import bisect
from guard.ops import measure as ops_measure

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
    suite = ops_measure.open_suite(root / "suite.yaml")
    lines: list[str] = []
    result = bisect.bisect(
        suite, "HEAD~16", "HEAD", opts=ops_measure.MeasureOptions(device="cpu"), repo=root,
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
            ops_measure.open_suite(root / "suite.yaml"), "HEAD~16", "HEAD~9",
            opts=ops_measure.MeasureOptions(device="cpu"), repo=root,
        )  # fmt: skip
    assert main(["bisect", "reference/b1-h4-s128-d32-full-float32", "--good", "HEAD",
                 "--bad", "HEAD~3", "--suite", "suite.yaml", "--device", "cpu"]) == 2  # fmt: skip
    assert "is not an ancestor" in capsys.readouterr().err


def test_a_bisection_is_recorded_where_the_history_names_it(tmp_path: Path) -> None:
    import report_data as data

    from guard.ops import bisect
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


# ------------------------------------------------------------------ the night's bisections

STEPPED = "triton_flash/b1-h8-s512-d64-full"


def _stepped_history(db: Path) -> None:
    import report_data as data

    from guard.store import history

    for run in data.history_runs(n=10, step_at=6, factor=1.1):
        history.append(run, db)


def _trends(db: Path) -> list:
    from guard.store import history

    return list(history.every_trend(db, limit=None))


def test_pending_steps_are_the_unattributed_ones_and_an_open_one_resumes(tmp_path: Path) -> None:
    from guard.store import history

    db = tmp_path / "h.sqlite"
    _stepped_history(db)
    [step] = bisect.pending_steps(_trends(db), parent=lambda c: "p" + c)
    assert step.case_ids == (STEPPED,) and step.resume is None
    t = history.trend(db, STEPPED)
    assert (step.good, step.bad) == t.step_range(t.steps[0])
    history.record_step_commit(
        db, [STEPPED], good=step.good, bad=step.bad, first_bad="", open_range=["a1" * 4, "b2" * 4]
    )
    [again] = bisect.pending_steps(_trends(db), parent=lambda c: "p" + c)
    assert again.ends == ("p" + "a1" * 4, "b2" * 4)  # from the first parent of those left
    history.record_step_commit(db, [STEPPED], good=step.good, bad=step.bad, first_bad="b2" * 4)
    assert bisect.pending_steps(_trends(db), parent=lambda c: "p" + c) == []


def _result(good: str, bad: str, probes: int, first_bad: str | None) -> bisect.Bisection:
    probe = bisect.Probe(bad, True, ())
    left = () if first_bad else (good + "1", bad)
    return bisect.Bisection(good, bad, first_bad, left, (probe,) * probes, 1.2)


def test_the_budget_bounds_the_paired_runs_and_a_cut_short_range_stays_open() -> None:
    steps = [bisect.PendingStep(f"g{i}", f"b{i}", (f"k/c{i}",)) for i in range(4)]
    asked: list[tuple[str, int]] = []

    def run(step: bisect.PendingStep, max_steps: int) -> bisect.Bisection:
        asked.append((step.good, max_steps))
        if step.good == "g1":
            raise BadInput("nothing to bisect")
        # Up to 5 paired runs to finish; fewer allowed leaves the range open.
        done = max_steps + 1 >= 5
        return _result(step.good, step.bad, min(5, max_steps + 1), "f" if done else None)

    records = bisect.bisect_pending(steps, run, budget_steps=9)
    # g0: 5 runs (found); g1: refused, 1 run charged; g2: 3 runs left, open; then none.
    assert asked == [("g0", 8), ("g1", 3), ("g2", 2)]
    assert [(r.good, r.first_bad, bool(r.open_range)) for r in records] == [
        ("g0", "f", False),
        ("g2", "", True),
    ]


def test_publish_records_the_bisections_where_the_site_names_the_commit(tmp_path: Path) -> None:
    import json

    from guard.store import history

    db = tmp_path / "h.sqlite"
    _stepped_history(db)
    [step] = bisect.pending_steps(_trends(db), parent=lambda c: c)
    culprit = "ab" * 20
    record = bisect.StepRecord(step.good, step.bad, step.case_ids, culprit, ())
    path = tmp_path / "bisections.json"
    path.write_text(json.dumps(bisect.records_json([record])))
    assert bisect.read_records(json.loads(path.read_text()), "f") == [record]
    site = tmp_path / "site"
    repo = "https://github.com/example/attn-guard"
    assert main(["publish", "--db", str(db), "--out", str(site), "--bisections", str(path),
                 "--repo-url", repo]) == 0  # fmt: skip
    t = history.trend(db, STEPPED)
    assert t.attribution(t.steps[0]) == f"made by {culprit[:10]}"
    pages = "".join(p.read_text() for p in site.rglob("*.html"))
    assert f"made by {culprit[:10]}" in pages
    # The step's row links the commit that made it (its page names the pull request).
    assert f'<a href="{repo}/commit/{culprit}">made by {culprit[:10]}</a>' in pages


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schema_version": 2, "bisections": []}, "schema 1"),
        ({"schema_version": 1, "bisections": [{"good": "a"}]}, "needs exactly"),
        (
            {"schema_version": 1, "bisections": [
                {"good": "zz", "bad": "ab12345", "case_ids": ["k/c"], "first_bad": "",
                 "open_range": []}]},
            "hexadecimal",
        ),
        (
            {"schema_version": 1, "bisections": [
                {"good": "ab12345", "bad": "ab12346", "case_ids": [], "first_bad": "",
                 "open_range": []}]},
            "case_ids",
        ),
    ],
)  # fmt: skip
def test_a_bad_bisections_file_is_refused_naming_the_field(doc, message) -> None:
    with pytest.raises(BadInput, match=message):
        bisect.read_records(doc, "bisections.json")


def test_bisect_pending_writes_an_empty_file_when_nothing_is_pending(tmp_path: Path, capsys):
    import json

    from guard.store import history

    db = tmp_path / "h.sqlite"
    _stepped_history(db)
    t = history.trend(db, STEPPED)
    good, bad = t.step_range(t.steps[0])
    history.record_step_commit(db, [STEPPED], good=good, bad=bad, first_bad="c" * 40)
    out = tmp_path / "b.json"
    code = main(["bisect-pending", "--db", str(db), "--out", str(out), "--gpu", t.gpu_slug,
                 "--device", "cpu"])  # fmt: skip
    assert code == 0
    assert json.loads(out.read_text()) == {"schema_version": 1, "bisections": []}
