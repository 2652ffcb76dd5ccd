"""A pytest-benchmark case's id is ``pytest/`` and its node id verbatim, so that what
follows the first "/" pastes back into pytest; files and history stores written when
the node id's "/" were stored as "|" still read and pair with the new form."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import synthetic_rounds

from guard.base.errors import BadInput
from guard.commands import main as commands_main
from guard.decide.compare import compare_runs
from guard.ops import pytest_compare as ops_pytest_compare
from guard.report import comment, render, report
from guard.store import history, pytest_benchmark, results
from guard.store.results import OK, CaseResult, RoundInfo, RunResult

NESTED = "bench/test_x.py::test_y[a]"
SLASHED = "bench/sub/test_z.py::test_w[p/q]"  # a "/" in its parameter id too
TOP = "test_top.py::test_t"
NODES = (NESTED, SLASHED, TOP)
# Written by the guard of results schema 2: its three cases' node ids with "/" as "|".
V2_FILE = Path(__file__).parent / "fixtures" / "results-v2-pytest.json"


def _run(
    names: tuple[str, ...], *, threshold: str = "median:5%", seed: int = 0, label: str = "run"
) -> RunResult:
    """A run of pytest-benchmark cases named ``names``, six rounds each, on the machine
    the schema 2 fixture names (so that the two compare)."""
    rng = np.random.default_rng(seed)
    cases = tuple(
        CaseResult(
            case=pytest_benchmark.pytest_case(name, threshold),
            status=OK,
            rounds=synthetic_rounds(rng, (1 + k) * 1e-4, per_round=8),
            method=pytest_benchmark.PYTEST_METHOD,
        )
        for k, name in enumerate(names)
    )
    return RunResult(
        schema_version=results.SCHEMA_VERSION,
        created=f"2026-11-2{seed}T10:00:00+00:00",
        suite_name="pytest-benchmark",
        suite_hash="",
        environment=results.pytest_environment(
            {"node": "n", "python_version": "3.11.7"}, f"{seed:040d}"
        ),
        cases=cases,
        rounds=tuple(RoundInfo(i + 1, "candidate", "", 1.0) for i in range(6)),
        label=label,
    )


def _folded(node: str) -> str:
    """The name a guard of results schema 2 gave the benchmark of ``node``."""
    return node.replace("/", "|").replace("\\", "|")


def _pytest_benchmark_doc(nodes: tuple[str, ...]) -> dict:
    data = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3]
    return {
        "machine_info": {"node": "n", "python_version": "3.11.7"},
        "commit_info": {"id": "abc"},
        "benchmarks": [
            {"name": n.rsplit("::", 1)[-1], "fullname": n, "stats": {"data": data}} for n in nodes
        ],
        "datetime": "2026-11-26T00:00:00",
        "version": "5.1.0",
    }


# ------------------------------------------------------------------ the id


def test_a_benchmark_in_a_folder_is_its_node_id_verbatim() -> None:
    run = results.from_json(_pytest_benchmark_doc(NODES), "pb.json")
    assert [c.id for c in run.cases] == [f"pytest/{n}" for n in NODES]
    for c, node in zip(run.cases, NODES, strict=True):
        kernel, _, name = c.id.partition("/")  # the first "/" splits kernel and name
        assert (kernel, name) == ("pytest", node) and c.case.name == node


def test_the_id_round_trips_through_a_results_file(tmp_path: Path) -> None:
    run = _run(NODES)
    results.save(run, tmp_path / "r.json")
    back = results.load(tmp_path / "r.json")
    assert [c.id for c in back.cases] == [f"pytest/{n}" for n in NODES]
    assert back.cases == run.cases
    saved = json.loads((tmp_path / "r.json").read_text())["guard"]
    assert saved["schema_version"] == results.SCHEMA_VERSION
    assert [c["case"]["name"] for c in saved["cases"]] == list(NODES)


def test_only_a_pytest_case_may_hold_a_path_separator(tmp_path: Path) -> None:
    doc = results.to_json(_run((NESTED,)))
    doc["guard"]["cases"][0]["case"]["kernel"] = "triton_flash"
    with pytest.raises(BadInput, match=r"guard\.cases\[0\]\.case\.name: must hold no path"):
        results.from_json(doc, "r.json")


# ------------------------------------------------- files of results schema 2


def test_a_schema_2_file_reads_with_the_path_of_each_node_id_restored() -> None:
    old = results.load(V2_FILE)
    assert json.loads(V2_FILE.read_text())["guard"]["schema_version"] == 2
    # The path's "|" were "/"; a "|" in the parameter id cannot be told from a "/".
    assert [c.id for c in old.cases] == [
        f"pytest/{NESTED}",
        "pytest/bench/sub/test_z.py::test_w[p|q]",
        f"pytest/{TOP}",
    ]


def test_a_schema_2_file_pairs_every_benchmark_with_a_new_file(tmp_path: Path, capsys) -> None:
    """A base saved before the change, a head after: each benchmark meets itself, the
    one with a "/" in its parameter id too, and the head's ids are shown."""
    new = tmp_path / "new.json"
    results.save(_run(NODES), new)
    assert commands_main.main(["compare", str(V2_FILE), str(new), "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["cases"]] == [f"pytest/{n}" for n in NODES]
    assert all(c["baseline_median_s"] is not None and c["ci"] is not None for c in doc["cases"])
    assert not any("not measured" in n for n in doc["notes"])
    # And the other way round: the new file as the base.
    comparison = ops_pytest_compare.compare_files(new, V2_FILE)
    assert all(c.baseline is not None for c in comparison.cases)


def test_pairing_by_the_folded_form_never_replaces_an_exact_match() -> None:
    both = _run((SLASHED, "bench/sub/test_z.py::test_w[p|q]"))
    assert both.case(f"pytest/{SLASHED}") is both.cases[0]
    assert both.case("pytest/bench/sub/test_z.py::test_w[p|q]") is both.cases[1]
    assert both.case("pytest/bench|sub|test_z.py::test_w[p|q]") is None  # two would pair
    one = _run((SLASHED,))
    assert one.case("pytest/bench|sub|test_z.py::test_w[p|q]") is one.cases[0]
    assert one.case("sdpa/bench") is None


# ------------------------------------------------------- what is shown


def test_compare_output_shows_the_node_id_verbatim(tmp_path: Path, capsys) -> None:
    base, cand, md = tmp_path / "base.json", tmp_path / "cand.json", tmp_path / "summary.md"
    results.save(_run(NODES, seed=1), base)
    results.save(_run(NODES, seed=2), cand)
    commands_main.main(["compare", str(base), str(cand), "--markdown", str(md)])
    out = capsys.readouterr().out
    markdown = md.read_text()
    for node in NODES:
        assert f"pytest/{node}" in out  # the terminal table
        assert f"pytest/{node}" in markdown  # no character of these needs escaping
    commands_main.main(["compare", str(base), str(cand), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert [(c["id"], c["kernel"], c["name"]) for c in doc["cases"]] == [
        (f"pytest/{n}", "pytest", n) for n in NODES
    ]


def test_the_html_report_shows_the_node_id_and_keeps_its_anchors_plain() -> None:
    base, cand = _run(NODES, seed=1), _run(NODES, seed=2)
    page = report.html_report(cand, compare_runs(base, cand))
    for node in NODES:
        assert f"pytest/{node}" in page
    anchors = re.findall(r'id="(case-[^"]*)"', page)
    assert len(anchors) == len(NODES)
    assert all(re.fullmatch(r"[a-z0-9-]+", a) for a in anchors)
    assert sorted(re.findall(r'href="#(case-[^"]*)"', page)) == sorted(anchors)


def test_the_pr_comment_names_the_node_id(tmp_path: Path) -> None:
    """Through the outcome file the comment is written from (meta.json)."""
    base = _run(NODES, seed=1)
    slower = tuple(
        replace(c, rounds=tuple(tuple(x * 1.5 for x in r) for r in c.rounds)) for c in base.cases
    )
    outcome = compare_runs(base, replace(base, cases=slower)).outcome()
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(outcome.to_json()))
    body = comment.markdown([comment.read(meta)])
    for node in NODES:
        assert f"pytest/{node}" in body


def test_a_markdown_table_escapes_a_bar_of_a_parameter_id() -> None:
    comparison = compare_runs(_run(("t.py::test[a|b]",), seed=1), _run(("t.py::test[a|b]",)))
    assert "pytest/t.py::test[a\\|b]" in render.comparison_markdown(comparison)


# ------------------------------------------------------------- --cases


@pytest.mark.parametrize("word", [NESTED, f"pytest/{NESTED}"])
def test_cases_selects_a_benchmark_by_its_node_id(tmp_path: Path, capsys, word: str) -> None:
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    results.save(_run(NODES, seed=1), base)
    results.save(_run(NODES, seed=2), cand)
    commands_main.main(["compare", str(base), str(cand), "--json", "--cases", word])
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["cases"]] == [f"pytest/{NESTED}"]


def test_cases_selects_by_node_id_in_a_schema_2_file(tmp_path: Path, capsys) -> None:
    cand = tmp_path / "cand.json"
    results.save(_run(NODES), cand)
    commands_main.main(["compare", str(V2_FILE), str(cand), "--json", "--cases", SLASHED])
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["cases"]] == [f"pytest/{SLASHED}"]
    assert doc["cases"][0]["baseline_median_s"] is not None


def test_cases_selects_a_plain_pytest_benchmark_file_by_node_id(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_pytest_benchmark_doc(NODES)))
    b.write_text(json.dumps(_pytest_benchmark_doc(NODES)))
    commands_main.main(["compare", str(a), str(b), "--json", "--cases", SLASHED, TOP])
    doc = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in doc["cases"]] == [f"pytest/{SLASHED}", f"pytest/{TOP}"]


