"""A worker process: runs one round of one arm and reports case by case.

Started by ``guard.runner`` as ``python -m guard.worker`` with a JSON job on stdin. It
writes one JSON object per line to its *original* stdout and sends everything else
(including whatever kernels print) to stderr, so a chatty kernel cannot corrupt the
protocol. Events: ``hello``, then ``begin``/``result`` per case, then ``done``.
A CUDA error that poisons the context ends the worker (exit 86) after reporting the
case, and the runner starts a fresh one for the remaining cases.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, TextIO

CONTEXT_LOST = 86


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


def _report_failure(proto: TextIO, case_id: str, exc: Exception, device: str) -> bool:
    """Report a case that raised; True when the CUDA context is lost (worker must end)."""
    from guard import measure
    from guard.results import CRASHED, WRONG

    status = WRONG if isinstance(exc, measure.OutOfBoundsWrite) else CRASHED
    _emit(
        proto,
        event="result",
        case=case_id,
        status=status,
        reason=f"{type(exc).__name__}: {_tail(str(exc), 1)}",
        output=_tail(traceback.format_exc(), 30),
    )
    return not _context_alive(device)


def run_job(job: dict[str, Any], proto: TextIO) -> int:
    import torch

    from guard import env as guard_env
    from guard import measure
    from guard.results import BUILD_FAILED, CRASHED, OK, UNAVAILABLE, WRONG
    from guard.suite import Case, TimingPlan, Tolerance

    for module in job.get("fault_modules", []):
        __import__(module)  # tests register fault-injection kernels this way
    import kernels

    device = job["device"]
    mode = job["mode"]
    plan = TimingPlan(**job["plan"])
    tolerances = {k: Tolerance(**v) for k, v in job.get("tolerances", {}).items()}
    if device == "cpu":
        torch.set_num_threads(1)  # CPU fallback: steadier samples on shared 2-core machines
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be true float32
    torch.backends.cudnn.allow_tf32 = False
    _emit(proto, event="hello", pid=os.getpid(), gpu_state=guard_env.gpu_state())

    loaded: dict[str, Any] = {}
    hashes: dict[str, str] = {}
    prepared: list[tuple[Case, measure.Prepared]] = []
    for raw in job["cases"]:
        case = Case.from_json(raw)
        seed = int(raw.get("seed", 0))
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
            except Exception as exc:
                _emit(
                    proto,
                    **base,
                    status=BUILD_FAILED,
                    reason=f"{type(exc).__name__}: {_tail(str(exc), 1)}",
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
                result = measure.check(
                    fn,
                    case,
                    tolerances.get(case.dtype, Tolerance()),
                    seed,
                    device,
                    spec.accepts_out,
                )
                _emit(
                    proto,
                    **base,
                    status=OK if result.passed else WRONG,
                    reason=result.message,
                    correctness=result.__dict__,
                    kernel_hash=hashes[case.kernel],
                )
            else:
                prepared.append((case, measure.Prepared(fn, case, plan, seed, device)))
        except Exception as exc:
            if _report_failure(proto, case.id, exc, device):
                return CONTEXT_LOST

    if mode == "time" and prepared:
        # Samples are taken in passes over every case, after one warm-up for the round.
        measure.warm_round([p for _, p in prepared], plan)
        samples: dict[str, list[float]] = {case.id: [] for case, _ in prepared}
        for i, n in enumerate(measure.pass_sizes(plan)):
            live = list(prepared)
            for case, prep in live[i % len(live) :] + live[: i % len(live)]:
                _emit(proto, event="begin", case=case.id)
                try:
                    samples[case.id] += prep.sample(n)
                except Exception as exc:
                    prepared.remove((case, prep))
                    if _report_failure(proto, case.id, exc, device):
                        return CONTEXT_LOST
        for case, prep in prepared:
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


def main() -> int:
    # Keep the protocol on a private copy of stdout; route fd 1 to stderr.
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    job = json.loads(sys.stdin.read())
    root = job.get("kernels_root")
    if root:
        sys.path.insert(0, root)  # the --against arm: its kernels, this guard
    sys.path.extend(job.get("sys_path", []))
    try:
        return run_job(job, proto)
    except Exception:
        _emit(proto, event="fatal", output=_tail(traceback.format_exc(), 30))
        return 1


if __name__ == "__main__":
    sys.exit(main())
