"""Shared fixtures: synthetic runs (no torch timing needed) and a tiny CPU suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The Triton kernels run under the interpreter on CPU-only machines, and triton reads
# the switch once, when it is first imported: set it before any test module imports
# triton (tests that compile for a GPU target do so in a fresh process without it).
import torch

if not torch.cuda.is_available():  # on a GPU machine the kernels compile and launch
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest
from hypothesis import settings

from guard.base.stats import Threshold
from guard.store.results import OK, SCHEMA_VERSION, CaseResult, Correctness, Environment, RunResult
from guard.store.suite import Case, Shape

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# Kernel tests draw fresh inputs every run: their seeds are offset by one drawn per
# session (ATTN_GUARD_TEST_SEED replays a run), which pytest's header prints.
KERNEL_SEED = int(os.environ.get("ATTN_GUARD_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))


# Tests of the Gluon Hopper kernel run on an sm_90 GPU only.
needs_sm90 = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
    reason="needs an sm_90 GPU",
)


def pytest_report_header() -> str:
    return f"kernel test inputs: ATTN_GUARD_TEST_SEED={KERNEL_SEED}"


GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                 "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    """``git -C repo ARGS`` with a test identity; its stdout, stripped. Raises on failure."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60,
        check=True, env={**os.environ, **GIT_IDENTITY},
    ).stdout.strip()  # fmt: skip


# Property tests draw the same examples on every run and keep no example database, so a
# failure never depends on luck or on what an earlier run left behind; a failure prints
# the blob that reproduces it (@reproduce_failure). Loaded here, before any test module
# is imported, so every @settings(...) inherits it.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile("ci")

TINY_SUITE = """\
schema_version: 1
name: tiny
kernels: [reference, sdpa]
gate: [reference]
threshold: "median:5%"
cpu_timing: {rounds: 2, max_rounds: 2, samples_per_round: 3, sample_target_ms: 1, warmup_ms: 1}
cases:
  - {shape: [1, 2, 24, 16], causal: false}
  - {shape: [1, 2, 17, 16], causal: true}
"""


def make_env(**kw) -> Environment:
    base = dict(
        device="cuda",
        gpu_name="NVIDIA H100 80GB HBM3",
        gpu_slug="nvidia-h100-80gb-hbm3",
        driver="580.1",
        cuda="13.0",
        torch="2.11.0",
        triton="3.6.0",
        python="3.12",
        commit="abc123",
    )
    base.update(kw)
    return Environment(**base)


def make_case(name="b1-h8-s512-d64-full", kernel="triton_flash", gate=True, threshold="median:2%"):
    return Case(
        name, kernel, Shape(1, 8, 512, 64), "float16", False, Threshold.parse(threshold), gate
    )


def synthetic_rounds(
    rng: np.random.Generator,
    mu: float,
    n_rounds: int = 6,
    per_round: int = 25,
    between: float = 0.004,
    within: float = 0.01,
) -> tuple[tuple[float, ...], ...]:
    """Log-normal samples with a per-round offset (the structure seen on H100/H200)."""
    return tuple(
        tuple(
            float(x)
            for x in mu * np.exp(rng.normal(0, between)) * np.exp(rng.normal(0, within, per_round))
        )
        for _ in range(n_rounds)
    )


def make_run(
    case_rounds: dict[Case, tuple],
    env: Environment | None = None,
    status: dict[str, str] | None = None,
    label: str = "run",
) -> RunResult:
    status = status or {}
    cases = []
    for case, rounds in case_rounds.items():
        st = status.get(case.id, OK)
        corr = Correctness(st == OK, 1e-3, 2e-3, 2e-3, 8e-3, 6e-4, 7)
        cases.append(
            CaseResult(
                case=case,
                status=st,
                reason="" if st == OK else "planted",
                correctness=corr,
                rounds=rounds if st == OK else (),
                host_rounds=rounds[:1] if st == OK else (),
                method="cuda-graph",
                calls_per_sample=(10,) * len(rounds),
            )
        )
    return RunResult(
        SCHEMA_VERSION,
        "2026-11-26T00:00:00+00:00",
        "attention-fwd",
        "h1",
        env or make_env(),
        tuple(cases),
        label=label,
    )


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261126)


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SUITE)
    return path


def two_arm_session(suite_path: Path, **kw: object):  # -> guard.measure.runner.Rounds
    """A CPU session of the suite at ``suite_path`` with two arms, both this tree's
    kernels (the runner's mechanics, not a comparison), seeded."""
    from guard.measure.runner import Arm, Rounds
    from guard.store.suite import load_suite

    return Rounds(
        load_suite(suite_path),
        device="cpu",
        arms=(Arm("baseline", str(ROOT)), Arm("candidate", str(ROOT))),
        seed=11,
        **kw,  # type: ignore[arg-type]
    )


def fault_suite(
    tmp_path: Path,
    kernels: list[str],
    gate: list[str] | None = None,
    timeout: float = 60,
    rounds: int = 2,
    *,
    name: str = "faults",
    samples: int = 3,
) -> Path:
    """A one-case CPU suite over ``kernels`` (the fault kernels of fault_kernels.py
    among them); all of them gated unless ``gate`` says otherwise."""
    import json

    path = tmp_path / "suite.yaml"
    path.write_text(
        f"schema_version: 1\nname: {name}\n"
        f"kernels: {json.dumps(kernels)}\ngate: {json.dumps(kernels if gate is None else gate)}\n"
        'threshold: "median:10%"\n'
        f"cpu_timing: {{rounds: {rounds}, max_rounds: {rounds}, samples_per_round: {samples},"
        f" sample_target_ms: 1, warmup_ms: 1, case_timeout_s: {timeout}}}\n"
        "cases:\n  - {shape: [1, 2, 24, 16], causal: true}\n"
    )
    return path


def stub_op(monkeypatch: pytest.MonkeyPatch, name: str, fn: object) -> None:
    """Replace the operation ``name`` wherever a command or an operation looks it up
    (each module imports it by name), so that a test reaches no real measurement."""
    import importlib
    import pkgutil

    import guard.commands
    import guard.ops

    patched = 0
    for package in (guard.commands, guard.ops):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if callable(getattr(module, name, None)):
                monkeypatch.setattr(module, name, fn)
                patched += 1
    assert patched, f"no command or operation has {name}"
