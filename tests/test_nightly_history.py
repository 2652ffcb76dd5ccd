"""The nightly workflow's history jobs, their steps run as nightly.yml writes them against
a local bare repository: fetch (git only), publish (main's guard, no token), push (git
only). Nights land one after another; a night whose branch moved while it appended is
refused, never overwrites, and lands when run again; a night appended again stores
nothing twice."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from test_publish import _runs

from guard.store import history, results

ROOT = Path(__file__).resolve().parent.parent
STEPS = {
    "fetch": "Fetch perf-history's head (git only)",
    "publish": "Append tonight's results to the history and build the site",
    "push": "Commit it on the head fetch saw and push without force (git only)",
}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _step(job: str) -> tuple[str, dict[str, str]]:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text("utf-8"))
    step = next(s for s in doc["jobs"][job]["steps"] if s.get("name") == STEPS[job])
    return step["run"], {k: str(v) for k, v in step["env"].items()}


def _night(tmp: Path, name: str, runs: list[results.RunResult]) -> Path:
    """A night's folder: main's baselines (none here) and tonight's artifacts."""
    night = tmp / name
    (night / "baselines").mkdir(parents=True)
    for i, run in enumerate(runs):
        results.save(run, night / "nightly" / f"nightly-gpu{i}" / "results.json")
    return night


