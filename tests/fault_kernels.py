"""Fault-injection kernels for the guard's own tests (never in the users' registry).

Importing this module registers them. ``FAULT_SLOW_MS`` sets the planted delay of
``fault_slow`` so a test can make one commit slower than another. ``FAULT_PID_FILE``
names a file where the ``fault_spawn*`` kernels append "worker-pid pgid child-pid", so
a test can look for what outlived the guard. ``FAULT_DAEMON_FILE``: importing this
module in a worker starts a daemon (a double fork into a session of its own, as a
kernels package could at import time) and appends "daemon-pid session-id" there.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import torch

import kernels
from kernels.reference import attention
from kernels.registry import KernelSpec


def _any(device: str) -> str | None:
    return None


def _cuda_only(device: str) -> str | None:
    return None if device == "cuda" and torch.cuda.is_available() else "needs a CUDA GPU"


def fault_raise(q, k, v, *, causal=False, scale=None):
    raise RuntimeError("planted failure in fault_raise")


def fault_nan(q, k, v, *, causal=False, scale=None):
    out = attention(q, k, v, causal=causal, scale=scale)
    out[..., 0, 0] = math.nan
    return out


def fault_wrong(q, k, v, *, causal=False, scale=None):
    # 2% too large: small enough to look plausible, far beyond fp16 rounding.
    return attention(q, k, v, causal=causal, scale=scale) * 1.02


def fault_hang(q, k, v, *, causal=False, scale=None):
    time.sleep(3600)
    return attention(q, k, v, causal=causal, scale=scale)


def fault_slow(q, k, v, *, causal=False, scale=None):
    delay = float(os.environ.get("FAULT_SLOW_MS", "0")) / 1e3
    if delay:
        time.sleep(delay)
    return attention(q, k, v, causal=causal, scale=scale)


def fault_oob(q, k, v, *, causal=False, scale=None, out=None):
    """Writes its output and then 8 elements past its end."""
    result = attention(q, k, v, causal=causal, scale=scale)
    if out is None:
        return result
    out.copy_(result)
    past = torch.as_strided(out, (8,), (1,), out.storage_offset() + out.numel())
    past.fill_(1.0)
    return out


def fault_illegal_address(q, k, v, *, causal=False, scale=None):
    """Reads far outside any allocation on the GPU (poisons the CUDA context)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _bad(ptr):
        offs = tl.arange(0, 128) + (1 << 40)
        tl.store(ptr + offs, tl.load(ptr + offs))

    _bad[(1,)](q)
    torch.cuda.synchronize()
    return attention(q, k, v, causal=causal, scale=scale)


_calls = {"n": 0}  # calls of the "later" faults in this worker process
_children: list[subprocess.Popen] = []


def _later() -> bool:
    """False on the first call in a process (the correctness check), True afterwards."""
    _calls["n"] += 1
    return _calls["n"] > 1


def _spawn_sleeper() -> None:
    """Start one ``sleep 300`` per worker (inheriting stdout/stderr, as a careless
    kernel's helper would) and record the pids."""
    if _children:
        return
    child = subprocess.Popen(["sleep", "300"])
    _children.append(child)
    path = os.environ.get("FAULT_PID_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {os.getpgrp()} {child.pid}\n")


def fault_spawn(q, k, v, *, causal=False, scale=None):
    """Correct, but leaves a child process (sleep 300) behind."""
    _spawn_sleeper()
    return attention(q, k, v, causal=causal, scale=scale)


def fault_spawn_hang(q, k, v, *, causal=False, scale=None):
    """Starts a child process (sleep 300), then hangs."""
    _spawn_sleeper()
    time.sleep(3600)
    return attention(q, k, v, causal=causal, scale=scale)


def fault_os_exit(q, k, v, *, causal=False, scale=None):
    """Ends its worker with os._exit(0)."""
    os._exit(0)


def fault_sys_exit(q, k, v, *, causal=False, scale=None):
    """Calls sys.exit(0)."""
    sys.exit(0)


def fault_exit_later(q, k, v, *, causal=False, scale=None):
    """Correct on its first call in a process, os._exit(0) on the next (while timed)."""
    if _later():
        os._exit(0)
    return attention(q, k, v, causal=causal, scale=scale)


def fault_nan_later(q, k, v, *, causal=False, scale=None):
    """Correct on its first call in a process, NaN afterwards (while timed)."""
    out = attention(q, k, v, causal=causal, scale=scale)
    if _later():
        out[..., 0, 0] = math.nan
    return out


