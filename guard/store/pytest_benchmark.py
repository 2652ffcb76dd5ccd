"""pytest-benchmark's JSON files, as the guard reads them, and its benchmarks as cases.

A plain pytest-benchmark file (saved with ``--benchmark-save-data``) is validated into a
``PytestBenchmarkFile`` (``read_pytest_benchmark``; ``BadInput`` names the file and the
field). Each benchmark is compared as a case of the kernel "pytest" named by its node id
verbatim (``pytest_case``); a case id of schema 2's form ("/" and "\\" as "|") pairs by
``pairing_key``. Turning a file into a run (``RunResult``) is ``guard.store.results``'s
(one file, one round) or ``guard.store.pytest_runs``'s (several files, one round each):
this module builds none of the results model, so both import it and it imports neither.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from guard.base import limits
from guard.base.errors import shown
from guard.store.fields import Reader, check_numbers, not_an_object
from guard.store.suite import Case

PYTEST_BENCHMARK_VERSION = "5.2.3"  # the format we write
PYTEST_BENCHMARK_MAJORS = (3, 4, 5)  # the formats we read: same layout of stats.data
PYTEST_BENCHMARK_NOTE = (
    "pytest-benchmark file: one process, so one round per benchmark; its samples are "
    "correlated and the noise between runs is unknown (several saved runs a side: "
    "--baseline-runs and --candidate-runs; a paired run: --against REF --pytest ARGS)"
)
PYTEST_KERNEL = "pytest"  # the kernel name of every pytest-benchmark case
PYTEST_METHOD = "pytest-benchmark"  # CaseResult.method of a pytest-benchmark case
# pytest-benchmark has no threshold of its own. Saved runs (a fixed count of files a
# side): each round by its median. Rounds the guard runs itself (--pytest), where it can
# run more: each round by its fastest sample, as pytest-benchmark's own `compare` sorts
# by min; on a CPU shared with other work the median left one of two unchanged runs
# undecided where min:5% decided every run (docs/PYTEST.md).
PYTEST_THRESHOLD = "median:5%"
PYTEST_LIVE_THRESHOLD = "min:5%"


@dataclass(frozen=True)
class PytestBenchmark:
    """One benchmark of a pytest-benchmark file: what one process measured of it."""

    name: str  # the case's name: ``fullname`` (``name`` in old files), the node id verbatim
    fullname: str
    params: str  # ``params`` as canonical JSON ("null" when there are none)
    samples: tuple[float, ...]  # ``stats.data``: seconds per call


@dataclass(frozen=True)
class PytestBenchmarkFile:
    """A plain pytest-benchmark JSON document (saved with ``--benchmark-save-data``)."""

    source: str
    version: str
    machine: dict[str, Any]  # ``machine_info`` as written
    commit: str
    created: str
    benchmarks: tuple[PytestBenchmark, ...]


def is_pytest_id(case_id: str) -> bool:
    """Whether ``case_id`` names a pytest-benchmark case: ``pytest/`` and a node id."""
    return case_id.startswith(PYTEST_KERNEL + "/")


def _folded(name: str) -> str:
    return name.replace("/", "|").replace("\\", "|")


def pairing_key(case_id: str) -> str:
    """What pairs a case with its counterpart in another file: its id, except that a
    pytest case's node id has its "/" and "\\" folded to "|", the form schema 2 stored.
    Lossy (a "|" of a parameter id folds alike), so only where the exact id finds
    nothing."""
    if not is_pytest_id(case_id):
        return case_id
    return PYTEST_KERNEL + "/" + _folded(case_id[len(PYTEST_KERNEL) + 1 :])


def names_case(entry: str, case: Case) -> bool:
    """Whether ``entry`` (a ``--cases`` word) names ``case``: its name or its id; a
    pytest case also in schema 2's form, and a case read from a schema 2 file by its
    verbatim node id (``pairing_key``)."""
    if entry in (case.name, case.id):
        return True
    if case.kernel != PYTEST_KERNEL:
        return False
    key = pairing_key(case.id)
    return key in (pairing_key(entry), pairing_key(f"{PYTEST_KERNEL}/{entry}"))


def unfold_v2_name(name: str) -> str:
    """A pytest case's name as schema 2 stored it, as near the node id as it can be
    told: the "|" of the path (before the first "::") were "/" (pytest writes node ids
    with "/" on every system); after it a "|" may have been a "/" or a "|" and stays."""
    path, sep, rest = name.partition("::")
    return path.replace("|", "/") + sep + rest if sep else name


def pytest_case(name: str, threshold: str = PYTEST_THRESHOLD) -> Case:
    """The case a pytest-benchmark benchmark is compared as (gated, kernel "pytest")."""
    from guard.base.stats import Threshold
    from guard.store.suite import Shape

    return Case(
        name, PYTEST_KERNEL, Shape(1, 1, 1, 1), "float32", False, Threshold.parse(threshold), True
    )


def read_pytest_benchmark(data: Any, source: str) -> PytestBenchmarkFile:
    """Validate a plain pytest-benchmark document (``BadInput`` names the file and field)."""
    reader = Reader(source)
    if not isinstance(data, dict):
        raise not_an_object(source)
    check_numbers(reader, data)
    return read_checked(reader, data)


def read_checked(reader: Reader, data: dict[str, Any]) -> PytestBenchmarkFile:
    """``read_pytest_benchmark`` of a document already checked: a JSON object whose
    numbers a float can hold (``check_numbers``), as ``results.from_json`` has it."""
    version = reader.get(data, "version", "", str)
    major = re.match(r"(\d{1,6})\.", version)
    if major is None or int(major.group(1)) not in PYTEST_BENCHMARK_MAJORS:
        known = ", ".join(f"{m}.x" for m in PYTEST_BENCHMARK_MAJORS)
        raise reader.fail(
            "version",
            f"pytest-benchmark version {shown(version)} is not one this guard reads ({known})",
        )
    benches = reader.get(data, "benchmarks", "", list)
    reader.at_most(len(benches), limits.MAX_CASES, "benchmarks", "benchmarks")
    machine = reader.get(data, "machine_info", "", dict, {})
    commit = reader.get(data, "commit_info", "", (dict, type(None)), None) or {}
    out = []
    seen: set[str] = set()
    for i, bench in enumerate(benches):
        where = f"benchmarks[{i}]"
        fullname = reader.get(bench, "fullname", where, str, None) or reader.get(
            bench, "name", where, str
        )
        params = reader.get(bench, "params", where, (dict, type(None)), None)
        st = reader.get(bench, "stats", where, dict)
        if "data" not in st:
            raise reader.fail(
                f"{where}.stats.data",
                f"benchmark {shown(fullname)} has no raw samples; save it with "
                "--benchmark-save-data",
            )
        samples = reader.times(st["data"], f"{where}.stats.data")
        if len(samples) < 2:
            raise reader.fail(
                f"{where}.stats.data", f"benchmark {shown(fullname)} has fewer than 2 samples"
            )
        if fullname in seen:
            raise reader.fail(where, f"duplicate benchmark {shown(fullname)}")
        seen.add(fullname)
        out.append(
            PytestBenchmark(
                name=fullname,
                fullname=fullname,
                params=json.dumps(params, sort_keys=True, default=str),
                samples=samples,
            )
        )
    return PytestBenchmarkFile(
        source=reader.source,
        version=version,
        machine=machine,
        commit=str(commit.get("id", "") or "") if isinstance(commit, dict) else "",
        created=str(data.get("datetime", "")),
        benchmarks=tuple(out),
    )
