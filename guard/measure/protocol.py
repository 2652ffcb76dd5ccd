"""The worker protocol: the job the runner sends, the events the worker answers.

One JSON object on the worker's stdin (``WorkerJob``), then one JSON object per line on
its protocol stream (``Event``): ``hello``, then per case ``begin`` and ``result``,
then ``done`` (with ``clock``, a ``WorkerClock``); ``fatal`` when the worker itself
failed. The runner also synthesizes ``exit`` and ``timeout`` events when a worker dies
or hangs (``guard.measure.runner``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

from guard.store.suite import Case, KernelOptions, TimingPlan, Tolerance

# "check": correctness and fingerprint; "time": samples; "probe": one call's fingerprint
# (no reference: which cases a change reaches, guard.ops.compare.select_surface).
Mode = Literal["check", "time", "probe"]


@dataclass(frozen=True)
class CaseJob:
    """One case of a round, with the seed of its inputs in that round."""

    case: Case
    seed: int


@dataclass(frozen=True)
class WorkerJob:
    """Everything one worker process needs for one round of one arm."""

    mode: Mode
    device: str
    # The tree whose ``kernels`` package (and ``module:function`` kernels) this worker imports.
    kernels_root: str
    plan: TimingPlan
    cases: tuple[CaseJob, ...]
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    fault_modules: tuple[str, ...] = ()  # tests: modules that register extra kernels
    sys_path: tuple[str, ...] = ()
    # End through the interpreter's whole exit (C atexit handlers included): under
    # compute-sanitizer, whose findings must reach its exit code.
    teardown: bool = False
    # Variables the worker sets before it imports the arm's kernels: the arm's own
    # compile caches (``Arm.env``), so that one tree's builds never serve the other's.
    env: Mapping[str, str] = field(default_factory=dict)
    # The suite's ``module:function`` kernels and their options (``Suite.kernel_options``).
    kernel_options: Mapping[str, KernelOptions] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "device": self.device,
            "kernels_root": self.kernels_root,
            "plan": asdict(self.plan),
            "tolerances": {k: asdict(v) for k, v in self.tolerances.items()},
            "fault_modules": list(self.fault_modules),
            "sys_path": list(self.sys_path),
            "teardown": self.teardown,
            "env": dict(self.env),
            "kernel_options": {k: v.to_json() for k, v in self.kernel_options.items()},
            "cases": [{**c.case.to_json(), "seed": c.seed} for c in self.cases],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerJob:
        mode = data["mode"]
        if mode not in ("check", "time", "probe"):
            raise ValueError(f"job.mode: {mode!r} is not 'check', 'time' or 'probe'")
        return cls(
            mode=mode,
            device=str(data["device"]),
            kernels_root=str(data.get("kernels_root", "")),
            plan=TimingPlan(**data["plan"]),
            cases=tuple(
                CaseJob(Case.from_json(raw), int(raw.get("seed", 0))) for raw in data["cases"]
            ),
            tolerances={k: Tolerance(**v) for k, v in data.get("tolerances", {}).items()},
            fault_modules=tuple(data.get("fault_modules", ())),
            sys_path=tuple(data.get("sys_path", ())),
            teardown=bool(data.get("teardown", False)),
            env={str(k): str(v) for k, v in data.get("env", {}).items()},
            kernel_options={
                str(k): KernelOptions.from_json(v)
                for k, v in data.get("kernel_options", {}).items()
            },
        )


PRELOAD_FLAG = "--preload"  # a worker started ahead of its job (``worker._preload``)
PHASES = ("gpu_state", "load", "check", "prepare", "warm", "sample", "verify", "probe")


@dataclass(frozen=True)
class WorkerClock:
    """Where one worker's time went. Stamps are ``time.monotonic()``: on Linux one clock
    (CLOCK_MONOTONIC) for every process of the machine, so the runner sets them against
    its own (when it started the worker, when it saw it end); the rest are seconds."""

    main: float  # the worker's first line: the interpreter has started
    # Its job read: at once, or after the preloading of a worker started ahead.
    job: float
    hello: float  # torch, the guard and the kernels package imported
    done: float  # its cases done, just before ``done``
    spent: Mapping[str, float] = field(default_factory=dict)  # seconds per PHASES entry
    first_calls: Mapping[str, float] = field(default_factory=dict)  # per kernel: load + 1st case

    def to_json(self) -> dict[str, Any]:
        return {
            "main": self.main,
            "job": self.job,
            "hello": self.hello,
            "done": self.done,
            "spent": dict(self.spent),
            "first_calls": dict(self.first_calls),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkerClock:
        """The worker is this guard's own code: a malformed clock is a bug (ValueError)."""
        try:
            return cls(
                main=float(data["main"]),
                job=float(data["job"]),
                hello=float(data["hello"]),
                done=float(data["done"]),
                spent={k: float(data["spent"].get(k, 0.0)) for k in PHASES},
                first_calls={str(k): float(v) for k, v in data["first_calls"].items()},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a worker's clock is malformed: {exc!r}") from None


class Event(TypedDict, total=False):
    """One line of the protocol (which keys an event carries depends on ``event``)."""

    event: Literal["hello", "begin", "result", "done", "fatal", "exit", "timeout"]
    case: str
    status: str
    reason: str
    output: str
    correctness: dict[str, Any]
    kernel_hash: str
    fingerprint: str
    parts: dict[str, str]  # probe: the fingerprint's parts (fingerprint.parts)
    samples: list[float]
    host: list[float]
    method: str
    calls: int
    gpu_state: dict[str, Any]
    pid: int
    code: int
    clock: dict[str, Any]  # done: WorkerClock as JSON
