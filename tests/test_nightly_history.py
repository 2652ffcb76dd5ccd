"""The nightly workflow's history step, run as it is written in nightly.yml against a
local bare repository: two nights that race both land on the history branch, and a
night appended again stores nothing twice."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_publish import _runs

from guard.store import history, results

ROOT = Path(__file__).resolve().parent.parent
STEP = "Append to the history on perf-history and build the site"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _script() -> tuple[str, dict[str, str]]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text("utf-8"))
    step = next(s for s in doc["jobs"]["history"]["steps"] if s.get("name") == STEP)
    return step["run"], {k: str(v) for k, v in step["env"].items()}


def _night(tmp: Path, name: str, remote: Path, runs: list[results.RunResult]) -> Path:
    """A job's folder: main's baselines (none here), tonight's artifacts, a `guard`."""
    job = tmp / name
    (job / "baselines").mkdir(parents=True)
    for i, run in enumerate(runs):
        results.save(run, job / "nightly" / f"nightly-gpu{i}" / "results.json")
    bin_dir = job / "bin"
    bin_dir.mkdir()
    guard = bin_dir / "guard"
    guard.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m guard "$@"\n')
    guard.chmod(0o755)
    return job


def _run(job: Path, remote: Path) -> subprocess.Popen[str]:
    script, env_spec = _script()
    env = dict(os.environ)
    env.update(
        {
            "GH_TOKEN": "not-a-token",
            "REPO": remote.name.removesuffix(".git"),
            "SERVER_URL": remote.parent.as_uri(),
            "SHA": "0123456789abcdef0123456789abcdef01234567",
            "RUN_ID": job.name,
            "NIGHTLY": str(job / "nightly"),
            "HIST": str(job / "history"),
            "SITE": str(job / "site"),
            "BRANCH": env_spec["BRANCH"],
            "PATH": f"{job / 'bin'}{os.pathsep}{env['PATH']}",
            "PYTHONPATH": str(ROOT),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(job),
        }
    )
    return subprocess.Popen(
        ["bash", "-c", script], cwd=job, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


@needs_git
def test_racing_nights_lose_nothing(tmp_path: Path) -> None:
    remote = tmp_path / "attn-guard.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    first = _runs(3, step_at=9, factor=1.0)
    second = _runs(2, step_at=9, factor=1.0, gpu="nvidia-h200")
    jobs = [_night(tmp_path, "night-a", remote, first), _night(tmp_path, "night-b", remote, second)]
    procs = [_run(job, remote) for job in jobs]  # started together: both may fetch no branch
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    clone = tmp_path / "check"
    subprocess.run(
        ["git", "clone", "-q", "--branch", "perf-history", str(remote), str(clone)], check=True
    )
    log = subprocess.run(
        ["git", "-C", str(clone), "log", "--format=%s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(log) == 2 and all(line.startswith("History: nightly run night-") for line in log)
    db = clone / "history.sqlite"
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert stored == len(first) + len(second)  # every run of both nights
    assert {t.gpu_slug for t in history.every_trend(db)} == {
        "nvidia-h100-80gb-hbm3",
        "nvidia-h200",
    }
    for job in jobs:
        assert (job / "site" / "index.html").is_file()
    # Night A again (a rerun of the same artifacts): nothing new, nothing pushed.
    shutil.rmtree(jobs[0] / "history")
    proc = _run(jobs[0], remote)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "nothing new for the history" in out, out[-3000:]
