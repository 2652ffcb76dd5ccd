"""Files the guard writes (results, baselines, reports, summaries) get the mode any
program's open() would give them, 0o666 & ~umask, not mkstemp's private 0600; a write
that fails or is cut short (SIGTERM) leaves the old file and no temporary one."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_data as data
from conftest import ROOT

from guard.base.errors import ExitCode, GuardError
from guard.commands import main as commands_main
from guard.store import atomic, results


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_atomic_gives_the_normal_mode(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "sub" / "f.json"
    atomic.write_atomic(path, "one")
    assert _mode(path) == 0o666 & ~umask
    path.chmod(0o600)  # replacing a file gives the new one the normal mode too
    atomic.write_atomic(path, "two")
    assert path.read_text() == "two" and _mode(path) == 0o666 & ~umask


def test_compare_writes_reports_with_the_normal_mode(tmp_path: Path, umask: int, capsys) -> None:
    base, cand = data.pair()
    bpath, cpath = tmp_path / "base.json", tmp_path / "cand.json"
    results.save(base, bpath)
    results.save(cand, cpath)
    md, html = tmp_path / "s.md", tmp_path / "r.html"
    argv = ["compare", str(bpath), str(cpath), "--markdown", str(md), "--html", str(html)]
    assert commands_main.main(argv) == 1
    for path in (bpath, cpath, md, html):
        assert _mode(path) == 0o666 & ~umask, path


# ------------------------------------------------------------------ no half-written file

_STALLED_WRITER = """
import os, sys, time
from guard.store import atomic

def stall(fd):  # the temporary file is written, not yet renamed: the test's SIGTERM comes
    print("writing", flush=True)
    time.sleep(600)

os.fsync = stall
atomic.write_atomic(sys.argv[1], "new" * (8 << 20))
"""


@pytest.mark.parametrize("old", ["old\n", None], ids=["replacing", "creating"])
def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path: Path, old: str | None) -> None:
    """A cancelled job (SIGTERM) in the middle of `guard report --html` or `guard run
    --out` once left `.NAME.<random>.tmp` beside the target."""
    target = tmp_path / "report.html"
    if old is not None:
        target.write_text(old)
    proc = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITER, str(target)],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM  # unwound, not killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [p.name for p in tmp_path.iterdir()] == ([target.name] if old else [])
    assert old is None or target.read_text() == old


def test_write_atomic_to_a_directory_or_under_a_file_says_which(tmp_path: Path) -> None:
    folder, plain = tmp_path / "out", tmp_path / "plain.txt"
    folder.mkdir()
    plain.write_text("x")
    handler = signal.getsignal(signal.SIGTERM)
    for path, why in (
        (folder, "it is a directory"),
        (plain / "r.html", f"{plain} is not a directory"),
        (plain / "sub" / "r.html", f"{plain} is not a directory"),
    ):
        with pytest.raises(OSError) as err:  # what callers of a writer expect
            atomic.write_atomic(path, "text")
        assert str(err.value) == f"{path}: cannot write: {why}" and err.value.strerror == why
        assert isinstance(err.value, GuardError) and err.value.exit_code == ExitCode.BAD_INPUT
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out", "plain.txt"]  # no tmp
    assert signal.getsignal(signal.SIGTERM) is handler  # put back


def test_cli_writing_a_report_onto_a_directory_exits_two(tmp_path: Path, capsys) -> None:
    base, cand = data.pair()
    bpath, cpath = tmp_path / "base.json", tmp_path / "cand.json"
    results.save(base, bpath)
    results.save(cand, cpath)
    folder = tmp_path / "html"
    folder.mkdir()
    assert commands_main.main(["compare", str(bpath), str(cpath), "--html", str(folder)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()  # one line, no traceback
    assert line.startswith("guard: error: ") and f"{folder}: " in line and "directory" in line
    assert list(folder.iterdir()) == [] and len(list(tmp_path.iterdir())) == 3
