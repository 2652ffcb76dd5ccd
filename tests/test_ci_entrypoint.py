"""The PR check (``python -m guard.ci``), end to end on the CPU: the judge is the base.

A temporary git repository holds a copy of the guard and the kernels plus a tiny kernel
``demo`` (``kernels/demo.py``: a sleep, then the reference attention) gated by a tiny
suite. Its history is a pull request's:

    B        the base: demo sleeps 2 ms                       (the judge)
    B..same  an unrelated change                               -> pass (exit 0)
    B..slow  demo sleeps 6 ms                                  -> regression (exit 1)
    B..rig   the same slowdown, and the PR also ungates demo, drops it from the suite,
             sets alpha to 1e-6, widens the threshold and edits guard/base/stats.py so that
             every interval is "unchanged"                       -> still exit 1
    B..wrong demo returns wrong numbers                        -> wrong results (exit 1)
    H0..H1   (branched from B) H0 gives demo a compiler-resources hook reporting 32
             registers, H1 raises them to 40: the local mode (a checkout of H1,
             ``--base H0``, no ``--candidate-tree``) names the rise

As in the workflow, the base is checked out in one folder (the judge, whose guard runs)
and the PR in another (``--candidate-tree``, whose ``kernels/`` alone is imported),
under a fake GitHub Actions environment. Tiny shapes and 3 rounds per arm (up to 8 while
a case is inconclusive) keep each run near half a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GIT_IDENTITY
from conftest import git as _git

ROOT = Path(__file__).resolve().parent.parent

SUITE = """\
schema_version: 1
name: ci-tiny
kernels: [demo, reference]
gate: [demo]
# 3x planted slowdowns on a busy 2-core CPU: a 25% threshold and a 5% noise floor.
threshold: "median:25%"
cpu_timing: {rounds: 3, max_rounds: 8, samples_per_round: 5, sample_target_ms: 2, margin: 0.05}
cases:
  - {shape: [1, 2, 32, 16], causal: false, dtype: float32}
"""

DEMO = """\
import time

from kernels.reference import attention as _reference

DELAY_S = {delay}


def attention(q, k, v, *, causal=False, scale=None):
    time.sleep(DELAY_S)
    return _reference(q, k, v, causal=causal, scale=scale){wrong}
"""

REGISTER = """

REGISTRY["demo"] = KernelSpec(
    name="demo",
    description="a test kernel: a sleep, then the reference",
    loader=_from_module("kernels.demo", "attention"),
    probe=_any_device,
    source_files=("demo.py",),
)
"""


HOOK = """\
REGISTERS = {registers}


def resources(params, arch):  # what a compile for arch would report (none is run)
    return [{{"arch": arch, "kernel": "demo_kernel", "registers": REGISTERS,
             "spill_store_bytes": 0, "spill_load_bytes": 0, "shared_bytes": 0,
             "num_warps": 4, "num_stages": 1, "grid": [1]}}]
"""

REGISTER_HOOK = """

import dataclasses as _dataclasses

from kernels.demo_resources import resources as _demo_resources

