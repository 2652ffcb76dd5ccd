"""Several pytest-benchmark runs a side: each file one round.

One pytest-benchmark file is what one pytest process measured, so its samples are one
round (``pytest_benchmark.PytestBenchmarkFile``). Several files of the same benchmarks on
the same machine (a ``.benchmarks/`` folder of saved runs, or the rounds ``guard compare
--against REF --pytest`` runs) are several rounds, which is what an interval needs: each
benchmark becomes a case whose rounds are its samples in each file, in file order.

Benchmarks are matched by ``fullname`` and ``params``. All files must come from one
machine (``MACHINE_FIELDS`` of ``machine_info``) and, within a side, hold the same
benchmarks; otherwise ``BadInput`` (exit 2) names the two files and what differs.
Between the sides, a benchmark in one side only is a case without a comparison, as in
the guard's own files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from guard.base import files, limits
from guard.base.errors import BadInput, shown
from guard.base.stats import Threshold
from guard.store import fields, pytest_benchmark, results
from guard.store.pytest_benchmark import PYTEST_METHOD, PytestBenchmarkFile
from guard.store.results import OK, SCHEMA_VERSION, WRONG, CaseResult, RoundInfo, RunResult

# ``machine_info`` fields (dotted: nested) that must agree between files: what runs
# the benchmarks. Not the date, not the commit.
MACHINE_FIELDS = (
    "node",
    "machine",
    "processor",
    "system",
    "release",
    "python_implementation",
    "python_version",
    "cpu.brand_raw",
    "cpu.count",
    "gpu",
)
# A round of more samples is kept as this many evenly spaced quantiles: the round's
# median (all that decides, ``stats.case_time``) stays exact, and a side of many rounds
# of a fast benchmark (pytest-benchmark takes up to 200k samples a round) stays small.
KEPT_SAMPLES = 2001
MAX_FILES_PER_SIDE = limits.MAX_ROUNDS_PER_CASE


def run_files(paths: Sequence[str | Path], option: str) -> list[Path]:
    """The files ``paths`` name: a file as itself, a folder as every ``*.json`` under it
    (sorted, links not followed: a ``.benchmarks/`` folder). ``option`` names the list
    in errors."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [p for p in files.tree_files(path) if p.suffix == ".json"]
            if not found:
                raise BadInput(f"{option} {path}: no pytest-benchmark .json file in this folder")
            out.extend(found)
        elif path.exists():
            out.append(path)
        else:
            raise BadInput(f"{option} {path}: no such file or folder")
    if len(out) > MAX_FILES_PER_SIDE:
        raise BadInput(f"{option}: {len(out)} files, over the limit of {MAX_FILES_PER_SIDE}")
    return out


def read_file(path: str | Path) -> PytestBenchmarkFile:
    """One saved pytest-benchmark run (not a guard results file: that is several
    rounds already, compared as one of two files)."""
    data = _stream(path, str(path))
    if "guard" in data:
        raise BadInput(
            f"{path}: a guard results file, not a pytest-benchmark run; compare guard "
            "files as two files (guard compare BASELINE CANDIDATE)"
        )
    return pytest_benchmark.read_pytest_benchmark(data, str(path))


def read_pytest_json(path: str | Path, source: str) -> PytestBenchmarkFile:
    """A pytest-benchmark JSON file that errors call ``source`` (a round, not a path)."""
    return pytest_benchmark.read_pytest_benchmark(_stream(path, source), source)


# The top-level fields of a pytest-benchmark file that the guard reads besides its
# benchmarks (each read whole: they are small).
_TOP_SCALARS = ("version", "datetime")
_TOP_OBJECTS = ("machine_info", "commit_info")


