"""Files the guard writes (results, baselines, reports, summaries) get the mode any
program's open() would give them, 0o666 & ~umask, not mkstemp's private 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_data as data

from guard import cli, results


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
    results.write_atomic(path, "one")
    assert _mode(path) == 0o666 & ~umask
    path.chmod(0o600)  # replacing a file gives the new one the normal mode too
    results.write_atomic(path, "two")
    assert path.read_text() == "two" and _mode(path) == 0o666 & ~umask


def test_compare_writes_reports_with_the_normal_mode(tmp_path: Path, umask: int, capsys) -> None:
    base, cand = data.pair()
    bpath, cpath = tmp_path / "base.json", tmp_path / "cand.json"
    results.save(base, bpath)
    results.save(cand, cpath)
    md, html = tmp_path / "s.md", tmp_path / "r.html"
    argv = ["compare", str(bpath), str(cpath), "--markdown", str(md), "--html", str(html)]
    assert cli.main(argv) == 1
    for path in (bpath, cpath, md, html):
        assert _mode(path) == 0o666 & ~umask, path