REGISTRY["demo"] = _dataclasses.replace(REGISTRY["demo"], resources=_demo_resources)
"""


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "RUNNER_", "BASE_SHA", "HEAD_SHA", "TESTED_SHA"))
    }
    env.update(OMP_NUM_THREADS="1", CI="true", **GIT_IDENTITY)
    return env


def _demo(path: Path, delay_ms: float, wrong: bool = False) -> None:
    (path / "kernels" / "demo.py").write_text(
        DEMO.format(delay=delay_ms / 1e3, wrong=" * 1.5" if wrong else "")
    )


@dataclass(frozen=True)
class Repo:
    path: Path
    base: str
    prs: dict[str, str]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    path = tmp_path_factory.mktemp("pr-repo")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("guard", "kernels"):
        shutil.copytree(ROOT / folder, path / folder, ignore=ignore)
    (path / "suites").mkdir()
    (path / "suites" / "ci.yaml").write_text(SUITE)
    with (path / "kernels" / "registry.py").open("a") as fh:
        fh.write(REGISTER)
    _demo(path, 2)
    (path / ".gitignore").write_text("__pycache__/\n")
    _git(path, "init", "-q", "-b", "main")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "B: the base")
    base = _git(path, "rev-parse", "HEAD")

    def pr(name: str, change) -> str:
        _git(path, "checkout", "-q", "-b", name, base)
        change()
        _git(path, "add", "-A")
        _git(path, "commit", "-qm", f"PR {name}")
        return _git(path, "rev-parse", "HEAD")

    def rig() -> None:
        _demo(path, 6)
        suite = (path / "suites" / "ci.yaml").read_text()
        suite = suite.replace("gate: [demo]", "gate: [reference]")
        suite = suite.replace("kernels: [demo, reference]", "kernels: [reference]")
        suite = suite.replace('threshold: "median:25%"', 'threshold: "median:90%"')
        suite = suite.replace("margin: 0.05}", "margin: 0.05, alpha: 1.0e-6}")
        (path / "suites" / "ci.yaml").write_text(suite)
        stats = path / "guard" / "base" / "stats.py"
        stats.write_text(
            stats.read_text()
            + "\n\ndef classify(interval, rule):  # the PR's 'fix'\n    return Verdict.UNCHANGED\n"
        )

    def hook() -> None:
        (path / "kernels" / "demo_resources.py").write_text(HOOK.format(registers=32))
        with (path / "kernels" / "registry.py").open("a") as fh:
            fh.write(REGISTER_HOOK)

    prs = {
        "same": pr("same", lambda: (path / "NOTES.md").write_text("an unrelated change\n")),
        "slow": pr("slow", lambda: _demo(path, 6)),
        "rig": pr("rig", rig),
        "wrong": pr("wrong", lambda: _demo(path, 2, wrong=True)),
        "hook-base": pr("hook", hook),
    }
    (path / "kernels" / "demo_resources.py").write_text(HOOK.format(registers=40))
    _git(path, "commit", "-qam", "H1: more registers")
    prs["hook-head"] = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "main")
    return Repo(path, base, prs)


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str
    summary: str
    outputs: dict[str, str]
    outcome: dict


def run_check(repo: Repo, pr: str, tmp_path: Path) -> Result:
    """The workflow's steps: the base in judge/, the PR in pr/, guard.ci from judge/."""
    judge, head = tmp_path / "judge", tmp_path / "pr"
    _git(repo.path, "worktree", "add", "-q", "--detach", str(judge), repo.base)
    _git(repo.path, "worktree", "add", "-q", "--detach", str(head), repo.prs[pr])
    summary, outputs, out_dir = tmp_path / "summary.md", tmp_path / "output.txt", tmp_path / "out"
    env = _env()
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(outputs),
        GPU_LABEL="cpu",
        PR_NUMBER="42",
        HEAD_SHA=repo.prs[pr],
        TESTED_SHA=repo.prs[pr],
        PYTHONPATH=str(judge),
    )
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "guard.ci",
                "--device",
                "cpu",
                "--base",
                repo.base,
                "--candidate-tree",
                str(head),
                "--suite",
                "suites/ci.yaml",
                "--out-dir",
                str(out_dir),
            ],
            cwd=judge,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        for tree in (judge, head):
            _git(repo.path, "worktree", "remove", "--force", str(tree))
    lines = outputs.read_text().splitlines() if outputs.exists() else []
    return Result(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        summary.read_text() if summary.exists() else "",
        dict(line.split("=", 1) for line in lines if "=" in line),
        json.loads((out_dir / "meta.json").read_text()),
    )


def run_local_check(repo: Repo, base: str, head: str, tmp_path: Path) -> Result:
    """A local run: in a checkout of ``head``, ``python -m guard.ci --base BASE`` (no
    --candidate-tree: the base's kernels are measured from a temporary worktree, the
    policy is the base commit's suite file, read from git). No GPU_LABEL."""
    tree, out_dir, summary = tmp_path / "pr", tmp_path / "out", tmp_path / "summary.md"
    _git(repo.path, "worktree", "add", "-q", "--detach", str(tree), head)
    env = _env()
    env.update(GITHUB_STEP_SUMMARY=str(summary), PYTHONPATH=str(tree))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", base,
             "--suite", "suites/ci.yaml", "--out-dir", str(out_dir)],
            cwd=tree, env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
    finally:
        _git(repo.path, "worktree", "remove", "--force", str(tree))
    return Result(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        summary.read_text() if summary.exists() else "",
        {},
        json.loads((out_dir / "meta.json").read_text()),
    )


