"""Output paths that exist and are not regular files (a FIFO, a device, a socket, a
link such as /dev/stdout) are refused with exit 2 and left as they were: every output
is written whole and renamed into place, which would replace them (as root,
`--markdown /dev/full` replaced the system's /dev/full)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from test_publish import _runs

from guard.commands import main as commands_main
from guard.store import atomic, results


def _specials(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    sock = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    return {"fifo": fifo, "link": link, "socket": sock, "device": Path("/dev/null")}


@pytest.mark.parametrize("kind", ["fifo", "link", "socket", "device"])
def test_the_writer_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    path = _specials(tmp_path)[kind]
    before = os.lstat(path)
    with pytest.raises(atomic.CannotWrite, match="not a regular file: refused") as caught:
        atomic.write_atomic(path, "x")
    assert caught.value.exit_code == 2
    after = os.lstat(path)
    kind = stat.S_IFMT
    assert (kind(after.st_mode), after.st_ino) == (kind(before.st_mode), before.st_ino)


@pytest.mark.parametrize("option", ["--markdown", "--html", "--out"])
@pytest.mark.parametrize("kind", ["fifo", "link", "device"])
def test_commands_refuse_them_before_anything_runs(
    tmp_path: Path, capsys, option: str, kind: str
) -> None:
    path = _specials(tmp_path)[kind]
    run = _runs(1, step_at=9, factor=1.0)[0]
    saved = tmp_path / "run.json"
    results.save(run, saved)
    before = os.lstat(path)
    if option == "--out":  # a measuring command's results file: refused before measuring
        argv = ["run", "--device", "cpu", "--out", str(path)]
    else:
        argv = ["report", str(saved), option, str(path)]
    assert commands_main.main(argv) == 2
    assert "not a regular file: refused" in capsys.readouterr().err
    assert os.lstat(path).st_ino == before.st_ino


def test_a_regular_file_is_still_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "out.md"
    path.write_text("old")
    atomic.write_atomic(path, "new")
    assert path.read_text() == "new"


def test_two_files_compare_outside_a_checkout(tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's `guard compare old.json new.json`, run where there is no suites/
    folder: decided with the default timing plan, not refused for a missing suite."""
    base, head = _runs(2, step_at=9, factor=1.0)
    results.save(base, tmp_path / "old.json")
    results.save(head, tmp_path / "new.json")
    monkeypatch.chdir(tmp_path)
    assert commands_main.main(["compare", "old.json", "new.json"]) in (0, 1)
    assert "suite file not found" not in capsys.readouterr().err
    assert commands_main.main(["compare", "old.json", "new.json", "--suite", "none.yaml"]) == 2
    capsys.readouterr()
    assert (
        commands_main.main(["compare", "--against", "HEAD"]) == 2
    )  # no suite here: what would work
    assert "--pytest ARGS" in capsys.readouterr().err
