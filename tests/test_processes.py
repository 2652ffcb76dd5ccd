"""Worker processes on the CPU: lifetime, blame, timed-output checks, logs, worktrees, and
"no gated measurement, no verdict".

Fault kernels (tests/fault_kernels.py) leave children behind, hang, exit, turn NaN after
their first call, or flood stderr. Nothing here asserts a duration: the waits only keep a
broken guard from hanging the test.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, fault_suite, make_case, make_run
from conftest import git as _git

from guard.base.errors import ExitCode
from guard.commands.main import main
from guard.decide.compare import Comparison, compare_runs
from guard.ops import pytest_compare as ops_pytest_compare
from guard.ops import trees as ops_trees
from guard.store import results
from guard.store.results import UNAVAILABLE

FAULTS = ["--fault-module", "fault_kernels", "--worker-path", str(TESTS)]

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes"
)


write_suite = functools.partial(fault_suite, name="procs")


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


# --------------------------------------------------------------------------- /proc


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _living(pgids: set[int], pids: set[int]) -> list[int]:
    """Processes (not zombies) in any of ``pgids``, or among ``pids``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st and st[0] not in "ZX" and (st[1] in pgids or int(entry.name) in pids):
            out.append(int(entry.name))
    return out


def _spawned(pid_file: Path) -> tuple[set[int], set[int]]:
    """The worker process groups and the children the fault kernels recorded."""
    rows = [line.split() for line in pid_file.read_text().splitlines() if line.strip()]
    return {int(r[1]) for r in rows}, {int(r[0]) for r in rows} | {int(r[2]) for r in rows}