def _stream(path: str | Path, source: str) -> dict[str, Any]:
    """The document a pytest-benchmark file holds, read as a stream: one benchmark at a
    time, each one's ``stats.data`` reduced to ``KEPT_SAMPLES`` quantiles as it is read
    (``kept``), so that a file of pytest-benchmark's defaults (tens of MB, up to 200k
    samples a benchmark) costs the memory of one benchmark. What is not valid is left
    as it is, for ``pytest_benchmark.read_pytest_benchmark`` to name.

    Only the parsing is this module's own: ``results.load`` parses a file whole
    (``json.loads``), which would hold every sample of such a file in memory at once.
    What the stream yields is validated by the reader of a single pytest-benchmark file,
    and a file that cannot be read is named as ``results.load`` names it
    (``fields.reading``)."""
    import ijson

    def passes() -> Any:
        return files.open_bounded(path, limits.MAX_PYTEST_FILE_BYTES)

    doc: dict[str, Any] = {}
    with fields.reading(source):
        try:
            with passes() as fh:
                seen = set()
                for prefix, event, value in ijson.parse(fh, use_float=True):
                    if prefix == "" and event == "map_key":
                        seen.add(value)
                    elif prefix in _TOP_SCALARS and event in ("string", "number", "null"):
                        doc[prefix] = value
                    elif prefix == "" and event not in ("start_map", "end_map"):
                        raise fields.not_an_object(source)
            for key in _TOP_OBJECTS:
                if key in seen:
                    with passes() as fh:
                        doc[key] = next(iter(ijson.items(fh, key, use_float=True)), None)
            if "guard" in seen:
                doc["guard"] = True  # a guard results file: read_file says so
            if "benchmarks" in seen:
                with passes() as fh:
                    doc["benchmarks"] = [
                        _reduced(b) for b in ijson.items(fh, "benchmarks.item", use_float=True)
                    ]
        except ijson.JSONError as exc:
            raise BadInput(f"{source}: not valid JSON ({exc})") from None
    return doc


def _reduced(bench: Any) -> Any:
    """A benchmark entry with its samples reduced (``kept``) where they are all positive
    finite numbers; anything else is left for the reader to name."""
    stats = bench.get("stats") if isinstance(bench, dict) else None
    if not isinstance(stats, dict):
        return bench
    data = stats.get("data")
    if not isinstance(data, list) or len(data) <= KEPT_SAMPLES:
        return bench
    if not all(type(x) is float or type(x) is int for x in data):
        return bench
    values = np.asarray(data, dtype=float)
    if not (np.isfinite(values).all() and (values > 0).all() and values.max() <= limits.MAX_TIME_S):
        return bench
    stats["data"] = list(kept(data))
    return bench


def machine_value(machine: Mapping[str, Any], field: str) -> str:
    """A ``machine_info`` field (dotted: nested) as text; "" when absent."""
    value: Any = machine
    for key in field.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def check_same_machine(docs: Sequence[PytestBenchmarkFile]) -> None:
    """Refuse files measured on different machines (``MACHINE_FIELDS``), naming the
    field and two files that differ."""
    if not docs:
        return
    first = docs[0]
    for doc in docs[1:]:
        for field in MACHINE_FIELDS:
            a, b = machine_value(first.machine, field), machine_value(doc.machine, field)
            if a != b:
                raise BadInput(
                    f"{doc.source}: machine_info.{field}: {shown(b)}, but {first.source} has "
                    f"{shown(a)}; runs from different machines cannot be compared"
                )


def _keys(doc: PytestBenchmarkFile) -> dict[str, str]:
    return {b.fullname: b.params for b in doc.benchmarks}


def check_same_benchmarks(docs: Sequence[PytestBenchmarkFile], side: str) -> None:
    """Refuse a side whose files do not hold the same benchmarks (fullname and params),
    naming the two files and a benchmark that differs."""
    if not docs:
        return
    first, want = docs[0], _keys(docs[0])
    for doc in docs[1:]:
        have = _keys(doc)
        missing = sorted(set(want) - set(have))
        extra = sorted(set(have) - set(want))
        changed = sorted(k for k in set(want) & set(have) if want[k] != have[k])
        if missing:
            why = f"lacks benchmark {shown(missing[0])}, which {first.source} has"
        elif extra:
            why = f"has benchmark {shown(extra[0])}, which {first.source} lacks"
        elif changed:
            k = changed[0]
            why = (
                f"benchmark {shown(k)} has params {shown(have[k])}, but {first.source} has "
                f"{shown(want[k])}"
            )
        else:
            continue
        raise BadInput(
            f"{doc.source}: {why} ({side}: every run of a side must hold the same benchmarks)"
        )


def kept(samples: Sequence[float]) -> tuple[float, ...]:
    """``samples``, or ``KEPT_SAMPLES`` evenly spaced quantiles of them (median exact)."""
    if len(samples) <= KEPT_SAMPLES:
        return tuple(samples)
    q = np.quantile(np.asarray(samples, dtype=float), np.linspace(0.0, 1.0, KEPT_SAMPLES))
    return tuple(float(x) for x in q)


