"""What every child process the guard starts shares: where the guard lives, its env,
which ``kernels`` it imports, a run in a process group of its own (the compile-only
resources child and ncu), and the end of whatever such a child left behind.

The runner's workers, the compile-only resources child and ncu's profiled child all
run this guard's modules (``GUARD_ROOT`` first on ``PYTHONPATH``) against some tree's
``kernels/``; the two that compile or profile must not inherit the interpreter switch.

Strays: a tree's code may start processes that leave the process group the guard
kills (``setsid``, a double fork). While a child runs, ``subreaper()`` makes this
process their new parent when theirs dies (Linux's child subreaper), instead of PID 1;
``end_strays`` then finds them among this process's children, SIGKILLs them (their
groups and sessions too) and reaps them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from guard.base.errors import BadInput
from guard.base.files import inside

GUARD_ROOT = Path(__file__).resolve().parents[2]


# The CI runner's variables: what a tree's code could use to reach the job (the files
# GitHub reads after a step: GITHUB_ENV, GITHUB_PATH, GITHUB_OUTPUT; the runtime token
# ACTIONS_RUNTIME_TOKEN; the runner's folders), and the shell start-up files a later
# step's bash would source. No child of the guard needs them.
RUNNER_PREFIXES = ("GITHUB_", "ACTIONS_", "RUNNER_")
SHELL_STARTUP = ("BASH_ENV", "ENV")


def child_env(*, compiled: bool = False) -> dict[str, str]:
    """This process's environment with ``GUARD_ROOT`` first on ``PYTHONPATH``, unbuffered
    output, and none of the CI runner's variables (``RUNNER_PREFIXES``,
    ``SHELL_STARTUP``); ``compiled``: without ``TRITON_INTERPRET`` (the kernels must
    compile or run on the GPU, not be interpreted)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(RUNNER_PREFIXES) and k not in SHELL_STARTUP
    }
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

    if not getattr(kernels, "__file__", None):
        raise BadInput(f"kernels: a namespace package ({_portions(kernels)}): no __init__.py")
    return str(Path(kernels.__file__).resolve().parent.parent)


def tree_root(uses_registry: bool) -> str:
    """The tree this process measures when no other is named: where it imports
    ``kernels`` from when a suite names registry kernels (``local_kernels_root``), else
    the folder the guard was started in, whose ``module:function`` kernels a suite
    names (another project's checkout needs no ``kernels`` package)."""
    return local_kernels_root() if uses_registry else str(Path.cwd().resolve())


def _portions(module: ModuleType) -> str:
    return ", ".join(str(p) for p in getattr(module, "__path__", [])) or "no folder"


def kernels_init_problem(root: str | Path) -> str:
    """Why ``root/kernels`` is not a regular package of its own ("" when it is).

    A ``kernels/`` without ``__init__.py`` is a namespace package, and a regular
    ``kernels`` package anywhere on ``sys.path`` wins over it: the judge's own, through
    ``GUARD_ROOT`` on ``PYTHONPATH``. An arm whose tree lacks it would measure the judge's
    kernels under the candidate's name."""
    init = Path(root) / "kernels" / "__init__.py"
    try:
        info = os.lstat(init)
    except FileNotFoundError:
        return f"{init}: the kernels/ folder has no __init__.py"
    except OSError as exc:
        return f"{init}: cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        return f"{init}: {kind}; it must be a regular file"
    return ""


def import_kernels_from(root: str | Path) -> ModuleType:
    """``import kernels`` from ``root`` (put first on ``sys.path`` unless already on it),
    checking that the package imported is ``root/kernels`` and no other tree's.
    BadInput when it is not (see ``kernels_init_problem``)."""
    root = Path(root).resolve()
    problem = kernels_init_problem(root)
    if problem:
        raise BadInput(problem)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import kernels

    where = getattr(kernels, "__file__", None)
    if not where or not inside(Path(where), root / "kernels"):
        came = where or f"a namespace package ({_portions(kernels)})"
        raise BadInput(f"kernels was imported from {came}, not from {root / 'kernels'}")
    return kernels


_SHOWN_STRAYS = 8


