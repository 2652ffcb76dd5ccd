"""A project's own pytest-benchmark suite, measured in rounds of fresh pytest processes.

One round of one arm (a tree: this checkout, or a worktree of the base ref) is one
``python -m pytest ARGS`` process run from that tree, with ``--benchmark-json`` and
``--benchmark-save-data`` added, so every benchmark's samples of that process are one
round (``guard.store.pytest_runs``). The arms alternate round by round, the first of
each round changing every round (ABBA...), as the guard's own workers do
(``runner.Rounds.time``).

Each arm's tree comes first on ``PYTHONPATH`` (and its ``src/`` when it has one), so
its modules are imported, not those of the other tree or of an editable install. A
small plugin records every test that failed or errored (and every module that failed
to collect): such a test is "wrong results" (a WRONG case), never a timing. pytest's
exit codes: 0 and 1 (tests failed) are rounds; 4 (usage) and 5 (no tests collected)
are bad input; anything else, a timeout or a process left behind is infrastructure.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from guard.base.errors import BadInput, InfraError, shown
from guard.measure.proc import run_group, strays_text
from guard.measure.runner import Progress, ProgressFn, _noop
from guard.store import pytest_benchmark, pytest_runs, results
from guard.store.pytest_benchmark import PytestBenchmarkFile
from guard.store.results import RoundInfo, RunResult

ROUND_TIMEOUT_S = 600.0  # one pytest process
OUTPUT_TAIL_BYTES = 8 * 1024  # of a failed round's output, in its message
PLUGIN = "_guard_pytest_outcomes"
PLUGIN_SOURCE = '''"""Written by the guard: the tests that failed, as JSON at exit (stdlib only)."""
import json
import os

_FAILED = {}


def _why(report):
    text = getattr(report, "longreprtext", "") or ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "failed")[:300]


def pytest_runtest_logreport(report):
    if report.failed:
        _FAILED.setdefault(report.nodeid, report.when + ": " + _why(report))


def pytest_collectreport(report):
    if report.failed:
        _FAILED.setdefault(report.nodeid or "collection", "collection: " + _why(report))


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["GUARD_PYTEST_OUTCOMES"], "w", encoding="utf-8") as fh:
        json.dump(_FAILED, fh)
'''

# Options the guard sets itself, or that would leave nothing to time or write into the
# trees: refused in ARGS (exit 2), with why.
REFUSED = {
    "--benchmark-json": "the guard writes each round's JSON itself",
    "--benchmark-disable": "nothing would be timed",
    "--benchmark-skip": "nothing would be timed",
    "--benchmark-save": "rounds are not saved into the trees (--benchmark-json per round)",
    "--benchmark-autosave": "rounds are not saved into the trees (--benchmark-json per round)",
    "--benchmark-compare": "the guard compares the two trees' rounds itself",
    "--benchmark-storage": "the guard keeps pytest-benchmark's storage out of the trees",
    # Options that run no test: nothing to time.
    "--help": "it runs no benchmark",
    "-h": "it runs no benchmark",
    "--version": "it runs no benchmark",
    "-V": "it runs no benchmark",
    "--collect-only": "it runs no benchmark",
    "--co": "it runs no benchmark",
    "--fixtures": "it runs no benchmark",
    "--funcargs": "it runs no benchmark",
    "--fixtures-per-test": "it runs no benchmark",
    "--markers": "it runs no benchmark",
    "--setup-only": "it runs no benchmark",
    "--setup-plan": "it runs no benchmark",
    "--benchmark-help": "it runs no benchmark",
}
COMPARE_FAIL = "--benchmark-compare-fail"


@dataclass(frozen=True)
class PytestArm:
    """A tree whose suite is run: ``root`` is where pytest starts (the same place in
    both trees, so that ARGS mean the same)."""

    name: str  # "baseline" or "candidate"
    root: Path
    label: str


def parse_args(args: Sequence[str], threshold: str | None) -> tuple[tuple[str, ...], str]:
    """ARGS for pytest, and the threshold: ``--benchmark-compare-fail=median:N%`` (or
    ``min:N%``) in ARGS (pytest-benchmark's notation; of its fields, the median and the
    minimum mean something here) sets it, as ``threshold`` does (both: BadInput).
    Options in ``REFUSED``: BadInput."""
    out: list[str] = []
    found: str | None = None
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        name, eq, value = arg.partition("=")
        if name in REFUSED:
            raise BadInput(f"--pytest {arg}: not taken here: {REFUSED[name]}")
        if name == COMPARE_FAIL:
            if not eq:
                if i + 1 >= len(items):
                    raise BadInput(f"--pytest {COMPARE_FAIL}: needs a value (median:N%, min:N%)")
                i += 1
                value = items[i]
            for part in value.split(","):
                try:
                    pytest_benchmark.pytest_case("x", part.strip())
                except ValueError as exc:
                    raise BadInput(
                        f"--pytest {COMPARE_FAIL}={value}: {exc} (only the median and the "
                        "minimum are decided here, as median:N% or min:N%)"
                    ) from None
                found = part.strip()
            i += 1
            continue
        out.append(arg)
        i += 1
    if found and threshold:
        raise BadInput(f"--threshold {threshold} and --pytest {COMPARE_FAIL}: give one of them")
    chosen = threshold or found or pytest_benchmark.PYTEST_LIVE_THRESHOLD
    try:
        pytest_benchmark.pytest_case("x", chosen)
    except ValueError as exc:
        raise BadInput(f"--threshold {chosen}: {exc}") from None
    return tuple(out), chosen


class PytestSession:
    """Rounds of two (or more) arms' pytest suites, interleaved. Not thread-safe."""

    def __init__(
        self,
        arms: Sequence[PytestArm],
        args: Sequence[str],
        *,
        device: str = "auto",
        threshold: str = pytest_benchmark.PYTEST_LIVE_THRESHOLD,
        timeout_s: float = ROUND_TIMEOUT_S,
        progress: ProgressFn = _noop,
        python: str = sys.executable,
    ) -> None:
        self.arms = tuple(arms)
        self.args = tuple(args)
        self.device = device
        self.threshold = threshold
        self.timeout_s = timeout_s
        self.progress = progress
        self.python = python
        self.docs: dict[str, list[PytestBenchmarkFile]] = {a.name: [] for a in self.arms}
        self.wrong: dict[str, dict[str, str]] = {a.name: {} for a in self.arms}
        self.infos: dict[str, list[RoundInfo]] = {a.name: [] for a in self.arms}
        self.rounds_done = 0
        self._planned = 0

    @property
    def failed(self) -> bool:
        """Whether a test of the last arm (the candidate) failed: its check fails
        whatever the timings say, so no more rounds are timed. A test failing in the
        baseline only leaves that case without a comparison; the rest is timed."""
        return bool(self.wrong[self.arms[-1].name]) if self.arms else False

    def time(self, n_rounds: int, planned: int | None = None) -> None:
        """``n_rounds`` more rounds of every arm (``planned``: the total shown)."""
        self._planned = max(self._planned, planned or 0, self.rounds_done + n_rounds)
        for _ in range(n_rounds):
            self.rounds_done += 1
            r = self.rounds_done
            arms = self.arms if r % 2 else tuple(reversed(self.arms))
            for arm in arms:
                self._round(arm, r, tuple(a.name for a in arms))
            self._refuse_a_shared_failure()
            if self.failed:
                return

    def _refuse_a_shared_failure(self) -> None:
        """Every test failing in every arm, none timed, is how the arguments or the
        environment fail (``--benchmark-timer=os.getpid``), not the trees: bad input."""
        timed = any(doc.benchmarks for a in self.arms for doc in self.docs[a.name])
        if len(self.arms) < 2 or timed:
            return
        if all(self.wrong[a.name] for a in self.arms):
            sets = [set(self.wrong[a.name]) for a in self.arms]
            if all(s == sets[0] for s in sets):
                test, why = next(iter(self.wrong[self.arms[-1].name].items()))
                raise BadInput(
                    f"pytest {shown(' '.join(self.args))}: every test failed in both trees "
                    f"alike, so the arguments or the environment fail, not a change: {test}: {why}"
                )

    def _env(self, arm: PytestArm, plugin_dir: str, outcomes: Path) -> dict[str, str]:
        env = dict(os.environ)
        paths = [plugin_dir, str(arm.root)]
        top = toplevel(arm.root)
        for extra in (top, top / "src") if top is not None else ():
            if extra.is_dir() and str(extra) not in paths:
                paths.append(str(extra))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["GUARD_PYTEST_OUTCOMES"] = str(outcomes)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # The environment's size moves the process's initial stack, and with it the
        # alignment of everything on it: a fixed difference between the trees (their
        # paths) could slow one tree's every round by a few percent. A random size per
        # process turns that into noise between rounds, which the interval accounts for.
        env["GUARD_LAYOUT_PAD"] = "." * random.randrange(0, 4096)
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # --device cpu: the suite sees no GPU
        return env

    def _round(self, arm: PytestArm, r: int, order: tuple[str, ...]) -> None:
        # Benchmarks a round holds, as far as known (0 before the first round ends).
        known = max((len(d[0].benchmarks) for d in self.docs.values() if d), default=0)
        if known:  # before the first round ends, the round's end says how many
            self.progress(Progress("time", arm.name, r, self._planned, "", 0, known))
        started, t0 = results.now_iso(), time.monotonic()
        with tempfile.TemporaryDirectory(prefix="guard-pytest-") as tmp:
            out = Path(tmp) / "round.json"
            outcomes = Path(tmp) / "outcomes.json"
            (Path(tmp) / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
            argv = [
                self.python,
                "-m",
                "pytest",
                *self.args,
                "-p",
                PLUGIN,
                "-p",
                "no:cacheprovider",
                f"--benchmark-json={out}",
                "--benchmark-save-data",
                # Saves that an ini file's or PYTEST_ADDOPTS' addopts ask for (autosave)
                # land here, never in the tree.
                f"--benchmark-storage=file://{Path(tmp) / 'storage'}",
            ]
            code, output = _run(argv, arm.root, self._env(arm, tmp, outcomes), self.timeout_s)
            where = f"round {r} of the {arm.name} ({arm.label})"
            if code is None:
                raise InfraError(
                    f"pytest {where}: still running after {self.timeout_s:g} s; killed. "
                    f"Output ends: {_tail(output)}"
                )
            failed = _read_outcomes(outcomes)
            if code == 4:
                raise BadInput(f"pytest {shown(' '.join(self.args))}: usage error: {_tail(output)}")
            if code == 5:
                raise BadInput(
                    f"pytest {shown(' '.join(self.args))} collected no tests in {arm.label} "
                    f"({arm.root})"
                )
            if code not in (0, 1) and not failed:
                raise InfraError(f"pytest {where}: exit code {code}. Output ends: {_tail(output)}")
            if failed:
                for nodeid, why in failed.items():
                    self.wrong[arm.name].setdefault(nodeid, why)
            elif not out.is_file() and code == 0:
                raise BadInput(
                    f"pytest {shown(' '.join(self.args))}: ran no benchmark in {arm.label} "
                    f"(exit 0, no --benchmark-json written): {_tail(output)}"
                )
            elif not out.is_file():
                raise InfraError(f"pytest {where}: wrote no --benchmark-json file: {_tail(output)}")
            if out.is_file() and (out.stat().st_size or not failed):  # empty: all failed
                doc = pytest_runs.read_pytest_json(out, where)
                if not doc.benchmarks and not failed:
                    raise BadInput(
                        f"pytest {shown(' '.join(self.args))}: no benchmark ran in {arm.label} "
                        "(tests that use the `benchmark` fixture, saved with their samples)"
                    )
                self.docs[arm.name].append(doc)
        self.infos[arm.name].append(
            RoundInfo(r, arm.name, started, round(time.monotonic() - t0, 3), order)
        )
        done = len(self.docs[arm.name][-1].benchmarks) if self.docs[arm.name] else known
        self.progress(Progress("time", arm.name, r, self._planned, "", done, done))

    def results(self) -> dict[str, RunResult]:
        """Each arm's rounds as a run (``pytest_runs.rounds_run``), after checking that
        every round ran on one machine and held the same benchmarks."""
        pytest_runs.check_same_machine([d for docs in self.docs.values() for d in docs])
        out = {}
        for arm in self.arms:
            run = pytest_runs.rounds_run(
                self.docs[arm.name],
                label=arm.label,
                arm=arm.name,
                threshold=self.threshold,
                wrong=self.wrong[arm.name],
                notes=(
                    f"pytest {' '.join(self.args)}: each round one fresh pytest process in "
                    f"{arm.root}",
                ),
            )
            out[arm.name] = replace(run, rounds=tuple(self.infos[arm.name]))
        return out


def toplevel(root: Path) -> Path | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def _run(
    argv: Sequence[str], cwd: Path, env: dict[str, str], timeout_s: float
) -> tuple[int | None, str]:
    """Run ``argv`` in ``cwd`` as the leader of a new process group, killed at
    ``timeout_s`` and on return (None: timed out); its output's tail. A process that
    left the group is killed and fails the round (InfraError), as a worker's does."""
    try:
        run = run_group(
            argv,
            timeout_s,
            env,
            cwd=cwd,
            stdout_limit=OUTPUT_TAIL_BYTES,
            stderr_limit=OUTPUT_TAIL_BYTES,
        )
    except OSError as exc:
        raise InfraError(f"cannot start pytest in {cwd}: {exc}") from None
    if run.strays:
        raise InfraError(
            f"pytest in {cwd} left {strays_text(run.strays)} running outside its process "
            "group; killed"
        )
    output = run.stdout + ("\n" + run.stderr if run.stderr else "")
    return run.returncode, output[-OUTPUT_TAIL_BYTES:]


def _tail(output: str, lines: int = 6) -> str:
    kept = [line for line in output.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def _read_outcomes(path: Path) -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return {str(k): str(v) for k, v in data.items()}
    return {}
