"""What every child process the guard starts shares: where the guard lives, its env,
and (for the compile-only resources child and ncu) a run in a process group of its own.

The runner's workers, the compile-only resources child and ncu's profiled child all
run this guard's modules (``GUARD_ROOT`` first on ``PYTHONPATH``) against some tree's
``kernels/``; the two that compile or profile must not inherit the interpreter switch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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


@dataclass(frozen=True)
class GroupRun:
    """How a ``run_group`` child ended, and the tails of what it wrote."""

    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str


def _read_tail(f: BinaryIO, limit: int) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode("utf-8", errors="replace")


# Process groups of run_group children still running (their leaders' pids), so that an
# interrupted caller can end them: run_group may wait in a thread of a pool, and a pool
# waits for its threads on the way out, i.e. for the children's timeout.
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


def kill_running_groups() -> None:
    """SIGKILL every run_group child's group still running (the caller is leaving)."""
    with _RUNNING_LOCK:
        pids = list(_RUNNING)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def run_group(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str],
    *,
    stdout_limit: int,
    stderr_limit: int,
) -> GroupRun:
    """Run ``argv`` from ``GUARD_ROOT`` as the leader of a new process group; SIGKILL the
    group at ``timeout_s`` and whenever this returns (nvcc, ptxas, ncu's child: nothing
    outlives the call). Keeps the last ``stdout_limit`` / ``stderr_limit`` bytes of each
    stream. OSError when it cannot start."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(argv),
            cwd=str(GUARD_ROOT),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        with _RUNNING_LOCK:
            _RUNNING.add(proc.pid)
        try:
            code: int | None = proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with _RUNNING_LOCK:  # before the reap: a listed pid is never a reused one
                _RUNNING.discard(proc.pid)
            proc.wait()
        return GroupRun(code, _read_tail(out, stdout_limit), _read_tail(err, stderr_limit))
