"""Where a round's time goes (``RoundPhases``), and the fixed costs cut from every round.

A worker reports its clock (``protocol.WorkerClock``); the runner records each round's
phases in the results file, where older files without them still load; ``guard compare``
says in one note what a round spends on start-up (not divided by --gpus) and on the
cases. The cuts: the GPU-state readings (nvidia-smi) run beside the imports and beside
the verification instead of in line, and the worker leaves without the interpreter's
teardown (atexit handlers still run). Nothing here asserts a duration: the waits only
keep a broken guard from hanging.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, make_case, make_run, synthetic_rounds

from guard.base.errors import BadInput
from guard.decide import compare
from guard.decide.compare import compare_runs
from guard.measure import env as guard_env
from guard.measure import measure, proc, worker
from guard.measure.protocol import CaseJob, WorkerClock, WorkerJob
from guard.measure.runner import Arm, Rounds, round_phases
from guard.store import results
from guard.store.results import RoundInfo, RoundPhases
from guard.store.suite import load_suite

WAIT_S = 30.0  # what a broken guard makes a test wait, at most


def _phases(**kw: float) -> RoundPhases:
    base = dict(start_s=0.1, imports_s=3.0, gpu_state_s=0.2, load_s=1.0, warm_s=0.3)
    base.update(prepare_s=2.0, sample_s=1.0, verify_s=0.3, exit_s=0.1, total_s=8.0)
    base.update(kw)
    return RoundPhases(workers=1, first_calls=(("cuda_flash", 1.5), ("sdpa", 0.2)), **base)


# ------------------------------------------------------------------ a real run, recorded


def test_every_round_records_its_phases_and_the_file_keeps_them(tiny_suite, tmp_path):
    session = Rounds(load_suite(tiny_suite), device="cpu", seed=7)
    session.check()
    session.time(1)
    run = session.results()["candidate"]
    check, timed = run.rounds
    for r in (check, timed):
        p = r.phases
        assert p is not None and p.workers == 1
        assert p.imports_s > 0 and p.total_s > 0
        parts = sum(getattr(p, k) for k in RoundPhases.SECONDS if k != "total_s")
        assert parts <= p.total_s  # phases of one process, on one clock: they nest
        assert p.total_s <= r.duration_s
        assert {name for name, _ in p.first_calls} == {"reference", "sdpa"}
    assert check.phases is not None and timed.phases is not None
    assert check.phases.check_s > 0 and check.phases.sample_s == 0
    assert timed.phases.check_s == 0 and timed.phases.prepare_s > 0
    assert timed.phases.sample_s > 0 and timed.phases.verify_s > 0

    path = tmp_path / "r.json"
    results.save(run, path)
    assert results.load(path).rounds == run.rounds
    line = compare.phases_summary(results.load(path).rounds)
    assert line.startswith("worker time per round (median of 1): ")
    assert "imports" in line and "sampling" in line


# ------------------------------------------------------------------ the file format


def _file_with_round(tmp_path: Path, phases: object = None) -> Path:
    case = make_case()
    run = make_run({case: ((1e-3, 1.1e-3),)})
    run = replace(run, rounds=(RoundInfo(1, "candidate", "", 2.5),))
    data = results.to_json(run)
    if phases is not None:
        data["guard"]["rounds"][0]["phases"] = phases
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    return path


def test_rounds_without_phases_load_and_are_written_as_before(tmp_path):
    path = _file_with_round(tmp_path)
    record = json.loads(path.read_text())["guard"]["rounds"][0]
    assert "phases" not in record  # absent, not null: the round's record is unchanged
    assert results.load(path).rounds[0].phases is None
    assert compare.phases_summary(results.load(path).rounds) == ""


def test_phases_round_trip_and_unknown_keys_are_left_alone(tmp_path):
    phases = {**_phases().to_json(), "later_s": 1.0}
    loaded = results.load(_file_with_round(tmp_path, phases)).rounds[0].phases
    assert loaded == _phases()


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("imports_s", -1.0, "guard.rounds[0].phases.imports_s"),
        ("imports_s", "slow", "guard.rounds[0].phases.imports_s"),
        ("total_s", 1e9, "guard.rounds[0].phases.total_s"),
        ("workers", 0, "guard.rounds[0].phases.workers"),
        ("workers", 1.5, "guard.rounds[0].phases.workers"),
        ("first_calls", {"sdpa": -2.0}, "guard.rounds[0].phases.first_calls.sdpa"),
        ("first_calls", {f"k{i}": 1.0 for i in range(65)}, "guard.rounds[0].phases.first_calls"),
        ("first_calls", [], "guard.rounds[0].phases.first_calls"),
    ],
)
def test_bad_phases_are_refused_naming_the_field(tmp_path, field, value, where):
    phases = {**_phases().to_json(), field: value}
    with pytest.raises(BadInput) as caught:
        results.load(_file_with_round(tmp_path, phases))
    assert where in str(caught.value)


# ------------------------------------------------------------------ the summary line


def test_the_summary_is_the_median_timing_round_split_into_start_up_and_cases(rng):
    rounds = (
        RoundInfo(0, "candidate", "", 9.0, phases=_phases(imports_s=50.0)),  # the check
        RoundInfo(1, "candidate", "", 9.0, phases=_phases(imports_s=2.0)),
        RoundInfo(2, "candidate", "", 9.0, phases=_phases(imports_s=3.0)),
        RoundInfo(3, "candidate", "", 9.0, phases=_phases(imports_s=4.0)),
        RoundInfo(4, "candidate", "", 9.0),  # a round whose worker crashed: none
    )
    line = compare.phases_summary(rounds)
    assert line.startswith("worker time per round (median of 3): 8.0 s; ")
    # 0.1 + 3.0 + 0.2 + 1.0 + 0.3 + 0.1 start-up; 2.0 + 1.0 + 0.3 on the cases
    assert "start-up 4.7 s (interpreter 0.10, imports 3.0, nvidia-smi 0.20, kernel loads" in line
    assert "cases 3.3 s (preparation 2.0, sampling 1.0, verification 0.30)" in line
    assert line.endswith("first calls: cuda_flash 1.5, sdpa 0.20")

    case = make_case()
    base = make_run({case: synthetic_rounds(rng, 1e-3)})
    cand = replace(make_run({case: synthetic_rounds(rng, 1e-3)}), rounds=rounds)
    assert line in compare_runs(base, cand).notes
    assert not [n for n in compare_runs(cand, base).notes if n.startswith("worker time")]


def test_round_phases_sum_the_workers_of_a_round():
    def clock(t0: float) -> WorkerClock:
        spent = {"gpu_state": 0.1, "load": 0.5, "prepare": 1.0, "sample": 2.0, "verify": 0.25}
        return WorkerClock(
            main=t0 + 0.05, job=t0 + 0.05, hello=t0 + 3.0, done=t0 + 7.0, spent=spent,
            first_calls={"sdpa": 0.5},
        )  # fmt: skip

    one = round_phases([(100.0, clock(100.0), 107.5)])
    assert one.start_s == pytest.approx(0.05) and one.imports_s == pytest.approx(2.95)
    assert one.exit_s == pytest.approx(0.5) and one.total_s == pytest.approx(7.5)
    assert one.sample_s == 2.0 and one.warm_s == 0.0 and one.first_calls == (("sdpa", 0.5),)
    two = round_phases([(100.0, clock(100.0), 107.5), (200.0, clock(200.0), 207.5)])
    assert two.workers == 2 and two.total_s == pytest.approx(15.0)
    assert two.load_s == 1.0 and two.first_calls == (("sdpa", 1.0),)


# ------------------------------------------------------------------ the cuts


def test_gpu_state_is_read_beside_the_imports_and_beside_the_verification(tiny_suite, monkeypatch):
    """The start reading has begun before the kernels package is imported, the end
    reading before the timed calls' output is verified (each reading waits for the work
    it should overlap, so a reading made in line would block these waits)."""
    readings: list[threading.Event] = [threading.Event(), threading.Event()]
    calls: list[int] = []
    seen: dict[str, bool] = {}

    def gpu_state() -> guard_env.GpuState:
        calls.append(1)
        readings[min(len(calls), 2) - 1].set()
        return {"throttle_reasons": "0x0", "throttle_names": []}

    real_import, real_verify = proc.import_kernels_from, measure.Prepared.verify

    def import_kernels_from(root):  # type: ignore[no-untyped-def]
        seen["start read beside the imports"] = readings[0].wait(WAIT_S)
        return real_import(root)

    def verify(self, tol):  # type: ignore[no-untyped-def]
        seen["end read beside the verification"] = readings[1].wait(WAIT_S)
        return real_verify(self, tol)

    monkeypatch.setattr(guard_env, "gpu_state", gpu_state)
    monkeypatch.setattr(proc, "import_kernels_from", import_kernels_from)
    monkeypatch.setattr(measure.Prepared, "verify", verify)
    suite = load_suite(tiny_suite)
    job = WorkerJob(
        mode="time",
        device="cpu",
        kernels_root=str(ROOT),
        plan=suite.cpu_timing,
        cases=(CaseJob(suite.cases[0], 11),),
    )
    import torch

    threads = torch.get_num_threads()
    out = io.StringIO()
    try:
        assert worker.run_job(job, out) == 0
    finally:
        torch.set_num_threads(threads)
    assert seen == {"start read beside the imports": True, "end read beside the verification": True}
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(calls) == 2  # one reading at each end, as before
    assert events[0]["gpu_state"]["throttle_reasons"] == "0x0"
    assert events[-1]["event"] == "done" and events[-1]["gpu_state"]["throttle_reasons"] == "0x0"
    clock = WorkerClock.from_json(events[-1]["clock"])
    assert clock.main <= clock.hello <= clock.done and clock.spent["sample"] > 0


EXIT_PROBE = """\
import atexit, os, threading, time
MARKS = {marks!r}

