"""Workers started ahead: while one worker measures, the next one of the same call
imports torch, Triton and the guard (``--preload``) and waits for its job.

The round stays a fresh process of its own arm: the job, handed over when the round
begins, says which arm's kernels to import; nothing from ``kernels`` is imported ahead.
The worker left when the session closes is stopped (every core entry point closes its
session, however it returns), and one that died waiting is replaced by a fresh one.
Nothing here asserts a duration.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from conftest import ROOT, two_arm_session

from guard.measure import proc
from guard.measure.protocol import PRELOAD_FLAG, WorkerClock
from guard.measure.runner import Arm, Rounds, _Started, round_phases
from guard.store.results import OK
from guard.store.suite import load_suite

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="process groups and /proc are Linux's"
)

MODULES = ("torch", "guard.measure.measure", "guard.store.results", "kernels")


def _preloaded_modules(preload: bool) -> list[str]:
    """Which of MODULES a worker holds once ``_read_job`` returns on an empty stdin."""
    code = (
        "import sys\n"
        "from guard.measure import worker\n"
        f"proto, data = worker._read_job(preload={preload})\n"
        "assert data is None\n"
        f"proto.write(repr([m for m in {MODULES!r} if m in sys.modules]))\n"
        "proto.flush()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=ROOT,
        env=proc.child_env(),
    ).stdout
    found: list[str] = ast.literal_eval(out)
    return found


def test_a_preloading_worker_imports_torch_and_the_guard_but_no_kernels_before_its_job():
    assert _preloaded_modules(True) == ["torch", "guard.measure.measure", "guard.store.results"]
    assert _preloaded_modules(False) == []


def test_every_worker_but_the_sessions_first_is_started_ahead(tiny_suite, tmp_path):
    with two_arm_session(tiny_suite, prestart=True) as session:
        session.check()
        spare = session.lanes[0].spare  # waits across calls: the timing rounds' first takes it
        assert spare is not None and spare.proc.poll() is None
        session.time(2)
        res = session.results()
    assert session.lanes[0].spare is None and not proc._RUNNING  # none outlives the session
    assert spare.proc.poll() is not None
    for arm in ("baseline", "candidate"):
        cases = res[arm].cases
        assert len(cases) == 4 and all(c.status == OK for c in cases)
        assert all(len(c.rounds) == 2 for c in cases)
    # The order: the check round of both arms at once (each cold, the first timing
    # round's worker importing beside them), rounds 1 (baseline first) and 2 (candidate
    # first). Every timing round's worker starts ahead.
    started_ahead = {
        (r.index, r.arm): r.phases.prestarted
        for arm in ("baseline", "candidate")
        for r in res[arm].rounds
        if r.phases is not None
    }
    assert started_ahead == {
        (0, "baseline"): 0,
        (0, "candidate"): 0,
        (1, "baseline"): 1,
        (1, "candidate"): 1,
        (2, "candidate"): 1,
        (2, "baseline"): 1,
    }


def test_no_worker_is_started_ahead_on_a_cpu_or_under_compute_sanitizer(tiny_suite, tmp_path):
    assert not Rounds(load_suite(tiny_suite), device="cpu").prestart
    assert not Rounds(load_suite(tiny_suite), device="cpu", prestart=True, sanitize=True).prestart
    session = two_arm_session(tiny_suite)
    session.check()
    assert all(r.phases and r.phases.prestarted == 0 for r in session.results()["candidate"].rounds)


@pytest.mark.parametrize("how", ["died", "other command"])
def test_a_spare_that_cannot_serve_is_stopped_and_a_fresh_worker_runs(tiny_suite, tmp_path, how):
    session = two_arm_session(tiny_suite, prestart=True)
    command = [session.python, "-m", "guard.measure.worker"]
    env = proc.child_env()
    if how == "died":  # exited while waiting for its job
        spare = _Started.start([sys.executable, "-c", "pass"], env, base=command)
        spare.proc.wait(timeout=60)
    else:
        spare = _Started.start([*command, PRELOAD_FLAG], env, base=[*command, "--other"])
    session.lanes[0].spare = spare
    assert session._take_spare(session.lanes[0], command, env) is None
    assert spare.proc.poll() is not None and spare.proc.pid not in proc._RUNNING
    with session:
        session.check()
    for arm in ("baseline", "candidate"):
        assert all(c.status == OK for c in session.results()[arm].cases)
    assert not proc._RUNNING


def test_a_started_ahead_workers_round_begins_when_its_job_is_handed_over():
    spent = {"load": 0.5, "sample": 2.0}
    # Started at 90, imported until 93, waited; the job handed over at 100, read at 100.01.
    ahead = WorkerClock(main=90.05, job=100.01, hello=100.5, done=104.0, spent=spent)
    cold = WorkerClock(main=200.05, job=200.06, hello=203.0, done=207.0, spent=spent)
    phases = round_phases([(100.0, ahead, 104.5), (200.0, cold, 207.5)])
    assert phases.workers == 2 and phases.prestarted == 1
    assert phases.start_s == pytest.approx(0.01 + 0.06)
    assert phases.imports_s == pytest.approx(0.49 + 2.94)
    assert phases.total_s == pytest.approx(4.5 + 7.5)


def test_the_phases_note_says_how_many_rounds_had_their_worker_started_ahead():
    from guard.decide.compare import phases_summary
    from guard.store.results import RoundInfo, RoundPhases

    def info(index: int, prestarted: int) -> RoundInfo:
        phases = RoundPhases(workers=1, prestarted=prestarted, imports_s=1.0, total_s=3.0)
        return RoundInfo(index, "candidate", "", 3.0, phases=phases)

    rounds = (info(0, 0), info(1, 0), info(2, 1), info(3, 1))
    assert phases_summary(rounds).endswith("; 2 of 3 rounds' workers started ahead (imported)")
    assert "started ahead" not in phases_summary(rounds[:2])


@pytest.mark.parametrize("entry", ["compare_arms", "run", "compare_with_baseline"])
def test_the_core_entry_points_leave_no_worker_started_ahead(tiny_suite, monkeypatch, entry):
    from guard.ops import compare as ops_compare
    from guard.ops import measure as ops_measure

    made: list[Rounds] = []
    real = ops_measure.rounds_for

    def session_ahead(*args: object, **kw: object) -> Rounds:
        session = real(*args, **kw)  # type: ignore[arg-type]
        session.prestart = True  # as on a GPU
        made.append(session)
        return session

    for module in (ops_measure, ops_compare):
        monkeypatch.setattr(module, "rounds_for", session_ahead)
    suite = load_suite(tiny_suite)
    opts = ops_measure.MeasureOptions(device="cpu", rounds=1, max_rounds=1)
    if entry == "compare_arms":
        ops_compare.compare_arms(
            suite, Arm("baseline", str(ROOT)), Arm("candidate", str(ROOT)), opts=opts
        )
    elif entry == "run":
        ops_measure.run(suite, opts)
    else:
        ops_compare.compare_with_baseline(suite, None, opts=opts)
    assert made and all(s.lanes[0].spare is None for s in made)
    assert not proc._RUNNING