@dataclass(frozen=True)
class Stray:
    """A process a child left running outside its process group (now killed)."""

    pid: int
    name: str  # its command name (``comm``), reduced to safe characters

    def __str__(self) -> str:
        return f"{self.pid} {self.name}"


def strays_text(strays: Sequence[Stray]) -> str:
    """``N process(es) (pid name, ...)``, the list cut after a few."""
    shown = ", ".join(str(s) for s in strays[:_SHOWN_STRAYS])
    more = f", and {len(strays) - _SHOWN_STRAYS} more" if len(strays) > _SHOWN_STRAYS else ""
    word = "process" if len(strays) == 1 else "processes"
    return f"{len(strays)} {word} ({shown}{more})"


@dataclass(frozen=True)
class GroupRun:
    """How a ``run_group`` child ended, and the tails of what it wrote."""

    returncode: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    strays: tuple[Stray, ...] = ()  # what it left running outside its group (killed)


def _read_tail(f: BinaryIO, limit: int) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode("utf-8", errors="replace")


# The one registry of process groups this guard started and has not reaped yet (their
# leaders, by pid = process group id): run_group's children and the runner's workers
# (``start_group``). An interrupted caller ends them (``kill_running_groups``: run_group
# may wait in a thread of a pool, and a pool waits for its threads on the way out, i.e.
# for the children's timeout); the guard leaving ends and reaps them (``stop_running``);
# end_strays never takes a listed child, or a member of a listed group or session, for a
# stray.
_RUNNING: dict[int, subprocess.Popen[Any]] = {}
_RUNNING_LOCK = threading.Lock()


def start_group(argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """``Popen(argv, **popen)`` as the leader of a new session, listed in ``_RUNNING``
    before any ``end_strays`` (another thread's) can see it unlisted. The caller calls
    ``forget_group`` (or ``stop_group``) before reaping it. OSError when it cannot start."""
    with _RUNNING_LOCK:
        proc = subprocess.Popen(list(argv), start_new_session=True, **popen)
        _RUNNING[proc.pid] = proc
    return proc


def forget_group(pid: int) -> None:
    """Unlist a ``start_group`` child (before reaping it: a listed pid is never reused)."""
    with _RUNNING_LOCK:
        _RUNNING.pop(pid, None)


def kill_group(pid: int) -> None:
    """SIGKILL a listed child's whole process group (it leads it: pgid == pid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def kill_running_groups() -> None:
    """SIGKILL every listed child's group still running (the caller is leaving)."""
    with _RUNNING_LOCK:
        pids = list(_RUNNING)
    for pid in pids:
        kill_group(pid)


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Kill a ``start_group`` child's group, close its stdin (a worker's watchdog reads
    it), unlist and reap it. Unlisted only once the group's members are dead: until
    then another thread's ``end_strays`` (a second GPU's worker ending) would take them,
    orphaned to this process, for strays."""
    kill_group(proc.pid)
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    _wait_group_dead(proc.pid, time.monotonic() + STRAY_WAIT_S)
    forget_group(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


@atexit.register
def stop_running() -> None:
    """Stop every listed child still running (the guard is leaving)."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING.values())
    for proc in procs:
        stop_group(proc)


