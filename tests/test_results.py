"""The results/baseline format: round trip, pytest-benchmark interop, and bad files."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_case, make_run, synthetic_rounds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.base.errors import BadInput
from guard.store import atomic, migrate, results


@pytest.fixture
def run(rng):
    cases = {
        make_case(): synthetic_rounds(rng, 1e-4),
        make_case("b1-h8-s512-d64-causal", "sdpa", gate=False): synthetic_rounds(rng, 2e-4),
    }
    return make_run(cases)


@pytest.fixture
def doc(run):
    return results.to_json(run)


def test_round_trip(run, tmp_path):
    path = tmp_path / "r.json"
    results.save(run, path)
    back = results.load(path)
    assert back.cases == run.cases
    assert back.environment == run.environment
    assert back.suite_hash == run.suite_hash
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary left behind


def test_pytest_benchmark_compare_reads_our_file(run, tmp_path):
    a, b = tmp_path / "0001_a.json", tmp_path / "0002_b.json"
    results.save(run, a)
    results.save(run, b)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "triton_flash-b1-h8-s512-d64-full" in proc.stdout
    assert "Failed to load" not in proc.stdout + proc.stderr


def _pytest_benchmark_file(tmp_path: Path, save_data: bool) -> Path:
    bench = tmp_path / "test_tiny_bench.py"
    bench.write_text("def test_sum(benchmark):\n    benchmark(sum, range(100))\n")
    out = tmp_path / "pb.json"
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(bench),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        "--benchmark-min-rounds=5",
    ]
    if save_data:
        args.append("--benchmark-save-data")
    proc = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_reads_plain_pytest_benchmark_with_raw_data(tmp_path):
    run = results.load(_pytest_benchmark_file(tmp_path, save_data=True))
    assert run.environment.gpu_slug == "pytest-benchmark"
    [case] = run.cases
    assert "test_sum" in case.case.name
    # One pytest process is one round: its samples are correlated, not replicates.
    assert len(case.rounds) == 1 and len(case.rounds[0]) >= 5
    assert "one process, so one round per benchmark" in run.notes[0]


def test_two_pytest_benchmark_runs_cannot_decide_and_do_not_fail(tmp_path, capsys):
    """Two runs of identical code once gave "regression 1.157x CI [1.157, 1.157]" and
    exit 1: every sample was taken for an independent round."""
    from guard.commands.main import main

    first = _pytest_benchmark_file(tmp_path, save_data=True)
    doc = json.loads(first.read_text())
    doc["benchmarks"][0]["stats"]["data"] = [
        x * 1.157 for x in doc["benchmarks"][0]["stats"]["data"]
    ]
    second = tmp_path / "second.json"
    second.write_text(json.dumps(doc))
    # No verdict (exit 2): nothing could be decided, which is neither a pass nor a fail.
    assert main(["compare", str(first), str(second), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    [case] = out["cases"]
    assert case["status"] == "too-few-rounds" and case["verdict"] is None
    assert case["ci"] is None and case["ratio"] == pytest.approx(1.157)
    assert "one process" in case["reason"] and "cannot decide" in case["reason"]
    assert out["headline"].startswith("NO VERDICT")


def test_plain_pytest_benchmark_without_raw_data_is_refused(tmp_path):
    # pytest-benchmark's --benchmark-save omits raw samples unless --benchmark-save-data.
    path = _pytest_benchmark_file(tmp_path, save_data=False)
    doc = json.loads(path.read_text())
    for bench in doc["benchmarks"]:
        bench["stats"].pop("data", None)
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"stats\.data.*--benchmark-save-data"):
        results.load(path)


def _mutate(doc, path, value):
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("guard", "schema_version"), 99, "guard.schema_version"),
        (("guard", "schema_version"), "1", "guard.schema_version"),
        (("guard", "environment"), KeyError, "guard.environment"),
        (("guard", "environment", "gpu_slug"), "../etc", "guard.environment.gpu_slug"),
        (("guard", "cases", 0, "rounds", 0, 0), -1.0, "guard.cases[0].rounds[0][0]"),
        (("guard", "cases", 0, "rounds", 0, 0), 0, "guard.cases[0].rounds[0][0]"),
        (("guard", "cases", 0, "rounds", 0, 0), "fast", "guard.cases[0].rounds[0][0]"),
        (("guard", "cases", 0, "rounds", 0), "x", "guard.cases[0].rounds[0]"),
        (("guard", "cases", 0, "rounds"), "none", "guard.cases[0].rounds"),
        (("guard", "cases", 0, "status"), "great", "guard.cases[0].status"),
        (("guard", "cases", 0, "case", "name"), "a/b", "guard.cases[0].case.name"),
        (("guard", "cases", 0, "case", "threshold"), "mean:1%", "guard.cases[0].case.threshold"),
        (
            ("guard", "cases", 0, "correctness", "passed"),
            "yes",
            "guard.cases[0].correctness.passed",
        ),
        (("guard", "cases"), {"a": 1}, "guard.cases"),
    ],
)
def test_bad_fields_are_named(doc, path, value, field):
    with pytest.raises(BadInput) as err:
        results.from_json(_mutate(doc, path, value), "base.json")
    assert str(err.value).startswith(f"base.json: {field}"), str(err.value)


def test_duplicate_case_is_refused(doc):
    doc["guard"]["cases"].append(copy.deepcopy(doc["guard"]["cases"][0]))
    with pytest.raises(BadInput, match="duplicate case"):
        results.from_json(doc, "dup.json")


def test_nan_and_infinity_literals_are_refused(doc, tmp_path):
    text = json.dumps(doc).replace('"driver": "580.1"', '"driver": NaN', 1)
    with pytest.raises(BadInput, match=r"^nan\.json: guard\.environment\.driver: nan is not a"):
        results.loads(text, "nan.json")
    text = json.dumps(doc)
    first = doc["guard"]["cases"][0]["rounds"][0][0]
    text = text.replace(f'"rounds": [[{first!r}', '"rounds": [[-Infinity', 1)
    with pytest.raises(BadInput, match=r"^inf\.json: guard\.cases\[0\]\.rounds\[0\]\[0\]: -inf"):
        results.loads(text, "inf.json")


@pytest.mark.parametrize("cut", [0, 1, 100, -10])
def test_truncated_files(doc, cut):
    text = json.dumps(doc)
    with pytest.raises(BadInput, match=r"trunc\.json"):
        results.loads(text[:cut] if cut else "", "trunc.json")


def test_huge_file_is_refused_before_reading(tmp_path, doc):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="over the"):
        results.load(path, max_bytes=100)


def test_missing_file(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        results.load(tmp_path / "nope.json")


def test_atomic_write_keeps_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "b.json"
    path.write_text("old")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_atomic(path, "new content")
    assert path.read_text() == "old"
    assert not [p for p in tmp_path.iterdir() if p.name != "b.json"]


def test_newer_schema_refused_older_migrated(doc, monkeypatch):
    newer = _mutate(doc, ("guard", "schema_version"), results.SCHEMA_VERSION + 1)
    with pytest.raises(BadInput, match="newer than this guard"):
        results.from_json(newer, "new.json")
    # A pretend next version: today's files go through its migration.
    seen = []
    nxt = results.SCHEMA_VERSION + 1

    def migrate_to_next(record):
        seen.append(record["schema_version"])
        return record

    monkeypatch.setattr(results, "SCHEMA_VERSION", nxt)
    monkeypatch.setitem(migrate.MIGRATIONS, nxt, migrate_to_next)
    run = results.from_json(doc, "old.json")
    assert seen == [nxt - 1] and run.schema_version == nxt


def test_version_1_files_read_without_fingerprints_or_resources():
    run = results.load(Path(__file__).parent / "fixtures" / "results-v1.json")
    assert run.schema_version == results.SCHEMA_VERSION
    assert all(c.fingerprint == "" and c.resources == () for c in run.cases)


def test_checked_in_v1_fixture_still_loads():
    run = results.load(Path(__file__).parent / "fixtures" / "results-v1.json")
    assert run.cases and all(c.rounds for c in run.cases if c.status == "ok")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_loader_fuzz_raises_only_bad_input(value):
    with contextlib.suppress(BadInput):
        results.from_json(value, "fuzz.json")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_loader_fuzz_mutated_real_document(data):
    doc = results.to_json(make_run({make_case(): ((1e-4, 1.1e-4), (1.2e-4,))}))
    # Replace one leaf of a real document with an arbitrary JSON value.
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        paths.append(path)

    walk(doc, ())
    path = data.draw(st.sampled_from([p for p in paths if p]))
    mutated = _mutate(doc, path, data.draw(json_values))
    with contextlib.suppress(BadInput):
        results.from_json(mutated, "fuzz.json")


def test_check_only_results_round_trip(run, tmp_path):
    """``guard check`` writes ok cases without samples; they must load back."""
    import dataclasses

    checked = dataclasses.replace(
        run, cases=tuple(dataclasses.replace(c, rounds=(), host_rounds=()) for c in run.cases)
    )
    results.save(checked, tmp_path / "c.json")
    back = results.load(tmp_path / "c.json")
    assert [c.status for c in back.cases] == ["ok", "ok"]
    assert all(not c.rounds for c in back.cases)


# ------------------------------------------------------------ hostile numbers and sizes


def _with_round(doc):
    doc = copy.deepcopy(doc)
    doc["guard"]["rounds"] = [
        {"index": 0, "arm": "candidate", "started": "", "duration_s": 1.25, "gpu_state": {}}
    ]
    doc["guard"]["environment"]["sm_clock_max_mhz"] = 1980.5
    return doc


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"duration_s": 1.25',
            '"duration_s": 1e999',
            r"guard\.rounds\[0\]\.duration_s: inf is not",
        ),
        (
            '"gpu_state": {}',
            '"gpu_state": {"t": -1e999}',
            r"guard\.rounds\[0\]\.gpu_state\.t: -inf",
        ),
        ("1980.5", "9" * 400, r"guard\.environment\.sm_clock_max_mhz: an integer of 400 digits"),
        ("FIRST", "9" * 400, r"guard\.cases\[0\]\.rounds\[0\]\[0\]: an integer of 400 digits"),
        ("FIRST", "1e300", r"guard\.cases\[0\]\.rounds\[0\]\[0\]: must be a time from 1e-12 to"),
        ("FIRST", "1e-300", r"guard\.cases\[0\]\.rounds\[0\]\[0\]: must be a time from 1e-12 to"),
    ],
    ids=["inf-duration", "inf-nested", "huge-clock", "huge-time", "time-1e300", "time-1e-300"],
)
def test_numbers_a_float_cannot_hold_are_refused_naming_the_field(doc, old, new, message):
    doc = _with_round(doc)
    text = json.dumps(doc)
    if old == "FIRST":
        old = repr(doc["guard"]["cases"][0]["rounds"][0][0])
        text = text.replace(f"[[{old}", f"[[{new}", 1)
    else:
        assert old in text
        text = text.replace(old, new, 1)
    with pytest.raises(BadInput, match=rf"^h\.json: {message}"):
        results.loads(text, "h.json")


def _pb_doc(data, version="5.2.3"):
    doc = {"machine_info": {}, "commit_info": {}, "datetime": "", "benchmarks": []}
    doc["benchmarks"].append({"name": "t", "fullname": "t", "stats": {"data": data}})
    if version is not None:
        doc["version"] = version
    return doc


@pytest.mark.parametrize(
    "version", ["99.0.0", "9" * 400, "2.1.0", "6.0.0", "x", 5, None], ids=lambda v: str(v)[:8]
)
def test_unknown_pytest_benchmark_versions_are_refused(version):
    with pytest.raises(BadInput, match=r"^pb\.json: version"):
        results.from_json(_pb_doc([1e-4, 2e-4], version), "pb.json")


@pytest.mark.parametrize("version", ["3.4.1", "4.0.0", "5.2.3"])
def test_known_pytest_benchmark_versions_load_as_one_round(version):
    run = results.from_json(_pb_doc([1e-4, 2e-4, 3e-4], version), "pb.json")
    assert run.cases[0].rounds == ((1e-4, 2e-4, 3e-4),)


def _over(doc, count):
    """``doc`` with its first case's rounds replaced by ``count`` (rounds, samples each)."""
    doc = copy.deepcopy(doc)
    n_rounds, per_round = count
    doc["guard"]["cases"][0]["rounds"] = [[1e-4] * per_round for _ in range(n_rounds)]
    return doc


