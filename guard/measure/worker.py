"""A worker process: runs one round of one arm and reports case by case.

Started by ``guard.measure.runner`` as ``python -m guard.measure.worker``, the leader of its
own process group, with a JSON job as the first line of stdin; the guard keeps stdin open for the
round. It writes one JSON object per line to its *original* stdout and sends everything
else (including whatever kernels print) to stderr, so a chatty kernel cannot corrupt the
protocol. Events: ``hello``, then ``begin`` (before a case runs, so a worker that dies is
blamed on that case) and ``result`` per case, then ``done``. A case that raises, or calls
``sys.exit``, is reported as that case's error. A CUDA error that poisons the context
ends the worker (exit 86) after reporting the case, and the runner starts a fresh one
for the remaining cases.

Dying with the guard: the worker asks Linux for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``), and forks a watchdog process into its group that waits for end
of file on stdin (the guard closed it, or died) and then SIGKILLs the whole group, the
kernels' children included. The watchdog is a process rather than a thread because a
thread dies with the SIGKILLed worker, and cannot run at all while a hung native call
holds the GIL. Limits: a descendant that leaves the group (``setsid``) escapes it (the
guard, their subreaper, finds and kills it after the worker: ``guard.measure.proc.end_strays``);
if the fork fails, a SIGKILLed guard leaves the kernels' children behind; the death
signal is Linux-only and follows the parent *thread* that started the worker.

The ``kernels`` package must come from the job's ``kernels_root`` (``guard.measure.proc.
import_kernels_from``); when it does not, the worker reports ``fatal`` and runs nothing.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from guard.measure.protocol import WorkerJob

CONTEXT_LOST = 86
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What a case may raise and still be only that case's failure: SystemExit is a kernel
# calling sys.exit, which must not end the worker (and every case after it).
CASE_ERRORS = (Exception, SystemExit)


def _emit(stream: TextIO, **event: Any) -> None:
    stream.write(json.dumps(event, allow_nan=False) + "\n")
    stream.flush()


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _context_alive(device: str) -> bool:
    if device != "cuda":
        return True
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit: the kernel called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {_tail(str(exc), 1)}"


def _report_failure(proto: TextIO, case_id: str, exc: BaseException, device: str) -> bool:
    """Report a case that raised; True when the CUDA context is lost (worker must end)."""
    from guard.measure import measure
    from guard.store.results import CRASHED, WRONG

    status = WRONG if isinstance(exc, measure.OutOfBoundsWrite) else CRASHED
    _emit(
        proto,
        event="result",
        case=case_id,
        status=status,
        reason=_describe(exc),
        output=_tail(traceback.format_exc(), 30),
    )
    return not _context_alive(device)


def run_job(job: WorkerJob, proto: TextIO) -> int:
    import torch

    from guard.measure import env as guard_env
    from guard.measure import measure
    from guard.store.results import BUILD_FAILED, CRASHED, OK, UNAVAILABLE, WRONG
    from guard.store.suite import Case, Tolerance

    for module in job.fault_modules:
        __import__(module)  # tests register fault-injection kernels this way
    from guard.measure import fingerprint
    from guard.measure.proc import import_kernels_from

    # The arm's own kernels or none: a tree without kernels/__init__.py would otherwise
    # hand over to another tree's regular package further on sys.path (GUARD_ROOT's).
    kernels = import_kernels_from(job.kernels_root)

    kernels_dir = os.path.dirname(os.path.abspath(str(kernels.__file__)))  # checked: a file
    device, mode, plan, tolerances = job.device, job.mode, job.plan, job.tolerances
    if device == "cpu":
        torch.set_num_threads(1)  # CPU fallback: steadier samples on shared 2-core machines
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be true float32
    torch.backends.cudnn.allow_tf32 = False
    _emit(proto, event="hello", pid=os.getpid(), gpu_state=guard_env.gpu_state())

    loaded: dict[str, Any] = {}
    hashes: dict[str, str] = {}
    prepared: list[tuple[Case, measure.Prepared]] = []
    for case_job in job.cases:
        case, seed = case_job.case, case_job.seed
        _emit(proto, event="begin", case=case.id)
        base = {"event": "result", "case": case.id}
        try:
            spec = kernels.get(case.kernel)
        except KeyError as exc:
            _emit(proto, **base, status=CRASHED, reason=str(exc).strip("'\""))
            continue
        reason = spec.probe(device)
        if reason:
            _emit(proto, **base, status=UNAVAILABLE, reason=reason)
            continue
        if case.kernel not in loaded:
            try:
                loaded[case.kernel] = spec.loader()
                hashes[case.kernel] = spec.source_hash()  # read its sources once
            except CASE_ERRORS as exc:
                _emit(
                    proto,
                    **base,
                    status=BUILD_FAILED,
                    reason=_describe(exc),
                    output=_tail(traceback.format_exc(), 30),
                )
                loaded[case.kernel] = None
                continue
        fn = loaded[case.kernel]
        if fn is None:
            _emit(proto, **base, status=BUILD_FAILED, reason="the kernel failed to load earlier")
            continue
        try:
            if mode == "check":
                # The case's first call: fingerprinted as it runs (guard.measure.fingerprint).
                result, print_ = fingerprint.take(
                    functools.partial(
                        measure.check,
                        fn,
                        case,
                        tolerances.get(case.dtype, Tolerance()),
                        seed,
                        device,
                        spec.accepts_out,
                    ),
                    kernels_dir,
                )
                _emit(
                    proto,
                    **base,
                    status=OK if result.passed else WRONG,
                    reason=result.message,
                    correctness=result.__dict__,
                    kernel_hash=hashes[case.kernel],
                    fingerprint=print_ if result.passed else "",
                )
            else:
                prepared.append((case, measure.Prepared(fn, case, plan, seed, device)))
        except CASE_ERRORS as exc:
            if _report_failure(proto, case.id, exc, device):
                return CONTEXT_LOST

    if mode == "time" and prepared:
        # Samples are taken in passes over every case, after one warm-up for the round.
        measure.warm_round(
            [p for _, p in prepared],
            plan,
            on_spin=lambda p: _emit(proto, event="begin", case=p.case.id),
        )
        samples: dict[str, list[float]] = {case.id: [] for case, _ in prepared}
        for i, n in enumerate(measure.pass_sizes(plan)):
            live = list(prepared)
            for case, prep in live[i % len(live) :] + live[: i % len(live)]:
                _emit(proto, event="begin", case=case.id)
                try:
                    samples[case.id] += prep.sample(n)
                except CASE_ERRORS as exc:
                    prepared.remove((case, prep))
                    if _report_failure(proto, case.id, exc, device):
                        return CONTEXT_LOST
        for case, prep in prepared:
            # The timed calls' output too: a kernel right on its first call only is wrong.
            _emit(proto, event="begin", case=case.id)
            try:
                verdict = prep.verify(tolerances.get(case.dtype, Tolerance()))
            except CASE_ERRORS as exc:
                if _report_failure(proto, case.id, exc, device):
                    return CONTEXT_LOST
                continue
            if not verdict.passed:
                _emit(
                    proto,
                    event="result",
                    case=case.id,
                    status=WRONG,
                    reason=f"output of the timed calls: {verdict.message}",
                    correctness=verdict.__dict__,
                )
                continue
            _emit(
                proto,
                event="result",
                case=case.id,
                status=OK,
                samples=samples[case.id],
                host=list(prep.host),
                method=prep.method,
                calls=prep.calls,
            )
    _emit(proto, event="done", gpu_state=guard_env.gpu_state())
    return 0


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere).

    The signal comes when the parent *thread* that started us ends; the runner starts
    workers from the thread that then waits for them."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _start_watchdog() -> None:
    """Fork a process that SIGKILLs this process group once stdin reaches end of file.

    Call after the job has been read from stdin (the watchdog reads the rest) and before
    any thread exists. It keeps only fd 0, so it holds no pipe the runner waits on.
    Only when stdin is a pipe (a job file redirected by hand ends at once)."""
    import stat

    if not stat.S_ISFIFO(os.fstat(0).st_mode):
        return
    try:
        pid = os.fork()
    except OSError:
        return  # the runner still kills the group; only a SIGKILLed guard goes uncovered
    if pid:
        return
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.closerange(3, 1 << 16)
        while os.read(0, 1 << 12):
            pass
    except BaseException:
        pass
    finally:
        try:
            os.killpg(0, signal.SIGKILL)
        finally:
            os._exit(0)


def main() -> int:
    from guard.base.errors import GuardError

    _die_with_parent(os.getppid())
    # Keep the protocol on a private copy of stdout; route fd 1 to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    line = sys.stdin.readline()  # the job; stdin then stays open until the round ends
    if not line:
        return 1  # the guard went away before sending a job
    data = json.loads(line)
    _start_watchdog()
    root = data.get("kernels_root")
    if root:
        sys.path.insert(0, root)  # the --against arm: its kernels, this guard
    sys.path.extend(data.get("sys_path", []))
    try:
        from guard.measure.protocol import WorkerJob

        return run_job(WorkerJob.from_json(data), proto)
    except GuardError as exc:  # the job cannot run (its tree): the reason is the message
        _emit(proto, event="fatal", output=str(exc))
        return 1
    except Exception:
        _emit(proto, event="fatal", output=_tail(traceback.format_exc(), 30))
        return 1


if __name__ == "__main__":
    sys.exit(main())
