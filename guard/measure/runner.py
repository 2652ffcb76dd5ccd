"""Run a suite: correctness first, then timing rounds in fresh worker processes.

Each round of each arm is one ``python -m guard.measure.worker`` process; the arms (this tree,
and the base ref's tree for ``--against``) alternate round by round, and the order of
cases is shuffled in every round. A worker that crashes, exits (``os._exit``), hangs
past the per-case timeout, or loses its CUDA context costs only the case it was on (the
worker announces each case before running it): the runner records that case's failure
with the tail of the worker's output and starts a fresh worker for the rest. Nothing is
written here; callers save the returned results atomically.

Process lifetime: each worker leads its own process group (``start_new_session``), and
that whole group (the worker, whatever its kernels started, its watchdog) is killed
when the worker ends, when its case times out, and when the guard leaves the round by
any exception (``sigterm_unwinds`` turns SIGTERM into one; ``proc.stop_running``, at
exit, covers the rest). If the guard itself is SIGKILLed, the worker dies with it
(``PR_SET_PDEATHSIG``) and the worker's watchdog process kills the group when the
worker's stdin, held open by the guard for the round, reaches end of file. A process that
leaves the group (``setsid``, ``setpgid``, a daemon's double fork) is reparented to the
guard while a worker runs (``proc.subreaper``); after each worker the guard kills whatever is left
(``proc.end_strays``) and fails the check (InfraError, exit 3) naming it: what a
tree's code starts ends with its worker, or the check fails. Limits: a guard killed
between starting a worker and the worker's first instructions leaves it to the stdin
check alone, and a SIGKILLed guard leaves the escaped processes to PID 1.

Each arm's worker imports ``kernels`` from that arm's tree only: an arm whose
``kernels/__init__.py`` is missing or not a regular file is refused (BadInput), and the
worker checks where the package came from (``proc.import_kernels_from``). A suite whose
kernels are all ``module:function`` needs no ``kernels`` package: the worker imports
each module from the arm's tree and checks it lies there (``module_kernel``).

Each round records where its time went (``RoundPhases``: the worker's clock set against
when the runner started it and saw it end), when every worker of the round finished.

Started ahead (``prestart``, on by default on a GPU): while a worker measures, the next
worker is started with ``--preload``: it imports torch, Triton and the guard, then waits
for its job, so the next round does not pay for those imports. It is still a fresh
process per round, it touches neither the GPU nor the arm's kernels until its job
comes, and the job says which arm it serves. The one left when the check ends is
stopped by ``close`` (it is a context manager). Not on a CPU, where its imports
would take a core from the measurement, nor under compute-sanitizer.

Several GPUs of one host (``gpus``): each is a *lane*, where one worker runs at a time
(``CUDA_VISIBLE_DEVICES`` set to it), driven by a thread of its own that lives as long
as the check (a worker's death signal follows the thread that started it, and the
lane's worker started ahead must outlive each round). The timing rounds are dealt out
round-robin: both arms of a round run on one lane, one after the other, and each lane
alternates which arm goes first, so every lane holds as many rounds of each arm and a
GPU's offset falls on both alike (the decision removes it: ``stats.ratio_interval``'s
strata, from each round's lane in ``CaseResult.round_gpus``). The check round runs the
arms at once, one lane each: nothing is timed there. One limit: what a worker's code
leaves running outside its group may be found, and blamed, when another lane's worker
ends.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from guard.base.errors import BadInput, InfraError
from guard.measure import env as guard_env
from guard.measure.proc import (
    GUARD_ROOT,
    Stray,
    child_env,
    end_strays,
    kernels_init_problem,
    kill_group,
    start_group,
    stop_group,
    strays_text,
    subreaper,
    tree_root,
)
from guard.measure.protocol import PRELOAD_FLAG, CaseJob, Event, Mode, WorkerClock, WorkerJob
from guard.store.results import (
    CRASHED,
    OK,
    SCHEMA_VERSION,
    TIMEOUT,
    WRONG,
    CaseResult,
    CaseStatus,
    Correctness,
    Environment,
    RoundInfo,
    RoundPhases,
    RunResult,
    now_iso,
)
from guard.store.suite import Case, Suite, TimingPlan

SANITIZER_FOUND = 87  # compute-sanitizer's exit code when it reports memory errors
STARTUP_TIMEOUT_S = 300.0  # torch import + CUDA init on a cold machine
LOG_TAIL_BYTES = 64 * 1024  # of a worker's stderr kept in memory (a kernel may print GBs)
LOG_TAIL_LINES = 20  # of those, the lines a failed case keeps in the results


@dataclass(frozen=True)
class Arm:
    """What is measured: this checkout's kernels, or another tree's (``kernels_root``)."""

    name: str = "candidate"
    kernels_root: str | None = None
    label: str = ""
    # Environment variables its workers set before importing its kernels (its own
    # compile caches: ``guard.measure.build_cache``).
    env: tuple[tuple[str, str], ...] = ()
    # The command prefix of every process that runs its code (its sandbox:
    # ``guard.measure.sandbox.wrapper``; (): none).
    wrapper: tuple[str, ...] = ()


@dataclass(frozen=True)
class Progress:
    """One progress event for the CLI to render (the operations never print)."""

    phase: str  # "check" or "time"
    arm: str
    round: int
    total_rounds: int
    case: str
    done: int
    total: int
    message: str = ""


ProgressFn = Callable[[Progress], None]


def _noop(_: Progress) -> None:
    pass


@dataclass
class _CaseState:
    case: Case
    status: CaseStatus = OK
    reason: str = ""
    correctness: Correctness | None = None
    rounds: list[tuple[float, ...]] = field(default_factory=list)
    host_rounds: list[tuple[float, ...]] = field(default_factory=list)
    kernel_hash: str = ""
    fingerprint: str = ""
    method: str = ""
    calls: list[int] = field(default_factory=list)
    output: str = ""
    round_gpus: list[str] = field(default_factory=list)  # each round's lane ("": the only one)
    parts: dict[str, str] = field(default_factory=dict)  # a probe's fingerprint parts

    def freeze(self) -> CaseResult:
        return CaseResult(
            case=self.case,
            status=self.status,
            reason=self.reason,
            correctness=self.correctness,
            rounds=tuple(self.rounds),
            host_rounds=tuple(self.host_rounds),
            kernel_hash=self.kernel_hash,
            fingerprint=self.fingerprint,
            method=self.method,
            calls_per_sample=tuple(self.calls),
            worker_output=self.output,
            round_gpus=tuple(self.round_gpus) if any(self.round_gpus) else (),
        )


@dataclass
class _Lane:
    """Where one worker runs at a time: a GPU (``CUDA_VISIBLE_DEVICES``; None: the
    devices this process sees), with its own worker started ahead."""

    gpu: str | None = None
    label: str = ""  # what its rounds record ("": the check's only lane)
    spare: _Started | None = None  # the next worker, started ahead
    strays: list[Stray] = field(default_factory=list)  # left by the last worker (end_strays)
    # The last worker's start and end (None: not seen to end by itself), monotonic.
    span: tuple[float, float | None] = (0.0, None)
    pairs: int = 0  # timing rounds of both arms done here: who goes first alternates
    current: subprocess.Popen[str] | None = None  # the worker running now
    thread: ThreadPoolExecutor | None = None  # drives the lane (several lanes only)
    # The arm of the worker after the one running now: its spare is started for it
    # (each arm's workers have their own environment and sandbox).
    next_arm: Arm | None = None


def case_seed(base: int, case_id: str, round_index: int) -> int:
    return zlib.crc32(f"{base}:{case_id}:{round_index}".encode()) & 0x7FFFFFFF


class Rounds:
    """The timing rounds of one check over one or two arms. Not thread-safe."""

    def __init__(
        self,
        suite: Suite,
        *,
        device: str,
        arms: Sequence[Arm] = (Arm(),),
        plan: TimingPlan | None = None,
        seed: int | None = None,
        progress: ProgressFn = _noop,
        fault_modules: Sequence[str] = (),
        sys_path: Sequence[str] = (),
        python: str = sys.executable,
        sanitize: bool = False,
        cpu_fallback_reason: str = "",
        prestart: bool | None = None,
        gpus: Sequence[str | None] = (),
    ) -> None:
        for arm in arms:
            # A suite of module:function kernels alone needs no kernels/ package.
            needed = arm.kernels_root and suite.uses_registry
            problem = kernels_init_problem(arm.kernels_root) if arm.kernels_root and needed else ""
            if problem:  # its worker would import another tree's kernels, or none
                raise BadInput(f"the {arm.name}'s kernels/ cannot be imported: {problem}")
        self.suite = suite
        self.device = device
        self.arms = tuple(arms)
        self.plan = plan or (suite.timing if device == "cuda" else suite.cpu_timing)
        self.seed = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
        self.progress = progress
        self.fault_modules = tuple(fault_modules)
        self.sys_path = tuple(sys_path)
        self.python = python
        self.sanitize = sanitize
        self.cpu_fallback_reason = cpu_fallback_reason
        # None: on a GPU only (on a CPU the preloading worker would take a core from
        # the measuring one); never under compute-sanitizer (it wraps each worker).
        self.prestart = (device == "cuda") if prestart is None else prestart
        self.prestart = self.prestart and not sanitize
        many = len(gpus) > 1
        self.lanes = [
            _Lane(gpu, (gpu if gpu is not None else str(i)) if many else "")
            for i, gpu in enumerate(gpus)
        ] or [_Lane()]
        self._lock = threading.RLock()  # the lanes' threads share the states and progress
        self._stopping = threading.Event()  # a lane failed, or the check is closing
        self.states = {a.name: {c.id: _CaseState(c) for c in suite.cases} for a in self.arms}
        self.round_infos: dict[str, list[RoundInfo]] = {a.name: [] for a in self.arms}
        self.rounds_done = 0
        self.environment = guard_env.collect(device, cpu_fallback_reason)
        # Each arm's machine record, with its own commit (git asked once, not per step).
        self.arm_environments = {a.name: self._arm_environment(a) for a in self.arms}

    # ------------------------------------------------------------------ phases

    def check(self) -> None:
        """Round 0: correctness of every case in every arm. Nothing is timed, so the arms
        run at once: on their own lanes where there are several, else side by side on
        the one GPU."""
        if len(self.lanes) == 1 and len(self.arms) > 1:
            lane = self.lanes[0]
            if self.prestart and lane.spare is None:
                # The first timing round's worker imports while the check runs, started
                # by this thread (which runs the rounds: its death signal follows it).
                command, env = self._worker_command(lane, self.arms[0])
                lane.spare = _Started.start([*command, PRELOAD_FLAG], env, base=command)
            self._at_once("check", 1)
            return
        work: list[list[Callable[[], None]]] = [[] for _ in self.lanes]
        for i, arm in enumerate(self.arms):
            lane = self.lanes[i % len(self.lanes)]
            work[i % len(self.lanes)].append(
                functools.partial(self._round, lane, arm, "check", list(self.suite.cases), 0, 0)
            )
        self._on_lanes(work)

    def probe(self, workers: int = 1) -> None:
        """Round 0 of a surface: one fingerprinted call of every case in every arm
        (``states[arm][case].fingerprint`` and ``.parts``), no reference and no timing,
        in ``workers`` processes per arm, every arm at once (``_at_once``)."""
        self._at_once("probe", workers)

    def _at_once(self, mode: Mode, workers: int) -> None:
        """A round of ``mode`` (nothing timed) of every case in every arm, all at once:
        each arm's cases dealt to ``workers`` processes (in the same order for every arm,
        whose workers then load the same kernels before each case), spread over the
        lanes' GPUs. Progress is one line as it starts and one as it ends."""
        cases = list(self.suite.cases)
        workers = max(1, min(workers, len(cases)))
        chunks = [cases[i::workers] for i in range(workers)]
        lanes: list[_Lane] = []
        steps: list[Callable[[], None]] = []
        for arm in self.arms:
            for chunk in chunks:
                lane = _Lane(self.lanes[len(lanes) % len(self.lanes)].gpu)
                lanes.append(lane)
                steps.append(functools.partial(self._round, lane, arm, mode, chunk, 0, 0))
        prestart, self.prestart = self.prestart, False  # each worker here runs one job
        progress, total, done = self.progress, len(cases) * len(self.arms), [0]
        trees = "both trees" if len(self.arms) == 2 else "this tree"

        def tally(event: Progress) -> None:
            if event.case or event.done != event.total:
                return
            done[0] += event.total
            progress(Progress(mode, trees, 0, 0, "", done[0], total))

        progress(Progress(mode, trees, 0, 0, "", 0, total))
        self.progress = tally
        try:
            with ThreadPoolExecutor(len(steps), thread_name_prefix=mode) as pool:
                self._wait_all([pool.submit(step) for step in steps], lanes)
        finally:
            self.prestart, self.progress = prestart, progress

    def time(self, n_rounds: int, case_ids: Sequence[str] | None = None) -> None:
        """``n_rounds`` more timing rounds of the cases that passed in every arm."""
        wanted = set(case_ids) if case_ids is not None else None
        cases = [
            c
            for c in self.suite.cases
            if (wanted is None or c.id in wanted)
            and all(self.states[a.name][c.id].status == OK for a in self.arms)
        ]
        if not cases:
            return
        first, total = self.rounds_done + 1, self.rounds_done + n_rounds
        self.rounds_done = total
        work: list[list[Callable[[], None]]] = [[] for _ in self.lanes]
        for r in range(first, total + 1):  # round-robin over the lanes
            j = (r - 1) % len(self.lanes)
            work[j].append(functools.partial(self._pair, self.lanes[j], cases, r, total))
        self._on_lanes(work)

    def _pair(self, lane: _Lane, cases: Sequence[Case], r: int, total: int) -> None:
        """Round ``r`` of every arm on ``lane``, the first arm alternating on each lane."""
        arms = self.arms if lane.pairs % 2 == 0 else tuple(reversed(self.arms))
        lane.pairs += 1
        order = list(cases)
        random.Random(self.seed + r).shuffle(order)
        for i, arm in enumerate(arms):
            # After this round's last arm, the next round on this lane starts with it.
            lane.next_arm = arms[i + 1] if i + 1 < len(arms) else arm
            self._round(lane, arm, "time", order, r, total)

    def _on_lanes(self, work: Sequence[Sequence[Callable[[], None]]]) -> None:
        """Run each lane's ``work`` in order: on this thread when there is one lane, else
        on each lane's thread at once. The first error is raised once every lane has
        stopped (a failing lane stops the others after their current round)."""
        if len(self.lanes) == 1:
            for step in work[0]:
                step()
            return
        futures: list[Future[None]] = []
        for lane, steps in zip(self.lanes, work, strict=True):
            if steps:
                if lane.thread is None:
                    lane.thread = ThreadPoolExecutor(1, thread_name_prefix=f"lane-{lane.label}")
                futures.append(lane.thread.submit(self._run_steps, steps))
        self._wait_all(futures, self.lanes)

    def _wait_all(self, futures: Sequence[Future[None]], lanes: Sequence[_Lane]) -> None:
        """Every step's end; the first error raised once all have ended (a failing step
        stops the others at their next case). Interrupted here (SIGTERM, ^C): every
        lane's worker is ended first."""
        errors: list[BaseException] = []
        try:
            for future in futures:
                try:
                    future.result()
                except Exception as exc:
                    self._stopping.set()
                    errors.append(exc)
        except BaseException:
            self._stopping.set()
            self._stop_workers(lanes)
            raise
        if errors:
            raise errors[0]

    def _run_steps(self, steps: Sequence[Callable[[], None]]) -> None:
        for step in steps:
            if self._stopping.is_set():
                return
            step()

    def _stop_workers(self, lanes: Sequence[_Lane] | None = None) -> None:
        for lane in self.lanes if lanes is None else lanes:
            if lane.current is not None:
                stop_group(lane.current)

    def close(self) -> None:
        """Stop the lanes and their workers started ahead (they never ran a job)."""
        self._stopping.set()
        self._stop_workers()
        for lane in self.lanes:
            if lane.thread is not None:
                lane.thread.shutdown(wait=True)
                lane.thread = None
            spare, lane.spare = lane.spare, None
            if spare is not None:
                spare.stop()

    def __enter__(self) -> Rounds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _arm_environment(self, arm: Arm) -> Environment:
        if not arm.kernels_root:
            return self.environment
        commit, dirty, branch = guard_env.git_info(arm.kernels_root)
        return replace(
            self.environment, commit=commit, commit_dirty=dirty, branch=arm.label or branch
        )

    def results(self) -> dict[str, RunResult]:
        notes = []
        if self.cpu_fallback_reason:
            notes.append(f"ran on the CPU: {self.cpu_fallback_reason}")
        out = {}
        for arm in self.arms:
            env = self.arm_environments[arm.name]
            out[arm.name] = RunResult(
                schema_version=SCHEMA_VERSION,
                created=now_iso(),
                suite_name=self.suite.name,
                suite_hash=self.suite.hash,
                environment=env,
                cases=tuple(s.freeze() for s in self.states[arm.name].values()),
                rounds=tuple(self.round_infos[arm.name]),
                notes=(*notes, f"seed {self.seed}"),
                label=arm.label or arm.name,
            )
        return out

    # ------------------------------------------------------------------ workers

    def _job(self, arm: Arm, mode: Mode, cases: list[Case], round_index: int) -> WorkerJob:
        return WorkerJob(
            mode=mode,
            device=self.device,
            kernels_root=arm.kernels_root or tree_root(self.suite.uses_registry),
            plan=self.plan,
            cases=tuple(CaseJob(c, case_seed(self.seed, c.id, round_index)) for c in cases),
            tolerances=dict(self.suite.tolerances),
            fault_modules=self.fault_modules,
            sys_path=self.sys_path,
            teardown=self.sanitize,
            env=dict(arm.env),
            kernel_options=dict(self.suite.kernel_options),
        )

    def _round(
        self,
        lane: _Lane,
        arm: Arm,
        mode: Mode,
        cases: list[Case],
        round_index: int,
        total_rounds: int,
    ) -> None:
        states = self.states[arm.name]
        remaining = list(cases)
        started, t0 = now_iso(), time.monotonic()
        first_state: dict[str, Any] = {}
        last_state: dict[str, Any] = {}
        done = 0
        spans: list[tuple[float, WorkerClock, float]] | None = []  # None: one did not finish
        while remaining and not self._stopping.is_set():  # a lane failed, or closing
            # Under compute-sanitizer a finding surfaces only as the worker's exit code,
            # so each case gets a worker of its own and the finding lands on that case.
            batch = remaining[:1] if self.sanitize else remaining
            job = self._job(arm, mode, batch, round_index)
            # The case the worker is on: announced ("begin") before it runs, cleared
            # when its result arrives, so a worker that dies is blamed on that case only.
            current: str | None = batch[0].id if self.sanitize else None
            progressed = False
            clock: WorkerClock | None = None
            with contextlib.closing(self._spawn(lane, arm, job)) as events:
                for event in events:
                    kind = event.get("event")
                    if kind == "hello":
                        first_state = first_state or event.get("gpu_state", {})
                    elif kind == "begin":
                        current = event["case"]
                        self._progress(
                            Progress(
                                mode, arm.name, round_index, total_rounds, current, done, len(cases)
                            )
                        )
                    elif kind == "result":
                        cid = event["case"]
                        self._record(states[cid], mode, event, lane.label)
                        remaining = [c for c in remaining if c.id != cid]
                        progressed, done = True, done + 1
                        current = cid if self.sanitize else None
                    elif kind == "done":
                        last_state = event.get("gpu_state", {})
                        with contextlib.suppress(ValueError):
                            clock = WorkerClock.from_json(event.get("clock", {}))
                    elif kind in ("exit", "timeout", "fatal"):
                        status = TIMEOUT if kind == "timeout" else CRASHED
                        reason = event.get("reason", "worker failed")
                        output = event.get("output", "")
                        failed = current
                        if self.sanitize and event.get("code") == SANITIZER_FOUND:
                            failed = batch[0].id  # even if the case had reported "ok"
                            state = states[failed]
                            if state.status != OK:  # keep its error, add the sanitizer's
                                state.reason += f"; {reason}"
                                state.output = output or state.output
                        if failed is None:
                            # Between cases: nobody to blame. A fresh worker takes the
                            # rest, unless this one ran nothing (then none can start).
                            if not progressed and remaining:
                                for c in remaining:
                                    why = f"{reason} (before any case started)"
                                    self._fail(states[c.id], status, why, output)
                                done += len(remaining)
                                remaining = []
                            break
                        if current is not None and failed == current and status == CRASHED:
                            reason = f"{reason} while running this case"
                        self._fail(states[failed], status, reason, output)
                        remaining = [c for c in remaining if c.id != failed]
                        done += 1
                        progressed = True
                        break
            spawned, ended = lane.span
            if spans is not None and clock is not None and ended is not None:
                spans.append((spawned, clock, ended))
            else:
                spans = None
            if lane.strays:
                strays, lane.strays = lane.strays, []
                raise InfraError(
                    f"the {arm.name}'s code left {strays_text(strays)} running outside "
                    "its worker's process group: killed"
                )
            if remaining and not progressed:
                # The worker ended without a word about the rest (cannot start): fail them.
                for c in remaining:
                    self._fail(states[c.id], CRASHED, "worker exited before running any case", "")
                break
        self._progress(
            Progress(mode, arm.name, round_index, total_rounds, "", len(cases), len(cases))
        )
        info = RoundInfo(
            index=round_index,
            arm=arm.name,
            started=started,
            duration_s=round(time.monotonic() - t0, 3),
            order=tuple(c.id for c in cases),
            gpu_state={"start": first_state, "end": last_state},
            throttled=guard_env.is_throttled(first_state) or guard_env.is_throttled(last_state),
            phases=round_phases(spans) if spans else None,
            gpu=lane.label,
        )
        with self._lock:
            self.round_infos[arm.name].append(info)

    def _progress(self, event: Progress) -> None:
        with self._lock:  # one lane's line at a time
            self.progress(event)

    def _record(self, state: _CaseState, mode: str, event: Event, lane: str = "") -> None:
        with self._lock:
            self._record_unlocked(state, mode, event, lane)

    def _record_unlocked(self, state: _CaseState, mode: str, event: Event, lane: str) -> None:
        status = _status(event.get("status", CRASHED))
        if mode == "probe":
            state.kernel_hash = event.get("kernel_hash", "")
            state.fingerprint = str(event.get("fingerprint", ""))
            raw = event.get("parts", {})
            state.parts = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
            if status != OK:
                self._fail(state, status, event.get("reason", ""), event.get("output", ""))
            return
        if mode == "check":
            corr = event.get("correctness")
            state.correctness = Correctness(**corr) if corr else None
            state.kernel_hash = event.get("kernel_hash", "")
            state.fingerprint = str(event.get("fingerprint", ""))
            if status != OK:
                self._fail(state, status, event.get("reason", ""), event.get("output", ""))
            return
        if status != OK:
            corr = event.get("correctness")
            if status == WRONG and corr and state.status == OK:  # the timed calls' output
                state.correctness = Correctness(**corr)
            self._fail(state, status, event.get("reason", ""), event.get("output", ""))
            return
        state.rounds.append(tuple(float(x) for x in event["samples"]))
        state.host_rounds.append(tuple(float(x) for x in event.get("host", [])))
        state.method = event.get("method", "")
        state.calls.append(int(event.get("calls", 1)))
        state.round_gpus.append(lane)

    def _fail(self, state: _CaseState, status: CaseStatus, reason: str, output: str) -> None:
        with self._lock:
            if state.status == OK:  # keep the first failure
                state.status, state.reason, state.output = status, reason, output

    def _sanitizer(self) -> list[str]:
        """``compute-sanitizer`` memcheck around the worker (opt-in: 10-100x slower)."""
        if not self.sanitize:
            return []
        exe = shutil.which("compute-sanitizer")
        if exe is None:
            raise InfraError("--sanitize: compute-sanitizer is not on PATH")
        return [
            exe,
            "--tool",
            "memcheck",
            "--error-exitcode",
            str(SANITIZER_FOUND),
            "--target-processes",
            "all",
            "--print-limit",
            "20",
        ]

    def _spawn(self, lane: _Lane, arm: Arm, job: WorkerJob) -> Generator[Event, None, None]:
        """Start a worker and yield its events; synthesize exit/timeout events.

        The worker's process group is killed when the worker ends (its kernels' children
        go with it) and when this generator is closed for any reason. Its stdin stays
        open until then: end of file there tells its watchdog the guard is gone. What
        left the group is killed then too, and kept in the lane's ``strays``.
        """
        command, env = self._worker_command(lane, arm)
        with subreaper():  # from the start: a daemon's double fork may come at import
            yield from self._worker_events(lane, job, command, env)

    def _worker_command(self, lane: _Lane, arm: Arm) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of a worker of ``arm`` on ``lane``: in the
        arm's sandbox, with the arm's variables."""
        env = {**child_env(), **dict(arm.env)}
        if lane.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = lane.gpu
        if self.sanitize:  # memcheck sees cudaMalloc bounds, not torch's sub-allocations
            env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        worker = [self.python, "-m", "guard.measure.worker"]
        return [*arm.wrapper, *self._sanitizer(), *worker], env

    def _take_spare(self, lane: _Lane, command: list[str], env: dict[str, str]) -> _Started | None:
        """The lane's worker started ahead, if it was started for this command and
        environment and is still waiting (one that died waiting is stopped: a fresh one
        starts)."""
        spare, lane.spare = lane.spare, None
        if spare is None:
            return None
        if spare.command == command and spare.env == env and spare.proc.poll() is None:
            return spare
        spare.stop()
        return None

    def _worker_events(
        self, lane: _Lane, job: WorkerJob, command: list[str], env: dict[str, str]
    ) -> Generator[Event, None, None]:
        spare = self._take_spare(lane, command, env)
        lane.span = (time.monotonic(), None)  # a spare's time begins with its job
        started = spare or _Started.start(command, env)
        proc, log = started.proc, started.log
        lane.current = proc
        try:
            lines: queue.Queue[str | None] = queue.Queue()

            def pump() -> None:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=pump, daemon=True).start()
            try:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps(job.to_json()) + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            if self.prestart and lane.spare is None and not self._stopping.is_set():
                # The next worker imports while this one runs (the same thread starts
                # both: the death signal follows the thread that started a worker), for
                # the arm it will serve.
                ahead, ahead_env = command, env
                if lane.next_arm is not None:
                    ahead, ahead_env = self._worker_command(lane, lane.next_arm)
                lane.spare = _Started.start([*ahead, PRELOAD_FLAG], ahead_env, base=ahead)

            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            finished = False  # the worker said "done"
            memory_limit = worker_memory_limit(self.plan)
            while True:
                try:
                    # Nothing follows "done": wait for the worker's exit, not for end of
                    # file on a pipe that a process its kernels started may hold open.
                    # Every MEMORY_POLL_S the group's resident memory is read.
                    wait_s = max(0.0, deadline - time.monotonic())
                    line = None
                    while not finished:
                        try:
                            line = lines.get(timeout=min(wait_s, MEMORY_POLL_S))
                            break
                        except queue.Empty:
                            if time.monotonic() >= deadline:
                                raise
                            wait_s = max(0.0, deadline - time.monotonic())
                            used = worker_rss(proc.pid)
                            if used > memory_limit:
                                kill_group(proc.pid)
                                yield {
                                    "event": "exit",
                                    "code": -9,
                                    "output": log.text(wait_s=5.0),
                                    "reason": f"its memory ({used / 2**30:.1f} GiB resident) "
                                    f"passed the limit of {memory_limit / 2**30:.1f} GiB "
                                    "(timing.memory_gb); worker killed",
                                }
                                return
                except queue.Empty:
                    kill_group(proc.pid)
                    yield {
                        "event": "timeout",
                        "output": log.text(wait_s=5.0),  # complete once the group is dead
                        "reason": f"no progress within {self.plan.case_timeout_s:g} s "
                        "(hung, or too slow); worker killed",
                    }
                    return
                if line is None:
                    try:
                        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                        lane.span = (lane.span[0], time.monotonic())
                    except subprocess.TimeoutExpired:  # stuck on its way out
                        kill_group(proc.pid)
                        code = proc.wait()
                    kill_group(proc.pid)  # what its kernels started dies with the worker
                    if code != 0 or not finished:
                        yield {
                            "event": "exit",
                            "reason": _exit_reason(code, finished),
                            "output": log.text(wait_s=5.0),
                            "code": code,
                        }
                    return
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("event") in ("begin", "result"):
                    deadline = time.monotonic() + self.plan.case_timeout_s
                if event.get("event") == "done":
                    finished = True
                if event.get("event") == "fatal":
                    last = (event.get("output") or "worker failed").splitlines()[-1]
                    event["reason"] = f"worker failed: {last}"
                yield event
        finally:
            lane.current = None
            stop_group(proc)
            lane.strays += end_strays(proc.pid)


MEMORY_POLL_S = 0.5  # how often a running worker's resident memory is read


def worker_memory_limit(plan: TimingPlan) -> int:
    """Bytes of resident memory a worker process may hold: the plan's
    ``memory_gb``, at most half of this machine's memory (a kernel that grows the host's
    memory fails its case, not the machine)."""
    limit = int(plan.memory_gb * 2**30)
    with contextlib.suppress(OSError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        limit = min(limit, total // 2)
    return limit


def worker_rss(pid: int) -> int:
    """Resident bytes of the worker process ``pid`` (0 where /proc cannot tell: another
    OS, or it has just ended). One small read: this runs every MEMORY_POLL_S."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            resident = int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident * os.sysconf("SC_PAGE_SIZE")


