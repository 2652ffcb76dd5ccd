"""``--gpus`` and ``--shard`` end to end on the CPU, and ``guard merge``'s exit codes.

A temporary repository holds the guard, the kernels and a kernel ``demo`` (a sleep,
then the reference) gated by a tiny suite of two workloads; its head makes demo 3x
slower. ``guard compare --against HEAD~1 --device cpu --gpus 2`` runs the whole
multi-process path (one process per "GPU", none pinned on a CPU), then merges.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GIT_IDENTITY
from conftest import git as _git

ROOT = Path(__file__).resolve().parent.parent

SUITE = """\
schema_version: 1
name: shard-tiny
kernels: [demo, reference]
gate: [demo]
# Up to 8 rounds: a round slowed by the other shard's processes on two cores leaves a case
# inconclusive at 3, and a sequential check then takes more rounds (as a real one does).
threshold: "median:25%"
cpu_timing: {rounds: 3, max_rounds: 8, samples_per_round: 5, sample_target_ms: 2, margin: 0.05}
cases:
  - {shape: [1, 2, 32, 16], causal: false, dtype: float32}
  - {shape: [1, 2, 48, 16], causal: false, dtype: float32}
"""

DEMO = """\
import time

from kernels.reference import attention as _reference


def attention(q, k, v, *, causal=False, scale=None):
    time.sleep({delay})
    return _reference(q, k, v, causal=causal, scale=scale)
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


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shard-repo")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("guard", "kernels"):
        shutil.copytree(ROOT / folder, path / folder, ignore=ignore)
    (path / "suites").mkdir()
    (path / "suites" / "tiny.yaml").write_text(SUITE)
    with (path / "kernels" / "registry.py").open("a") as fh:
        fh.write(REGISTER)
    (path / "kernels" / "demo.py").write_text(DEMO.format(delay=0.002))
    (path / ".gitignore").write_text("__pycache__/\nout/\n")
    _git(path, "init", "-q", "-b", "main")
    _git(path, "add", ".")
    _git(path, "commit", "-qm", "base")
    (path / "kernels" / "demo.py").write_text(DEMO.format(delay=0.006))
    _git(path, "commit", "-qam", "demo 3x slower")
    return path


def guard(repo: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(repo), **GIT_IDENTITY)
    return subprocess.run(
        [sys.executable, "-m", "guard", *args], cwd=repo, env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


COMPARE = ("compare", "--suite", "suites/tiny.yaml", "--against", "HEAD~1", "--device", "cpu")


def test_two_processes_measure_their_shares_and_one_verdict_comes_back(
    repo: Path, tmp_path: Path
) -> None:
    proc = guard(repo, *COMPARE, "--gpus", "2", "--gpu-split", "cases", "--json",
                 "--out", str(tmp_path / "r.json"))  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert "2 significant regression(s)" in json.dumps(data)
    assert "[worker 1]" in proc.stderr and "[worker 2]" in proc.stderr
    assert any("2 shards merged" in n for n in data.get("notes", [])), data.get("notes")


def test_rounds_dealt_over_two_gpus_give_one_verdict_and_record_each_rounds_gpu(
    repo: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    proc = guard(repo, *COMPARE, "--gpus", "2", "--json", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert "2 significant regression(s)" in json.dumps(data)
    assert "[worker" not in proc.stderr  # one process: no shards
    saved = json.loads(out.read_text())["guard"]
    timed = [c for c in saved["cases"] if c["rounds"]]
    assert timed and all(sorted(set(c["round_gpus"])) == ["0", "1"] for c in timed)
    assert {r.get("gpu") for r in saved["rounds"]} == {"0", "1"}


def test_shard_files_merge_into_the_verdict_and_a_missing_one_is_exit_3(
    repo: Path, tmp_path: Path
) -> None:
    files = []
    for i in (1, 2):
        out = tmp_path / f"shard-{i}.json"
        proc = guard(repo, *COMPARE, "--shard", f"{i}/2", "--outcome", str(out), "-q",
                     "--out", str(tmp_path / f"r{i}.json"))  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-3000:]  # each shard holds a demo case
        files.append(str(out))
    merged = tmp_path / "meta.json"
    proc = guard(repo, "merge", *files, "--out", str(merged))
    assert proc.returncode == 1, proc.stderr
    outcome = json.loads(merged.read_text())
    assert outcome["shard"] is None and outcome["verdict"] == "regression"
    assert {c["id"] for c in outcome["cases"]} == {
        f"{k}/b1-h2-s{s}-d16-full-float32" for k in ("demo", "reference") for s in (32, 48)
    }
    proc = guard(repo, "merge", files[0], "--out", str(merged))
    assert proc.returncode == 3, proc.stderr
    assert "2/2 missing" in json.loads(merged.read_text())["headline"]
    proc = guard(repo, "merge", files[0], str(tmp_path / "never-written.json"))
    assert proc.returncode == 3 and "never reported" in proc.stdout


def test_bad_shard_flags_are_exit_2_naming_the_flag(repo: Path) -> None:
    for args, flag in (
        (("--shard", "0/2"), "--shard"),
        (("--shard", "3/2"), "--shard"),
        (("--gpus", "9", "--gpu-split", "cases"), "--gpus"),  # 4 cases cannot fill 9
        (("--gpus", "2", "--shard", "1/2"), "--gpus"),
        (("--gpu-split", "cases"), "--gpu-split"),  # without --gpus
    ):
        proc = guard(repo, *COMPARE, *args, timeout=120)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert flag in proc.stderr, (args, proc.stderr[-2000:])
    proc = guard(repo, "compare", "--suite", "suites/tiny.yaml", "--device", "cpu",
                 "--shard", "1/2", timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "only with --against" in proc.stderr


def test_a_process_that_hangs_is_exit_3_naming_its_gpu(repo: Path) -> None:
    proc = guard(repo, *COMPARE, "--gpus", "2", "--gpu-split", "cases", "--gpu-timeout", "1")
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "worker 1 (shard 1/2): hung past 1 s" in proc.stderr


@pytest.mark.parametrize("split", ["rounds", "cases"])
def test_the_pr_check_on_two_gpus_publishes_one_outcome(
    repo: Path, tmp_path: Path, split: str
) -> None:
    """``python -m guard.ci --gpus 2`` as the workflow runs it (judge/ and pr/): one
    meta.json with every case, one job summary and one set of outputs (the GPUs'
    processes write none)."""
    judge, head = tmp_path / "judge", tmp_path / "pr"
    _git(repo, "worktree", "add", "-q", "--detach", str(judge), "HEAD~1")
    _git(repo, "worktree", "add", "-q", "--detach", str(head), "HEAD")
    summary, outputs = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    env.update(
        OMP_NUM_THREADS="1", PYTHONPATH=str(judge), GITHUB_ACTIONS="true", GPU_LABEL="cpu",
        GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(outputs), PR_NUMBER="42",
        HEAD_SHA=_git(repo, "rev-parse", "HEAD"), **GIT_IDENTITY,
    )  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", "judge",
         "--candidate-tree", str(head), "--suite", "suites/tiny.yaml",
         "--out-dir", str(tmp_path / "out"), "--gpus", "2", "--gpu-split", split],
        cwd=judge, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["verdict"] == "regression" and meta["shard"] is None and meta["pr_number"] == 42
    assert len(meta["cases"]) == 4
    assert summary.read_text().count("### ") == 1  # one table for this GPU kind
    assert outputs.read_text().count("exit_code=") == 1
    assert "exit_code=1" in outputs.read_text()
