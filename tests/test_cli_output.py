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
from conftest import ROOT, make_case, make_run, synthetic_rounds

from guard import cli, core, results
from guard.results import CRASHED, CaseResult


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
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "test_attn[fp16]" in out and "test_attn[bf16]" in out and "t[red]" in out


def test_markup_in_a_kernel_message_keeps_the_exit_code(tmp_path, tiny_suite, monkeypatch, capsys):
    """A crash whose message holds `[/]`: the run table shows it, the exit code is 3."""
    case = make_case(kernel="reference", name="b[red]x")
    run = make_run({case: synthetic_rounds(np.random.default_rng(1), 1e-3)})
    crashed = CaseResult(case, CRASHED, reason="RuntimeError: bad [/] tag [bold]x")
    run = replace(run, cases=(crashed,))
    monkeypatch.setattr(core, "run", lambda suite, opts, progress: run)
    out = tmp_path / "r.json"
    assert cli.main(["run", "--suite", str(tiny_suite), "--out", str(out), "-q"]) == 3
    printed = capsys.readouterr().out
    assert "bad [/] tag [bold]x" in printed.replace("\n", "")  # folded by the table
    assert "reference/b[red]x" in printed
    assert results.load(out).cases[0].reason == crashed.reason


def test_progress_bar_shows_markup_as_text() -> None:
    """The live bar's description is rich markup: the case name goes in escaped."""
    from rich.text import Text

    from guard.runner import Progress

    printer = cli.ProgressPrinter(True)
    printer.live = True
    try:
        printer(Progress("time", "candidate", 1, 2, "reference/x[/]y[red]", 0, 1))
        shown = Text.from_markup(printer._bar.tasks[0].description).plain
        assert shown == "time candidate round 1/2 reference/x[/]y[red]"
    finally:
        printer.close()


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
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert md.read_text().startswith("## Performance guard")
