"""The PR check's entry point (``python -m guard.ci``), end to end on the CPU.

A temporary git repository holds a copy of the guard, the kernels and the test fault
kernels; its history is what a pull request's checkout has:

    A  the code and a tiny suite, no baseline        (a base without a baseline)
    B  + baselines/cpu-x86-64.json, recorded with FAULT_SLOW_MS=2   (the PR's base)
    C  + an unrelated change                          (the PR's head)

The entry point runs at C under a fake GitHub Actions environment (GITHUB_ACTIONS,
GITHUB_STEP_SUMMARY, GITHUB_OUTPUT as temp files), with ``fault_slow``'s delay set
through FAULT_SLOW_MS: the same delay passes, three times the delay fails as a
regression, a wrong kernel fails the correctness step, and a base without a baseline
gives exit 2 and "no baseline". Tiny shapes and 3 rounds keep the whole file near a
minute and a half on 2 cores; OMP_NUM_THREADS=1 keeps the CPU timings steady on a
shared machine (torch's thread pool on tiny tensors is what makes them noisy).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLUG_FILE = "baselines/cpu-x86-64.json"

SUITE = """\
schema_version: 1
name: ci-tiny
kernels: [fault_slow, reference]
gate: [fault_slow]
# A 3x planted slowdown must fail and an unchanged kernel must pass with only three
# rounds on a busy CPU: a 25% band keeps scheduler noise on a 2 ms sleep from
# passing for a regression, and leaves the 3x effect far outside it.
threshold: "median:25%"
cpu_timing: {rounds: 3, max_rounds: 3, samples_per_round: 5, sample_target_ms: 2}
cases:
  - {shape: [1, 2, 32, 16], causal: false, dtype: float32}
"""

WRONG_SUITE = """\
schema_version: 1
name: ci-tiny-wrong
kernels: [fault_wrong, reference]
gate: [fault_wrong]
threshold: "median:25%"
cpu_timing: {rounds: 3, max_rounds: 3, samples_per_round: 5, sample_target_ms: 2}
cases:
  - {shape: [1, 2, 32, 16], causal: false, dtype: float32}