@dataclass
class _Started:
    """A worker process just started: its pipes and its stderr's tail."""

    command: list[str]  # as asked for (without ``--preload``: what it can serve)
    env: dict[str, str]
    proc: subprocess.Popen[str]
    log: LogTail

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str], base: list[str] | None = None) -> _Started:
        """Start ``argv`` (a worker) as a process-group leader. InfraError when it cannot."""
        err_read, err_write = os.pipe()
        try:
            proc = start_group(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err_write,
                cwd=str(GUARD_ROOT),
                env=env,
                text=True,
            )
        except OSError as exc:
            os.close(err_read)
            raise InfraError(f"cannot start a worker process ({exc})") from None
        finally:
            os.close(err_write)
        return cls(base if base is not None else argv, env, proc, LogTail(err_read))

    def stop(self) -> None:
        """Kill its group and reap it (a spare never ran a job: nothing to report)."""
        stop_group(self.proc)
        end_strays(self.proc.pid)


class LogTail:
    """Drain a pipe in a thread, keeping only its last ``limit`` bytes.

    A worker's stderr holds whatever its kernels print; one that prints gigabytes costs
    this process ``limit`` bytes of memory and no disk.
    """

    def __init__(self, fd: int, limit: int = LOG_TAIL_BYTES) -> None:
        self.limit = limit
        self.total = 0  # bytes read so far
        self._fd = fd
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 16):
                with self._lock:
                    self.total += len(chunk)
                    self._buf += chunk
                    if len(self._buf) > 2 * self.limit:
                        del self._buf[: -self.limit]
        except OSError:
            pass
        finally:
            os.close(self._fd)  # at end of file: every writer (the worker's group) is gone

    def text(self, wait_s: float = 0.0, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the kept bytes (after up to ``wait_s`` for end of
        file), preceded by a note of how many bytes were cut before them."""
        self._thread.join(wait_s)
        with self._lock:
            data = bytes(self._buf[-self.limit :])
            total = self.total
        stripped = data.rstrip()
        kept = stripped.splitlines(keepends=True)[-lines:]
        text = b"".join(kept).decode("utf-8", errors="replace")
        cut = total - len(data) + len(stripped) - sum(len(line) for line in kept)
        if cut > 0:
            return f"[guard: {cut} earlier bytes of output cut]\n{text}"
        return text


def round_phases(workers: Sequence[tuple[float, WorkerClock, float]]) -> RoundPhases:
    """A round's phases from its workers: (when the runner started each, or handed its
    job to one started ahead; its clock; when the runner saw it end), all
    ``time.monotonic()``; seconds summed over the workers. A worker started ahead began
    before the round did (its first line before the hand-off): its start is then only
    the job's way through the pipe, and its imports what the preloading left."""

    def total(seconds: Callable[[float, WorkerClock, float], float]) -> float:
        return round(sum(max(0.0, seconds(*worker)) for worker in workers), 4)

    def spent(phase: str) -> float:
        return total(lambda _s, clock, _e: clock.spent.get(phase, 0.0))

    first_calls: dict[str, float] = {}
    for _, clock, _ in workers:
        for kernel, seconds in clock.first_calls.items():
            first_calls[kernel] = first_calls.get(kernel, 0.0) + max(0.0, seconds)
    return RoundPhases(
        workers=len(workers),
        prestarted=sum(clock.main < spawned for spawned, clock, _ in workers),
        start_s=total(lambda spawned, clock, _e: clock.job - spawned),
        imports_s=total(lambda _s, clock, _e: clock.hello - clock.job),
        gpu_state_s=spent("gpu_state"),
        load_s=spent("load"),
        check_s=spent("check"),
        prepare_s=spent("prepare"),
        warm_s=spent("warm"),
        sample_s=spent("sample"),
        verify_s=spent("verify"),
        exit_s=total(lambda _s, clock, ended: ended - clock.done),
        total_s=total(lambda spawned, _c, ended: ended - spawned),
        first_calls=tuple((kernel, round(s, 4)) for kernel, s in sorted(first_calls.items())),
    )