def _job(job: str, night: Path, remote: Path) -> subprocess.CompletedProcess[str]:
    """One job's step, its folders where the artifacts would be downloaded."""
    script, spec = _step(job)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GIT_"))}
    env.update(
        {
            "GH_TOKEN": "not-a-token",
            "REPO": remote.name.removesuffix(".git"),
            "SERVER_URL": remote.parent.as_uri(),
            "SHA": "0123456789abcdef0123456789abcdef01234567",
            "RUN_ID": night.name,
            "NIGHTLY": str(night / "nightly"),
            "BISECT": str(night / "bisect"),
            "HIST": str(night / f"{job}-clone"),
            "BASE": str(night / "history-base"),
            "NEW": str(night / "history-new"),
            "SITE": str(night / "site"),
            "BRANCH": spec.get("BRANCH", "perf-history"),
            "PYTHONPATH": str(ROOT),
            "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(night),
        }
    )
    return subprocess.run(
        ["bash", "-c", script], cwd=night, env=env, text=True, timeout=300,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _run_jobs(night: Path, remote: Path, *jobs: str) -> str:
    out = ""
    for job in jobs:
        done = _job(job, night, remote)
        out += done.stdout
        if done.returncode != 0:
            raise AssertionError(f"{job} exited {done.returncode}: {out[-3000:]}")
    return out


def _branch(remote: Path, tmp: Path) -> tuple[list[str], Path]:
    clone = tmp / "check"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(
        ["git", "clone", "-q", "--branch", "perf-history", str(remote), str(clone)], check=True
    )
    log = subprocess.run(
        ["git", "-C", str(clone), "log", "--format=%s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return log, clone / "history.sqlite"


@needs_git
def test_nights_land_and_a_moved_branch_is_refused_not_overwritten(tmp_path: Path) -> None:
    remote = tmp_path / "attn-guard.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    first = _runs(3, step_at=9, factor=1.0)
    second = _runs(2, step_at=9, factor=1.0, gpu="nvidia-h200")
    night_a, night_b = _night(tmp_path, "night-a", first), _night(tmp_path, "night-b", second)

    # Both fetch before either pushes (no branch yet): A lands, B is refused.
    _run_jobs(night_a, remote, "fetch", "publish")
    _run_jobs(night_b, remote, "fetch", "publish")
    _run_jobs(night_a, remote, "push")
    refused = _job("push", night_b, remote)
    assert refused.returncode != 0, refused.stdout
    log, _ = _branch(remote, tmp_path)
    assert log == ["History: nightly run night-a of main at 0123456789"]

    # B run again, from its fetch: it lands on top of A, and both nights are kept.
    _run_jobs(night_b, remote, "fetch", "publish", "push")
    log, db = _branch(remote, tmp_path)
    assert len(log) == 2 and log[0].startswith("History: nightly run night-b")
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert stored == len(first) + len(second)  # every run of both nights
    assert {t.gpu_slug for t in history.every_trend(db)} == {
        "nvidia-h100-80gb-hbm3",
        "nvidia-h200",
    }
    for night in (night_a, night_b):
        assert (night / "site" / "index.html").is_file()

    # Night A again (a rerun of the same artifacts): nothing new, nothing pushed.
    out = _run_jobs(night_a, remote, "fetch", "publish", "push")
    assert "nothing new for the history" in out, out[-3000:]
    assert len(_branch(remote, tmp_path)[0]) == 2


@needs_git
def test_a_nights_bisections_land_in_the_history_and_on_the_site(tmp_path: Path) -> None:
    import json

    from guard.ops import bisect

    remote = tmp_path / "attn-guard.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    runs = _runs(12, step_at=6, factor=1.2)
    _run_jobs(_night(tmp_path, "night-a", runs), remote, "fetch", "publish", "push")
    _, db = _branch(remote, tmp_path)
    [step] = bisect.pending_steps(list(history.every_trend(db, limit=None)), parent=lambda c: c)
    assert (step.good, step.bad) == (runs[5].environment.commit, runs[6].environment.commit)
    # The next night: the bisect job of one GPU kind found the commit.
    night = _night(tmp_path, "night-b", [])
    culprit = "ab" * 20
    found = bisect.StepRecord(step.good, step.bad, step.case_ids, culprit, ())
    (night / "bisect" / "bisect-h100").mkdir(parents=True)
    (night / "bisect" / "bisect-h100" / "bisections.json").write_text(
        json.dumps(bisect.records_json([found]))
    )
    _run_jobs(night, remote, "fetch", "publish", "push")
    _, db = _branch(remote, tmp_path)
    assert bisect.pending_steps(list(history.every_trend(db, limit=None)), lambda c: c) == []
    pages = "".join(p.read_text() for p in (night / "site").rglob("*.html"))
    assert f"made by {culprit[:10]}" in pages


@needs_git
def test_push_refuses_what_is_not_a_history(tmp_path: Path) -> None:
    remote = tmp_path / "attn-guard.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    night = _night(tmp_path, "night", _runs(2, step_at=9, factor=1.0))
    _run_jobs(night, remote, "fetch", "publish")
    (night / "history-new" / "history.sqlite").write_text("#!/bin/sh\necho not a database\n")
    done = _job("push", night, remote)
    assert done.returncode != 0 and "not a SQLite file" in done.stdout, done.stdout
    (night / "history-new" / "base.txt").write_text("; rm -rf /\n")
    done = _job("push", night, remote)
    assert done.returncode != 0 and "bad base commit" in done.stdout, done.stdout


@needs_git
def test_a_history_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """perf-history's history.sqlite as a symbolic link (to /proc/self/environ, the
    job's token in it) is refused by fetch: nothing is appended or published."""
    remote = tmp_path / "attn-guard.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "perf-history", str(work)], check=True)
    (work / "history.sqlite").symlink_to("/proc/self/environ")
    git = ["git", "-C", str(work), "-c", "user.name=x", "-c", "user.email=x@x"]
    subprocess.run([*git, "add", "history.sqlite"], check=True)
    subprocess.run([*git, "commit", "-qm", "a link"], check=True)
    subprocess.run([*git, "push", "-q", str(remote), "perf-history"], check=True)
    night = _night(tmp_path, "night", _runs(2, step_at=9, factor=1.0))
    done = _job("fetch", night, remote)
    assert done.returncode != 0 and "not a regular file" in done.stdout, done.stdout
    assert not (night / "history-base" / "history.sqlite").exists()
