"""Several saved pytest-benchmark runs a side: each file one round, decided with an interval.

One real pytest-benchmark file (the worked example, run once) is the template; the
other runs are that file with its samples rescaled by a fresh random factor per run
(the noise between processes) and, for the candidate, by a planted ratio.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from guard.base.errors import BadInput
from guard.commands.main import main
from guard.store import pytest_runs

EXAMPLE = ROOT / "examples" / "pytest_benchmark_demo"
# Node ids from the repository's root (pytest's rootdir: pyproject.toml); a case's id
# is "pytest/" and its node id verbatim.
NODE = "examples/pytest_benchmark_demo/test_checksum_demo.py"
CHECKSUM = f"pytest/{NODE}::test_checksum"
FOLD = f"pytest/{NODE}::test_fold_xor"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    """One real run of the example's benchmarks, saved with its samples."""
    out = tmp_path_factory.mktemp("pb") / "run.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            ".",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out}",
            "--benchmark-save-data",
            "--benchmark-min-rounds=30",
            "--benchmark-max-time=0.01",
        ],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def _write_runs(
    folder: Path,
    template: dict,
    count: int,
    ratios: dict[str, float],
    noise: float = 0.01,
    factors: list[float] | None = None,
) -> Path:
    """``count`` runs under ``folder`` (pytest-benchmark's layout): each benchmark's
    samples times a fresh factor around its ``ratios`` entry (1 when absent), or
    times the run's entry of ``factors`` (the noise between runs, fixed)."""
    sub = folder / "Linux-CPython-3.11-64bit"
    sub.mkdir(parents=True)
    rng = random.Random()
    for i in range(count):
        doc = copy.deepcopy(template)
        for bench in doc["benchmarks"]:
            run = factors[i] if factors else 1.0 + rng.uniform(-noise, noise)
            scale = ratios.get(bench["name"], 1.0) * run
            bench["stats"]["data"] = [x * scale for x in bench["stats"]["data"]]
        (sub / f"{i + 1:04d}_run.json").write_text(json.dumps(doc))
    return folder


def _run_json(capsys, argv) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _sides(tmp_path, template, ratios, count=4) -> list[str]:
    base = _write_runs(tmp_path / "old", template, count, {})
    cand = _write_runs(tmp_path / "new", template, count, ratios)
    return ["compare", "--baseline-runs", str(base), "--candidate-runs", str(cand), "--json"]


def _verdicts(doc: dict) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in doc["cases"]}


def test_a_slowdown_in_several_runs_is_a_regression_of_that_case(tmp_path, template, capsys):
    code, doc = _run_json(capsys, _sides(tmp_path, template, {"test_checksum": 1.3}))
    assert code == 1
    assert _verdicts(doc) == {CHECKSUM: "regression", FOLD: "unchanged"}
    [case] = [c for c in doc["cases"] if c["id"] == CHECKSUM]
    low, high = case["ci"]
    assert 1.03 < low <= case["ratio"] <= high and case["ratio"] == pytest.approx(1.3, rel=0.03)
    assert doc["headline"].startswith("FAIL")


def test_unchanged_runs_pass_with_every_case_unchanged(tmp_path, template, capsys):
    code, doc = _run_json(capsys, _sides(tmp_path, template, {}))
    assert code == 0
    assert set(_verdicts(doc).values()) == {"unchanged"}
    assert all(c["ci"] is not None for c in doc["cases"])


def test_a_speedup_is_an_improvement(tmp_path, template, capsys):
    code, doc = _run_json(capsys, _sides(tmp_path, template, {"test_fold_xor": 0.7}))
    assert code == 0
    assert _verdicts(doc) == {CHECKSUM: "unchanged", FOLD: "improvement"}


def test_noisy_runs_with_a_small_shift_are_inconclusive(tmp_path, template, capsys):
    # Runs 15% apart: a 4% shift is neither ruled in (regression) nor, at a threshold
    # of 20% (+ 3% drift), ruled out (unchanged).
    base = _write_runs(tmp_path / "old", template, 3, {}, factors=[0.85, 1.0, 1.15])
    cand = _write_runs(
        tmp_path / "new", template, 3, {"test_checksum": 1.04}, factors=[1.15, 0.85, 1.0]
    )
    argv = ["compare", "--baseline-runs", str(base), "--candidate-runs", str(cand), "--json"]
    code, doc = _run_json(capsys, [*argv, "--threshold", "median:20%"])
    assert _verdicts(doc)[CHECKSUM] == "inconclusive"
    assert code == 0


def test_one_run_a_side_still_has_no_interval(tmp_path, template, capsys):
    code, doc = _run_json(capsys, _sides(tmp_path, template, {"test_checksum": 1.3}, count=1))
    assert code == 2 and doc["headline"].startswith("NO VERDICT")
    assert {c["status"] for c in doc["cases"]} == {"too-few-rounds"}