def _status(value: object) -> CaseStatus:
    """A worker's status word; one this guard does not know is a crash (the worker
    belongs to this guard, so that is a bug, reported rather than trusted)."""
    try:
        return CaseStatus(value)
    except ValueError:
        return CRASHED


def _exit_reason(code: int, finished: bool = False) -> str:
    from guard.measure.worker import CONTEXT_LOST

    if code == SANITIZER_FOUND:
        return "compute-sanitizer reported memory errors (see the worker's output)"
    if code == CONTEXT_LOST:
        return "CUDA context lost (illegal memory access or similar); worker restarted"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    if code == 0 and not finished:
        return "worker exited with code 0 before finishing (os._exit or sys.exit in a kernel?)"
    return f"worker exited with code {code}"


# --------------------------------------------------------------------------- GPUs

GPU_STOP_WAIT_S = 30.0  # after SIGTERM, for a GPU's process to remove its worktree


@dataclass(frozen=True)
class GpuJob:
    """One GPU's process of a check spread over the GPUs of a host: ``argv`` runs one
    shard there (``CUDA_VISIBLE_DEVICES=gpu``; None: no GPU to pin, a CPU run)."""

    label: str  # how messages name it, e.g. "GPU 1"
    gpu: str | None
    argv: tuple[str, ...]
    unset: tuple[str, ...] = ()  # environment variables it must not see