def test_cases_naming_no_case_is_bad_input(tmp_path: Path, capsys) -> None:
    base = tmp_path / "base.json"
    results.save(_run(NODES), base)
    assert (
        commands_main.main(["compare", str(base), str(base), "--cases", "bench/test_x.py::nope"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--cases: no case named 'bench/test_x.py::nope'" in err and str(base) in err


# ------------------------------------------------------------- history


def test_the_history_keeps_the_node_id(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    history.append(_run(NODES, seed=1), db)
    assert history.case_ids(db) == sorted(f"pytest/{n}" for n in NODES)
    for node in NODES:
        assert len(history.trend(db, f"pytest/{node}").points) == 1


def test_a_history_of_the_folded_form_reads_by_node_id_and_joins_new_runs(tmp_path: Path) -> None:
    """Rows appended by a guard of results schema 2 ("|" for "/") and rows appended
    since are one series per benchmark, listed once by its node id."""
    db = tmp_path / "h.sqlite"
    history.append(_run(tuple(_folded(n) for n in NODES), seed=1), db)  # as stored before
    # Only old rows: listed with the path restored, and found by the verbatim id.
    assert history.case_ids(db) == sorted(
        ["pytest/bench/sub/test_z.py::test_w[p|q]", f"pytest/{NESTED}", f"pytest/{TOP}"]
    )
    for node in NODES:
        assert len(history.trend(db, f"pytest/{node}").points) == 1
    assert len(history.trend(db, "pytest/bench/sub/test_z.py::test_w[p|q]").points) == 1
    # A new run joins each series.
    history.append(_run(NODES, seed=2), db)
    assert history.case_ids(db) == sorted(f"pytest/{n}" for n in NODES)
    for node in NODES:
        t = history.trend(db, f"pytest/{node}")
        assert [p.commit for p in t.points] == [f"{1:040d}", f"{2:040d}"]
        assert t.case_id == f"pytest/{node}"
    trends = history.every_trend(db)
    assert sorted(t.case_id for t in trends) == sorted(f"pytest/{n}" for n in NODES)
    assert all(len(t.points) == 2 for t in trends)


def test_a_pytest_run_appended_with_the_history_option_keeps_node_ids(tmp_path: Path) -> None:
    """The results file, then the history, as ``guard compare --out --history`` does."""
    out, db = tmp_path / "r.json", tmp_path / "h.sqlite"
    results.save(_run(NODES, seed=1), out)
    history.append(results.load(out), db)
    assert history.case_ids(db) == sorted(f"pytest/{n}" for n in NODES)


def test_a_case_id_splits_at_its_first_slash_only() -> None:
    """What the confirmation rerun of ``compare --confirm-against`` does with ids."""
    case_id = f"pytest/{SLASHED}"
    assert case_id.split("/", 1) == ["pytest", SLASHED]
    assert pytest_benchmark.pairing_key(case_id) == "pytest/bench|sub|test_z.py::test_w[p|q]"
    assert pytest_benchmark.pairing_key("triton_flash/b1") == "triton_flash/b1"
    assert pytest_benchmark.pytest_case(SLASHED).id == case_id