def mark(word):
    with open(MARKS, "a") as fh:
        fh.write(word + "\\n")

atexit.register(mark, "atexit")

def linger():  # a kernel's thread that outlives the round
    while not os.path.exists(MARKS + ".release"):
        time.sleep(0.05)
    mark("thread")

threading.Thread(target=linger).start()
"""


def _one_case_suite(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_version: 1\nname: exit\nkernels: [reference]\ngate: [reference]\n"
        'threshold: "median:5%"\n'
        "cpu_timing: {rounds: 2, max_rounds: 2, samples_per_round: 3, sample_target_ms: 1,"
        f" warmup_ms: 1, case_timeout_s: {WAIT_S:g}}}\n"
        "cases:\n  - {shape: [1, 2, 24, 16], causal: false}\n"
    )
    return path


def test_the_worker_leaves_without_teardown_but_runs_the_atexit_handlers(tmp_path):
    """A thread a kernel left running would hold the interpreter's exit (the runner
    then kills the worker at the case timeout and records no phases for the round)."""
    marks = tmp_path / "marks"
    (tmp_path / "exit_probe.py").write_text(EXIT_PROBE.format(marks=str(marks)))
    session = Rounds(
        load_suite(_one_case_suite(tmp_path)),
        device="cpu",
        fault_modules=("exit_probe",),
        sys_path=(str(tmp_path),),
    )
    try:
        session.check()
    finally:
        Path(str(marks) + ".release").touch()
    run = session.results()["candidate"]
    assert run.cases[0].status == "ok"
    assert marks.read_text().split() == ["atexit"]  # the thread never got to finish
    [check] = run.rounds
    assert check.phases is not None  # the worker ended by itself, right after "done"


@pytest.mark.parametrize("teardown", [False, True])
def test_a_job_that_asks_for_the_whole_teardown_gets_it(tmp_path, teardown):
    """``WorkerJob.teardown`` (compute-sanitizer's jobs): the interpreter's own exit,
    which waits for the kernel's thread; without it the worker leaves once its
    atexit handlers ran, the thread cut off."""
    marks = tmp_path / "marks"
    (tmp_path / "exit_probe.py").write_text(EXIT_PROBE.format(marks=str(marks)))
    suite = load_suite(_one_case_suite(tmp_path))
    job = WorkerJob(
        "check",
        "cpu",
        str(ROOT),
        suite.cpu_timing,
        (CaseJob(suite.cases[0], 1),),
        fault_modules=("exit_probe",),
        sys_path=(str(tmp_path),),
        teardown=teardown,
    )
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job.to_json()) + "\n")
    release = Path(str(marks) + ".release")
    with job_file.open() as stdin:  # a file, not a pipe: the worker starts no watchdog
        worker_proc = subprocess.Popen(
            [sys.executable, "-m", "guard.measure.worker"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            text=True,
            cwd=proc.GUARD_ROOT,
            env=proc.child_env(),
        )
    try:
        assert worker_proc.stdout is not None
        events = [json.loads(line) for line in worker_proc.stdout]
        assert events[-1]["event"] == "done"
        if teardown:
            release.touch()  # the interpreter's exit waits for the thread
        assert worker_proc.wait(timeout=WAIT_S) == 0
    finally:
        release.touch()
        worker_proc.kill()
        worker_proc.wait()
    assert marks.read_text().split() == (["thread", "atexit"] if teardown else ["atexit"])


@pytest.mark.parametrize("sanitize", [False, True])
def test_only_jobs_under_compute_sanitizer_ask_for_the_whole_teardown(tiny_suite, sanitize):
    session = Rounds(load_suite(tiny_suite), device="cpu", sanitize=sanitize)
    job = session._job(Arm(), "check", list(session.suite.cases), 0)
    assert job.teardown is sanitize
    assert WorkerJob.from_json(job.to_json()).teardown is sanitize


def test_a_worker_does_not_import_scipy() -> None:
    # scipy.stats costs a worker about a second of start-up per round; only deciding
    # (the parent) needs it, so the statistics module imports it on first use.
    code = (
        "import sys\n"
        "import guard.measure.worker, guard.measure.measure, guard.measure.fingerprint\n"
        "import guard.measure.proc, guard.measure.env, guard.store.results, guard.store.suite\n"
        "import guard.base.stats\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=ROOT,
    ).stdout
    assert out.strip() == "[]", out
