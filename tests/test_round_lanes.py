"""Rounds dealt over several GPUs of one host (``Rounds(gpus=...)``, ``--gpus N``).

Each GPU is a lane: one worker at a time, with ``CUDA_VISIBLE_DEVICES`` set to it. Both
arms of a round run on one lane, each lane alternates which arm goes first, and every
round records its lane, so that the decision can take each GPU's offset out
(``stats.ratio_interval``'s strata). On this CPU machine the lanes pin no GPU; what is
checked is the dealing, the records and the workers' lifetimes, not speed.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest
from conftest import TESTS, two_arm_session

from guard.base import stats
from guard.base.errors import InfraError
from guard.measure import proc
from guard.measure.runner import Progress, Rounds
from guard.store import results
from guard.store.results import OK

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="process groups and /proc are Linux's"
)


def _session(tiny_suite, **kw) -> Rounds:
    return two_arm_session(tiny_suite, **kw)


def test_rounds_are_dealt_round_robin_both_arms_of_a_round_on_one_lane(tiny_suite, tmp_path):
    with _session(tiny_suite, gpus=(None, None), prestart=True) as session:
        session.check()
        session.time(4)
        session.time(2)  # an extension step goes on dealing where the last one stopped
        res = session.results()
    assert not proc._RUNNING  # every lane's worker and spare ended with the session
    rounds = [r for arm in ("baseline", "candidate") for r in res[arm].rounds]
    lane_of = {(r.index, r.arm): r.gpu for r in rounds}
    # The check round: the arms at once, one lane each.
    assert lane_of[(0, "baseline")] == "0" and lane_of[(0, "candidate")] == "1"
    for index in range(1, 7):
        assert lane_of[(index, "baseline")] == lane_of[(index, "candidate")] == str((index - 1) % 2)
    # Every lane's worker but its first was started ahead, across both time() calls:
    # the lane's thread outlives each round (a worker dies with the thread that made it).
    timed = [r for r in rounds if r.index > 0]
    assert all(r.phases is not None and r.phases.prestarted == 1 for r in timed)
    for arm in ("baseline", "candidate"):
        for case in res[arm].cases:
            assert case.status == OK and len(case.rounds) == 6
            assert collections.Counter(case.round_gpus) == {"0": 3, "1": 3}


def test_each_lane_alternates_which_arm_goes_first(tiny_suite, tmp_path):
    # Which arm of a round went first: the first progress event of that round (the two
    # arms of a round run one after the other on their lane).
    first_arm: dict[int, str] = {}

    def progress(event: Progress) -> None:
        if event.phase == "time":
            first_arm.setdefault(event.round, event.arm)

    with _session(tiny_suite, gpus=(None, None), progress=progress) as session:
        session.check()
        session.time(8)
        res = session.results()
    lane_of = {r.index: r.gpu for r in res["baseline"].rounds if r.index > 0}
    first: dict[str, list[str]] = collections.defaultdict(list)
    for index in sorted(lane_of):
        first[lane_of[index]].append(first_arm[index])
    assert first == {
        "0": ["baseline", "candidate", "baseline", "candidate"],
        "1": ["baseline", "candidate", "baseline", "candidate"],
    }


def test_the_comparison_says_the_rounds_were_dealt_over_gpus(tiny_suite, tmp_path):
    from guard.decide.compare import compare_runs

    with _session(tiny_suite, gpus=(None, None)) as session:
        session.check()
        session.time(4)
        res = session.results()
    notes = compare_runs(res["baseline"], res["candidate"], paired=True).notes
    assert any(n.startswith("timing rounds dealt over 2 GPUs (0, 1)") for n in notes), notes
    with _session(tiny_suite) as session:
        session.check()
        session.time(2)
        res = session.results()
    notes = compare_runs(res["baseline"], res["candidate"], paired=True).notes
    assert not any("dealt over" in n for n in notes)


def test_a_run_on_one_lane_records_no_gpu(tiny_suite, tmp_path):
    with _session(tiny_suite) as session:
        session.check()
        session.time(2)
        res = session.results()
    assert all(not c.round_gpus for c in res["candidate"].cases)
    assert all(not r.gpu for r in res["candidate"].rounds)
    record = results.to_json(res["candidate"])
    assert "round_gpus" not in record["guard"]["cases"][0]  # files as before


def test_round_gpus_survive_a_write_and_a_read_and_a_mismatch_is_refused(tiny_suite, tmp_path):
    with _session(tiny_suite, gpus=(None, None)) as session:
        session.check()
        session.time(2)
        run = session.results()["baseline"]
    path = tmp_path / "run.json"
    results.save(run, path)
    back = results.load(path)
    assert [c.round_gpus for c in back.cases] == [c.round_gpus for c in run.cases]
    assert [r.gpu for r in back.rounds] == [r.gpu for r in run.rounds]
    data = results.to_json(run)
    data["guard"]["cases"][0]["round_gpus"] = ["0"]  # two rounds, one GPU named
    with pytest.raises(results.BadInput, match=r"cases\[0\]\.round_gpus"):
        results.from_json(data, "bad.json")


def test_a_failing_lane_stops_the_session_and_nothing_outlives_it(
    tiny_suite, tmp_path, monkeypatch
):
    # Each arm's kernels start a daemon at import (a double fork out of the worker's
    # group and session): the lane that finds it fails the session (exit 3), the other
    # lane stops, and no worker, spare or daemon is left.
    from test_isolation import _survivors

    record = tmp_path / "daemon.txt"
    monkeypatch.setenv("FAULT_DAEMON_FILE", str(record))
    session = _session(
        tiny_suite, gpus=(None, None), prestart=True, fault_modules=("fault_kernels",),
        sys_path=(str(TESTS),),
    )  # fmt: skip
    with pytest.raises(InfraError, match="running outside its worker's process group"), session:
        session.check()
        session.time(2)
    rows = [line.split() for line in record.read_text().splitlines()]
    assert rows, "no daemon started"
    assert not _survivors({int(r[1]) for r in rows})
    assert not proc._RUNNING
    assert all(lane.spare is None and lane.current is None for lane in session.lanes)


def _two_gpu_rounds(rng, ratio: float, offset: float, n: int = 6):
    """Round medians of two arms over two GPUs, the second GPU ``offset`` slower."""
    gpus = ["0", "1"] * (n // 2)
    noise = 0.003

    def arm(scale: float) -> list[list[float]]:
        return [
            [scale * (1 + offset * (g == "1")) * float(np.exp(rng.normal(0, noise)))] for g in gpus
        ]

    return arm(1.0), arm(ratio), gpus


def test_a_gpus_offset_widens_nothing_once_taken_out_and_moves_no_estimate():
    rng = np.random.default_rng(3)
    base, cand, gpus = _two_gpu_rounds(rng, 1.03, offset=0.04)
    kw = {"confidence": 0.99, "rng": np.random.default_rng(0)}
    plain = stats.ratio_interval(base, cand, **kw)
    kw["rng"] = np.random.default_rng(0)
    strat = stats.ratio_interval(base, cand, strata=(gpus, gpus), **kw)
    assert strat.ratio == plain.ratio  # the estimate is the rounds' as measured
    assert (strat.high - strat.low) < (plain.high - plain.low) / 3
    assert strat.low > 1.01  # a 3% regression stands out of a 4% GPU offset
    assert plain.low < 1.0  # lost in it otherwise


@pytest.mark.parametrize(
    "strata",
    [
        (["0", "0", "0", "0", "0", "0"], ["0", "0", "0", "0", "0", "0"]),  # one GPU
        (["0", "1", "0", "1", "0", "1"], ["0", "0", "0", "0", "0", "0"]),  # GPU 1: one arm
        (["0", "1"], ["0", "1"]),  # not one per round
    ],
    ids=["one GPU", "one arm on a GPU", "not one per round"],
)
def test_strata_that_cannot_be_taken_out_leave_the_interval_as_it_was(strata):
    rng = np.random.default_rng(4)
    base, cand, _ = _two_gpu_rounds(rng, 1.0, offset=0.02)
    plain = stats.ratio_interval(base, cand, confidence=0.99, rng=np.random.default_rng(1))
    same = stats.ratio_interval(
        base, cand, confidence=0.99, rng=np.random.default_rng(1), strata=strata
    )
    assert same == plain


def test_the_pr_check_refuses_a_gpu_split_without_gpus(capsys):
    from guard.github import ci as github_ci

    assert github_ci.main(["--device", "cpu", "--gpu-split", "cases"]) == 2
    assert "--gpu-split: only with --gpus" in capsys.readouterr().err
