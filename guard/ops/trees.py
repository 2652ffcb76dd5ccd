"""Trees to measure: a git ref checked out in a temporary worktree, the folder a
suite's modules come from, and the git tree of ``kernels/`` or a folder (the
identical-tree shortcut: a build output beside the sources counts, a cache does not)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from guard.base.errors import BadInput, InfraError

if TYPE_CHECKING:
    pass


@contextlib.contextmanager
def worktree(ref: str, repo: str | Path = ".") -> Iterator[Path]:
    """A temporary detached checkout of ``ref``, removed afterwards."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300
        )

    resolved = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if resolved.returncode != 0:
        raise BadInput(f"--against {ref}: not a commit in this repository")
    tmp = Path(tempfile.mkdtemp(prefix="guard-against-"))
    path = tmp / "tree"
    try:
        added = git("worktree", "add", "--detach", str(path), resolved.stdout.strip())
        if added.returncode != 0:
            raise InfraError(f"git worktree add {ref}: {added.stderr.strip()}")
        yield path
    finally:  # also on SIGTERM: the measuring entry points turn it into SystemExit
        if path.exists():
            git("worktree", "remove", "--force", str(path))
        shutil.rmtree(tmp, ignore_errors=True)
        git("worktree", "prune")


PROJECT_FOLDER = "the project's folder"  # what a tree of module:function kernels contributes


def same_folder(tree: Path, repo: str | Path, ref: str) -> Path:
    """``repo``'s folder (where the guard was started) in ``tree``, a checkout of ``ref``:
    where the base arm imports ``module:function`` kernels from, as the working tree's
    come from ``repo``. BadInput when ``ref`` has no such folder."""
    here = Path(repo).resolve()
    top = _git_out(here, "rev-parse", "--show-toplevel")
    if top is None:
        raise BadInput(f"--against {ref}: {here} is not in a git checkout")
    rel = here.relative_to(Path(top).resolve())
    folder = tree / rel
    if not folder.is_dir():
        raise BadInput(f"--against {ref}: {ref} has no folder {rel.as_posix()}")
    return folder


def _git_out(tree: str | Path, *args: str) -> str | None:
    """``git -C tree ARGS``'s output, None when git fails (not a checkout, say)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def kernels_tree(tree: str | Path, commit: str = "HEAD", *, ignored_count: bool = True) -> str:
    """The git tree id of ``commit:kernels`` in the checkout ``tree``, when the files
    under ``kernels/`` are exactly that tree's ("" otherwise, or when git cannot say):
    no file modified, none untracked, and with ``ignored_count`` none ignored either (a
    pull request's fresh checkout has none; a judge's own ``__pycache__`` does not count)."""
    sha = _git_out(tree, "rev-parse", "--verify", "--quiet", f"{commit}:kernels")
    if not sha or _git_out(tree, "rev-parse", "--verify", "--quiet", "HEAD") is None:
        return ""
    if commit != "HEAD" and sha != _git_out(tree, "rev-parse", "--verify", "HEAD:kernels"):
        return ""  # the working tree is not at that commit's kernels
    return sha if _clean(tree, "kernels", ignored_count) else ""


def _clean(tree: str | Path, path: str, ignored_count: bool) -> bool:
    """Whether ``path`` in the checkout ``tree`` holds exactly HEAD's files: none
    modified or untracked, none ignored but (``ignored_count`` False) a run's caches."""
    status = _git_out(
        tree, "status", "--porcelain", "--untracked-files=all", "--ignored", "--", path
    )
    if status is None:
        return False
    lines = status.splitlines()
    if not ignored_count:  # a run's caches do not count; an ignored build output does
        lines = [x for x in lines if not (x.startswith("!! ") and _a_cache(x[3:]))]
    return not lines


def folder_tree(folder: str | Path, *, ignored_count: bool = True) -> str:
    """The git tree id of HEAD's copy of ``folder`` (a checkout, or a folder in one),
    when the files under it are exactly that tree ("" otherwise, or when git cannot
    say), as ``kernels_tree``: what a suite of ``module:function`` kernels imports."""
    sha = _git_out(folder, "rev-parse", "--verify", "--quiet", "HEAD:./")
    if not sha:
        return ""
    return sha if _clean(folder, ".", ignored_count) else ""


# Ignored paths a run leaves behind that import nothing: bytecode and tools' caches. An
# ignored extension module, generated source or build folder still counts.
_CACHES = ("__pycache__/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/")


def _a_cache(path: str) -> bool:
    path = path.strip('"')
    return path.endswith((".pyc", ".pyo")) or any(
        path == c or path.endswith("/" + c) or f"/{c}" in f"/{path}" for c in _CACHES
    )
