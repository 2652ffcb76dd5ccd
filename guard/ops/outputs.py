"""Output files: checked writable before measuring, written atomically, an earlier
results file kept as ``*.previous.json``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import BadInput
from guard.store import atomic, results
from guard.store.results import RunResult

if TYPE_CHECKING:
    pass


def check_output_path(option: str, path: str | Path) -> None:
    """Refuse, before anything is measured, an output file that cannot be written:
    a directory, a path under a regular file, a folder this user cannot write in."""
    target = Path(path)
    special = atomic.not_a_regular_file(target)
    if special:
        raise BadInput(f"{option} {target}: {special}")
    if target.is_dir():
        raise BadInput(f"{option} {target}: is a directory; give a file name")
    for parent in target.parents:
        if not (parent.exists() or parent.is_symlink()):
            continue  # written with its missing folders
        if not parent.is_dir():
            raise BadInput(f"{option} {target}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise BadInput(f"{option} {target}: cannot write in {parent}")
        return


def write_output(option: str, path: str | Path, text: str) -> None:
    """``atomic.write_atomic``, with a failure named by its option and path (exit 2)."""
    try:
        atomic.write_atomic(path, text)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc})") from None


def previous_path(path: str | Path) -> Path:
    """Where ``save_results(keep_previous=True)`` moves the file it replaces."""
    p = Path(path)
    return p.with_name(f"{p.stem}.previous{p.suffix}")


def save_results(
    run: RunResult, path: str | Path, *, option: str = "--out", keep_previous: bool = False
) -> Path | None:
    """Save ``run`` to ``path``; ``keep_previous``: first move a file already there to
    ``previous_path`` (returned), so that a rerun never silently loses the last one."""
    kept = None
    try:
        if keep_previous and Path(path).is_file():
            kept = previous_path(path)
            os.replace(path, kept)
        results.save(run, path)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot write ({exc.strerror or exc})") from None
    return kept
