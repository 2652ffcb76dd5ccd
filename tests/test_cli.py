"""The guard command end to end on the CPU: every exit code, from real worker processes."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, fault_suite
from conftest import git as _git

from guard.commands.main import main
from guard.ops import compare as ops_compare
from guard.store import results

FAULTS = ["--fault-module", "fault_kernels", "--worker-path", str(TESTS)]


suite_file = functools.partial(fault_suite, name="cli", samples=5)


def test_help_exits_zero(capsys):
    assert main(["--help"]) == 0
    assert "Exit codes" in capsys.readouterr().out
    for cmd in ("run", "check", "compare", "list"):
        assert main([cmd, "--help"]) == 0
    assert main(["baseline", "refresh", "--help"]) == 0


def test_usage_error_exits_two():
    assert main(["frobnicate"]) == 2
    assert main(["compare", "--rounds", "many"]) == 2


def test_run_check_and_list_on_cpu(tmp_path, capsys):
    suite = suite_file(tmp_path, ["reference", "sdpa", "sdpa_flash"], gate=["reference"])
    out = tmp_path / "r.json"
    assert main(["run", "--suite", str(suite), "--out", str(out), "-q"]) == 0
    run = results.load(out)
    statuses = {c.case.kernel: c.status for c in run.cases}
    assert statuses == {"reference": "ok", "sdpa": "ok", "sdpa_flash": "unavailable"}
    assert all(len(c.rounds) == 2 for c in run.cases if c.status == "ok")
    assert run.environment.device == "cpu" and run.environment.cpu_fallback_reason
    captured = capsys.readouterr()
    assert "measured on the CPU instead" in captured.err

    assert (
        main(["check", "--suite", str(suite), "--out", str(tmp_path / "c.json"), "-q", "--json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["guard"]["cases"][0]["correctness"]["passed"] is True

    assert main(["list", "--suite", str(suite), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {row["kernel"]: row["availability"] for row in listed}[
        "sdpa_flash"
    ] == "needs a CUDA GPU"


def test_compare_without_baseline_reports_and_exits_two(tmp_path, capsys, monkeypatch):
    suite = suite_file(tmp_path, ["reference"])
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code = main(
        [
            "compare",
            "--suite",
            str(suite),
            "--baselines",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "r.json"),
            "-q",
        ]
    )
    assert code == 2
    assert "NO VERDICT: no baseline for this hardware" in capsys.readouterr().out
    assert "NO VERDICT" in summary.read_text()
    assert results.load(tmp_path / "r.json").cases[0].rounds  # it still measured


def test_refresh_then_compare_pass_and_regression(tmp_path, capsys, monkeypatch):
    # Sleeps far above what a loaded CPU adds (a sleep overshoots by about 0.1 ms, a few
    # ms at worst, and the tiny attention call costs microseconds): the same 50 ms in
    # both runs stays within the stored rule's 3% drift, and 250 ms is a 5x regression
    # whose interval over 3 rounds stays far from 1, whatever else runs on the machine.
    suite = suite_file(tmp_path, ["fault_slow"], rounds=3)
    bdir = tmp_path / "baselines"
    monkeypatch.setenv("FAULT_SLOW_MS", "50")
    assert (
        main(
            [
                "baseline",
                "refresh",
                "--suite",
                str(suite),
                "--dir",
                str(bdir),
                "--allow-cpu",
                "-q",
                *FAULTS,
            ]
        )
        == 0
    )
    [baseline] = list(bdir.glob("*.json"))
    assert baseline.name.startswith("cpu-")
    assert "baseline written" in capsys.readouterr().out

    common = ["compare", "--suite", str(suite), "--baselines", str(bdir), "-q", "--json", *FAULTS]
    assert main([*common, "--out", str(tmp_path / "same.json")]) == 0, capsys.readouterr()
    capsys.readouterr()

    monkeypatch.setenv("FAULT_SLOW_MS", "250")  # 5x: loud even on a busy CPU
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert main([*common, "--out", str(tmp_path / "slow.json")]) == 1
    out = capsys.readouterr().out
    verdicts = json.loads(out[: out.index("::error")])
    assert verdicts["cases"][0]["verdict"] == "regression"
    assert "::error title=Performance regression%3A fault_slow/" in out

    # The same two files compared directly.
    assert main(["compare", str(tmp_path / "same.json"), str(tmp_path / "slow.json")]) == 1


def test_wrong_results_exit_one_and_refresh_refuses(tmp_path, capsys):
    suite = suite_file(tmp_path, ["reference", "fault_wrong"], gate=["reference"])
    assert (
        main(["check", "--suite", str(suite), "-q", "--out", str(tmp_path / "r.json"), *FAULTS])
        == 1
    )
    code = main(
        [
            "baseline",
            "refresh",
            "--suite",
            str(suite),
            "--dir",
            str(tmp_path / "b"),
            "--allow-cpu",
            "-q",
            *FAULTS,
        ]
    )
    assert code == 1
    assert "refusing to write a baseline: wrong results" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("kernel", ["fault_raise", "fault_build", "fault_hang"])
def test_crash_build_failure_and_hang_exit_three_others_still_measured(tmp_path, kernel):
    suite = suite_file(tmp_path, ["reference", kernel], timeout=10)
    out = tmp_path / "r.json"
    assert main(["run", "--suite", str(suite), "-q", "--out", str(out), *FAULTS]) == 3
    run = results.load(out)
    by_kernel = {c.case.kernel: c for c in run.cases}
    assert by_kernel["reference"].status == "ok" and by_kernel["reference"].rounds
    bad = by_kernel[kernel]
    assert (
        bad.status
        == {"fault_raise": "crashed", "fault_build": "build_failed", "fault_hang": "timeout"}[
            kernel
        ]
    )
    assert bad.reason


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "nope.yaml"], "nope.yaml: suite file not found"),
        (["--baseline", "missing.json"], "missing.json: file not found"),
        (["a.json"], "compare takes two files"),
    ],
)
def test_bad_input_exit_two(tmp_path, capsys, args, message):
    assert main(["compare", *args, "-q"]) == 2
    assert message in capsys.readouterr().err


def test_truncated_and_foreign_baselines_exit_two(tmp_path, capsys):
    suite = suite_file(tmp_path, ["reference"])
    out = tmp_path / "r.json"
    assert main(["run", "--suite", str(suite), "-q", "--out", str(out)]) == 0
    text = out.read_text()
    trunc = tmp_path / "trunc.json"
    trunc.write_text(text[: len(text) // 2])
    assert main(["compare", str(trunc), str(out)]) == 2
    assert "trunc.json: not valid JSON" in capsys.readouterr().err

    doc = json.loads(text)
    doc["guard"]["environment"].update(gpu_name="NVIDIA L4", gpu_slug="nvidia-l4")
    foreign = tmp_path / "l4.json"
    foreign.write_text(json.dumps(doc))
    assert main(["compare", str(foreign), str(out)]) == 2
    assert "l4.json: environment.gpu_slug" in capsys.readouterr().err

    assert main(["compare", "--suite", str(suite), "--baseline", str(foreign), "-q"]) == 2


def test_device_cuda_without_gpu_exits_three(tmp_path, capsys):
    suite = suite_file(tmp_path, ["reference"])
    assert main(["run", "--suite", str(suite), "--device", "cuda", "-q"]) == 3
    assert "no GPU here" in capsys.readouterr().err


# ------------------------------------------------------------ where nothing gated can run


def test_no_gated_kernel_here_is_said_at_once_and_nothing_is_timed(tmp_path, capsys):
    """On a CPU the gated kernel (CUDA only) cannot run: each command says so before it
    measures, checks what can run, times nothing, and ends in NO VERDICT (exit 2)."""
    suite = suite_file(
        tmp_path, ["fault_illegal_address", "reference"], gate=["fault_illegal_address"]
    )
    common = ["--suite", str(suite), "-q", *FAULTS]
    out = tmp_path / "r.json"
    argv = ["compare", *common, "--baselines", str(tmp_path / "none"), "--out", str(out)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert first.startswith("[guard] no verdict is possible here: no gated kernel can run")
    assert "fault_illegal_address: needs a CUDA GPU" in first and "--time-controls" in first
    assert "NO VERDICT: no gated kernel could be checked here" in captured.out
    by_kernel = {c.case.kernel: c for c in results.load(out).cases}
    assert by_kernel["reference"].correctness is not None  # checked
    assert by_kernel["reference"].rounds == ()  # not timed
    assert by_kernel["fault_illegal_address"].status == "unavailable"

    # --time-controls times them all the same (still no verdict).
    assert main([*argv, "--time-controls"]) == 2
    timed = {c.case.kernel: c for c in results.load(out).cases}
    assert len(timed["reference"].rounds) == 2

    # `guard check`: no gated kernel checked is no pass either.
    assert main(["check", *common, "--out", str(tmp_path / "c.json")]) == 2
    captured = capsys.readouterr()
    assert "NO VERDICT: no gated kernel could be checked here" in captured.out
    assert "fault_illegal_address: needs a CUDA GPU" in captured.out


def test_paired_compare_times_nothing_when_no_gated_kernel_runs(tmp_path):
    """The --against path (compare_arms): the check round's findings, no timing round,
    and the controls say why they were not timed."""
    from guard.decide.compare import Status
    from guard.decide.outcome import CheckVerdict
    from guard.measure.runner import Arm
    from guard.ops import compare as ops_compare
    from guard.ops import measure as ops_measure

    suite_path = suite_file(
        tmp_path, ["fault_illegal_address", "reference"], gate=["fault_illegal_address"]
    )
    ops_measure.load_plugins(["fault_kernels"], [str(TESTS)])
    opts = ops_measure.MeasureOptions(fault_modules=("fault_kernels",), sys_path=(str(TESTS),))
    comparison = ops_compare.compare_arms(
        ops_measure.open_suite(suite_path), Arm("baseline"), Arm("candidate"), opts=opts
    )
    assert comparison.verdict is CheckVerdict.NO_VERDICT
    control = next(c for c in comparison.cases if c.kernel == "reference")
    assert control.status is Status.TOO_FEW_ROUNDS
    assert control.reason == ops_compare.CONTROLS_NOT_TIMED
    assert comparison.candidate.rounds == () or all(
        r.index == 0 for r in comparison.candidate.rounds
    )  # the check round only


def test_compare_against_git_ref(tmp_path):
    """Two commits of a kernel: the working tree is slower than HEAD~0's committed code.

    Both arms' times are sleeps far above what a loaded CPU adds to them (about 0.1 ms,
    a few ms at worst; the attention call itself takes microseconds), and 20x apart: the
    interval over 3 rounds a side lies far above 1 on a busy machine too (with 2 ms
    against 20 ms, other processes on both cores once made it inconclusive)."""
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    for name in ("__init__.py", "registry.py", "reference.py", "sdpa.py"):
        (repo / "kernels" / name).write_text((ROOT / "kernels" / name).read_text())
    reg = repo / "kernels" / "registry.py"
    reg.write_text(
        reg.read_text().replace(
            'loader=_from_module("kernels.reference", "attention"),',
            'loader=_from_module("kernels.reference", "attention_slowable"),',
        )
    )
    ref_py = repo / "kernels" / "reference.py"
    ref_py.write_text(
        ref_py.read_text() + "\n\ndef attention_slowable(q, k, v, **kw):\n"
        "    import time\n    time.sleep(DELAY)\n    return attention(q, k, v, **kw)\n"
        "\n\nDELAY = 0.01\n"
    )
    suite = suite_file(tmp_path, ["reference"], rounds=3)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    ref_py.write_text(ref_py.read_text().replace("DELAY = 0.01", "DELAY = 0.2"))
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard",
            "compare",
            "--against",
            "HEAD",
            "--suite",
            str(suite),
            "--json",
            "-q",
            "--out",
            str(tmp_path / "r.json"),
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["cases"][0]["verdict"] == "regression"
    assert doc["baseline"] == "HEAD"
    assert not _git(repo, "worktree", "list").strip().count("\n")  # worktree removed


def _processes_marked(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds ``marker``.

    The marker is set for the guard this test starts and inherited by its workers,
    which run in sessions of their own (so a process-group or parent-chain walk could
    miss them once their parent is gone); another user's or test's guard never has
    it. Zombies have an empty environment and do not count.
    """
    needle = marker.encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if needle in environ.split(b"\0"):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def test_ctrl_c_leaves_nothing_half_written_and_no_worker(tmp_path):
    """SIGINT mid-run: exit 130, no results file, the hung worker is gone, rerun works.

    Only this test's processes are looked at (an environment marker), so a guard run
    by someone else on the machine, here a decoy named like a worker, changes nothing.
    """
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find this test's worker processes")
    marker = f"GUARD_TEST_MARKER={uuid.uuid4().hex}"
    decoy = subprocess.Popen(  # someone else's worker, as pgrep -f guard.measure.worker saw it
        [sys.executable, "-c", "import time; time.sleep(600)", "guard.measure.worker"],
        start_new_session=True,
    )
    try:
        _interrupt_and_check(tmp_path, marker)
    finally:
        decoy.kill()
        decoy.wait()