def _survivors(pid_file: Path, wait_s: float = 20) -> list[int]:
    pgids, pids = _spawned(pid_file)
    assert pgids, "the fault kernel never ran"
    deadline = time.monotonic() + wait_s  # SIGKILL is delivered asynchronously
    while (alive := _living(pgids, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def _reap(pids: list[int]) -> None:
    for pid in pids:  # leave the machine clean even when the test fails
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_for(path: Path, proc: subprocess.Popen, wait_s: float = 180) -> None:
    deadline = time.monotonic() + wait_s
    while not (path.exists() and path.read_text().strip()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the fault kernel never started"
        time.sleep(0.2)
    time.sleep(1)  # let the kernel reach its hang


# --------------------------------------------------------------------------- 1. lifetime


@linux_only
@pytest.mark.parametrize("kernel", ["fault_spawn", "fault_spawn_hang"])
def test_no_process_of_a_worker_outlives_the_guard(tmp_path, monkeypatch, kernel):
    """A kernel's child (sleep 300) dies with its worker's round, hung or not."""
    pid_file = tmp_path / "pids.txt"
    monkeypatch.setenv("FAULT_PID_FILE", str(pid_file))
    suite = write_suite(tmp_path, ["reference", kernel], gate=["reference"], timeout=5)
    out = tmp_path / "r.json"
    code = main(["run", "--suite", str(suite), "-q", "--out", str(out), "--rounds", "1", *FAULTS])
    assert code == 0
    status = {c.case.kernel: c.status for c in results.load(out).cases}
    assert status == {"reference": "ok", kernel: "ok" if kernel == "fault_spawn" else "timeout"}
    alive = _survivors(pid_file)
    _reap(alive)
    assert not alive, f"processes outlived the guard: {alive}"


@linux_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_guard_kills_its_workers(tmp_path, sig):
    """SIGTERM: the guard cleans up and exits 143. SIGKILL: the worker dies with its parent
    and takes its process group (the kernel's child) with it."""
    pid_file = tmp_path / "pids.txt"
    suite = write_suite(tmp_path, ["fault_spawn_hang"], timeout=600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "guard", "run", "--suite", str(suite), "-q", *FAULTS],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "FAULT_PID_FILE": str(pid_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(pid_file, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    alive = _survivors(pid_file)
    _reap(alive)
    assert not alive, f"processes outlived the guard: {alive}"
    assert proc.returncode == (143 if sig == signal.SIGTERM else -signal.SIGKILL), err


# --------------------------------------------------------------------------- 2. exits


@pytest.mark.parametrize("kernel", ["fault_os_exit", "fault_sys_exit", "fault_exit_later"])
def test_a_kernel_that_exits_costs_only_its_own_case(tmp_path, kernel):
    """os._exit / sys.exit in a kernel (in the check, or later while timed) blames that
    case; the cases after it are measured in a fresh worker."""
    suite = write_suite(tmp_path, [kernel, "reference", "sdpa"], gate=["reference"])
    out = tmp_path / "r.json"
    main(["run", "--suite", str(suite), "-q", "--out", str(out), *FAULTS])
    by_kernel = {c.case.kernel: c for c in results.load(out).cases}
    for good in ("reference", "sdpa"):
        assert by_kernel[good].status == "ok", by_kernel[good].reason
        assert len(by_kernel[good].rounds) == 2
    bad = by_kernel[kernel]
    assert bad.status == "crashed"
    assert "exit" in bad.reason.lower(), bad.reason


def test_a_kernel_that_leaks_host_memory_crashes_its_case_not_the_machine(tmp_path):
    """A worker past the suite's memory limit is killed; its case is a crash naming the
    limit, and the other kernels' cases are measured."""
    suite = write_suite(tmp_path, ["fault_grow_memory", "reference"], gate=["reference"])
    text = suite.read_text().replace("case_timeout_s: 60}", "case_timeout_s: 60, memory_gb: 1}")
    suite.write_text(text)
    out = tmp_path / "r.json"
    main(["run", "--suite", str(suite), "-q", "--out", str(out), *FAULTS])
    by_kernel = {c.case.kernel: c for c in results.load(out).cases}
    assert by_kernel["reference"].status == "ok", by_kernel["reference"].reason
    bad = by_kernel["fault_grow_memory"]
    assert bad.status == "crashed"
    assert "passed the limit of 1.0 GiB (timing.memory_gb)" in bad.reason, bad.reason


# --------------------------------------------------------------------------- 3. timed output


@pytest.mark.parametrize("kernel", ["fault_nan_later", "fault_wrong_later"])
def test_output_of_timed_calls_is_checked(tmp_path, kernel):
    """Correct on the first call, NaN or 2% off afterwards: the case is wrong (exit 1)."""
    suite = write_suite(tmp_path, ["reference", kernel], gate=["reference"])
    out = tmp_path / "r.json"
    code = main(["run", "--suite", str(suite), "-q", "--out", str(out), "--rounds", "1", *FAULTS])
    by_kernel = {c.case.kernel: c for c in results.load(out).cases}
    assert by_kernel["reference"].status == "ok"
    bad = by_kernel[kernel]
    assert bad.status == "wrong", bad.reason
    assert "timed" in bad.reason
    assert bad.correctness is not None and not bad.correctness.passed
    assert code == ExitCode.FAIL


# --------------------------------------------------------------------------- 4. logs


def test_worker_log_is_read_as_a_bounded_tail(tmp_path):
    """4 MiB on stderr, then exit 3: the case keeps at most 64 KiB and says what was cut."""
    suite = write_suite(tmp_path, ["fault_chatty", "reference"], gate=["reference"])
    out = tmp_path / "r.json"
    main(["run", "--suite", str(suite), "-q", "--out", str(out), "--rounds", "1", *FAULTS])
    by_kernel = {c.case.kernel: c for c in results.load(out).cases}
    assert by_kernel["reference"].status == "ok"
    chatty = by_kernel["fault_chatty"]
    assert chatty.status == "crashed" and "code 3" in chatty.reason
    assert "last words of fault_chatty" in chatty.worker_output
    assert len(chatty.worker_output.encode()) <= 64 * 1024 + 256
    assert "cut" in chatty.worker_output


def test_log_tail_keeps_the_last_bytes_and_counts_the_rest():
    from guard.measure.runner import LogTail

    read, write = os.pipe()
    tail = LogTail(read, limit=1000)
    for i in range(50):
        os.write(write, f"line {i} ".encode() * 20 + b"\n")
    os.close(write)
    text = tail.text(wait_s=30)
    assert "line 49" in text and "line 0 " not in text
    assert tail.total > 1000
    assert f"{tail.total - 1000} earlier bytes of output cut" in text


# --------------------------------------------------------------------------- 5. worktrees


def test_worktree_removes_its_whole_temporary_folder(tmp_path, monkeypatch):
    repo = _repo(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with ops_trees.worktree("HEAD", repo) as tree:
        assert (tree / "kernels" / "registry.py").exists()
    assert list(scratch.iterdir()) == []
    assert _git(repo, "worktree", "list").strip().count("\n") == 0


@linux_only
def test_sigterm_during_compare_against_cleans_up(tmp_path):
    """SIGTERM while the base arm's worker hangs: the worktree is unregistered, the
    temporary folder removed, and the worker's process group gone."""
    repo = _repo(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    pid_file = tmp_path / "pids.txt"
    suite = write_suite(tmp_path, ["fault_spawn_hang"], timeout=600)
    env = {
        **os.environ,
        "PYTHONPATH": f"{repo}{os.pathsep}{ROOT}",
        "TMPDIR": str(scratch),
        "FAULT_PID_FILE": str(pid_file),
    }
    cmd = [sys.executable, "-m", "guard", "compare", "--against", "HEAD", "--suite", str(suite)]
    proc = subprocess.Popen(
        [*cmd, "-q", "--out", str(tmp_path / "r.json"), *FAULTS],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(pid_file, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    alive = _survivors(pid_file)
    _reap(alive)
    assert proc.returncode == 143, err
    assert not alive, f"processes outlived the guard: {alive}"
    assert _git(repo, "worktree", "list").strip().count("\n") == 0, "worktree still registered"
    assert not list(scratch.glob("guard-against-*")), "temporary checkout left behind"


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
        (tmp_path / name).write_text(json.dumps({"version": "5.2.3", "benchmarks": []}))
    comparison = ops_pytest_compare.compare_files(tmp_path / "a.json", tmp_path / "b.json")
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
