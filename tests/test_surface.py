"""The PR check's surface: the cases it adds where a change reaches them.

What must hold: every launch path of every gated kernel on sm_90 is run by some case of
the default suite or its surface (``guard list --coverage``), and the check catches a
path left without one; the surface file is validated like a suite; a probed case is
added exactly when its fingerprint (or its success) differs between the trees; the
selection runs end to end in worker processes; long cases are checked on a sample of
query rows, and sample fewer times a round; each tree gets its own compile cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from conftest import GIT_IDENTITY, ROOT, make_case
from conftest import git as _git

from guard.base.errors import BadInput
from guard.measure import build_cache, coverage, measure
from guard.measure import reference as guard_reference
from guard.measure.runner import Arm
from guard.ops import compare as ops_compare
from guard.ops import measure as ops_measure
from guard.ops import trees as ops_trees
from guard.store.results import CRASHED, OK, UNAVAILABLE, WRONG, CaseResult
from guard.store.suite import TimingPlan, Tolerance, load_suite
from kernels import launch_paths
from kernels.reference import attention_reference

SUITE = ROOT / "suites" / "default.yaml"
NO_CACHES = shutil.ignore_patterns("__pycache__")


# --------------------------------------------------------------------------- coverage


def test_every_launch_path_of_every_gated_kernel_is_run_by_the_surface():
    found = coverage.coverage(load_suite(SUITE))
    assert {k.kernel for k in found} == {"triton_flash", "gluon_flash", "cuda_flash"}
    for k in found:
        assert len(k.paths) >= 8, k.line()
        assert k.missing == (), f"{k.kernel}: no case runs {list(k.missing)}"


def test_a_path_run_by_one_case_only_is_missing_without_it():
    suite = load_suite(SUITE)
    every = (*suite.cases, *suite.surface)
    by_path: dict[tuple[str, str], list[str]] = {}
    for c in every:
        if c.gate:
            path = launch_paths.launch_path(c.kernel, c.params(), "sm_90")
            by_path.setdefault((c.kernel, path), []).append(c.id)
    (kernel, path), [only] = next((k, v) for k, v in by_path.items() if len(v) == 1)
    fewer = replace(
        suite,
        cases=tuple(c for c in suite.cases if c.id != only),
        surface=tuple(c for c in suite.surface if c.id != only),
    )
    missing = {k.kernel: k.missing for k in coverage.coverage(fewer)}
    assert missing[kernel] == (path,)


def test_guard_list_coverage_exits_1_naming_the_missing_path(tmp_path):
    doc = yaml.safe_load((ROOT / "suites" / "surface.yaml").read_text())
    doc["cases"] = [c for c in doc["cases"] if c["shape"][2] != 1]  # no Sq = 1 decode
    (tmp_path / "surface.yaml").write_text(yaml.safe_dump(doc))
    shutil.copy(SUITE, tmp_path / "default.yaml")
    run = subprocess.run(
        [sys.executable, "-m", "guard", "list", "--coverage", "--json",
         "--suite", str(tmp_path / "default.yaml")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    missing = {k["kernel"]: k["missing"] for k in json.loads(run.stdout)}
    assert any(missing.values()), missing


def test_paths_follow_the_dispatch_tables():
    def params(b, h, s, d, causal, dtype="float16", **kw):
        return {"shape": [b, h, s, d], "dtype": dtype, "causal": causal, **kw}

    assert launch_paths.cuda_path(params(1, 8, 128, 64, False), "sm_90").startswith("cuda mma_sync")
    long_full = launch_paths.cuda_path(params(2, 16, 2047, 128, False, "bfloat16"), "sm_90")
    assert long_full == "cuda hopper d128 bf16 full 128x192 s2 cluster2 last128"
    tier = launch_paths.gluon_path(params(4, 32, 4096, 128, False), "sm_90")
    below = launch_paths.gluon_path(params(2, 8, 2048, 128, False), "sm_90")
    assert tier.endswith("split") and not below.endswith("split")
    assert "pointer" in launch_paths.triton_path(params(1, 8, 4096, 128, False), "sm_90")
    with_ws = {"ATTN_TRITON_WS": "1"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", {**os.environ, **with_ws})
        assert "tma_ws" in launch_paths.triton_path(params(1, 8, 4096, 128, False), "sm_90")
        assert "pointer" in launch_paths.triton_path(params(1, 8, 4095, 128, False), "sm_90")


# --------------------------------------------------------------------------- the file


def _suite_with_surface(tmp_path: Path, surface: object, name: str = "surface.yaml") -> Path:
    doc = yaml.safe_load(SUITE.read_text())
    doc["surface"] = name
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(doc))
    if surface is not None:
        (tmp_path / "surface.yaml").write_text(yaml.safe_dump(surface))
    return path


SURFACE = {
    "schema_version": 1,
    "name": "s",
    "cases": [{"shape": [1, 8, 4096, 128], "causal": False}],
}


def test_the_surface_takes_the_suites_policy(tmp_path):
    suite = load_suite(_suite_with_surface(tmp_path, SURFACE))
    ids = {c.id for c in suite.surface}
    assert ids == {
        f"{k}/b1-h8-s4096-d128-full" for k in ("triton_flash", "gluon_flash", "cuda_flash")
    }
    assert all(c.gate and str(c.threshold) == "median:2%" for c in suite.surface)
    assert {c.kernel for c in suite.select(["cuda_flash"]).surface} == {"cuda_flash"}


@pytest.mark.parametrize(
    ("surface", "name", "field"),
    [
        (SURFACE, "../surface.yaml", "surface"),
        (SURFACE, ".hidden.yaml", "surface"),
        (None, "surface.yaml", "surface file not found"),
        ({**SURFACE, "kernels": ["no_such_kernel"]}, "surface.yaml", "kernels"),
        ({**SURFACE, "timing": {"alpha": 0.5}}, "surface.yaml", "unknown field"),
        ({**SURFACE, "schema_version": 2}, "surface.yaml", "schema_version"),
        (
            {**SURFACE, "cases": [{"name": "b1-h8-s128-d64-full", "shape": [1, 8, 256, 64]}]},
            "surface.yaml",
            "another workload",
        ),
    ],
)
def test_a_bad_surface_is_refused_naming_the_field(tmp_path, surface, name, field):
    with pytest.raises(BadInput, match=field.replace(".", r"\.")):
        load_suite(_suite_with_surface(tmp_path, surface, name))


def test_a_suite_document_loads_back_to_the_same_cases(tmp_path):
    suite = load_suite(SUITE)
    mixed = suite.with_cases((*suite.cases, *suite.surface[:9]))
    path = tmp_path / "doc.yaml"
    path.write_text(yaml.safe_dump(mixed.document(), sort_keys=False))
    again = load_suite(path)
    assert [(c.id, c.params(), c.gate, c.threshold) for c in again.cases] == [
        (c.id, c.params(), c.gate, c.threshold) for c in mixed.cases
    ]
    assert again.surface == ()


# --------------------------------------------------------------------------- selection


def _result(status: str = OK, fingerprint: str = "gpu:a", reason: str = "") -> CaseResult:
    return CaseResult(make_case(), status, reason=reason, fingerprint=fingerprint)


def test_an_identical_case_is_not_added_and_a_changed_one_says_which_launch():
    same = ops_compare.surface_reason(
        _result(), _result(), ({"k grid [1]": "a"}, {"k grid [1]": "a"})
    )
    assert same == ""
    why = ops_compare.surface_reason(
        _result(fingerprint="gpu:a"),
        _result(fingerprint="gpu:b"),
        (
            {"_attn grid [132]": "a", "old grid [1]": "c"},
            {"_attn grid [132]": "b", "new grid [2]": "d"},
        ),
    )
    assert why == "changed: _attn grid [132], new: new grid [2], no longer: old grid [1]"


@pytest.mark.parametrize(
    ("base", "head", "added"),
    [
        (_result(), _result(WRONG, "", "3 of 8 outputs are NaN"), "wrong in the head only"),
        (_result(CRASHED, "", "boom"), _result(), "crashed in the base only"),
        (_result(UNAVAILABLE, ""), _result(UNAVAILABLE, ""), ""),
        (_result(CRASHED, ""), _result(CRASHED, ""), ""),  # the base's too: a note
        (_result(fingerprint=""), _result(fingerprint=""), "fingerprint unknown"),
    ],
)
def test_a_case_that_fails_in_one_tree_only_is_added(base, head, added):
    why = ops_compare.surface_reason(base, head, ({}, {}))
    assert (added in why) if added else why == ""


SMALL_SURFACE_SUITE = """\
schema_version: 1
name: small
kernels: [reference, sdpa]
gate: [reference]
threshold: "median:25%"
surface: surface.yaml
cpu_timing: {rounds: 2, max_rounds: 2, samples_per_round: 3, sample_target_ms: 1, margin: 0.05}
cases:
  - {shape: [1, 2, 16, 16], causal: false, dtype: float32}