def _interrupt_and_check(tmp_path: Path, marker: str) -> None:
    suite = suite_file(tmp_path, ["fault_hang"], timeout=600)
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "guard",
        "run",
        "--suite",
        str(suite),
        "-q",
        "--out",
        str(out),
        *FAULTS,
    ]
    key, value = marker.split("=", 1)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, key: value},
        # Ctrl-C as a terminal delivers it: a test run started in the background by a
        # non-interactive shell inherits SIGINT ignored, and so would the guard.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _interrupt(proc, out, tmp_path, marker)
    finally:  # a failed check must not leave the guard running into the next test
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # A rerun starts cleanly.
    ok_suite = suite_file(tmp_path, ["reference"])
    assert main(["run", "--suite", str(ok_suite), "-q", "--out", str(out)]) == 0
    assert results.load(out).cases[0].status == "ok"


def _interrupt(proc: subprocess.Popen[str], out: Path, tmp_path: Path, marker: str) -> None:
    """Ctrl-C once the guard's worker hangs; then nothing half-written, no process left."""

    def workers() -> dict[int, str]:
        worker = "guard.measure.worker"
        return {pid: cmd for pid, cmd in _processes_marked(marker).items() if worker in cmd}

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not workers():  # until the worker is up (hanging)
        time.sleep(0.5)
    assert workers(), "the guard started no worker"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    time.sleep(1)
    assert _processes_marked(marker) == {}, "a process outlived the interrupted guard"


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"README.md": "no kernels here\n"}, "HEAD has no kernels/ folder to measure"),
        ({"kernels/registry.py": "\n"}, "HEAD has no kernels/__init__.py"),
    ],
)
def test_against_a_ref_without_kernels_exits_two(tmp_path, monkeypatch, capsys, files, message):
    """Without its own kernels/ package the base arm would import this checkout's and
    compare it with itself: a PASS that means nothing. Refused, naming what is missing."""

    repo = tmp_path / "repo"
    for rel, content in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    suite = suite_file(tmp_path, ["reference"])
    monkeypatch.setattr(ops_compare, "compare_arms", lambda *a, **kw: pytest.fail("measured it"))
    monkeypatch.chdir(repo)
    assert main(["compare", "--against", "HEAD", "--suite", str(suite), "-q"]) == 2
    assert f"guard: error: --against HEAD: {message}" in capsys.readouterr().err
    assert not _git(repo, "worktree", "list").strip().count("\n")  # worktree removed