def _why(r: Result) -> str:
    return f"exit {r.code}\n--- stderr\n{r.stderr[-4000:]}\n--- summary\n{r.summary[-3000:]}"


def _case(r: Result, case_id: str) -> dict:
    return next(c for c in r.outcome["cases"] if c["id"] == case_id)


DEMO_CASE = "demo/b1-h2-s32-d16-full-float32"


def test_an_unrelated_change_passes(repo: Repo, tmp_path: Path) -> None:
    r = run_check(repo, "same", tmp_path)
    assert r.code == 0, _why(r)
    assert r.outputs["verdict"] == "pass" and r.outcome["verdict"] == "pass"
    assert r.outcome["tested_commit"] == repo.prs["same"]
    assert r.outcome["judge_commit"] == repo.base
    # On the CPU the demo kernel is timed (only GPU fingerprints make a case identical),
    # so noise decides between unchanged, inconclusive and, rarely, improvement (seen
    # once in CI: the same code's interval below 0.95); what an unrelated change must
    # never get is a failing case.
    case = _case(r, DEMO_CASE)
    assert case["verdict"] in ("unchanged", "identical", "inconclusive", "improvement")
    assert not case["fails"], _why(r)
    # Where the wall time went: measuring against the rest (what sharding cannot divide).
    [wall] = [ln for ln in r.stderr.splitlines() if ln.startswith("[perf-guard] wall ")]
    total, measured, rest = (float(x) for x in re.findall(r"(\d+) s", wall))
    assert "measuring" in wall and "the rest" in wall
    assert abs(measured + rest - total) <= 1  # each rounded to the second


def test_a_slower_kernel_fails_and_is_named(repo: Repo, tmp_path: Path) -> None:
    r = run_check(repo, "slow", tmp_path)
    assert r.code == 1, _why(r)
    case = _case(r, DEMO_CASE)
    assert case["verdict"] == "regression" and case["fails"] and case["ratio"] > 2
    assert r.outputs["verdict"] == "regression"
    assert f"::error title=Performance regression%3A {DEMO_CASE}::" in r.stdout
    assert DEMO_CASE in r.summary


def test_a_pr_cannot_weaken_the_rule_that_judges_it(repo: Repo, tmp_path: Path) -> None:
    r = run_check(repo, "rig", tmp_path)
    assert r.code == 1, _why(r)
    case = _case(r, DEMO_CASE)
    assert case["gate"] and case["verdict"] == "regression" and case["fails"]
    changes = "\n".join(r.outcome["policy_changes"])
    assert "ungates demo" in changes
    assert "removes" in changes and DEMO_CASE in changes
    assert "timing.alpha" in changes or "cpu_timing.alpha" in changes
    assert "threshold" in changes
    assert "takes effect after merge" in r.summary
    assert r.outputs["policy_changed"] == "true"


def test_wrong_results_fail(repo: Repo, tmp_path: Path) -> None:
    r = run_check(repo, "wrong", tmp_path)
    assert r.code == 1, _why(r)
    assert r.outcome["verdict"] == "wrong-results"
    assert _case(r, DEMO_CASE)["verdict"] == "wrong"


def test_the_local_mode_names_compiler_resource_changes(repo: Repo, tmp_path: Path) -> None:
    """Without --candidate-tree the judge's suite is read from the base commit (no file
    here): the resource hooks must still run in both trees, and a change be named."""
    r = run_local_check(repo, repo.prs["hook-base"], repo.prs["hook-head"], tmp_path)
    assert r.code in (0, 1) and r.outcome["verdict"] != "no-verdict", _why(r)
    assert r.outcome["judge_commit"] == repo.prs["hook-base"]
    assert r.outcome["policy_changes"] == []  # the same suite file in both commits
    assert _case(r, DEMO_CASE)["notes"] == ["sm_90 demo_kernel: registers 32 -> 40"], _why(r)
    assert not [n for n in r.outcome["notes"] if "compiler resources" in n], r.outcome["notes"]
    # No GPU_LABEL: the heading names the device the run recorded, not just "GPU".
    assert r.outcome["gpu"].startswith("CPU ("), r.outcome["gpu"]
