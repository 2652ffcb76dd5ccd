"""What the ``guard`` command prints, with hostile data: rich markup in names and
messages, a closed stdout, newlines in workflow commands, bad numbers on the command
line. In-process (core functions replaced) or on tiny files: no worker, no timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, make_case, make_run, stub_op, synthetic_rounds

from guard.commands import main as commands_main
from guard.ops import baseline as ops_baseline
from guard.ops import compare as ops_compare
from guard.ops import outputs as ops_outputs
from guard.report import terminal
from guard.store import results
from guard.store.results import CRASHED, CaseResult


def pytest_benchmark_file(path: Path, names: list[str]) -> Path:
    """A minimal pytest-benchmark JSON (saved with --benchmark-save-data)."""
    data = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3, 1.02e-3]
    doc = {
        "machine_info": {"node": "n", "python_version": "3.12"},
        "commit_info": {"id": "abc"},
        "benchmarks": [
            {"name": n.rsplit("::", 1)[-1], "fullname": n, "stats": {"data": data}} for n in names
        ],
        "datetime": "2026-11-26T00:00:00",
        "version": "5.1.0",
    }
    path.write_text(json.dumps(doc))
    return path


# ------------------------------------------------------------ rich markup


def test_bracketed_names_print_as_written(tmp_path: Path, capsys) -> None:
    """pytest-benchmark names carry their parameters in brackets: two rows, not two
    identical `test_attn` rows (rich took `[fp16]` for a style)."""
    names = ["test_c.py::test_attn[fp16]", "test_c.py::test_attn[bf16]", "test_c.py::t[red]"]
    a = pytest_benchmark_file(tmp_path / "a.json", names)
    b = pytest_benchmark_file(tmp_path / "b.json", names)
    assert commands_main.main(["compare", str(a), str(b)]) == 2  # one round each: no verdict
    out = capsys.readouterr().out
    assert "test_attn[fp16]" in out and "test_attn[bf16]" in out and "t[red]" in out


def test_markup_in_a_kernel_message_keeps_the_exit_code(tmp_path, tiny_suite, monkeypatch, capsys):
    """A crash whose message holds `[/]`: the run table shows it, the exit code is 3."""
    case = make_case(kernel="reference", name="b[red]x")
    run = make_run({case: synthetic_rounds(np.random.default_rng(1), 1e-3)})
    crashed = CaseResult(case, CRASHED, reason="RuntimeError: bad [/] tag [bold]x")
    run = replace(run, cases=(crashed,))
    stub_op(monkeypatch, "run", lambda suite, opts, progress: run)
    out = tmp_path / "r.json"
    assert commands_main.main(["run", "--suite", str(tiny_suite), "--out", str(out), "-q"]) == 3
    printed = capsys.readouterr().out
    assert "bad [/] tag [bold]x" in printed.replace("\n", "")  # folded by the table
    assert "reference/b[red]x" in printed
    assert results.load(out).cases[0].reason == crashed.reason


def test_progress_bar_shows_markup_as_text() -> None:
    """The live bar's description is rich markup: the case name goes in escaped."""
    from rich.text import Text

    from guard.measure.runner import Progress

    printer = terminal.ProgressPrinter(True)
    printer.live = True
    try:
        printer(Progress("time", "candidate", 1, 2, "reference/x[/]y[red]", 0, 1))
        shown = Text.from_markup(printer._bar.tasks[0].description).plain
        assert shown == "time candidate round 1/2 reference/x[/]y[red]"
    finally:
        printer.close()