def run_group(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str],
    *,
    stdout_limit: int,
    stderr_limit: int,
    cwd: str | Path = GUARD_ROOT,
) -> GroupRun:
    """Run ``argv`` from ``cwd`` (``GUARD_ROOT``) as the leader of a new process group;
    SIGKILL the group at ``timeout_s`` and whenever this returns (nvcc, ptxas, ncu's child,
    a pytest round: nothing outlives the call). Keeps the last ``stdout_limit`` /
    ``stderr_limit`` bytes of each stream. OSError when it cannot start."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, subreaper():
        proc = start_group(
            argv,
            cwd=str(cwd),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        try:
            code: int | None = proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc.pid)
            forget_group(proc.pid)
            proc.wait()
            strays = end_strays(proc.pid)
        return GroupRun(code, _read_tail(out, stdout_limit), _read_tail(err, stderr_limit), strays)


# --------------------------------------------------------------------------- strays

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PR_GET_CHILD_SUBREAPER = 37
STRAY_WAIT_S = 10.0  # for a killed group to die, and for its escapees to be reparented


@dataclass(frozen=True)
class _Stat:
    pid: int
    name: str
    state: str
    ppid: int
    pgrp: int
    sid: int
    start: int  # clock ticks after boot: with the pid, names one process over time

    @property
    def alive(self) -> bool:
        return self.state not in "ZX"


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", errors="replace")
    except OSError:  # gone
        return None
    name, rest = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
    try:
        ppid, pgrp, sid, start = int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None
    return _Stat(pid, re.sub(r"[^\w.+-]", "?", name), rest[0], ppid, pgrp, sid, start)


def _processes() -> list[_Stat]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = (_stat(int(n)) for n in names if n.isdigit())
    return [s for s in found if s is not None]


def _prctl(option: int, *args: Any) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, *args, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


_REAPER_LOCK = threading.Lock()
_reaper = {"users": 0, "was": 0}
_KNOWN: set[tuple[int, int]] = set()  # this process's children when it became a subreaper


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """While inside (Linux): this process is a child subreaper, the new parent of every
    orphaned descendant, so that ``end_strays`` can find what a child's code left behind.
    Nested and threaded uses are counted; the setting is restored on the way out of the
    last. The children it already had are never taken for strays."""
    import ctypes

    with _REAPER_LOCK:
        if _reaper["users"] == 0:
            was = ctypes.c_int(0)
            _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(was))
            _reaper["was"] = was.value
            me = os.getpid()
            _KNOWN.clear()
            _KNOWN.update((s.pid, s.start) for s in _processes() if s.ppid == me)
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _reaper["users"] += 1
    try:
        yield
    finally:
        with _REAPER_LOCK:
            _reaper["users"] -= 1
            if _reaper["users"] == 0 and not _reaper["was"]:
                _prctl(PR_SET_CHILD_SUBREAPER, 0)


def _reap(pid: int) -> bool:
    """Reap ``pid`` (a child of this process) if it has ended; True when it is gone."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _wait_group_dead(group: int, deadline: float) -> None:
    """Until no process of ``group`` is alive (SIGKILL is delivered asynchronously), or
    ``deadline`` (monotonic)."""
    while any(s.pgrp == group and s.alive for s in _processes()):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)


def end_strays(group: int | None = None, wait_s: float = STRAY_WAIT_S) -> tuple[Stray, ...]:
    """SIGKILL and reap what this process's children left behind; those that were still
    running, for the caller to report (dead ones are reaped silently).

    ``group``: the process group of a child that has just been killed and reaped. Its
    members are first waited for (up to ``wait_s``): once they are dead, every process
    they orphaned has been reparented here. They are not reported (they died with their
    group, as they should). A stray is then a child of this process in another session
    that this process did not start (not listed in ``_RUNNING``, not a child it had before
    ``subreaper()``); it is killed with every process of its group and session, and the
    search repeats until no stray is left (each death may orphan more), or ``wait_s``."""
    deadline = time.monotonic() + wait_s
    if group is not None:
        _wait_group_dead(group, deadline)
    me, my_sid, my_pgrp = os.getpid(), os.getsid(0), os.getpgrp()
    found: dict[int, Stray] = {}
    while True:
        with _RUNNING_LOCK:
            every = _processes()
            strays = [
                s
                for s in every
                if s.ppid == me
                and s.sid != my_sid
                and (s.pid, s.start) not in _KNOWN
                and not _RUNNING.keys() & {s.pid, s.pgrp, s.sid}
            ]
            groups = {s.pgrp for s in strays} - {my_pgrp}
            sessions = {s.sid for s in strays} - {my_sid}
            doomed = [s for s in every if s.alive and (s.pgrp in groups or s.sid in sessions)]
            for s in doomed:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(s.pid, signal.SIGKILL)
        found.update((s.pid, Stray(s.pid, s.name)) for s in doomed if s.pgrp != group)
        pending = [s.pid for s in strays if not _reap(s.pid)]
        if not strays or time.monotonic() > deadline:
            break
        if pending:
            time.sleep(0.02)
    return tuple(found[pid] for pid in sorted(found))
