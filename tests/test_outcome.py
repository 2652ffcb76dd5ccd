"""The typed outcome: one verdict -> one exit code; outcome files read strictly; the PR
comment renders every string from them as data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from guard.base.errors import ExitCode
from guard.decide.outcome import (
    MAX_TEXT,
    CaseOutcome,
    CaseProfile,
    CaseVerdict,
    CheckVerdict,
    Outcome,
    OutcomeFileError,
)
from guard.github import comment as github_comment
from guard.report import comment

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("verdict", "code"),
    [
        (CheckVerdict.PASS, ExitCode.PASS),
        (CheckVerdict.REGRESSION, ExitCode.FAIL),
        (CheckVerdict.WRONG_RESULTS, ExitCode.FAIL),
        (CheckVerdict.NO_VERDICT, ExitCode.BAD_INPUT),
        (CheckVerdict.BAD_INPUT, ExitCode.BAD_INPUT),
        (CheckVerdict.INFRASTRUCTURE, ExitCode.INFRA),
    ],
)
def test_each_verdict_has_one_exit_code(verdict, code):
    assert Outcome(verdict, "h").exit_code == code


def _outcome() -> Outcome:
    return Outcome(
        CheckVerdict.REGRESSION,
        "FAIL: 1 significant regression(s)",
        cases=(
            CaseOutcome(
                "k/<img src=x onerror=alert(1)>",
                True,
                CaseVerdict.REGRESSION,
                True,
                1.12,
                1.10,
                1.14,
                reason="a|b",
                notes=("registers 168 -> 190",),
            ),
            CaseOutcome("k/same", True, CaseVerdict.IDENTICAL),
            CaseOutcome("sdpa/x", False, CaseVerdict.CONTROL, ratio=1.03),
            CaseOutcome(
                "k/flat",
                True,
                CaseVerdict.UNCHANGED,
                False,
                1.001,
                0.964,
                1.038,
                bound=1.012,
                limit=1.02,
                bound_level=0.95,
            ),
        ),
        policy_changes=("ungates triton_flash",),
        baseline_changes=("baselines/x.json",),
        gpu="h100",
        tested_commit="a" * 40,
        judge_commit="b" * 40,
        pr_number=7,
        profiles=(CaseProfile("k/y", (("duration", "1 µs", "2 µs", "2.00x"),)),),
    )


def test_round_trip_and_moved_cases():
    outcome = _outcome()
    again = Outcome.from_json(json.loads(json.dumps(outcome.to_json())))
    assert again == outcome
    assert [c.case_id for c in outcome.moved] == ["k/<img src=x onerror=alert(1)>"]


def test_a_crashed_control_is_shown_as_in_the_job_summary():
    # The comment (Outcome.moved) and the summary/HTML table (render) share one rule:
    # a not-gated case that crashed or went wrong is shown, a control that moved is not.
    crashed = CaseOutcome("sdpa_flash/x", False, CaseVerdict.ERROR, reason="no kernel")
    wrong = CaseOutcome("sdpa/y", False, CaseVerdict.WRONG)
    drifted = CaseOutcome("sdpa/z", False, CaseVerdict.REGRESSION, ratio=1.2)
    outcome = Outcome(CheckVerdict.PASS, "PASS", cases=(crashed, wrong, drifted))
    assert {c.case_id for c in outcome.moved} == {"sdpa_flash/x", "sdpa/y"}


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"schema_version": 1}, "schema_version"),
        ({"schema_version": 4}, "schema_version"),
        ({"verdict": "maybe"}, "verdict"),
        ({"pr_number": -1}, "pr_number"),
        ({"cases": [{"id": "x", "gate": True, "verdict": "bogus"}]}, "cases[0].verdict"),
        ({"cases": [{"id": "x", "gate": "yes", "verdict": "new"}]}, "cases[0].gate"),
        ({"headline": "x" * 5000}, "headline"),
        ({"profiles": [{"id": "x", "rows": [["a", "b"]]}]}, "profiles[0].rows[0]"),
    ],
)
def test_outcome_files_are_read_strictly(edit, field):
    data = {**_outcome().to_json(), **edit}
    with pytest.raises(OutcomeFileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Outcome.from_json(data, "meta.json")


def test_comment_escapes_everything_from_the_file():
    body = comment.markdown([_outcome()])
    assert body.startswith(comment.MARKER)
    outside_code = re.sub(r"`[^`]*`", "", body)  # code spans render literally
    assert "<img" not in outside_code and "&lt;img" in body
    assert "a\\|b" in body  # a pipe cannot split a table cell
    assert "takes effect after merge" in body or "take effect after merge" in body
    assert "registers 168 -&gt; 190" in body and "Nsight Compute" in body
    assert "1 case(s) unchanged: identical kernel" in body


def test_comment_cli_refuses_an_unknown_version(tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({**_outcome().to_json(), "schema_version": 99}))
    proc = subprocess.run(
        [sys.executable, "-s", "-E", "-m", "guard.github.comment", "--meta", str(meta),
         "--out", str(tmp_path / "c.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "schema_version" in proc.stderr
    assert not (tmp_path / "c.md").exists()
    meta.write_text(json.dumps(_outcome().to_json()))
    proc = subprocess.run(
        [sys.executable, "-s", "-E", "-m", "guard.github.comment", "--meta", str(meta),
         "--out", str(tmp_path / "c.md")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "h100" in (tmp_path / "c.md").read_text()


def test_html_report_shows_profiles_and_resource_changes_escaped():
    import dataclasses

    from guard.decide.compare import compare_runs
    from guard.report import report

    sys.path.insert(0, str(Path(__file__).parent))
    import report_data as data

    base, cand = data.pair()
    comparison = compare_runs(base, cand)
    first = dataclasses.replace(comparison.cases[0], resource_changes=("registers 1 -> <2>",))
    comparison = dataclasses.replace(comparison, cases=(first, *comparison.cases[1:]))
    prof = CaseProfile("k/<b>", (("duration", "1 µs", "2 µs", "2.00x"),))
    page = report.html_report(cand, comparison, profiles=[prof])
    assert "Nsight Compute: k/&lt;b&gt;" in page and "registers 1 -&gt; &lt;2&gt;" in page


@pytest.mark.parametrize(
    ("case", "text"),
    [
        (CaseOutcome("a", True, CaseVerdict.UNCHANGED, bound=1.0121, limit=1.02, bound_level=0.95),
         "unchanged: ≤ 1.012x (95% bound) < 1.02"),
        (CaseOutcome("a", True, CaseVerdict.REGRESSION, True, bound=1.0314, limit=1.005),
         "regression: ≥ 1.031x > 1.005"),
        (CaseOutcome("a", True, CaseVerdict.IMPROVEMENT, bound=0.909, limit=0.995),
         "improvement: ≤ 0.909x < 0.995"),
        (CaseOutcome("a", True, CaseVerdict.INCONCLUSIVE, bound=1.083, limit=1.02,
                     bound_level=0.95),
         "inconclusive: ≤ 1.083x (95% bound) ≥ 1.02"),
        (CaseOutcome("a", True, CaseVerdict.INCONCLUSIVE, limit=1.05),
         "inconclusive: interval too wide to compare with 1.05"),
        (CaseOutcome("a", True, CaseVerdict.UNCHANGED), "unchanged"),  # an older file
        (CaseOutcome("a", True, CaseVerdict.IDENTICAL), "unchanged (identical kernel)"),
        (CaseOutcome("a", False, CaseVerdict.CONTROL, ratio=1.2), "control (not gated)"),
    ],
)  # fmt: skip
def test_verdict_text_shows_the_number_it_rests_on(case, text):
    assert case.verdict_text == text


def test_comment_shows_the_number_each_verdict_rests_on():
    outcome = _outcome()
    flat = replace(outcome.cases[3], verdict=CaseVerdict.INCONCLUSIVE, bound=1.083)
    body = comment.markdown([replace(outcome, cases=(*outcome.cases, flat))])
    assert "inconclusive: ≤ 1.083x (95% bound) ≥ 1.02" in body


def test_an_outcome_file_without_bounds_is_still_read():
    # Written before cases carried the number their verdict rests on: same version.
    data = _outcome().to_json()
    for case in data["cases"]:
        for key in ("bound", "limit", "bound_level"):
            del case[key]
    again = Outcome.from_json(data)
    assert [c.verdict_text for c in again.cases][3] == "unchanged"


def test_what_the_check_writes_the_comment_reads(tmp_path):
    """A kernel's 10,000-character exception message once made meta.json unreadable."""
    long = "RuntimeError: " + "x" * (10_000 - 14)
    crashed = CaseOutcome("k/crash", True, CaseVerdict.ERROR, reason=long, notes=(long,))
    outcome = replace(
        _outcome(),
        verdict=CheckVerdict.INFRASTRUCTURE,
        headline="NO VERDICT: " + long,
        cases=(*_outcome().cases, crashed),
        notes=tuple(f"note {i}" for i in range(500)),
    )
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps(outcome.to_json()))
    again = comment.read(meta)
    [read_back] = [c for c in again.cases if c.case_id == "k/crash"]
    for text, length in ((read_back.reason, 10_000), (read_back.notes[0], 10_000),
                         (again.headline, 10_012)):  # fmt: skip
        assert len(text) <= MAX_TEXT and text.endswith(f"[cut: {length} characters in all]")
    assert read_back.reason.startswith("RuntimeError: xxx")
    assert len(again.notes) == 200 and again.notes[-1] == "... and 301 more left out"
    assert github_comment.main(["--meta", str(meta), "--out", str(tmp_path / "c.md")]) == 0
    assert "RuntimeError" in (tmp_path / "c.md").read_text()


def test_an_outcome_with_more_cases_than_a_file_holds_keeps_the_moved_ones():
    flat = [CaseOutcome(f"k/{i:03}", True, CaseVerdict.UNCHANGED) for i in range(300)]
    bad = CaseOutcome("k/zzz", True, CaseVerdict.REGRESSION, True, 1.5)
    outcome = Outcome(CheckVerdict.REGRESSION, "FAIL", cases=(*flat, bad))
    again = Outcome.from_json(json.loads(json.dumps(outcome.to_json())))
    assert len(again.cases) == 200 and again.cases[-1] == bad
    assert again.notes[0] == "101 case(s) left out of this file"
