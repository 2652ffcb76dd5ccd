"""What every child process the guard starts shares: where the guard lives, its env.

The runner's workers, the compile-only resources child and ncu's profiled child all
run this guard's modules (``GUARD_ROOT`` first on ``PYTHONPATH``) against some tree's
``kernels/``; the two that compile or profile must not inherit the interpreter switch.
"""

from __future__ import annotations

import os
from pathlib import Path

GUARD_ROOT = Path(__file__).resolve().parent.parent


def child_env(*, compiled: bool = False) -> dict[str, str]:
    """This process's environment with ``GUARD_ROOT`` first on ``PYTHONPATH`` and
    unbuffered output; ``compiled``: without ``TRITON_INTERPRET`` (the kernels must
    compile or run on the GPU, not be interpreted)."""
    env = dict(os.environ)
    if compiled:
        env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(GUARD_ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def local_kernels_root() -> str:
    """Where this process imports ``kernels`` from: the candidate arm's tree."""
    import kernels

    return str(Path(kernels.__file__).resolve().parent.parent)
