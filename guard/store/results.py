"""Results and baselines on disk: one JSON format for both.

The file is a pytest-benchmark JSON document (``machine_info``, ``commit_info``,
``benchmarks`` with ``stats.data``), so ``pytest-benchmark compare`` reads it, and
carries the guard's own record under the key ``guard`` with an integer
``schema_version`` that is independent of the package version.

Format changes (bump ``SCHEMA_VERSION`` and add ``migrate_to_N`` to ``guard.store.migrate``
for each):
  1 (2026-11): first version.
  2 (2026-11): per case ``fingerprint`` (what ran on the GPU: ``guard.measure.fingerprint``)
     and ``resources`` (compiler resources per arch: ``guard.measure.resources``); version 1
     files read as having neither.
     Since then, each round may carry ``phases`` (``RoundPhases``: where its worker's time
     went); optional, so files without it, older or not, read as ``phases=None`` and an
     older guard ignores it (no new version: nothing a reader relied on changed).
     Likewise optional: each round's ``gpu`` and each case's ``round_gpus`` (the GPU of
     each of its rounds, where a run spread its rounds over several GPUs); absent reads
     as one GPU. An older guard ignores them and decides without removing each GPU's
     offset: a wider interval, never a biased one.
  3 (2026-11): a pytest-benchmark case (kernel "pytest") is named by its node id verbatim
     (``bench/test_x.py::test_y[a]``: its id ``pytest/`` and the node id); version 2
     stored the name with "/" and "\\" as "|". ``migrate_to_3`` turns the "|" of the
     path (before the first "::") back into "/"; a "|" after it may have been a "/" of
     a parameter id, so files of either form pair by ``pairing_key`` where the exact
     id finds nothing (``RunResult.case``). Other cases' names still hold no "/".

Readers migrate older files (``guard.store.migrate``) and refuse newer ones; every field
is validated on load and a failure raises ``BadInput`` naming the file and the field
(``guard.store.fields``); only a regular file is read, up to ``limits.MAX_FILE_BYTES``
(``guard.base.files``). A file without the ``guard`` record is read as plain
pytest-benchmark (``guard.store.pytest_benchmark``). Writers write atomically
(``guard.store.atomic``).
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.base import files, limits, stats
from guard.base.errors import BadInput, shown
from guard.store import atomic, migrate
from guard.store.fields import Reader, check_numbers, not_an_object, reading
from guard.store.kernel_resources import KernelResources
from guard.store.pytest_benchmark import (
    PYTEST_BENCHMARK_NOTE,
    PYTEST_BENCHMARK_VERSION,
    PYTEST_KERNEL,
    PYTEST_METHOD,
    is_pytest_id,
    pairing_key,
    pytest_case,
    read_checked,
)
from guard.store.suite import Case

SCHEMA_VERSION = 3


# Case status values. Only OK cases carry samples.
class CaseStatus(str, enum.Enum):
    """How a case's run ended (what a results file records; ``compare`` turns it,
    with the baseline's, into the case's verdict, ``outcome.CaseVerdict``)."""

    OK = "ok"
    WRONG = "wrong"  # ran, but the output is wrong (NaN, unwritten, over tolerance)
    CRASHED = "crashed"  # raised, or the worker died
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"  # cannot run on this machine (no GPU, no backend)
    BUILD_FAILED = "build_failed"

    def __str__(self) -> str:  # the word, in messages and tables
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


OK, WRONG, CRASHED, TIMEOUT, UNAVAILABLE, BUILD_FAILED = (
    CaseStatus.OK,
    CaseStatus.WRONG,
    CaseStatus.CRASHED,
    CaseStatus.TIMEOUT,
    CaseStatus.UNAVAILABLE,
    CaseStatus.BUILD_FAILED,
)
STATUSES = tuple(s.value for s in CaseStatus)
INFRA_STATUSES = (CRASHED, TIMEOUT, BUILD_FAILED)


@dataclass(frozen=True)
class Correctness:
    passed: bool
    rel_norm_err: float | None
    max_abs_err: float | None
    rel_norm_bound: float | None
    max_abs_bound: float | None
    yardstick_rel_norm_err: float | None  # torch SDPA in the same dtype vs the reference
    seed: int
    message: str = ""


@dataclass(frozen=True)
class CaseResult:
    """What one run learned about one case."""

    case: Case
    status: CaseStatus
    reason: str = ""
    correctness: Correctness | None = None
    rounds: tuple[tuple[float, ...], ...] = ()  # device seconds per call, one tuple a round
    host_rounds: tuple[tuple[float, ...], ...] = ()  # host-inclusive seconds per call
    kernel_hash: str = ""
    fingerprint: str = ""  # guard.measure.fingerprint of what ran on the GPU; "" unknown
    # guard.store.kernel_resources.KernelResources as JSON
    resources: tuple[dict[str, Any], ...] = ()
    method: str = ""  # "cuda-graph", "cuda-events", "cpu-timer"
    calls_per_sample: tuple[int, ...] = ()
    worker_output: str = ""  # tail of the worker's output when it failed
    # The GPU each round ran on, parallel to ``rounds`` (() : all on one GPU).
    round_gpus: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.case.id

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r]

    @property
    def median(self) -> float | None:
        """The case's time (``stats.case_time``: trimmed geometric mean of round
        medians, or of the fastest half under a ``min`` threshold), the number every
        report shows for this case."""
        return stats.case_time(self.rounds, self.case.threshold.statistic)


@dataclass(frozen=True)
class Environment:
    """The machine a run measured on. ``gpu_slug`` names the baseline file."""

    device: str  # "cuda" or "cpu"
    gpu_name: str
    gpu_slug: str
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    triton: str = ""
    python: str = ""
    host: str = ""
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    commit: str = ""
    commit_dirty: bool = False
    branch: str = ""
    cpu_fallback_reason: str = ""

    def differences(self, other: Environment) -> list[tuple[str, str, str]]:
        """(field, ours, theirs) for every field that matters to timing and differs."""
        keys = (
            "gpu_name",
            "driver",
            "cuda",
            "torch",
            "triton",
            "sm_clock_max_mhz",
            "mem_clock_max_mhz",
        )
        out = []
        for key in keys:
            a, b = getattr(self, key), getattr(other, key)
            if a != b:
                out.append((key, str(a), str(b)))
        return out


@dataclass(frozen=True)
class RoundPhases:
    """Where a round's wall time went, in seconds summed over its worker processes
    (``guard.measure.runner`` sets the worker's clock against its own).

    The start-up (``STARTUP``) is paid once per worker process whatever its share of
    the cases; the rest grows with the cases (what sharding over GPUs divides)."""

    workers: int = 1
    prestarted: int = 0  # of them, started ahead of the round (imports done before it)
    start_s: float = 0.0  # process start (or its job handed over) to the job read
    imports_s: float = 0.0  # torch, the guard, the kernels package
    gpu_state_s: float = 0.0  # waiting for nvidia-smi readings (read beside other work)
    load_s: float = 0.0  # probes (the first initializes CUDA), loaders, source hashes
    check_s: float = 0.0  # correctness checks (the check round)
    prepare_s: float = 0.0  # inputs, first calls (JIT caches, extensions), graph capture
    warm_s: float = 0.0  # the round's warm-up
    sample_s: float = 0.0
    verify_s: float = 0.0  # the timed calls' output checked
    exit_s: float = 0.0  # "done" to the process's end (interpreter and CUDA teardown)
    total_s: float = 0.0  # process start to its end
    # Per kernel: its load and its first case (first calls: JIT caches, extension builds).
    first_calls: tuple[tuple[str, float], ...] = ()

    SECONDS = (
        "start_s",
        "imports_s",
        "gpu_state_s",
        "load_s",
        "check_s",
        "prepare_s",
        "warm_s",
        "sample_s",
        "verify_s",
        "exit_s",
        "total_s",
    )
    STARTUP = ("start_s", "imports_s", "gpu_state_s", "load_s", "warm_s", "exit_s")
    CASES = ("check_s", "prepare_s", "sample_s", "verify_s")

    def to_json(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "prestarted": self.prestarted,
            **{key: getattr(self, key) for key in self.SECONDS},
            "first_calls": dict(self.first_calls),
        }


@dataclass(frozen=True)
class RoundInfo:
    """One fresh worker process: when, in what order, and the GPU's state around it."""

    index: int
    arm: str  # "candidate" or "baseline" (the --against arm)
    started: str
    duration_s: float
    order: tuple[str, ...] = ()
    gpu_state: dict[str, Any] = field(default_factory=dict)
    throttled: bool = False
    phases: RoundPhases | None = None  # None: not recorded (older files, crashed workers)
    gpu: str = ""  # the GPU of a run spread over several ("": one)


@dataclass(frozen=True)
class RunResult:
    schema_version: int
    created: str
    suite_name: str
    suite_hash: str
    environment: Environment
    cases: tuple[CaseResult, ...]
    rounds: tuple[RoundInfo, ...] = ()
    notes: tuple[str, ...] = ()
    label: str = ""  # where it came from (file name, git ref); not stored

    def case(self, case_id: str) -> CaseResult | None:
        """The case of this id; else the one case that pairs with it by ``pairing_key``
        (a pytest case read from a file of either name form)."""
        for c in self.cases:
            if c.id == case_id:
                return c
        if not is_pytest_id(case_id):
            return None
        key = pairing_key(case_id)
        found = [c for c in self.cases if pairing_key(c.id) == key]
        return found[0] if len(found) == 1 else None

    @property
    def correctness_failures(self) -> list[CaseResult]:
        return [c for c in self.cases if c.status == WRONG]

    @property
    def infra_failures(self) -> list[CaseResult]:
        return [c for c in self.cases if c.status in INFRA_STATUSES]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


# ------------------------------------------------------------------------- writing


def _pytest_benchmark_entry(result: CaseResult) -> dict[str, Any]:
    case = result.case
    samples = result.samples
    entry: dict[str, Any] = {
        "group": case.name,
        "name": f"attention[{case.kernel}-{case.name}]",
        "fullname": f"guard::attention[{case.kernel}-{case.name}]",
        "params": case.params(),
        "param": f"{case.kernel}-{case.name}",
        "extra_info": {"status": result.status.value, "reason": result.reason},
        "options": {
            "disable_gc": False,
            "timer": result.method or "none",
            "min_rounds": len(result.rounds),
            "max_time": 0,
            "min_time": 0,
            "warmup": True,
        },
    }
    entry["stats"] = {**stats.summary(samples), "data": samples}
    return entry


def _case_record(r: CaseResult) -> dict[str, Any]:
    return {
        "id": r.id,
        "case": r.case.to_json(),
        "status": r.status.value,
        "reason": r.reason,
        "correctness": None if r.correctness is None else r.correctness.__dict__,
        "rounds": [list(x) for x in r.rounds],
        "host_rounds": [list(x) for x in r.host_rounds],
        "kernel_hash": r.kernel_hash,
        "fingerprint": r.fingerprint,
        "resources": list(r.resources),
        "method": r.method,
        "calls_per_sample": list(r.calls_per_sample),
        "worker_output": r.worker_output,
        **({"round_gpus": list(r.round_gpus)} if r.round_gpus else {}),
    }


def _round_record(r: RoundInfo) -> dict[str, Any]:
    record = {**r.__dict__, "order": list(r.order)}
    del record["phases"]
    if not r.gpu:  # absent on one GPU: files as before
        del record["gpu"]
    if r.phases is not None:  # absent, not null: rounds without it read as before
        record["phases"] = r.phases.to_json()
    return record


def to_json(run: RunResult) -> dict[str, Any]:
    env = run.environment
    timed = [c for c in run.cases if c.status == OK and c.samples]  # pytest-benchmark's view
    return {
        "machine_info": {
            "node": env.host,
            "processor": platform.processor(),
            "machine": platform.machine(),
            "python_implementation": platform.python_implementation(),
            "python_version": env.python,
            "system": platform.system(),
            "release": platform.release(),
            "gpu": env.gpu_name,
            "cpu": {},
        },
        "commit_info": {
            "id": env.commit,
            "dirty": env.commit_dirty,
            "branch": env.branch,
            "project": "attn-guard",
        },
        "benchmarks": [_pytest_benchmark_entry(c) for c in timed],
        "datetime": run.created,
        "version": PYTEST_BENCHMARK_VERSION,
        "guard": {
            "schema_version": SCHEMA_VERSION,
            "created": run.created,
            "suite_name": run.suite_name,
            "suite_hash": run.suite_hash,
            "environment": env.__dict__,
            "cases": [_case_record(c) for c in run.cases],
            "rounds": [_round_record(r) for r in run.rounds],
            "notes": list(run.notes),
        },
    }


def save(run: RunResult, path: str | Path) -> None:
    atomic.write_atomic(path, json.dumps(to_json(run), indent=1, allow_nan=False) + "\n")


# ------------------------------------------------------------------------- reading


def _rounds(reader: Reader, rec: Any, key: str, where: str) -> tuple[tuple[float, ...], ...]:
    raw = reader.get(rec, key, where, list, [])
    where = f"{where}.{key}"
    reader.at_most(len(raw), limits.MAX_ROUNDS_PER_CASE, "rounds", where)
    n = sum(len(r) for r in raw if isinstance(r, list))
    reader.at_most(n, limits.MAX_SAMPLES_PER_CASE, "samples in all rounds", where)
    return tuple(reader.times(r, f"{where}[{i}]") for i, r in enumerate(raw))


def _case_from(reader: Reader, rec: Any, where: str) -> CaseResult:
    from guard.base.stats import Threshold
    from guard.store.suite import DTYPES, Shape

    cw = f"{where}.case"
    data = reader.get(rec, "case", where, dict)
    name = reader.get(data, "name", cw, str)
    kernel = reader.get(data, "kernel", cw, str)
    for key, value in (("name", name), ("kernel", kernel)):
        if not value:
            raise reader.fail(f"{cw}.{key}", "must be non-empty")
        # A pytest case's name is its node id, "/" and all (the id splits at its first
        # "/"); any other case's name and every kernel's hold no path separator.
        if ("/" in value or "\\" in value) and (key, kernel) != ("name", PYTEST_KERNEL):
            raise reader.fail(f"{cw}.{key}", "must hold no path separator")
    shape_data = reader.get(data, "shape", cw, dict)
    dims = {}
    for key in ("batch", "heads", "seq_q", "head_dim", "seq_k", "kv_heads"):
        value = reader.get(
            shape_data,
            key,
            f"{cw}.shape",
            (int, type(None)),
            None if key in ("seq_k", "kv_heads") else ...,
        )
        if value is not None and value <= 0:
            raise reader.fail(f"{cw}.shape.{key}", "must be positive")
        dims[key] = value
    unknown = set(shape_data) - set(dims)
    if unknown:
        raise reader.fail(f"{cw}.shape", f"unknown field(s) {shown(sorted(map(str, unknown)))}")
    dtype = reader.get(data, "dtype", cw, str)
    if dtype not in DTYPES:
        raise reader.fail(f"{cw}.dtype", f"unknown dtype {shown(dtype)}")
    try:
        threshold = Threshold.parse(reader.get(data, "threshold", cw, str))
    except ValueError as exc:
        raise reader.fail(f"{cw}.threshold", str(exc)) from None
    case = Case(
        name,
        kernel,
        Shape(**dims),
        dtype,
        reader.get(data, "causal", cw, bool),
        threshold,
        reader.get(data, "gate", cw, bool),
    )
    status = reader.get(rec, "status", where, str)
    if status not in STATUSES:
        raise reader.fail(f"{where}.status", f"unknown status {shown(status)}")
    corr = reader.get(rec, "correctness", where, (dict, type(None)), None)
    correctness = None
    if corr is not None:
        cw = f"{where}.correctness"
        correctness = Correctness(
            passed=reader.get(corr, "passed", cw, bool),
            rel_norm_err=reader.opt_float(corr, "rel_norm_err", cw),
            max_abs_err=reader.opt_float(corr, "max_abs_err", cw),
            rel_norm_bound=reader.opt_float(corr, "rel_norm_bound", cw),
            max_abs_bound=reader.opt_float(corr, "max_abs_bound", cw),
            yardstick_rel_norm_err=reader.opt_float(corr, "yardstick_rel_norm_err", cw),
            seed=reader.get(corr, "seed", cw, int),
            message=reader.get(corr, "message", cw, str, ""),
        )
    rounds = _rounds(reader, rec, "rounds", where)
    host = _rounds(reader, rec, "host_rounds", where)
    cps = reader.get(rec, "calls_per_sample", where, list, [])
    return CaseResult(
        case=case,
        status=CaseStatus(status),
        reason=reader.get(rec, "reason", where, str, ""),
        correctness=correctness,
        rounds=rounds,
        host_rounds=host,
        kernel_hash=reader.get(rec, "kernel_hash", where, str, ""),
        fingerprint=reader.get(rec, "fingerprint", where, str, ""),
        resources=_resources(reader, rec, where),
        method=reader.get(rec, "method", where, str, ""),
        calls_per_sample=tuple(int(x) for x in cps if isinstance(x, int)),
        worker_output=reader.get(rec, "worker_output", where, str, ""),
        round_gpus=_round_gpus(reader, rec, where, len(rounds)),
    )


def _round_gpus(reader: Reader, rec: Any, where: str, n_rounds: int) -> tuple[str, ...]:
    gpus = reader.get(rec, "round_gpus", where, list, [])
    if gpus and (len(gpus) != n_rounds or not all(isinstance(g, str) for g in gpus)):
        raise reader.fail(f"{where}.round_gpus", f"must be {n_rounds} strings, one per round")
    return tuple(gpus)


_ENV_STR = (
    "device",
    "gpu_name",
    "gpu_slug",
    "driver",
    "cuda",
    "torch",
    "triton",
    "python",
    "host",
    "commit",
    "branch",
    "cpu_fallback_reason",
)


def _environment_from(reader: Reader, data: Any, where: str) -> Environment:
    values: dict[str, Any] = {}
    for key in _ENV_STR:
        values[key] = reader.get(data, key, where, str, "")
    for key in ("device", "gpu_slug"):
        if not values[key]:
            raise reader.fail(f"{where}.{key}", "missing")
    if (
        "/" in values["gpu_slug"]
        or "\\" in values["gpu_slug"]
        or values["gpu_slug"].startswith(".")
    ):
        raise reader.fail(f"{where}.gpu_slug", "must not contain path separators")
    values["commit_dirty"] = reader.get(data, "commit_dirty", where, bool, False)
    values["sm_clock_max_mhz"] = reader.opt_float(data, "sm_clock_max_mhz", where)
    values["mem_clock_max_mhz"] = reader.opt_float(data, "mem_clock_max_mhz", where)
    return Environment(**values)


def _resources(reader: Reader, rec: dict[str, Any], where: str) -> tuple[dict[str, Any], ...]:
    """Each record validated as ``guard.store.kernel_resources.KernelResources``, kept as JSON."""

    items = reader.get(rec, "resources", where, list, [])
    if len(items) > 64:
        raise reader.fail(f"{where}.resources", f"{len(items)} records; at most 64 per case")
    return tuple(
        KernelResources.from_json(item, f"{reader.source}: {where}.resources[{i}]").to_json()
        for i, item in enumerate(items)
    )


MAX_PHASE_S = 1e6  # seconds: no round of a worker lasts longer
MAX_FIRST_CALLS = 64  # kernels named in one round's ``phases.first_calls``
MAX_KERNEL_NAME = 200  # characters


def _phases_from(reader: Reader, raw: dict[str, Any], where: str) -> RoundPhases | None:
    """A round's ``phases`` (``{}``: none recorded); keys this guard does not know are
    left alone, as a round's own are."""
    if not raw:
        return None

    def seconds(value: Any, at: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise reader.fail(at, f"must be a number, got {type(value).__name__}")
        if not 0 <= value <= MAX_PHASE_S:
            raise reader.fail(at, f"must be seconds from 0 to {MAX_PHASE_S:g}, got {shown(value)}")
        return float(value)

    workers = reader.get(raw, "workers", where, int)
    if not 1 <= workers <= limits.MAX_CASES:
        raise reader.fail(f"{where}.workers", f"must be from 1 to {limits.MAX_CASES}")
    prestarted = reader.get(raw, "prestarted", where, int, 0)
    if not 0 <= prestarted <= workers:
        raise reader.fail(f"{where}.prestarted", f"must be from 0 to workers ({workers})")
    values = {
        key: seconds(reader.get(raw, key, where, (int, float), 0.0), f"{where}.{key}")
        for key in RoundPhases.SECONDS
    }
    firsts = reader.get(raw, "first_calls", where, dict, {})
    reader.at_most(len(firsts), MAX_FIRST_CALLS, "kernels", f"{where}.first_calls")
    for name in firsts:
        if len(name) > MAX_KERNEL_NAME:
            raise reader.fail(f"{where}.first_calls", f"a kernel name of {len(name)} characters")
    first_calls = tuple(
        (name, seconds(s, f"{where}.first_calls.{name}")) for name, s in firsts.items()
    )
    return RoundPhases(workers=workers, prestarted=prestarted, first_calls=first_calls, **values)


def from_json(data: Any, source: str) -> RunResult:
    """Parse a results or baseline document (the guard's own, or plain pytest-benchmark)."""
    reader = Reader(source)
    if not isinstance(data, dict):
        raise not_an_object(source)
    check_numbers(reader, data)
    if "guard" not in data:
        return _from_pytest_benchmark(reader, data)
    record = migrate.to_current(reader, reader.get(data, "guard", "", dict), SCHEMA_VERSION)
    env = _environment_from(
        reader, reader.get(record, "environment", "guard", dict), "guard.environment"
    )
    raw_cases = reader.get(record, "cases", "guard", list)
    reader.at_most(len(raw_cases), limits.MAX_CASES, "cases", "guard.cases")
    cases = tuple(_case_from(reader, rec, f"guard.cases[{i}]") for i, rec in enumerate(raw_cases))
    seen: set[str] = set()
    for i, c in enumerate(cases):
        if c.id in seen:
            raise reader.fail(f"guard.cases[{i}]", f"duplicate case {shown(c.id)}")
        seen.add(c.id)
    rounds = []
    raw_rounds = reader.get(record, "rounds", "guard", list, [])
    most = limits.MAX_ROUNDS_PER_CASE * 2  # each round measures both arms at most
    reader.at_most(len(raw_rounds), most, "rounds", "guard.rounds")
    for i, r in enumerate(raw_rounds):
        w = f"guard.rounds[{i}]"
        rounds.append(
            RoundInfo(
                index=reader.get(r, "index", w, int),
                arm=reader.get(r, "arm", w, str, "candidate"),
                started=reader.get(r, "started", w, str, ""),
                duration_s=float(reader.get(r, "duration_s", w, (int, float), 0.0)),
                order=tuple(reader.get(r, "order", w, list, [])),
                gpu_state=reader.get(r, "gpu_state", w, dict, {}),
                throttled=reader.get(r, "throttled", w, bool, False),
                phases=_phases_from(reader, reader.get(r, "phases", w, dict, {}), f"{w}.phases"),
                gpu=reader.get(r, "gpu", w, str, ""),
            )
        )
    return RunResult(
        schema_version=SCHEMA_VERSION,
        created=reader.get(record, "created", "guard", str, ""),
        suite_name=reader.get(record, "suite_name", "guard", str),
        suite_hash=reader.get(record, "suite_hash", "guard", str, ""),
        environment=env,
        cases=cases,
        rounds=tuple(rounds),
        notes=tuple(str(n) for n in reader.get(record, "notes", "guard", list, [])),
        label=source,
    )


def pytest_environment(machine: dict[str, Any], commit: str = "") -> Environment:
    """The machine a pytest-benchmark file names (``machine_info``)."""
    return Environment(
        device="unknown",
        gpu_name=str(machine.get("gpu", "")) or "unknown",
        gpu_slug="pytest-benchmark",
        python=str(machine.get("python_version", "")),
        host=str(machine.get("node", "")),
        commit=commit,
    )


def _from_pytest_benchmark(reader: Reader, data: dict[str, Any]) -> RunResult:
    """A plain pytest-benchmark file: each benchmark becomes a case of the kernel "pytest".

    The file holds what one pytest process measured: one round per benchmark. Its
    samples share that process's state, so they say nothing about the noise between
    runs, and a comparison of two such files has no interval (``TOO_FEW_ROUNDS``);
    several files a side do (``guard.store.pytest_runs``).
    """
    doc = read_checked(reader, data)
    cases = tuple(
        CaseResult(case=pytest_case(b.name), status=OK, rounds=(b.samples,), method=PYTEST_METHOD)
        for b in doc.benchmarks
    )
    return RunResult(
        schema_version=SCHEMA_VERSION,
        created=doc.created,
        suite_name="pytest-benchmark",
        suite_hash="",
        environment=pytest_environment(doc.machine, doc.commit),
        cases=cases,
        notes=(PYTEST_BENCHMARK_NOTE,),
        label=reader.source,
    )


def read_json_text(path: str | Path, max_bytes: int = limits.MAX_FILE_BYTES) -> Any:
    """A JSON file, read with the guard's limits (``BadInput`` names the file)."""
    path = Path(path)
    with reading(str(path)):
        text = files.read_text(path, max_bytes)  # a regular file only: no FIFO, no /dev/zero
    return _parse_json(text, str(path))


def load(path: str | Path, *, max_bytes: int = limits.MAX_FILE_BYTES) -> RunResult:
    """Read a results or baseline file; BadInput names the file and field at fault."""
    return from_json(read_json_text(path, max_bytes), str(Path(path)))


def loads(text: str, source: str) -> RunResult:
    return from_json(_parse_json(text, source), source)


def _parse_json(text: str, source: str) -> Any:
    if not text.strip():
        raise BadInput(f"{source}: file is empty")
    brackets = text.count("[") + text.count("{")
    if brackets > limits.MAX_CONTAINERS:
        raise BadInput(
            f"{source}: {brackets} JSON lists and objects ('[' and '{{'), over the limit of "
            f"{limits.MAX_CONTAINERS}"
        )
    try:
        return json.loads(text)  # NaN, Infinity: refused by check_numbers, with the field
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{source}: not valid JSON (line {exc.lineno}: {exc.msg}; truncated?)"
        ) from None
    except ValueError as exc:
        raise BadInput(f"{source}: {exc}") from None
    except RecursionError:
        raise BadInput(f"{source}: JSON nested too deeply") from None