def test_limits_per_case_refuse_a_file_just_over_each(doc):
    from guard.base import limits

    cases = [
        ((limits.MAX_ROUNDS_PER_CASE + 1, 1), rf"rounds: {limits.MAX_ROUNDS_PER_CASE + 1} rounds"),
        ((1, limits.MAX_SAMPLES_PER_ROUND + 1), r"rounds\[0\]: 200001 samples in one round"),
        ((2, limits.MAX_SAMPLES_PER_CASE // 2 + 1), r"rounds: 250002 samples in all rounds"),
    ]
    for count, message in cases:
        with pytest.raises(BadInput, match=rf"^f\.json: guard\.cases\[0\]\.{message}, over the"):
            results.from_json(_over(doc, count), "f.json")
    at_limit = (
        limits.MAX_ROUNDS_PER_CASE,
        limits.MAX_SAMPLES_PER_CASE // limits.MAX_ROUNDS_PER_CASE,
    )
    assert len(results.from_json(_over(doc, at_limit), "f.json").cases[0].rounds) == 200


def test_limits_per_file_refuse_a_file_just_over_each(doc, tmp_path):
    from guard.base import limits

    many = copy.deepcopy(doc)
    template = many["guard"]["cases"][0]
    many["guard"]["cases"] = []
    for i in range(limits.MAX_CASES + 1):
        rec = copy.deepcopy(template)
        rec["case"]["name"] = f"c{i}"
        many["guard"]["cases"].append(rec)
    with pytest.raises(BadInput, match=r"guard\.cases: 1001 cases, over the limit of 1000"):
        results.from_json(many, "f.json")

    heavy = copy.deepcopy(doc)
    per_case = limits.MAX_SAMPLES_PER_CASE // 2
    n_cases = limits.MAX_SAMPLES_PER_FILE // (2 * per_case) + 1
    heavy["guard"]["cases"] = []
    for i in range(n_cases):
        rec = copy.deepcopy(template)
        rec["case"]["name"] = f"c{i}"
        rec["rounds"] = [[1e-4] * per_case, [1e-4] * per_case]
        rec["host_rounds"] = []
        heavy["guard"]["cases"].append(rec)
    with pytest.raises(BadInput, match=r"samples in the file so far, over the limit of 2000000"):
        results.from_json(heavy, "f.json")

    brackets = "[" * (limits.MAX_CONTAINERS + 1)
    with pytest.raises(BadInput, match=r"1000001 JSON lists and objects .* limit of 1000000"):
        results.loads(brackets, "f.json")

    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(limits.MAX_FILE_BYTES + 1)  # sparse: nothing is written
    with pytest.raises(BadInput, match=rf"{limits.MAX_FILE_BYTES + 1} bytes, over the"):
        results.load(big)

    pb = _pb_doc([1e-4] * (limits.MAX_SAMPLES_PER_ROUND + 1))
    with pytest.raises(BadInput, match=r"benchmarks\[0\]\.stats\.data: 200001 samples in one"):
        results.from_json(pb, "pb.json")