def test_files_and_folders_mix(tmp_path, template, capsys):
    base = _write_runs(tmp_path / "old", template, 3, {})
    cand = _write_runs(tmp_path / "new", template, 3, {"test_checksum": 1.5})
    files = sorted(str(p) for p in cand.rglob("*.json"))
    argv = ["compare", "--baseline-runs", str(base), "--candidate-runs", *files, "--json"]
    code, doc = _run_json(capsys, argv)
    assert code == 1 and _verdicts(doc)[CHECKSUM] == "regression"


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_runs_from_another_machine_are_refused_naming_the_field(tmp_path, template, capsys):
    argv = _sides(tmp_path, template, {})
    other = sorted((tmp_path / "new").rglob("*.json"))[1]
    doc = json.loads(other.read_text())
    doc["machine_info"]["node"] = "another-host"
    other.write_text(json.dumps(doc))
    err = _error(capsys, argv)
    assert f"{other}: machine_info.node: 'another-host'" in err
    assert "different machines" in err


def test_a_run_without_a_benchmark_of_its_side_is_refused_naming_it(tmp_path, template, capsys):
    argv = _sides(tmp_path, template, {})
    odd = sorted((tmp_path / "old").rglob("*.json"))[2]
    doc = json.loads(odd.read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["name"] != "test_fold_xor"]
    odd.write_text(json.dumps(doc))
    err = _error(capsys, argv)
    assert f"{odd}: lacks benchmark '{NODE}::test_fold_xor'" in err


def test_a_benchmark_whose_params_differ_is_refused(tmp_path, template, capsys):
    argv = _sides(tmp_path, template, {})
    odd = sorted((tmp_path / "old").rglob("*.json"))[1]
    doc = json.loads(odd.read_text())
    doc["benchmarks"][0]["params"] = {"n": 7}
    odd.write_text(json.dumps(doc))
    assert "has params" in _error(capsys, argv)


def test_a_guard_file_or_a_file_named_twice_is_refused(tmp_path, template, capsys):
    base = _write_runs(tmp_path / "old", template, 2, {})
    one = sorted(base.rglob("*.json"))[0]
    err = _error(capsys, ["compare", "--baseline-runs", str(base), "--candidate-runs", str(one)])
    assert "named twice" in err
    guard_file = tmp_path / "guard.json"
    guard_file.write_text(json.dumps({**template, "guard": {}}))
    err = _error(
        capsys, ["compare", "--baseline-runs", str(base), "--candidate-runs", str(guard_file)]
    )
    assert "a guard results file" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline-runs", "x"], "go together"),
        (["c.json", "d.json", "--baseline-runs", "a", "--candidate-runs", "b"], "no other"),
        (["--baseline-runs", "nope", "--candidate-runs", "nope2"], "no such file or folder"),
        (["--threshold", "mean:5%", "--baseline-runs", ".", "--candidate-runs", "."], "median"),
    ],
)
def test_bad_arguments_exit_two(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    assert message in _error(capsys, ["compare", *argv])


def test_long_rounds_keep_their_median_exactly():
    rng = np.random.default_rng()
    samples = list(rng.lognormal(mean=-9.0, sigma=0.3, size=pytest_runs.KEPT_SAMPLES * 3 + 1))
    kept = pytest_runs.kept(samples)
    assert len(kept) == pytest_runs.KEPT_SAMPLES
    assert float(np.median(kept)) == pytest.approx(float(np.median(samples)), rel=1e-12)
    assert pytest_runs.kept(samples[:10]) == tuple(samples[:10])


def test_an_empty_folder_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match=r"no pytest-benchmark \.json file"):
        pytest_runs.run_files([tmp_path / "empty"], "--baseline-runs")