"""
SMALL_SURFACE = """\
schema_version: 1
name: small-surface
cases:
  - {shape: [1, 2, 40, 16], causal: true, dtype: float32}
  - {shape: [2, 2, 24, 16], causal: false, dtype: float32}
"""


def _tree(tmp_path: Path, name: str) -> Path:
    tree = tmp_path / name
    shutil.copytree(ROOT / "kernels", tree / "kernels", ignore=NO_CACHES)
    return tree


def test_the_probe_adds_the_surface_cases_a_change_reaches(tmp_path):
    (tmp_path / "suite.yaml").write_text(SMALL_SURFACE_SUITE)
    (tmp_path / "surface.yaml").write_text(SMALL_SURFACE)
    suite = load_suite(tmp_path / "suite.yaml")
    base, same, changed = _tree(tmp_path, "base"), _tree(tmp_path, "same"), _tree(tmp_path, "new")
    with (changed / "kernels" / "reference.py").open("a") as fh:
        fh.write("\n# a change\n")
    opts = ops_measure.MeasureOptions(device="cpu", probe_workers=2)
    arms = (Arm("baseline", str(base)), Arm("candidate", str(same)))
    unchanged = ops_compare.select_surface(suite, arms, opts)
    assert unchanged.probed == 2 and unchanged.added == ()
    arms = (Arm("baseline", str(base)), Arm("candidate", str(changed)))
    picked = ops_compare.select_surface(suite, arms, opts)
    assert {c.id for c in picked.added} == {c.id for c in suite.surface}
    assert all("fingerprint differs" in why for _, why in picked.reasons)
    assert picked.summary()[0].startswith("surface: 2 of 2 case(s) added")
    assert ops_compare.select_surface(suite, arms, replace(opts, surface="none")).added == ()
    assert len(ops_compare.select_surface(suite, arms, replace(opts, surface="all")).added) == 2


# --------------------------------------------------------------------------- long cases


def test_a_long_cases_reference_is_a_sample_of_rows_every_key(monkeypatch):
    monkeypatch.setattr(measure, "REFERENCE_PAIRS", 1000)
    monkeypatch.setattr(measure, "SAMPLED_ROWS", 12)
    monkeypatch.setattr(measure, "CHUNK_PAIRS", 700)  # a few heads at a time
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 8, 64, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, 48, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, 48, 16, generator=gen, dtype=torch.float64)
    rows = measure.sampled_rows(q, k, seed=3)
    assert rows is not None and len(rows) == 12 and rows[0] == 0 and rows[-1] == 63
    assert torch.equal(rows, measure.sampled_rows(q, k, seed=3))  # the seed decides
    for causal in (False, True):
        full = attention_reference(q, k, v, causal=causal, dtype=torch.float64)
        sampled = measure.reference_rows(q, k, v, causal, rows, torch.float64)
        torch.testing.assert_close(sampled, full[:, :, rows])


def test_a_long_case_fails_on_a_wrong_sampled_row_and_on_nan_anywhere(monkeypatch):
    monkeypatch.setattr(measure, "REFERENCE_PAIRS", 1000)
    monkeypatch.setattr(measure, "SAMPLED_ROWS", 10)
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 4, 80, 16, generator=gen) for _ in range(3))
    yard = measure.Yardstick.of(q, k, v, True, Tolerance(), seed=4)
    assert yard.rows is not None and yard.ref.shape[2] == 10
    good = attention_reference(q, k, v, causal=True).to(q.dtype)
    assert measure.judge(good, q, yard).passed
    wrong = good.clone()
    wrong[:, :, yard.rows[3]] += 0.5
    assert not measure.judge(wrong, q, yard).passed
    unsampled = next(i for i in range(80) if i not in set(yard.rows.tolist()))
    poisoned = good.clone()
    poisoned[0, 0, unsampled, 0] = float("nan")
    assert "NaN" in measure.judge(poisoned, q, yard).message


def test_the_judges_reference_is_the_kernels_definition():
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(2, 8, 40, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(2, 2, 56, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(2, 2, 56, 16, generator=gen, dtype=torch.float64)
    rows = torch.tensor([0, 7, 39])
    for causal in (False, True):
        mine = guard_reference.attention_reference(q, k, v, causal=causal, dtype=torch.float64)
        theirs = attention_reference(q, k, v, causal=causal, dtype=torch.float64)
        torch.testing.assert_close(mine, theirs)
        sampled = guard_reference.attention_reference(
            q[:, :, rows], k, v, causal=causal, dtype=torch.float64, rows=rows
        )
        torch.testing.assert_close(sampled, theirs[:, :, rows])
        yard = guard_reference.yardstick_sdpa(q.float(), k.float(), v.float(), causal)
        torch.testing.assert_close(yard.double(), theirs, atol=1e-5, rtol=1e-4)


def test_a_tree_that_rigs_its_own_reference_still_fails_a_wrong_kernel(monkeypatch):
    """The tree under test imports as ``kernels``: its reference and SDPA adapters are
    its code, so the yardstick must not come from them."""
    rigged_reference = types.ModuleType("kernels.reference")
    rigged_sdpa = types.ModuleType("kernels.sdpa")
    rigged_reference.attention_reference = lambda q, k, v, **_: torch.zeros_like(q)  # type: ignore[attr-defined]
    rigged_sdpa.sdpa_default = lambda q, k, v, **_: torch.zeros_like(q)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kernels.reference", rigged_reference)
    monkeypatch.setitem(sys.modules, "kernels.sdpa", rigged_sdpa)
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 32, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    yard = measure.Yardstick.of(q, k, v, False, Tolerance(), seed=1)
    verdict = measure.judge(torch.zeros_like(q), q, yard)  # what the rigged tree computes
    assert not verdict.passed and "over tolerance" in verdict.message


def test_a_slow_call_takes_fewer_samples_a_round():
    plan = TimingPlan(samples_per_round=25, case_budget_ms=150.0, min_samples=5)
    assert measure.samples_for(plan, 0.001) == 25  # 1 ms samples: the plan's
    assert measure.samples_for(plan, 0.010) == 15
    assert measure.samples_for(plan, 0.030) == 5
    assert measure.samples_for(plan, 2.0) == 5  # never fewer than min_samples
    assert sum(measure.pass_sizes(plan, 7)) == 7


# --------------------------------------------------------------------------- caches


def test_each_tree_gets_its_own_copy_of_the_trusted_cache(tmp_path):
    trusted = tmp_path / "trusted"
    (trusted / "triton" / "ab").mkdir(parents=True)
    (trusted / "triton" / "ab" / "k.cubin").write_bytes(b"cubin")
    base, head = build_cache.arm_caches(tmp_path / "arms", trusted)
    base_dir, head_dir = Path(dict(base)["TRITON_CACHE_DIR"]), Path(dict(head)["TRITON_CACHE_DIR"])
    assert base_dir != head_dir
    (head_dir / "ab" / "k.cubin").write_bytes(b"poisoned by the PR")
    assert (base_dir / "ab" / "k.cubin").read_bytes() == b"cubin"
    assert (trusted / "triton" / "ab" / "k.cubin").read_bytes() == b"cubin"
    with pytest.raises(BadInput, match="not a folder"):
        build_cache.check_trusted(tmp_path / "none")


def test_a_trusted_cache_is_replaced_whole(tmp_path):
    dest = tmp_path / "trusted"
    first = build_cache.staging(dest)
    (first / "triton" / "old").write_text("1")
    build_cache.publish(first, dest)
    second = build_cache.staging(dest)
    (second / "triton" / "new").write_text("2")
    build_cache.publish(second, dest)
    assert sorted(p.name for p in (dest / "triton").iterdir()) == ["new"]
    assert oct(dest.stat().st_mode & 0o777) == "0o755"
    assert [p.name for p in tmp_path.iterdir()] == ["trusted"]  # nothing left beside it


def test_a_built_extension_loads_from_its_marker_only(tmp_path):
    from kernels import cuda_flash

    assert cuda_flash._import_built(tmp_path, "attn_guard_cuda_flash_x") is None
    (tmp_path / "attn_guard_cuda_flash_x.so").write_bytes(b"not an ELF file")
    assert cuda_flash._import_built(tmp_path, "attn_guard_cuda_flash_x") is None  # no marker
    (tmp_path / cuda_flash.BUILT_MARKER).write_text("attn_guard_cuda_flash_y\n")
    assert cuda_flash._import_built(tmp_path, "attn_guard_cuda_flash_x") is None  # another's


# --------------------------------------------------------------------------- same trees


def _repo(path: Path) -> Path:
    path.mkdir()
    shutil.copytree(ROOT / "kernels", path / "kernels", ignore=NO_CACHES)
    (path / "README.md").write_text("x\n")
    _git(path, "init", "-q")
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "base")
    return path


def test_the_kernels_tree_is_known_only_when_the_files_are_exactly_it(tmp_path):
    repo = _repo(tmp_path / "repo")
    tree = ops_trees.kernels_tree(repo)
    assert len(tree) == 40
    (repo / "README.md").write_text("docs only\n")
    assert ops_trees.kernels_tree(repo) == tree
    (repo / "kernels" / "new.py").write_text("")  # untracked
    assert ops_trees.kernels_tree(repo) == ""
    os.remove(repo / "kernels" / "new.py")
    (repo / "kernels" / "__pycache__").mkdir()
    (repo / "kernels" / "__pycache__" / "x.pyc").write_bytes(b"")  # untracked, not ignored
    assert ops_trees.kernels_tree(repo) == ""
    shutil.rmtree(repo / "kernels" / "__pycache__")
    with (repo / "kernels" / "sdpa.py").open("a") as fh:
        fh.write("# edited\n")
    assert ops_trees.kernels_tree(repo) == ""
    assert ops_trees.kernels_tree(tmp_path) == ""  # not a checkout


def test_a_pr_that_changes_no_kernel_passes_without_measuring(tmp_path):
    judge = _repo(tmp_path / "judge")
    shutil.copytree(ROOT / "suites", judge / "suites")
    shutil.copytree(ROOT / "guard", judge / "guard", ignore=NO_CACHES)
    (judge / ".gitignore").write_text("__pycache__/\n")
    _git(judge, "add", "-A")
    _git(judge, "commit", "-qm", "the judge")
    pr = tmp_path / "pr"
    subprocess.run(["git", "clone", "-q", str(judge), str(pr)], check=True, timeout=60)
    (pr / "README.md").write_text("docs\n")
    _git(pr, "commit", "-qam", "docs")
    env = {**os.environ, **GIT_IDENTITY, "PYTHONPATH": str(judge)}  # the judge's guard
    env = {k: v for k, v in env.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    run = subprocess.run(
        [sys.executable, "-m", "guard.ci", "--device", "cpu", "--base", "HEAD",
         "--candidate-tree", str(pr), "--out-dir", str(tmp_path / "out"),
         "--suite", str(judge / "suites" / "default.yaml")],
        capture_output=True, text=True, cwd=judge, env=env, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    outcome = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert outcome["verdict"] == "pass"
    assert any("same git tree in both" in n for n in outcome["notes"])
    assert {c["verdict"] for c in outcome["cases"] if c["gate"]} == {"identical"}
