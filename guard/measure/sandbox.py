"""Where a tree's code runs: a bubblewrap sandbox that can write its own caches only.

Every process that imports a tree's ``kernels/`` (its workers, its compiler-resource
child, its profiled run) can start inside ``bwrap``: the whole file system bound
read-only (the judge's checkout, the virtual environment, the output folder, the CI
runner's command files among it), the devices bound as they are (the GPU), a private
``/dev/shm``, ``/proc`` and ``/tmp`` (in memory: compilers' and Nsight Compute's
scratch), the ``readable`` folders that lie under ``/tmp`` bound read-only again (the
trees, the guard), and only ``writable`` folders bound read-write: the tree's own
compile caches and temporary folder (``build_cache.arm_caches``). It dies with the
guard (``--die-with-parent``). The process environment is stripped of the CI runner's
variables as for every child (``proc.child_env``). Nothing of the host is hidden from
reading: the sandbox keeps a pull request's code from changing what judges it, not
from reading it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence

MODES = ("auto", "bwrap", "none")


@functools.cache
def unavailable() -> str:
    """Why bubblewrap cannot sandbox here ("" when it can): not installed, or user
    namespaces refused (tried once, on ``true``)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed"
    try:
        run = subprocess.run(
            [*wrapper(()), "true"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap cannot start: {exc}"
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["exit code " + str(run.returncode)])[-1]
        return f"bwrap refused a sandbox here: {last}"
    return ""


def _under_tmp(path: str) -> bool:
    return os.path.abspath(path).startswith("/tmp/")


def wrapper(writable: Sequence[str], readable: Sequence[str] = ()) -> tuple[str, ...]:
    """The command prefix that runs a command in the sandbox: ``writable`` folders (they
    must exist) bound read-write, ``readable`` ones that lie under ``/tmp`` (a private
    one inside) bound read-only again."""
    seen: set[str] = set()
    again = []
    for folder in readable:
        path = os.path.abspath(folder)
        if _under_tmp(path) and os.path.exists(path) and path not in seen:
            seen.add(path)
            again += ["--ro-bind", path, path]
    binds = [arg for folder in writable for arg in ("--bind", folder, folder)]
    return (
        "bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm",
        "--proc", "/proc", "--tmpfs", "/tmp", *again, *binds, "--die-with-parent", "--",
    )  # fmt: skip
