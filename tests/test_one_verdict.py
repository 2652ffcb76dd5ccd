"""One mapping from a check's verdict to its headline and exit code, read by every entry
point; the suite's timing plan decides every comparison; one registry of process groups."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest
from conftest import make_case, make_run, synthetic_rounds

from guard.base.errors import ExitCode
from guard.commands.main import main
from guard.decide.compare import compare_runs, run_verdict
from guard.decide.outcome import CheckVerdict
from guard.measure import proc, runner
from guard.ops import compare as ops_compare
from guard.ops import pytest_compare as ops_pytest_compare
from guard.report import report
from guard.store import results
from guard.store.results import CRASHED, WRONG
from guard.store.suite import TimingPlan

SUITE = """\
schema_version: 1
name: plan-test
kernels: [triton_flash, sdpa]
gate: [triton_flash]
threshold: "median:2%"
timing: {{drift: {drift}}}
cases:
  - {{shape: [1, 8, 512, 64], causal: false}}
"""


def _runs(rng, slowdown: float = 1.0, status: dict[str, str] | None = None):
    gated, control = make_case(), make_case(kernel="sdpa", gate=False)
    base = {gated: synthetic_rounds(rng, 1e-4), control: synthetic_rounds(rng, 1e-4)}
    cand = {
        gated: synthetic_rounds(rng, 1e-4 * slowdown),
        control: synthetic_rounds(rng, 1e-4),
    }
    return make_run(base, label="base"), make_run(cand, status=status, label="cand")


@pytest.mark.parametrize("verdict", list(CheckVerdict))
def test_every_verdicts_headline_starts_with_its_label(verdict):
    assert verdict.headline("why").startswith(f"{verdict.label}: ")
    assert verdict.tone in ("pass", "fail", "error", "neutral")


@pytest.mark.parametrize(
    ("slowdown", "status", "expected"),
    [
        (1.0, None, CheckVerdict.PASS),
        (1.5, None, CheckVerdict.REGRESSION),
        (1.0, {"triton_flash/b1-h8-s512-d64-full": WRONG}, CheckVerdict.WRONG_RESULTS),
        (1.0, {"triton_flash/b1-h8-s512-d64-full": CRASHED}, CheckVerdict.INFRASTRUCTURE),
        (1.0, {"sdpa/b1-h8-s512-d64-full": CRASHED}, CheckVerdict.PASS),
    ],
)
def test_comparison_headline_and_exit_code_follow_its_verdict(rng, slowdown, status, expected):
    comparison = compare_runs(*_runs(rng, slowdown, status))
    assert comparison.verdict is expected
    assert comparison.headline.startswith(f"{expected.label}: ")
    assert comparison.exit_code == expected.exit_code
    outcome = comparison.outcome()
    assert outcome.headline == comparison.headline and outcome.exit_code == expected.exit_code


def test_no_baseline_with_wrong_results_is_headed_fail_not_no_verdict(rng):
    _, cand = _runs(rng, status={"triton_flash/b1-h8-s512-d64-full": WRONG})
    outcome = ops_compare.CompareOutcome(cand, None, "no baseline for this GPU")
    assert outcome.exit_code == ExitCode.FAIL
    assert outcome.headline.startswith("FAIL: ")


def test_no_baseline_nothing_wrong_is_no_verdict(rng):
    _, cand = _runs(rng)
    outcome = ops_compare.CompareOutcome(cand, None, "no baseline for this GPU")
    assert outcome.exit_code == ExitCode.BAD_INPUT
    assert outcome.headline == "NO VERDICT: no baseline for this GPU"


def test_report_of_a_run_whose_ungated_kernel_crashed_says_what_the_exit_code_says(rng):
    _, run = _runs(rng, status={"sdpa/b1-h8-s512-d64-full": CRASHED})
    verdict, _ = run_verdict(run)
    assert verdict is CheckVerdict.PASS and verdict.exit_code == ExitCode.PASS
    headline, tone = report.run_headline(run)
    assert headline.startswith("PASS: ") and tone == "pass"
    assert "ERROR" not in headline
    assert f'id="verdict">{headline}' in report.html_report(run)


def test_report_of_a_run_whose_gated_kernel_crashed_is_error(rng):
    _, run = _runs(rng, status={"triton_flash/b1-h8-s512-d64-full": CRASHED})
    headline, tone = report.run_headline(run)
    assert headline.startswith("ERROR: ") and tone == "error"
    assert run_verdict(run)[0].exit_code == ExitCode.INFRA


def _files(tmp_path, rng, drift: float):
    base, cand = _runs(rng, slowdown=1.10)
    results.save(base, tmp_path / "base.json")
    results.save(cand, tmp_path / "cand.json")
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(drift=drift))
    return tmp_path / "base.json", tmp_path / "cand.json", suite


def test_compare_files_decides_under_the_given_plan(tmp_path, rng):
    base, cand, _ = _files(tmp_path, rng, 0.4)
    assert ops_pytest_compare.compare_files(base, cand).verdict is CheckVerdict.REGRESSION
    loose = ops_pytest_compare.compare_files(base, cand, plan=TimingPlan(drift=0.4))
    assert loose.verdict is CheckVerdict.PASS
    assert loose.plan.drift == 0.4


@pytest.mark.parametrize("drift", [0.03, 0.4])
def test_guard_compare_files_and_report_use_the_suites_plan(tmp_path, rng, capsys, drift):
    base, cand, suite = _files(tmp_path, rng, drift)
    code = main(["compare", str(base), str(cand), "--suite", str(suite), "--json"])
    compared = json.loads(capsys.readouterr().out)
    expected = CheckVerdict.PASS if drift == 0.4 else CheckVerdict.REGRESSION
    assert code == expected.exit_code
    assert compared["headline"].startswith(f"{expected.label}: ")
    main(["report", str(cand), "--baseline", str(base), "--suite", str(suite), "--json"])
    reported = json.loads(capsys.readouterr().out)
    assert reported["headline"] == compared["headline"]


def test_one_registry_of_process_groups():
    assert not hasattr(runner, "_LIVE")
    child = proc.start_group([sys.executable, "-c", "import time; time.sleep(120)"])
    assert proc._RUNNING[child.pid] is child
    proc.stop_running()  # what runs at exit: ends and reaps every listed group
    assert child.pid not in proc._RUNNING
    assert child.returncode is not None


def test_a_run_that_timed_nothing_says_none_was_timed(rng):
    """A check-only run (every case passed its check, no timing round) times nothing."""
    _, run = _runs(rng)
    untimed = replace(run, cases=tuple(replace(c, rounds=()) for c in run.cases))
    headline, _ = report.run_headline(untimed)
    assert f"0 of {len(run.cases)} case(s) timed" in headline
    assert f"{len(run.cases)} of {len(run.cases)} case(s) timed" in report.run_headline(run)[0]