def fault_wrong_later(q, k, v, *, causal=False, scale=None):
    """Correct on its first call in a process, 2% too large afterwards (while timed)."""
    out = attention(q, k, v, causal=causal, scale=scale)
    return out * 1.02 if _later() else out


def fault_chatty(q, k, v, *, causal=False, scale=None):
    """Writes 4 MiB to stderr (one line), then ends its worker with exit code 3."""
    block = b"x" * (1 << 20)
    for _ in range(4):
        os.write(2, block)
    os.write(2, b"\nlast words of fault_chatty\n")
    os._exit(3)


_HOARD: list[bytearray] = []


def fault_grow_memory(q, k, v, *, causal=False, scale=None):
    """Holds 512 MiB more of the host's memory on every call, touched page by page, up
    to 4 GiB (a leak): its worker passes a small memory limit."""
    import time

    for _ in range(8):
        if sum(map(len, _HOARD)) < 4 << 30:
            _HOARD.append(bytearray(b"\x01" * (64 << 20)))
        time.sleep(0.05)
    return attention(q, k, v, causal=causal, scale=scale)


def fault_cpu_only_wrong_on_gpu(q, k, v, *, causal=False, scale=None):
    return attention(q, k, v, causal=causal, scale=scale)


for _name, _fn, _probe, _out in (
    ("fault_raise", fault_raise, _any, False),
    ("fault_nan", fault_nan, _any, False),
    ("fault_wrong", fault_wrong, _any, False),
    ("fault_hang", fault_hang, _any, False),
    ("fault_slow", fault_slow, _any, False),
    ("fault_oob", fault_oob, _any, True),
    ("fault_illegal_address", fault_illegal_address, _cuda_only, False),
    ("fault_spawn", fault_spawn, _any, False),
    ("fault_spawn_hang", fault_spawn_hang, _any, False),
    ("fault_os_exit", fault_os_exit, _any, False),
    ("fault_sys_exit", fault_sys_exit, _any, False),
    ("fault_exit_later", fault_exit_later, _any, False),
    ("fault_nan_later", fault_nan_later, _any, False),
    ("fault_wrong_later", fault_wrong_later, _any, False),
    ("fault_chatty", fault_chatty, _any, False),
    ("fault_grow_memory", fault_grow_memory, _any, False),
):
    kernels.register(
        KernelSpec(
            name=_name,
            description=f"test fault: {_fn.__doc__ or _name}",
            loader=(lambda f=_fn: f),
            probe=_probe,
            source_files=(),
            accepts_out=_out,
        )
    )


def _in_worker() -> bool:
    """Whether this is a guard worker (``python -m guard.measure.worker``), not the guard that
    imports this module too (``--fault-module``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "") == "guard.measure.worker"


def _start_daemon(record: str) -> None:
    """A daemon's double fork: a child in a session of its own forks the daemon and
    exits at once, so the daemon has no parent left and is in neither the worker's
    process group nor its session. The daemon (``sh``, waiting on a ``sleep 600`` it
    started: two processes) keeps the worker's pipes open, as a careless one would."""
    first = os.fork()
    if first == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                with open(record, "a", encoding="utf-8") as fh:
                    fh.write(f"{os.getpid()} {os.getsid(0)}\n")
                os.execvp("sh", ["sh", "-c", "sleep 600 & wait"])
        finally:
            os._exit(0)
    os.waitpid(first, 0)


if os.environ.get("FAULT_DAEMON_FILE") and _in_worker():
    _start_daemon(os.environ["FAULT_DAEMON_FILE"])


def _broken_loader():
    raise RuntimeError("planted build failure: nvcc exited with status 1\nerror: expected ';'")


kernels.register(
    KernelSpec(
        name="fault_build",
        description="test fault: fails to build",
        loader=_broken_loader,
        probe=_any,
    )
)


def fault_oob_gpu(q, k, v, *, causal=False, scale=None):
    """Writes 64 elements just past the end of its own output (the allocator's slack
    hides it from the CUDA context; compute-sanitizer sees it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _past_end(ptr, n):
        offs = n + tl.arange(0, 64)
        tl.store(ptr + offs, tl.zeros([64], dtype=tl.float16))

    out = attention(q, k, v, causal=causal, scale=scale)
    _past_end[(1,)](out, out.numel())
    return out


kernels.register(
    KernelSpec(
        name="fault_oob_gpu",
        description="test fault: writes past its output (GPU)",
        loader=lambda: fault_oob_gpu,
        probe=_cuda_only,
    )
)
