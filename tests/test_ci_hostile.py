"""The PR check (``python -m guard.ci``) against a hostile or broken environment, and
the gaps it must not leave silent. Nothing here measures: a broken environment is found
before measuring, and the rest calls ``guard.ci`` / ``ops_resources.with_resource_changes`` with
the measurement or the compile child stubbed (the end-to-end run of the ``--base`` mode
is in test_ci_entrypoint.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import report_data as data

from guard.base import files, limits
from guard.decide.compare import Comparison, compare_runs
from guard.github import ci as github_ci
from guard.measure import resources
from guard.measure.resources import KernelResources, ResourceReport
from guard.ops import check as ops_check
from guard.ops import resources as ops_resources
from guard.store.suite import load_suite

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "RUNNER_", "BASE_SHA", "HEAD_SHA", "TESTED_SHA"))
        and k not in ("PR_NUMBER", "GPU_LABEL")
    }
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    return env


def _ci(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """guard.ci against a candidate tree without kernels/: were the environment not
    checked first, the check would go on to that (a "no kernels/ folder" verdict) and
    write meta.json, then fail on the broken environment with a traceback."""
    empty = tmp_path / "pr"
    empty.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", "0" * 40,
           "--candidate-tree", str(empty), *args]  # fmt: skip
    if "--out-dir" not in args:
        cmd += ["--out-dir", str(tmp_path / "out")]
    return subprocess.run(
        cmd, cwd=tmp_path, env=_env(**env), capture_output=True, text=True, timeout=300
    )


def _regular(tmp_path: Path) -> Path:
    path = tmp_path / "regular"
    path.write_text("a file\n")
    return path


# Each: environment or option -> the words the one-line error must hold.
BROKEN = {
    "GITHUB_OUTPUT is a directory": (
        lambda t: {"GITHUB_OUTPUT": str(t)}, "GITHUB_OUTPUT=", "Is a directory"),
    "GITHUB_OUTPUT under a regular file": (
        lambda t: {"GITHUB_OUTPUT": str(_regular(t) / "x")}, "GITHUB_OUTPUT=", "Not a directory"),
    "GITHUB_STEP_SUMMARY is a directory": (
        lambda t: {"GITHUB_STEP_SUMMARY": str(t)}, "GITHUB_STEP_SUMMARY=", "Is a directory"),
    "GITHUB_STEP_SUMMARY under a regular file": (
        lambda t: {"GITHUB_STEP_SUMMARY": str(_regular(t) / "x")}, "GITHUB_STEP_SUMMARY=",
        "Not a directory"),
    "PR_NUMBER is a superscript digit": (
        lambda t: {"PR_NUMBER": "²"}, "PR_NUMBER=²", "not a pull-request number"),
    "PR_NUMBER is not a number": (
        lambda t: {"PR_NUMBER": "12a"}, "PR_NUMBER=12a", "not a pull-request number"),
    "the event file is /dev/zero": (
        lambda t: {"GITHUB_EVENT_PATH": "/dev/zero"}, "GITHUB_EVENT_PATH=/dev/zero",
        "not a regular file (a character device)"),
    "the event file is a directory": (
        lambda t: {"GITHUB_EVENT_PATH": str(t)}, "GITHUB_EVENT_PATH=", "a directory"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_environment_is_one_line_and_exit_2_before_measuring(
    tmp_path: Path, case: str
) -> None:
    make_env, named, why = BROKEN[case]
    proc = _ci(tmp_path, **make_env(tmp_path))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith("[perf-guard] error: ") and named in line and why in line, line
    assert "no kernels/ folder" not in proc.stderr  # it stopped before the check began
    assert not (tmp_path / "out" / ops_check.OUTCOME_FILE).exists()


def test_an_event_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    with event.open("wb") as fh:  # sparse: no disk, and never read
        fh.truncate(32 << 20)  # GitHub caps an event at 25 MB
    proc = _ci(tmp_path, GITHUB_EVENT_PATH=str(event))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "GITHUB_EVENT_PATH=" in proc.stderr and "-byte limit" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_event_file_still_gives_the_pr_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    monkeypatch.delenv("PR_NUMBER", raising=False)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    assert github_ci._pr_number() == 7
    event.write_text(json.dumps({"push": {}}))  # not a pull request: no number, no error
    assert github_ci._pr_number() is None
    monkeypatch.setenv("PR_NUMBER", "42")
    assert github_ci._pr_number() == 42


def test_an_out_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = _regular(tmp_path)
    proc = _ci(tmp_path, "--out-dir", str(out))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith("[perf-guard] error: --out-dir ") and str(out) in line, line
    assert "no kernels/ folder" not in proc.stderr


# ------------------------------------------------------------------ the PR's baselines


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    judge, pr = tmp_path / "judge", tmp_path / "pr"
    for tree in (judge, pr):
        (tree / "baselines").mkdir(parents=True)
        (tree / "baselines" / "same.json").write_text("{}\n")
    return judge, pr


def test_a_baseline_link_is_listed_and_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge, pr = _trees(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge.json").write_text("x" * 100)
    os.mkfifo(outside / "fifo")  # read, it would block; is_file() would skip it silently
    (pr / "baselines" / "x.json").symlink_to(outside / "huge.json")
    (pr / "baselines" / "pipe.json").symlink_to(outside / "fifo")
    (pr / "baselines" / "folder").symlink_to(outside, target_is_directory=True)
    for tree in (judge, pr):  # the same link in both checkouts is no change
        (tree / "baselines" / "latest.json").symlink_to("same.json")
    read: list[Path] = []
    digest = files.digest

    def recorded(path: Path, limit: int | None = None) -> str:
        read.append(Path(path))
        return digest(path, limit)

    monkeypatch.setattr(files, "digest", recorded)
    assert ops_check.changed_files(judge, pr, "baselines") == [
        "baselines/folder (a link: not read)",
        "baselines/pipe.json (a link: not read)",
        "baselines/x.json (a link: not read)",
    ]
    assert all(outside not in p.parents for p in read), read


def test_a_baselines_folder_that_is_a_link_is_listed_not_walked(tmp_path: Path) -> None:
    judge, pr = _trees(tmp_path)
    (pr / "baselines" / "same.json").unlink()
    (pr / "baselines").rmdir()
    (pr / "baselines").symlink_to(judge / "baselines", target_is_directory=True)
    assert ops_check.changed_files(judge, pr, "baselines") == [
        "baselines (a link: not read)",
        "baselines/same.json",  # gone from the PR's tree as a folder
    ]


def test_a_baseline_over_the_size_limit_is_listed_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_FILE_BYTES", 1000)
    judge, pr = _trees(tmp_path)
    for tree in (judge, pr):  # even unchanged: what was not read cannot be called the same
        (tree / "baselines" / "big.json").write_text("x" * 1001)
    (pr / "baselines" / "new.json").write_text("{}\n")
    assert ops_check.changed_files(judge, pr, "baselines") == [
        "baselines/big.json (over the 1000-byte limit: not read)",
        "baselines/new.json",
    ]


def test_a_suite_file_link_in_the_pr_is_not_followed(tmp_path: Path) -> None:
    suite = load_suite(ROOT / "suites" / "default.yaml")
    (tmp_path / "suites").mkdir()
    link = tmp_path / "suites" / "default.yaml"
    link.symlink_to("/dev/zero")  # followed, load_suite would read it until memory ran out
    assert ops_check.policy_changes(suite, link, tmp_path) == [
        "the PR's suite file default.yaml is a link: not read"
    ]
    link.unlink()
    os.mkfifo(link)
    assert ops_check.policy_changes(suite, link, tmp_path) == [
        "the PR's suite file default.yaml is not a regular file: not read"
    ]


# ------------------------------------------------------------------ the outcome


ARGV = ["--base", "0" * 40, "--candidate-tree", "pr", "--out-dir", "out"]


def _in_actions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A local run in ``tmp_path`` that writes a job summary; no GPU_LABEL."""
    monkeypatch.chdir(tmp_path)
    for var in ("GPU_LABEL", "PR_NUMBER", "GITHUB_EVENT_PATH", "GITHUB_OUTPUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    (tmp_path / "pr").mkdir()


def _measured(monkeypatch: pytest.MonkeyPatch) -> Comparison:
    """ops_check.measure stubbed: a comparison of two synthetic H100 runs."""
    comparison = compare_runs(*data.pair())
    monkeypatch.setattr(ops_check, "measure", lambda *args: ops_check.Measured(comparison))
    return comparison


def test_without_gpu_label_the_outcome_names_the_gpu_the_run_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _in_actions(monkeypatch, tmp_path)
    gpu = _measured(monkeypatch).candidate.environment.gpu_name
    assert gpu == "NVIDIA H100 80GB HBM3"
    meta = tmp_path / "out" / ops_check.OUTCOME_FILE
    for label in (None, ""):
        if label is not None:
            monkeypatch.setenv("GPU_LABEL", label)
        (tmp_path / "summary.md").unlink(missing_ok=True)
        github_ci.main(ARGV)
        assert json.loads(meta.read_text())["gpu"] == gpu
        [heading] = [x for x in (tmp_path / "summary.md").read_text().splitlines() if "###" in x]
        assert f" {gpu}: " in heading, heading  # was "### ... GPU: ..."
    monkeypatch.setenv("GPU_LABEL", "h100")
    github_ci.main(ARGV)
    assert json.loads(meta.read_text())["gpu"] == "h100"


def test_the_wall_line_says_how_long_the_measuring_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _in_actions(monkeypatch, tmp_path)
    comparison = compare_runs(*data.pair())
    measured = ops_check.Measured(comparison, seconds=12.0)
    monkeypatch.setattr(ops_check, "measure", lambda *args: measured)
    github_ci.main(ARGV)
    assert ": measuring 12 s, the rest " in capsys.readouterr().err

    # Nothing measured (bad input before measuring): the wall time alone.
    def fail(*args: object) -> None:
        from guard.base.errors import BadInput

        raise BadInput("x")

    monkeypatch.setattr(ops_check, "measure", fail)
    github_ci.main(ARGV)
    wall = [x for x in capsys.readouterr().err.splitlines() if "] wall " in x]
    assert wall and "measuring" not in wall[0], wall


def test_the_summary_has_this_runs_cases_never_a_stale_compare_md(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _in_actions(monkeypatch, tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "compare.md").write_text("STALE: an earlier run's table\n")
    # The candidate has no kernels/ for the judge's suite of registry kernels: no
    # verdict, nothing measured, no table of cases.
    (tmp_path / "suites").mkdir()
    for name in ("default.yaml", "surface.yaml"):
        (tmp_path / "suites" / name).write_text((ROOT / "suites" / name).read_text())
    assert github_ci.main(ARGV) == 2
    summary = (tmp_path / "summary.md").read_text()
    assert "BAD INPUT: " in summary and "no kernels/ folder" in summary
    assert "STALE" not in summary and "Every case" not in summary
    # Measured: the table comes from memory, the same as the compare.md written beside it.
    _measured(monkeypatch)
    (tmp_path / "summary.md").unlink()
    github_ci.main(ARGV)
    summary = (tmp_path / "summary.md").read_text()
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "STALE" not in table and "Every case" in summary and table.strip() in summary


def test_a_failed_check_is_headed_by_its_verdict_not_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash of the PR's code (exit 3) or a bad tree (exit 2) was headed "NO VERDICT"."""
    from guard.base.errors import BadInput, InfraError

    _in_actions(monkeypatch, tmp_path)
    meta = tmp_path / "out" / ops_check.OUTCOME_FILE
    for error, code, label in ((InfraError, 3, "ERROR: "), (BadInput, 2, "BAD INPUT: ")):

        def fail(*args: object, error: type[Exception] = error) -> None:
            raise error("the candidate's code left 1 process running")

        monkeypatch.setattr(ops_check, "measure", fail)
        assert github_ci.main(ARGV) == code
        headline = json.loads(meta.read_text())["headline"]
        assert headline == f"{label}the candidate's code left 1 process running", headline


# ------------------------------------------------------------------ compiler resources


def _record(registers: int) -> KernelResources:
    return KernelResources(
        arch="sm_90", kernel="_attn_fwd", registers=registers, spill_store_bytes=0,
        spill_load_bytes=0, shared_bytes=0, num_warps=4, num_stages=3, grid=(1, 1, 1),
    )  # fmt: skip


def test_resources_of_a_suite_read_from_a_commit_are_compared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """guard.ci --base reads the judge's suite from the base commit: its source is
    "suites/default.yaml@<sha>", no file. The compile child gets the same suite anyway."""
    comparison = compare_runs(*data.pair())
    case_id = comparison.cases[0].case_id
    suite = load_suite(ROOT / "suites" / "default.yaml")
    suite = replace(suite, source="suites/default.yaml@0123456789ab")
    seen: list[tuple[str, tuple[str, ...]]] = []

    def collect(root: str, suite_path: str, *args: object, **kw: object) -> ResourceReport:
        child = load_suite(suite_path)  # what the child process reads
        seen.append((root, tuple(c.id for c in child.cases)))
        regs = 168 if root == "base" else 190
        return ResourceReport(arches=("sm_90",), cases={case_id: (_record(regs),)})

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    out = ops_resources.with_resource_changes(comparison, suite, "base", "head")
    assert sorted(seen) == [(r, tuple(c.id for c in suite.cases)) for r in ("base", "head")]
    [case] = [c for c in out.cases if c.case_id == case_id]
    assert case.resource_changes == ("sm_90 _attn_fwd: registers 168 -> 190",)
    assert not [n for n in out.notes if "compiler resources" in n], out.notes


def test_resources_that_cannot_be_compared_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    comparison = compare_runs(*data.pair())
    case_id = comparison.cases[0].case_id
    reports = {"base": {}, "head": {case_id: (_record(168),)}}

    def collect(root: str, *args: object, **kw: object) -> ResourceReport:
        return ResourceReport(arches=("sm_90",), cases=reports[root])

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    suite = load_suite(ROOT / "suites" / "default.yaml")
    # A suite with neither a file nor its parsed content (built in code).
    bare = replace(suite, source="suites/default.yaml@0123456789ab", raw={})
    out = ops_resources.with_resource_changes(comparison, bare, "base", "head")
    assert out.notes[-1] == (
        "compiler resources not compared: the suite 'suites/default.yaml@0123456789ab' "
        "has no file to compile from"
    )
    # Records from one tree only (a hook added): said so, not shown as "no change".
    out = ops_resources.with_resource_changes(comparison, suite, "base", "head")
    assert out.notes[-1].startswith("compiler resources not compared for 1 case(s) that have ")
    assert f"e.g. {case_id} (only in the head)" in out.notes[-1]
