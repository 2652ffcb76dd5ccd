"""What a tree's code can do to the check that measures it, on the CPU.

- Import the judge's kernels instead of its own: a ``kernels/`` without ``__init__.py``
  is a namespace package that the judge's regular package (``GUARD_ROOT`` on
  ``PYTHONPATH``) shadows, so the candidate arm would measure the base twice.
- Outlive the check: a daemon started at import time (a double fork into a session of
  its own) leaves the worker's process group, which is all the guard used to kill.
- Write workflow commands through progress lines: a case name holding a newline.

Nothing here asserts a duration: the waits only keep a broken guard from hanging.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, fault_suite

from guard.base.errors import BadInput, ExitCode
from guard.commands.main import main
from guard.measure import proc
from guard.measure.protocol import CaseJob, WorkerJob
from guard.measure.runner import Arm, Progress, Rounds
from guard.ops import compare as ops_compare
from guard.ops import measure as ops_measure
from guard.report import terminal
from guard.store.suite import load_suite

FAULTS = ["--fault-module", "fault_kernels", "--worker-path", str(TESTS)]

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a child subreaper and /proc are Linux's"
)


def _tree(tmp_path: Path, init: str = "missing") -> Path:
    """A tree holding a copy of the kernels package whose ``__init__.py`` is ``missing``,
    a ``symlink`` to the judge's, or a ``directory``."""
    tree = tmp_path / "pr"
    (tree / "kernels").mkdir(parents=True)
    for name in ("registry.py", "reference.py", "sdpa.py"):
        shutil.copy(ROOT / "kernels" / name, tree / "kernels" / name)
    target = tree / "kernels" / "__init__.py"
    if init == "symlink":
        target.symlink_to(ROOT / "kernels" / "__init__.py")
    elif init == "directory":
        target.mkdir()
    return tree


# --------------------------------------------------------------------------- 1. kernels


@pytest.mark.parametrize("init", ["missing", "symlink", "directory"])
def test_an_arm_whose_kernels_is_not_its_own_package_is_refused(tmp_path, init):
    """The runner refuses the arm before any worker runs, naming the file."""
    tree = _tree(tmp_path, init)
    suite = load_suite(fault_suite(tmp_path, ["reference"]))
    arms = (Arm("baseline", None), Arm("candidate", str(tree)))
    with pytest.raises(BadInput) as caught:
        Rounds(suite, device="cpu", arms=arms)
    message = str(caught.value)
    assert str(tree / "kernels" / "__init__.py") in message
    assert "candidate's kernels/" in message
    # The paired comparison the PR check runs says the same, with exit code 2.
    with pytest.raises(BadInput):
        ops_compare.compare_arms(suite, *arms, opts=ops_measure.MeasureOptions(device="cpu"))
    assert caught.value.exit_code == ExitCode.BAD_INPUT


def test_the_worker_imports_only_its_trees_kernels(tmp_path):
    """Defence in depth: a worker sent a tree whose kernels/ is a namespace package
    (past the runner's check) reports a fatal error instead of measuring the judge's
    kernels, which it finds through GUARD_ROOT on its PYTHONPATH."""
    tree = _tree(tmp_path)
    suite = load_suite(fault_suite(tmp_path, ["reference"]))
    job = WorkerJob("check", "cpu", str(tree), suite.cpu_timing, (CaseJob(suite.cases[0], 1),))
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job.to_json()) + "\n")
    with job_file.open() as stdin:  # a file, not a pipe: the worker starts no watchdog
        run = subprocess.run(
            [sys.executable, "-m", "guard.measure.worker"],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=proc.GUARD_ROOT,
            env=proc.child_env(),
            timeout=600,
        )
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert [e["event"] for e in events] == ["fatal"], run.stdout + run.stderr
    assert events[0]["output"].startswith(f"{tree / 'kernels' / '__init__.py'}: "), events
    assert run.returncode == 1


def test_kernels_imported_from_another_tree_are_refused(tmp_path):
    """After the import, the package must lie in the tree asked for: here this process
    already holds the judge's ``kernels``, so a tree of its own (with __init__.py)
    cannot be what ``import kernels`` gives."""
    tree = _tree(tmp_path)
    shutil.copy(ROOT / "kernels" / "__init__.py", tree / "kernels" / "__init__.py")
    import kernels  # noqa: F401  (the judge's, as GUARD_ROOT on PYTHONPATH gives a worker)

    with pytest.raises(BadInput, match="not from"):
        proc.import_kernels_from(tree)
    assert Path(proc.import_kernels_from(ROOT).__file__).parent == ROOT / "kernels"


# --------------------------------------------------------------------------- 2. strays