def test_plain_progress_names_the_case_a_short_round_is_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a CI log: a round of many cases is counted, a round of a few (the extension of
    inconclusive ones) names each case as it starts, so a check stopped by a timeout in
    the middle of that round still says what it was measuring."""
    from guard.measure.runner import Progress

    monkeypatch.setenv("CI", "true")
    printer = terminal.ProgressPrinter(True, prefix="[perf-guard]")
    many = [f"k/case{i}" for i in range(5)]
    for i, cid in enumerate(many):
        printer(Progress("time", "candidate", 6, 20, cid, i, len(many)))
    printer(Progress("time", "candidate", 6, 20, "", len(many), len(many)))
    printer(Progress("time", "baseline", 7, 20, "k/case3", 0, 1))  # stopped here
    lines = [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "[perf-guard] time candidate round 6/20: 5 case(s)",
        "[perf-guard] time candidate round 6/20: done",
        "[perf-guard] time baseline round 7/20: 1 case(s)",
        "[perf-guard] time baseline round 7/20: k/case3",
    ]


# ------------------------------------------------------------ closed stdout


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_closed_stdout_exits_quietly_with_the_verdict(tmp_path: Path, fmt: list[str]) -> None:
    """`guard compare a b | head -1`: the reader is gone before the guard writes (the
    read end is closed before it starts). It still writes its files and exits with its
    own code, with no traceback."""
    a = pytest_benchmark_file(tmp_path / "a.json", ["t.py::test_a", "t.py::test_b"])
    md = tmp_path / "summary.md"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "guard", "compare", str(a), str(a), "--markdown", str(md), *fmt],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 2, proc.stderr  # the verdict: one round each, none
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert md.read_text().startswith("## Performance guard")


# ------------------------------------------------------------ numbers and flags


def _refuse_to_measure(*args, **kw):
    raise AssertionError("measured although the command line was bad")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "--rounds", "-3"], "--rounds"),
        (["run", "--rounds", "0"], "--rounds"),
        (["check", "--max-rounds", "0"], "--max-rounds"),
        (["compare", "--rounds", "1.5"], "--rounds"),
        (["report", "r.json", "--history-limit", "0"], "--history-limit"),
    ],
)
def test_bad_numbers_exit_two_naming_the_flag(tiny_suite, monkeypatch, capsys, argv, flag):
    stub_op(monkeypatch, "run", _refuse_to_measure)
    stub_op(monkeypatch, "check", _refuse_to_measure)
    code = commands_main.main([*argv, "--suite", str(tiny_suite)] if argv[0] != "report" else argv)
    assert code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be" in err and "Traceback" not in err


def test_history_limit_zero_is_refused(tmp_path: Path, capsys) -> None:
    import report_data

    from guard.store import history

    db = tmp_path / "h.sqlite"
    for run in report_data.history_runs(n=3):
        history.append(run, db)
    case_id = "triton_flash/b1-h8-s512-d64-full"
    assert commands_main.main(["history", case_id, "--db", str(db), "--limit", "0"]) == 2
    err = capsys.readouterr().err
    assert "argument --limit: must be an integer from 1 to 1000000000, got '0'" in err
    assert commands_main.main(["history", case_id, "--db", str(db), "--limit", "2", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["points"]) == 2


def test_refresh_without_gpu_refuses_before_measuring(tmp_path, tiny_suite, monkeypatch, capsys):
    from guard.measure import env as guard_env

    monkeypatch.setattr(guard_env, "pick_device", lambda requested="auto": ("cpu", "no GPU (test)"))
    stub_op(monkeypatch, "run", _refuse_to_measure)
    bdir = tmp_path / "b"
    argv = ["baseline", "refresh", "--suite", str(tiny_suite), "--dir", str(bdir), "-q"]
    assert commands_main.main(argv) == 3
    assert "baseline refresh needs a GPU: no GPU (test)" in capsys.readouterr().err
    assert not bdir.exists()


def test_refresh_out_writes_the_measured_results(tmp_path, tiny_suite, monkeypatch, capsys):
    measured = make_run(
        {make_case(kernel="reference"): synthetic_rounds(np.random.default_rng(2), 1e-3)}
    )
    stub_op(monkeypatch, "run", lambda suite, opts, progress, **kw: measured)
    out, bdir = tmp_path / "res" / "r.json", tmp_path / "b"
    argv = ["baseline", "refresh", "--suite", str(tiny_suite), "--dir", str(bdir), "-q"]
    assert commands_main.main([*argv, "--allow-cpu", "--out", str(out)]) == 0
    [baseline] = bdir.glob("*.json")
    assert results.load(out).cases == results.load(baseline).cases == measured.cases


# ------------------------------------------------------------ GitHub output


def test_no_baseline_warning_is_one_command(tmp_path, tiny_suite, monkeypatch, capsys) -> None:
    """The no-verdict reason names a path the user chose: a newline in it must not
    start a second workflow command, in the ::warning or in the plain lines."""
    run = make_run(
        {make_case(kernel="reference"): synthetic_rounds(np.random.default_rng(3), 1e-3)}
    )
    reason = "no baseline for this hardware (b\n::error::pwned/x.json does not exist)"
    stub_op(monkeypatch, "find_baseline", lambda *a: (None, reason))
    stub_op(
        monkeypatch,
        "compare_with_baseline",
        lambda *a, **kw: ops_compare.CompareOutcome(run, None, reason),
    )
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    argv = ["compare", "--suite", str(tiny_suite), "--out", str(tmp_path / "r.json"), "-q"]
    assert commands_main.main(argv) == 2
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("::")]
    assert commands == [
        "::warning title=No baseline::no baseline for this hardware (b%0A::error::pwned/x.json"
        " does not exist)"
    ]


def test_refresh_summary_escapes_case_names(tmp_path, tiny_suite, monkeypatch) -> None:
    case = make_case(kernel="reference", name="a|b<img src=x>`c`")
    measured = make_run({case: synthetic_rounds(np.random.default_rng(4), 1e-3)})
    stub_op(monkeypatch, "run", lambda suite, opts, progress, **kw: measured)
    md = tmp_path / "s.md"
    argv = ["baseline", "refresh", "--suite", str(tiny_suite), "--dir", str(tmp_path / "b")]
    assert commands_main.main([*argv, "--allow-cpu", "-q", "--markdown", str(md)]) == 0
    row = md.read_text().splitlines()[-1]
    assert row.startswith("| reference/a\\|b&lt;img src=x&gt;\\`c\\` | — | ")
    assert row.count("|") - row.count("\\|") == 5


# ------------------------------------------------------------ no gated kernel, hints


def test_check_with_no_gated_case_checked_is_no_verdict(tmp_path, tiny_suite, monkeypatch, capsys):
    """Only the controls ran (the gated kernel cannot run here): no pass, exit 2."""
    from guard.store.results import UNAVAILABLE

    gated = make_case(kernel="triton_flash", name="x")
    control = make_case(kernel="sdpa", name="x", gate=False)
    run = make_run({gated: (), control: ()}, status={gated.id: UNAVAILABLE})
    run = replace(run, cases=(replace(run.cases[0], reason="needs a CUDA GPU"), run.cases[1]))
    stub_op(monkeypatch, "check", lambda suite, opts, progress: run)
    argv = ["check", "--suite", str(tiny_suite), "--out", str(tmp_path / "r.json"), "-q"]
    assert commands_main.main(argv) == 2
    assert "NO VERDICT: no gated kernel could be checked here (triton_flash: needs a CUDA GPU)" in (
        capsys.readouterr().out.replace("\n", " ")
    )
    assert commands_main.main([*argv, "--json"]) == 2  # stdout stays the results document
    captured = capsys.readouterr()
    assert json.loads(captured.out)["guard"]["cases"][0]["status"] == UNAVAILABLE
    assert "NO VERDICT: no gated kernel could be checked here" in captured.err


@pytest.mark.parametrize(
    ("device", "wanted", "unwanted"),
    [
        ("cpu", "`guard baseline refresh --allow-cpu`", "this GPU"),
        ("cuda", "on this GPU with `guard baseline refresh`", "--allow-cpu"),
    ],
)
def test_no_baseline_hint_is_a_command_that_works_here(
    tmp_path, monkeypatch, device, wanted, unwanted
):
    """Without a GPU, `guard baseline refresh` exits 3 unless given --allow-cpu."""
    from guard.measure import env as guard_env

    monkeypatch.setattr(guard_env, "pick_device", lambda requested="auto": (device, ""))
    monkeypatch.setattr(guard_env, "device_slug", lambda d: f"{d}-test")
    baseline, reason = ops_baseline.find_baseline(tmp_path / "none")
    assert baseline is None
    assert wanted in reason and unwanted not in reason


# ------------------------------------------------------------ where results go


def test_results_file_is_named_and_the_previous_one_kept(tmp_path, tiny_suite, monkeypatch, capsys):
    """The default results file is said on stderr; a rerun moves the last one aside."""
    run = make_run(
        {make_case(kernel="reference"): synthetic_rounds(np.random.default_rng(5), 1e-3)}
    )
    stub_op(monkeypatch, "check", lambda suite, opts, progress: run)
    monkeypatch.chdir(tmp_path)
    argv = ["check", "--suite", str(tiny_suite), "-q"]
    assert commands_main.main(argv) == 0
    assert "[guard] results written to results/guard-results.json\n" in capsys.readouterr().err
    first = (tmp_path / "results" / "guard-results.json").read_text()
    assert commands_main.main(argv) == 0
    err = capsys.readouterr().err
    assert (
        "[guard] results written to results/guard-results.json (the previous results moved "
        "to results/guard-results.previous.json)" in err
    )
    assert (tmp_path / "results" / "guard-results.previous.json").read_text() == first

    out = tmp_path / "mine.json"  # a path the user chose: replaced, and said so
    assert commands_main.main([*argv, "--out", str(out)]) == 0
    assert f"[guard] results written to {out}\n" in capsys.readouterr().err


def test_compare_says_where_it_wrote(tmp_path, tiny_suite, monkeypatch, capsys):
    run = make_run(
        {make_case(kernel="reference"): synthetic_rounds(np.random.default_rng(6), 1e-3)}
    )
    stub_op(monkeypatch, "find_baseline", lambda *a: (None, "no baseline (test)."))
    stub_op(
        monkeypatch,
        "compare_with_baseline",
        lambda *a, **kw: ops_compare.CompareOutcome(run, None, "none"),
    )
    out = tmp_path / "c.json"
    assert commands_main.main(["compare", "--suite", str(tiny_suite), "--out", str(out), "-q"]) == 2
    assert f"[guard] results written to {out}" in capsys.readouterr().err
    assert results.load(out).cases == run.cases


# ------------------------------------------------------------ output paths


def _output_paths(tmp_path: Path) -> dict[str, Path]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    return {"a directory": tmp_path, "under a file": afile / "x.out"}


@pytest.mark.parametrize("where", ["a directory", "under a file"])
@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("report", "--html"),
        ("report", "--markdown"),
        ("compare", "--html"),
        ("compare", "--markdown"),
        ("compare", "--out"),
        ("check", "--markdown"),
        ("check", "--out"),
    ],
)
def test_unwritable_output_paths_exit_two_before_measuring(
    tmp_path, tiny_suite, monkeypatch, capsys, command, option, where
):
    run = make_run(
        {make_case(kernel="reference"): synthetic_rounds(np.random.default_rng(7), 1e-3)}
    )
    res = tmp_path / "res.json"
    results.save(run, res)
    for name in ("check", "run", "compare_with_baseline", "compare_against"):
        stub_op(monkeypatch, name, _refuse_to_measure)
    bad = _output_paths(tmp_path)[where]
    if command == "report":
        argv = ["report", str(res), option, str(bad)]
    else:
        argv = [command, "--suite", str(tiny_suite), "-q", option, str(bad)]
        if command == "compare":
            argv += ["--baselines", str(tmp_path / "none")]
    assert commands_main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"guard: error: {option} {bad}: "), err
    assert "Traceback" not in err


def test_compare_files_html_into_a_directory_exits_two(tmp_path, capsys):
    a = pytest_benchmark_file(tmp_path / "a.json", ["t.py::test_a"])
    assert commands_main.main(["compare", str(a), str(a), "--html", str(tmp_path)]) == 2
    assert f"--html {tmp_path}: is a directory" in capsys.readouterr().err


def test_a_failed_write_names_its_option(tmp_path) -> None:
    """A write that fails after the check (a folder appeared meanwhile): exit 2, named."""
    from guard.base.errors import BadInput

    (tmp_path / "r.html").mkdir()
    with pytest.raises(BadInput, match=r"^--html .*r\.html: cannot write"):
        ops_outputs.write_output("--html", tmp_path / "r.html", "<p>")


def test_reasons_and_the_baseline_only_failure_are_on_screen(tmp_path, capsys) -> None:
    """A case that fails says why under the table; a case whose baseline alone failed
    says so (it used to read only "new"); the interval's column names its level."""
    rng = np.random.default_rng(3)
    broken = make_case(name="b1-h8-s512-d64-full")
    healed = make_case(name="b1-h8-s512-d64-causal")
    rounds = {c: synthetic_rounds(rng, 1e-3) for c in (broken, healed)}
    base = make_run(rounds, status={healed.id: results.WRONG}, label="base")
    cand = make_run(rounds, status={broken.id: results.WRONG}, label="head")
    cand = replace(
        cand,
        cases=tuple(
            replace(c, reason="rel err 0.31 > bound 0.002") if c.case.id == broken.id else c
            for c in cand.cases
        ),
    )
    results.save(base, tmp_path / "base.json")
    results.save(cand, tmp_path / "head.json")
    code = commands_main.main(["compare", str(tmp_path / "base.json"), str(tmp_path / "head.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert f"why: {broken.id}: rel err 0.31 > bound 0.002" in out
    assert f"why: {healed.id}: only the baseline failed: it was wrong (planted)" in out
    assert "% CI" in out