def rounds_run(
    docs: Sequence[PytestBenchmarkFile],
    *,
    label: str,
    arm: str,
    threshold: str = pytest_benchmark.PYTEST_THRESHOLD,
    wrong: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
) -> RunResult:
    """One side: each file a round of every benchmark in it (``check_same_benchmarks``
    first). ``wrong``: case names (``PytestBenchmark.name``) whose test failed, with
    why; they become WRONG cases (a failed test without a benchmark too)."""
    wrong = dict(wrong or {})
    check_same_benchmarks(docs, label)
    cases = []
    names: list[str] = [b.name for b in docs[0].benchmarks] if docs else []
    trimmed = False
    fastest = Threshold.parse(threshold).statistic == "min"
    for i, name in enumerate(names):
        rounds: list[tuple[float, ...]] = []
        for doc in docs:
            samples = doc.benchmarks[_index(doc, docs[0].benchmarks[i].fullname)].samples
            if fastest:  # min:N%: a round stands as its fastest sample
                rounds.append((min(samples),))
                continue
            trimmed = trimmed or len(samples) > KEPT_SAMPLES
            rounds.append(kept(samples))
        case = pytest_benchmark.pytest_case(name, threshold)
        if name in wrong:
            cases.append(CaseResult(case=case, status=WRONG, reason=wrong.pop(name)))
        else:
            cases.append(
                CaseResult(case=case, status=OK, rounds=tuple(rounds), method=PYTEST_METHOD)
            )
    for name, why in wrong.items():  # failed tests that measured nothing
        cases.append(
            CaseResult(case=pytest_benchmark.pytest_case(name, threshold), status=WRONG, reason=why)
        )
    all_notes = list(notes)
    if fastest:
        all_notes.append(
            f"threshold {threshold}: each round stands as its fastest sample (a process "
            "slowed for part of its run by other work on its core moves its median, much "
            "less its fastest call), and each side as the fastest half of its rounds "
            "(other work only adds time: a process slowed for its whole run is noise)"
        )
    if trimmed:
        all_notes.append(
            f"rounds of more than {KEPT_SAMPLES} samples are kept as {KEPT_SAMPLES} evenly "
            "spaced quantiles (each round's median, which decides, is exact)"
        )
    commits = {d.commit for d in docs}
    first = docs[0] if docs else None
    env = results.pytest_environment(
        first.machine if first else {}, commits.pop() if len(commits) == 1 else ""
    )
    return RunResult(
        schema_version=SCHEMA_VERSION,
        created=max((d.created for d in docs), default=results.now_iso()),
        suite_name="pytest-benchmark",
        suite_hash="",
        environment=env,
        cases=tuple(cases),
        rounds=tuple(
            RoundInfo(index=i + 1, arm=arm, started=d.created, duration_s=0.0)
            for i, d in enumerate(docs)
        ),
        notes=tuple(all_notes),
        label=label,
    )


def _index(doc: PytestBenchmarkFile, fullname: str) -> int:
    return next(i for i, b in enumerate(doc.benchmarks) if b.fullname == fullname)


def describe(paths: Sequence[str | Path], count: int) -> str:
    """A side's label: its paths and how many runs they hold."""
    shown_paths = ", ".join(str(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
    return f"{shown_paths} ({count} run{'s' if count != 1 else ''})"


def load_sides(
    baseline: Sequence[str | Path],
    candidate: Sequence[str | Path],
    threshold: str = pytest_benchmark.PYTEST_THRESHOLD,
) -> tuple[RunResult, RunResult]:
    """Both sides' saved runs as two runs of several rounds each, after checking that
    every file (both sides) comes from one machine and each side's files hold the same
    benchmarks; a file named twice is refused."""
    base_files = run_files(baseline, "--baseline-runs")
    cand_files = run_files(candidate, "--candidate-runs")
    seen: dict[Path, str] = {}
    for option, paths in (("--baseline-runs", base_files), ("--candidate-runs", cand_files)):
        for path in paths:
            key = path.resolve()
            if key in seen:
                raise BadInput(f"{option} {path}: named twice (also in {seen[key]})")
            seen[key] = option
    base_docs = [read_file(p) for p in base_files]
    cand_docs = [read_file(p) for p in cand_files]
    check_same_machine([*base_docs, *cand_docs])
    note = "each saved pytest-benchmark run is one round (one process)"
    return (
        rounds_run(
            base_docs,
            label=describe(baseline, len(base_docs)),
            arm="baseline",
            threshold=threshold,
            notes=(note,),
        ),
        rounds_run(
            cand_docs,
            label=describe(candidate, len(cand_docs)),
            arm="candidate",
            threshold=threshold,
            notes=(note,),
        ),
    )
