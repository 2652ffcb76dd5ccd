"""The pull request's code cannot reach what judges it (docs/CI.md, "The runner's trust
boundary").

A PR's ``kernels/__init__.py`` runs in every worker, probe and compiler-resource child
of the check. Here it tries each escape a real PR could try, with the paths handed to it
(as if it had guessed them): append to the step's ``$GITHUB_ENV`` (a variable that
would reach every later step), edit the judge's guard and suite, write the check's
output folder, poison the base tree's and the trusted compile cache. It also records
which of the runner's variables it can see. Run as the workflow runs it (judge mode, a
fake GitHub Actions environment) once with ``--sandbox none`` (every write lands: what
the check did before bubblewrap) and once with ``--sandbox bwrap`` (none does). CPU only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from guard.measure import sandbox

SUITE = """\
schema_version: 1
name: sandbox
kernels: [reference]
gate: [reference]
threshold: "median:50%"
cpu_timing: {rounds: 2, max_rounds: 2, samples_per_round: 3, sample_target_ms: 1, margin: 0.05}
cases:
  - {shape: [1, 2, 16, 16], causal: false, dtype: float32}
"""

ESCAPES = '''

def _escape(targets):
    """Try every write; note what the environment shows (the test reads the notes)."""
    import os as _os

    seen = sorted(k for k in _os.environ if k.startswith(("GITHUB_", "ACTIONS_", "RUNNER_")))
    for path in targets:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("ESCAPED\\n")
        except OSError:
            pass
    mine = _os.environ.get("ATTN_GUARD_CACHE", "")
    if mine.endswith("/head/attn-guard"):  # the base tree's cache, beside this tree's
        base = mine[: -len("/head/attn-guard")] + "/base/attn-guard/poison"
        try:
            with open(base, "w", encoding="utf-8") as fh:
                fh.write("ESCAPED\\n")
        except OSError:
            pass
    return seen


_SEEN = _escape(TARGETS)
'''


def _unavailable_bwrap() -> None:
    why = sandbox.unavailable()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI runs `./install.sh --test`, which installs bubblewrap")
        pytest.skip(why)


def _judge(tmp_path: Path) -> Path:
    judge = tmp_path / "judge"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("guard", "kernels"):
        shutil.copytree(ROOT / folder, judge / folder, ignore=ignore)
    (judge / "suites").mkdir()
    (judge / "suites" / "ci.yaml").write_text(SUITE)
    return judge


def _pr(tmp_path: Path, targets: list[str]) -> Path:
    pr = tmp_path / "pr"
    shutil.copytree(ROOT / "kernels", pr / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    init = pr / "kernels" / "__init__.py"
    init.write_text(init.read_text() + f"\nTARGETS = {targets!r}\n" + ESCAPES)
    return pr


@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_a_prs_code_cannot_write_what_judges_it(tmp_path: Path, mode: str) -> None:
    if mode == "bwrap":
        _unavailable_bwrap()
    judge = _judge(tmp_path)
    out, trusted = tmp_path / "out", tmp_path / "trusted"
    (trusted / "triton").mkdir(parents=True)
    github_env = tmp_path / "github_env"
    github_env.write_text("")
    targets = [
        str(github_env),
        str(judge / "guard" / "ci.py"),
        str(judge / "suites" / "ci.yaml"),
        str(out / "meta.json"),
        str(trusted / "triton" / "poison"),
    ]
    pr = _pr(tmp_path, targets)
    before = {t: Path(t).read_bytes() if Path(t).exists() else None for t in targets}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_ENV=str(github_env),
        ACTIONS_RUNTIME_TOKEN="a-token-the-pr-must-not-see",
        RUNNER_TEMP=str(tmp_path),
        PYTHONPATH=str(judge),
        OMP_NUM_THREADS="1",
        TESTED_SHA="escape",
    )
    run = subprocess.run(
        [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", "judge",
         "--candidate-tree", str(pr), "--suite", "suites/ci.yaml", "--out-dir", str(out),
         "--trusted-cache", str(trusted), "--sandbox", mode, "--surface", "none"],
        cwd=judge, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    outcome = json.loads((out / "meta.json").read_text())
    assert run.returncode in (0, 2), run.stderr[-3000:]  # pass, or no verdict on a busy CPU
    case = next(c for c in outcome["cases"] if c["id"] == "reference/b1-h2-s16-d16-full-float32")
    assert case["verdict"] not in ("crashed", "wrong"), case
    meta = str(out / "meta.json")  # the guard writes it: only the PR's line counts there
    escaped = [
        t
        for t in targets
        if Path(t).exists()
        and (b"ESCAPED" in Path(t).read_bytes() if t == meta else Path(t).read_bytes() != before[t])
    ]
    poisoned = list((tmp_path).glob("**/base/attn-guard/poison"))
    if mode == "none":
        # Without the sandbox every file the PR's code was handed changed (or appeared).
        assert set(escaped) == set(targets) - {meta}, escaped  # the guard rewrote meta.json
    else:
        assert escaped == [] and poisoned == [], (escaped, poisoned)
        assert any("bubblewrap" in n for n in outcome["notes"]), outcome["notes"]


def test_the_prs_code_sees_none_of_the_runners_variables(tmp_path: Path) -> None:
    """The workers' environment has no GITHUB_*, ACTIONS_* or RUNNER_* (sandboxed or not)."""
    from guard.measure.proc import child_env

    os.environ["GITHUB_ENV"] = "/x"
    os.environ["ACTIONS_RUNTIME_TOKEN"] = "t"
    os.environ["BASH_ENV"] = "/y"
    try:
        env = child_env()
    finally:
        for k in ("GITHUB_ENV", "ACTIONS_RUNTIME_TOKEN", "BASH_ENV"):
            os.environ.pop(k)
    assert not [k for k in env if k.startswith(("GITHUB_", "ACTIONS_", "RUNNER_"))]
    assert "BASH_ENV" not in env and "PYTHONPATH" in env


def test_sandbox_bwrap_where_it_cannot_run_is_exit_3(tmp_path: Path) -> None:
    judge = _judge(tmp_path)
    pr = _pr(tmp_path, [])
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env.update(PATH=f"{fake}:{env['PATH']}", PYTHONPATH=str(judge))
    run = subprocess.run(
        [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", "judge",
         "--candidate-tree", str(pr), "--suite", "suites/ci.yaml",
         "--out-dir", str(tmp_path / "out"), "--sandbox", "bwrap"],
        cwd=judge, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 3, run.stderr[-2000:]
    assert "No permissions to create new namespace" in run.stderr