"""

GUARD_EXTRA = ["--fault-module", "fault_kernels"]  # plus --worker-path <repo>/tests


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return proc.stdout.strip()


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "RUNNER_", "BASE_SHA", "PERF_GUARD_", "FAULT_"))
    }
    env.update(
        OMP_NUM_THREADS="1",
        CI="true",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return env


@dataclass(frozen=True)
class Repo:
    path: Path
    no_baseline: str  # commit A
    base: str  # commit B
    head: str  # commit C


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    path = tmp_path_factory.mktemp("pr-repo")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("guard", "kernels", "suites"):
        shutil.copytree(ROOT / folder, path / folder, ignore=ignore)
    (path / "tests").mkdir()
    shutil.copy2(ROOT / "tests" / "fault_kernels.py", path / "tests" / "fault_kernels.py")
    shutil.copy2(ROOT / "pyproject.toml", path / "pyproject.toml")
    (path / "suites" / "ci-tiny.yaml").write_text(SUITE)
    (path / ".gitignore").write_text("__pycache__/\n/perf-guard-out/\n/results/\n")
    env = _base_env()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    _git(path, "add", ".")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "A: code")
    no_baseline = _git(path, "rev-parse", "HEAD")

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "baseline",
            "refresh",
            "--allow-cpu",
            "--dir",
            "baselines",
            "--suite",
            "suites/ci-tiny.yaml",
            "-q",
            *GUARD_EXTRA,
            "--worker-path",
            str(path / "tests"),
        ],
        cwd=path,
        env={**env, "FAULT_SLOW_MS": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (path / SLUG_FILE).exists()
    _git(path, "add", "baselines")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "B: baseline")
    base = _git(path, "rev-parse", "HEAD")
    _git(path, "branch", "base-branch", base)

    (path / "suites" / "ci-tiny-wrong.yaml").write_text(WRONG_SUITE)
    (path / "NOTES.md").write_text("an unrelated change\n")
    _git(path, "add", ".")
    _git(path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "C: the PR")
    head = _git(path, "rev-parse", "HEAD")
    return Repo(path, no_baseline, base, head)


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str
    summary: str
    outputs: dict[str, str]
    out_dir: Path

    @property
    def meta(self) -> dict:
        return json.loads((self.out_dir / "meta.json").read_text())


def run_entry(
    repo: Repo,
    tmp_path: Path,
    *,
    slow_ms: float = 2,
    suite: str = "suites/ci-tiny.yaml",
    env_extra: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Result:
    summary = tmp_path / "step-summary.md"
    outputs = tmp_path / "github-output.txt"
    out_dir = tmp_path / "out"
    env = _base_env()
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(outputs),
        GITHUB_SERVER_URL="https://github.com",
        GITHUB_REPOSITORY="attn/attn-guard",
        GITHUB_RUN_ID="123",
        GPU_LABEL="cpu",
        PR_NUMBER="42",
        HEAD_SHA=repo.head,
        FAULT_SLOW_MS=str(slow_ms),
    )
    env.update(env_extra or {})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard.ci",
            "--suite",
            suite,
            "--out-dir",
            str(out_dir),
            "--no-confirm",
            *args,
            "--",
            "-q",
            *GUARD_EXTRA,
            "--worker-path",
            str(repo.path / "tests"),
        ],
        cwd=repo.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = outputs.read_text() if outputs.exists() else ""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return Result(
        proc.returncode,
        proc.stdout,
        proc.stderr,
        summary.read_text() if summary.exists() else "",
        values,
        out_dir,
    )


def _why(r: Result) -> str:
    return f"exit {r.code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"


def test_pass_with_the_same_delay(repo: Repo, tmp_path: Path) -> None:
    # The base is given as GITHUB_BASE_REF (a branch name), as on a pull_request event.
    r = run_entry(repo, tmp_path, slow_ms=2, env_extra={"GITHUB_BASE_REF": "base-branch"})
    assert r.code == 0, _why(r)
    assert r.outputs == {"exit_code": "0", "verdict": "pass", "baseline_changed": "false"}
    assert "# perf-guard: cpu" in r.summary and "## Performance guard" in r.summary
    assert "PASS" in r.summary
    assert "perf-guard verdict: pass" in r.summary
    assert "::error" not in r.stdout
    meta = r.meta
    assert meta["pr_number"] == 42 and meta["exit_code"] == 0 and meta["verdict"] == "pass"
    assert meta["base_sha"] == repo.base and meta["head_sha"] == repo.head
    assert meta["run_url"] == "https://github.com/attn/attn-guard/actions/runs/123"
    for name in ("check.json", "results.json", "comparison.json", "compare.md"):
        assert (r.out_dir / name).exists(), name


def test_regression_at_three_times_the_delay(repo: Repo, tmp_path: Path) -> None:
    r = run_entry(repo, tmp_path, slow_ms=6, env_extra={"BASE_SHA": repo.base})
    assert r.code == 1, _why(r)
    assert r.outputs["exit_code"] == "1" and r.outputs["verdict"] == "regression"
    errors = [line for line in r.stdout.splitlines() if line.startswith("::error")]
    # the title is a workflow-command property: ":" escaped as GitHub's toolkit does
    assert any("title=Performance regression%3A fault_slow/" in line for line in errors), r.stdout
    assert "fault_slow/b1-h2-s32-d16-full-float32" in r.summary
    assert "regression" in r.summary
    moved = {c["id"]: c for c in r.meta["moved"]}
    case = moved["fault_slow/b1-h2-s32-d16-full-float32"]
    assert case["fails"] and case["ratio"] > 1.5


def test_wrong_results_fail_the_correctness_step(repo: Repo, tmp_path: Path) -> None:
    r = run_entry(
        repo, tmp_path, suite="suites/ci-tiny-wrong.yaml", env_extra={"BASE_SHA": repo.base}
    )
    assert r.code == 1, _why(r)
    assert r.outputs["verdict"] == "wrong-results"
    assert any(  # ':' in a title is escaped as %3A (GitHub decodes it)
        line.startswith("::error title=Wrong results%3A fault_wrong/")
        for line in r.stdout.splitlines()
    ), r.stdout
    assert "fault_wrong/b1-h2-s32-d16-full-float32" in r.summary
    assert not (r.out_dir / "comparison.json").exists()  # timing skipped


def test_no_baseline_in_the_base_commit(repo: Repo, tmp_path: Path) -> None:
    r = run_entry(repo, tmp_path, env_extra={"BASE_SHA": repo.no_baseline})
    assert r.code == 2, _why(r)
    assert r.outputs["verdict"] == "no-baseline"
    assert "no baseline" in r.summary.lower()
    assert "NO VERDICT" in r.summary
    assert "baseline-refresh" in r.summary
    assert "::error title=No baseline for this GPU::" in r.stdout
    # Between A and C the PR adds the baseline file: called out, with an annotation.
    assert r.outputs["baseline_changed"] == "true"
    assert "changes baseline files" in r.summary and SLUG_FILE in r.summary
    assert f"::warning file={SLUG_FILE}," in r.stdout


def test_no_baseline_can_be_neutral(repo: Repo, tmp_path: Path) -> None:
    r = run_entry(
        repo,
        tmp_path,
        env_extra={"BASE_SHA": repo.no_baseline},
        args=("--missing-baseline", "neutral"),
    )
    assert r.code == 0, _why(r)
    assert r.outputs["verdict"] == "no-baseline" and r.outputs["exit_code"] == "0"
    assert "::warning title=No baseline for this GPU::" in r.stdout


def test_no_base_commit_is_bad_input(repo: Repo, tmp_path: Path) -> None:
    r = run_entry(repo, tmp_path, env_extra={"BASE_SHA": "0" * 40})
    assert r.code == 2, _why(r)
    assert r.outputs["verdict"] == "bad-input"
    assert "is not in this checkout" in r.summary
    assert r.meta["verdict"] == "bad-input"


def test_split_json() -> None:
    from guard.ci import _split_json

    data, lines = _split_json('{\n "a": 1\n}\n::error title=x::y\n')
    assert data == {"a": 1} and lines == ["::error title=x::y"]
    assert _split_json("") == (None, [])
    assert _split_json("not json")[0] is None


def test_annotations_and_summary_hold_data_not_commands(tmp_path, monkeypatch, capsys) -> None:
    """A case name or a crash message with a newline, HTML, backticks or a fence: one
    workflow command per annotation, a summary that renders it as text, and a
    traceback the runner shows without running."""
    from guard import ci

    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    ci.annotate("error", "Wrong results: a\n::error::x", "m\r\n::warning::y", file="b,c:d")
    assert capsys.readouterr().out == (
        "::error file=b%2Cc%3Ad,title=Wrong results%3A a%0A%3A%3Aerror%3A%3Ax"
        "::m%0D%0A::warning::y\n"
    )
    evil = "bad ```\n</details>\n<img src=x onerror=alert(1)>\n::error::pwned | *x*"
    outcome = ci._crashed("guard compare", RuntimeError(evil))
    assert outcome.exit_code == 3
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if line.startswith("::")] == [
        line for line in out.splitlines() if line.startswith("::error title=perf-guard crashed::")
    ]
    token = err.splitlines()[0].removeprefix("::stop-commands::")
    assert len(token) == 32 and err.rstrip().endswith(f"::{token}::")
    md = summary.read_text()
    head, block = md.split("<details><summary>traceback</summary>", 1)
    assert "<img" not in head and "\n" not in head.strip()
    assert "**guard compare crashed: RuntimeError: bad \\`\\`\\` &lt;/details&gt;" in head
    fence = block.strip().splitlines()[0]
    assert fence == "````" and block.rstrip().endswith(f"{fence}\n\n</details>")