def _alive_in(sessions: set[int]) -> list[int]:
    """Processes (not zombies) in any of ``sessions``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            text = (entry / "stat").read_text()
            fields = text[text.rindex(")") + 2 :].split()
            if fields[0] not in "ZX" and int(fields[3]) in sessions:
                out.append(int(entry.name))
    return out


def _survivors(sessions: set[int], wait_s: float = 20) -> list[int]:
    deadline = time.monotonic() + wait_s  # SIGKILL is delivered asynchronously
    while (alive := _alive_in(sessions)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:  # leave the machine clean even when the test fails
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return alive


@linux_only
def test_a_daemon_started_at_import_ends_with_the_check(tmp_path, monkeypatch, capsys):
    """The worker's kernels double-fork a daemon (sh and its sleep 600) into a session
    of their own: the guard, their subreaper, kills both after the worker and fails the
    run as an infrastructure failure naming them."""
    record = tmp_path / "daemon.txt"
    monkeypatch.setenv("FAULT_DAEMON_FILE", str(record))
    suite = fault_suite(tmp_path, ["reference"], timeout=120)
    code = main(["run", "--suite", str(suite), "-q", "--out", str(tmp_path / "r.json"), *FAULTS])
    rows = [line.split() for line in record.read_text().splitlines()]
    assert rows, "the daemon never started"
    alive = _survivors({int(r[1]) for r in rows})
    assert not alive, f"the daemon outlived the guard: {alive}"
    err = capsys.readouterr().err
    assert code == ExitCode.INFRA, err
    assert "the candidate's code left 2 processes (" in err, err
    assert f"{rows[0][0]} sh" in err and " sleep" in err and "killed" in err, err


@linux_only
def test_run_group_kills_what_its_child_left_outside_its_group(tmp_path):
    """The resources child and ncu's run the same way: a process that left the group
    (``setsid``) and lost its parent is killed with the call and named."""
    record = tmp_path / "daemon.txt"
    code = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(record)!r}, 'w').write(str(os.getsid(0)))\n"
        "    os.execvp('sleep', ['sleep', '600'])\n"
    )
    run = proc.run_group(
        [sys.executable, "-c", code], 120, os.environ, stdout_limit=100, stderr_limit=1000
    )
    assert run.returncode == 0, run.stderr
    alive = _survivors({int(record.read_text())})
    assert not alive, f"the daemon outlived run_group: {alive}"
    assert [s.name for s in run.strays] == ["sleep"]
    assert proc.strays_text(run.strays).startswith("1 process (")


# --------------------------------------------------------------------------- 3. progress


def test_progress_lines_cannot_write_workflow_commands(capsys, monkeypatch):
    """Under GitHub Actions a log line starting with ``::`` is a workflow command: a
    case name holding a newline (or a carriage return) stays on its progress line."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    printer = terminal.ProgressPrinter(True)
    name = "k/x\n::error::injected\r::warning::twice\r\n::stop-commands::t"
    printer(Progress("time", "candidate", 1, 2, name, 0, 1))
    printer(Progress("time", "candidate", 1, 2, "", 1, 1))
    odd = terminal.ProgressPrinter(True, prefix="::")  # no caller's prefix starts one either
    odd(Progress("check", "candidate", 0, 0, "k/y", 0, 1))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5, lines
    assert not [line for line in lines if line.lstrip().startswith("::")], lines
    assert "k/x ::error::injected ::warning::twice ::stop-commands::t" in lines[1]


def _left_a_daemon(*args: object, **kwargs: object) -> proc.GroupRun:
    """run_group's answer when the child left a process outside its group (killed)."""
    return proc.GroupRun(0, "", "", strays=(proc.Stray(4242, "sleep"),))


def test_a_resources_child_that_leaves_a_process_is_an_infrastructure_error(tmp_path, monkeypatch):
    """The compile-only child runs the tree's code too: what it leaves is named, not
    taken for a clean compile (run_group has killed it)."""
    from guard.base.errors import InfraError
    from guard.measure import resources

    monkeypatch.setattr(resources, "run_group", _left_a_daemon)
    with pytest.raises(InfraError, match=r"left 1 process \(4242 sleep\) running: killed"):
        resources.collect_in_tree(ROOT, ROOT / "suites" / "default.yaml", ["sm_90"])


def test_a_profile_whose_run_left_a_process_is_skipped_and_says_why(tmp_path, monkeypatch):
    from conftest import make_case

    from guard.measure import profile

    monkeypatch.setattr(profile, "run_group", _left_a_daemon)
    pc = profile.profile_case(make_case(), ROOT, ROOT, ncu="/bin/true")
    assert pc.skipped and "left 1 process (4242 sleep) running: killed" in pc.skipped_reason


def test_the_resources_child_imports_only_its_trees_kernels(tmp_path):
    """A tree whose kernels/ is a namespace package would compile the guard's kernels."""
    (tmp_path / "kernels").mkdir()
    out = tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, "-m", "guard.measure.resources", "--kernels-root", str(tmp_path),
         "--suite", str(ROOT / "suites" / "default.yaml"), "--out", str(out)],
        cwd=ROOT, env=proc.child_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == ExitCode.BAD_INPUT, run.stderr
    assert "no __init__.py" in run.stderr and not out.exists()
