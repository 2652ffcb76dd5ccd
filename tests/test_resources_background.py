"""The compiler-resource notes of a paired comparison compile in the background.

Both trees compile (two child processes, niced) from the end of the check round on,
while the timing rounds measure, instead of after them: a cold compile of a large suite
takes minutes of CPU, and on a sharded check it used to follow every shard's
measurement. Each child compiles exactly its suite's cases: a shard is a set of case
ids, not every kernel by every workload name. A measurement that fails ends both
children at once. CPU only; nothing here asserts a duration.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import replace

import pytest
from conftest import ROOT
from report_data import pair

from guard.base.errors import BadInput, InfraError
from guard.decide.compare import compare_runs
from guard.measure import proc, resources
from guard.measure.resources import ResourceReport
from guard.measure.runner import Arm, Rounds
from guard.ops import compare as ops_compare
from guard.ops import measure as ops_measure
from guard.ops import resources as ops_resources
from guard.store.suite import load_suite

WAIT_S = 60.0  # what a broken guard makes a test wait, at most


def _arms() -> tuple[Arm, Arm]:
    return Arm("baseline", str(ROOT)), Arm("candidate", str(ROOT))


def _changed_arms(tmp_path) -> tuple[Arm, Arm]:
    """The base, and a copy of it whose kernels/ differ (a comment): only cases whose
    kernels differ between the trees are compiled for their resources."""
    import shutil

    shutil.copytree(ROOT / "kernels", tmp_path / "head" / "kernels")
    with (tmp_path / "head" / "kernels" / "reference.py").open("a") as fh:
        fh.write("\n# changed\n")
    return Arm("baseline", str(ROOT)), Arm("candidate", str(tmp_path / "head"))


def test_the_trees_compile_while_the_timing_rounds_measure(tiny_suite, monkeypatch, tmp_path):
    compiling = threading.Event()
    seen: dict[str, object] = {}
    real_time = Rounds.time

    def collect(root: str, suite_path: str, *args: object, **kw: object) -> ResourceReport:
        compiling.set()
        seen.setdefault("ids", kw.get("case_ids"))
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    def time_rounds(self: Rounds, *args: object, **kw: object) -> None:
        # Started by the check round's end, not after the last timing round.
        seen.setdefault("compiling_when_timing", compiling.wait(WAIT_S))
        real_time(self, *args, **kw)

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    monkeypatch.setattr(Rounds, "time", time_rounds)
    suite = load_suite(tiny_suite)
    opts = ops_measure.MeasureOptions(device="cpu", rounds=2, max_rounds=2)
    comparison = ops_compare.compare_arms(suite, *_changed_arms(tmp_path), opts=opts)
    assert seen["compiling_when_timing"] is True
    assert seen["ids"] == [c.id for c in suite.cases]
    assert all(c.verdict for c in comparison.cases)


def test_each_tree_compiles_exactly_the_cases_of_its_shard(monkeypatch):
    """A shard holding triton_flash on one workload and cuda_flash on another compiles
    those two cases, not both kernels on both workloads."""
    suite = load_suite(ROOT / "suites" / "default.yaml")
    by_id = {c.id: c for c in suite.cases}
    first, second = suite.cases[0].name, suite.cases[-1].name
    wanted = [f"triton_flash/{first}", f"cuda_flash/{second}"]
    shard = replace(suite, cases=tuple(by_id[i] for i in wanted))
    asked: list[list[str]] = []

    def collect(root: str, suite_path: str, *args: object, **kw: object) -> ResourceReport:
        child = load_suite(suite_path).select(kw["kernels"], None)  # what the child reads
        ids = list(kw["case_ids"])
        asked.append([c.id for c in child.cases if c.id in ids])
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    ops_resources.with_resource_changes(compare_runs(*pair()), shard, "base", "head")
    assert asked == [wanted, wanted]


def test_the_child_selects_case_ids_and_names_an_unknown_one(monkeypatch, tmp_path):
    suite_file = ROOT / "suites" / "default.yaml"
    suite = load_suite(suite_file)
    wanted = [suite.cases[0].id, suite.cases[-1].id]
    got: list[list[str]] = []

    def collect(s, arches):  # in-process: the child's selection, not its compiles
        got.append([c.id for c in s.cases])
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    monkeypatch.setattr(resources, "collect_resources", collect)
    monkeypatch.setattr(os, "nice", lambda n: 0)  # this test process keeps its priority
    out = tmp_path / "r.json"
    argv = ["--suite", str(suite_file), "--out", str(out), "--case-ids", *wanted]
    assert resources.main(argv) == 0 and got == [wanted]
    argv = ["--suite", str(suite_file), "--out", str(out), "--case-ids", "triton_flash/nope"]
    assert resources.main(argv) == BadInput.exit_code


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups")
def test_a_measurement_that_fails_ends_both_compiles_at_once(tiny_suite, monkeypatch, tmp_path):
    ends: list[int | None] = []

    def collect(root: str, *args: object, **kw: object) -> ResourceReport:
        sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
        run = proc.run_group(sleeper, 120, os.environ, stdout_limit=100, stderr_limit=100)
        ends.append(run.returncode)
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    def time_rounds(self: Rounds, *args: object, **kw: object) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(proc._RUNNING) < 2 and time.monotonic() < deadline:  # both compiling
            time.sleep(0.05)
        raise InfraError("the GPU fell off the bus")

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    monkeypatch.setattr(Rounds, "time", time_rounds)
    opts = ops_measure.MeasureOptions(device="cpu", rounds=2, max_rounds=2, time_identical=True)
    with pytest.raises(InfraError, match="fell off the bus"):
        ops_compare.compare_arms(load_suite(tiny_suite), *_changed_arms(tmp_path), opts=opts)
    # Killed on the way out: not slept to their end (0) nor to their timeout (None).
    assert ends == [-signal.SIGKILL, -signal.SIGKILL]
    assert not proc._RUNNING


def test_identical_kernels_are_not_compiled_for_their_resources(tiny_suite, monkeypatch):
    asked: list[object] = []

    def collect(root: str, suite_path: str, *args: object, **kw: object) -> ResourceReport:
        asked.append(kw.get("case_ids"))
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    opts = ops_measure.MeasureOptions(device="cpu", rounds=2, max_rounds=2, time_identical=True)
    ops_compare.compare_arms(load_suite(tiny_suite), *_arms(), opts=opts)  # one tree, twice
    assert asked == []