@dataclass(frozen=True)
class GpuJobEnd:
    job: GpuJob
    returncode: int | None  # None: stopped at the timeout (it hung)
    output_tail: str
    seconds: float


def run_on_gpus(
    jobs: Sequence[GpuJob],
    timeout_s: float,
    log: Callable[[str], None] = lambda _line: None,
    cwd: str | None = None,
) -> list[GpuJobEnd]:
    """Run ``jobs`` at once, one process each (its own process group; the rest of the
    environment is this process's), passing each output line to ``log`` prefixed with
    the job's label; stop (SIGTERM, then SIGKILL) a job still running at ``timeout_s``.
    Returns how each ended, in the order of ``jobs``; nothing outlives the call.
    InfraError naming the job when one cannot start."""
    started: list[tuple[GpuJob, subprocess.Popen[bytes], float]] = []
    pumps: list[threading.Thread] = []
    lock = threading.Lock()

    def pump(label: str, stream: Any, tail: list[str]) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            with lock:
                tail.append(line)
                del tail[:-LOG_TAIL_LINES]
            log(f"[{label}] {line}")
        stream.close()

    texts: list[list[str]] = []
    ends: list[GpuJobEnd] = []
    try:
        for job in jobs:
            env = child_env()
            for name in job.unset:
                env.pop(name, None)
            if job.gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = job.gpu
            try:
                proc = start_group(
                    list(job.argv),
                    cwd=cwd or os.getcwd(),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            except OSError as exc:
                raise InfraError(f"{job.label}: cannot start its process ({exc})") from None
            started.append((job, proc, time.monotonic()))
            texts.append([])
            thread = threading.Thread(
                target=pump, args=(job.label, proc.stdout, texts[-1]), daemon=True
            )
            thread.start()
            pumps.append(thread)
        deadline = time.monotonic() + max(0.0, timeout_s)
        for (job, proc, t0), text, thread in zip(started, texts, pumps, strict=True):
            try:
                code: int | None = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)  # unwinds: workers, worktree
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=GPU_STOP_WAIT_S)
            kill_group(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=GPU_STOP_WAIT_S)
            thread.join(timeout=5)  # the last lines it wrote
            with lock:
                tail = "\n".join(text[-LOG_TAIL_LINES:])
            ends.append(GpuJobEnd(job, code, tail, time.monotonic() - t0))
    finally:
        for _, proc, _ in started:
            stop_group(proc)
        for thread in pumps:
            thread.join(timeout=5)
    return ends