def _contended_runs(
    folder: Path, template: dict, shares: list[float], ratios: dict[str, float]
) -> Path:
    """Runs of a CPU shared with other work: in run i, one span of ``shares[i]`` of the
    samples, placed afresh, is 1.6x slower (the process lost its core for that part of its
    run). A span, not scattered samples: the spans left fast always hold the template's
    fastest sample, so the run's fastest sample is known."""
    sub = folder / "Linux-CPython-3.11-64bit"
    sub.mkdir(parents=True)
    rng = random.Random()
    for i, share in enumerate(shares):
        doc = copy.deepcopy(template)
        for bench in doc["benchmarks"]:
            scale = ratios.get(bench["name"], 1.0)
            data = bench["stats"]["data"] * 10  # ten times the template's samples: a longer run
            slow = round(share * len(data))
            start = rng.randrange(len(data) - slow + 1)
            bench["stats"]["data"] = [
                x * scale * (1.6 if start <= j < start + slow else 1.0) for j, x in enumerate(data)
            ]
        (sub / f"{i + 1:04d}_run.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize("ratio", [1.0, 1.1])
def test_min_decides_rounds_slowed_for_part_of_their_run(tmp_path, template, capsys, ratio):
    """median:5% cannot decide a 10% slowdown, or no change, when each run lost its core
    for a different share of its samples; min:5% (each round its fastest sample) can."""
    cand_ratios = {"test_checksum": ratio}
    # Medians of rounds slowed for more than half their samples sit near 1.6x.
    base = _contended_runs(tmp_path / "old", template, [0.7, 0.0, 0.6, 0.1, 0.65, 0.2], {})
    cand = _contended_runs(tmp_path / "new", template, [0.0, 0.7, 0.1, 0.6, 0.2, 0.65], cand_ratios)
    argv = ["compare", "--baseline-runs", str(base), "--candidate-runs", str(cand), "--json"]
    code, doc = _run_json(capsys, [*argv, "--threshold", "median:5%"])
    assert _verdicts(doc)[CHECKSUM] == "inconclusive"
    code, doc = _run_json(capsys, [*argv, "--threshold", "min:5%"])
    want = "regression" if ratio > 1 else "unchanged"
    assert _verdicts(doc) == {CHECKSUM: want, FOLD: "unchanged"}
    assert code == (1 if ratio > 1 else 0)
    # Each round of the files compared is its fastest sample, and the run says so.
    run, _ = pytest_runs.load_sides([base], [cand], threshold="min:5%")
    lows = {b["name"]: min(b["stats"]["data"]) for b in template["benchmarks"]}
    assert [len(r) for c in run.cases for r in c.rounds] == [1] * 12
    assert all(c.rounds[0][0] >= lows[c.case.name.rsplit("::", 1)[1]] for c in run.cases)
    note = "threshold min:5%: each round stands as its fastest sample"
    assert any(n.startswith(note) for n in run.notes)


def test_a_suite_refuses_a_min_threshold(tmp_path):
    from guard.store.suite import load_suite

    text = (ROOT / "suites" / "default.yaml").read_text().replace('"median:2%"', '"min:2%"', 1)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(
        BadInput, match=r"threshold: 'min:2%': a suite's cases are decided on medians"
    ):
        load_suite(path)


@pytest.mark.parametrize("ratio", [1.0, 1.1])
def test_min_sets_aside_rounds_slowed_for_their_whole_run(tmp_path, template, capsys, ratio):
    """One process in six on each side lost its core from first sample to last (its
    fastest sample 1.6x slow too): under min:5% each side stands as the fastest half of
    its rounds, so the 10% plant fails and no change passes."""
    whole = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    base = _contended_runs(tmp_path / "old", template, whole, {})
    cand = _contended_runs(tmp_path / "new", template, whole[::-1], {"test_checksum": ratio})
    argv = ["compare", "--baseline-runs", str(base), "--candidate-runs", str(cand), "--json"]
    code, doc = _run_json(capsys, [*argv, "--threshold", "min:5%"])
    want = "regression" if ratio > 1 else "unchanged"
    assert _verdicts(doc) == {CHECKSUM: want, FOLD: "unchanged"}
    assert code == (1 if ratio > 1 else 0)
    [case] = [c for c in doc["cases"] if c["id"] == CHECKSUM]
    assert case["ratio"] == pytest.approx(ratio, rel=1e-6)  # the floors' ratio, exactly


def test_runs_of_pytest_benchmarks_default_size_are_read_and_decided(tmp_path, template, capsys):
    # pytest-benchmark at its defaults writes tens of MB a run (up to 200k samples a
    # benchmark): more than the guard's 16 MB cap on its own files. Each run is read as a
    # stream, each benchmark's samples reduced as read, the medians exact.
    rng = np.random.default_rng()
    big = copy.deepcopy(template)
    for bench in big["benchmarks"]:
        bench["stats"]["data"] = [float(x) for x in rng.lognormal(-9.0, 0.05, size=180_000)]
    text = json.dumps(big)
    assert len(text) > 16 * 1024 * 1024 / 2  # a run; the sides below hold 20+ MB each
    base = _write_runs(tmp_path / "old", big, 4, {}, noise=0.002)
    cand = _write_runs(tmp_path / "new", big, 4, {"test_checksum": 1.5}, noise=0.002)
    one = next((base / "Linux-CPython-3.11-64bit").iterdir())
    assert one.stat().st_size > 4 * 1024 * 1024
    doc = pytest_runs.read_file(one)
    for bench, original in zip(
        doc.benchmarks, json.loads(one.read_text())["benchmarks"], strict=True
    ):
        assert len(bench.samples) == pytest_runs.KEPT_SAMPLES
        assert float(np.median(bench.samples)) == pytest.approx(
            float(np.median(original["stats"]["data"])), rel=1e-12
        )
    code, out = _run_json(
        capsys,
        ["compare", "--baseline-runs", str(base), "--candidate-runs", str(cand), "--json",
         "--threshold", "median:5%"],
    )  # fmt: skip
    assert code == 1, out["headline"]
    assert _verdicts(out)[CHECKSUM] == "regression"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "top level must be a JSON object"),
        ('{"version": "4.0.0", "benchmarks": [', "not valid JSON"),
    ],
)
def test_a_run_that_is_not_a_pytest_benchmark_document_is_named(tmp_path, text, message):
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(BadInput, match=message):
        pytest_runs.read_file(path)
