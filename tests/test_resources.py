"""Compiler resources per case (guard/measure/resources.py and the hooks of kernel_reports/).

CPU only: the Triton kernel compiles for sm_90 and sm_89 without a GPU (in a child
process, as the guard runs it); a two-commit repository whose second commit enlarges a
tile shows the rise in ``diff``; the ``ptxas -v`` parser reads captured reports
(tests/fixtures/ptxas); the CUDA kernel's report comes from the machine's nvcc when
there is one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import report_data as data
from conftest import git as _git

from guard.base.errors import BadInput, InfraError
from guard.measure.resources import (
    KernelResources,
    ResourceChange,
    ResourceReport,
    collect_in_tree,
    collect_resources,
    diff,
    diff_cases,
)
from guard.store.suite import load_suite
from kernel_reports import cuda_flash_resources
from kernel_reports.ptxas import ResourcesUnavailable, exponentials_under_pv, parse_ptxas
from kernels import cuda_flash
from kernels.arch import parse_arch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ptxas"


def record(**kw) -> KernelResources:
    base = dict(
        arch="sm_90",
        kernel="_attn_fwd",
        registers=168,
        spill_store_bytes=0,
        spill_load_bytes=0,
        shared_bytes=57344,
        num_warps=4,
        num_stages=3,
        grid=(2, 8, 1),
        config={"BLOCK_M": 64, "BLOCK_N": 64, "source": "PINNED[sm_90]"},
        path="pointer",
    )
    base.update(kw)
    return KernelResources(**base)


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fresh triton and report caches, inherited by the child processes."""
    monkeypatch.setenv("ATTN_GUARD_CACHE", str(tmp_path / "guard-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    return tmp_path


# ------------------------------------------------------------------ data and diff


def test_record_round_trips_through_json() -> None:
    rec = record(stack_bytes=16, toolchain="triton 3.6.0, ptxas 12.8.93")
    assert KernelResources.from_json(rec.to_json()) == rec
    assert rec.spill_bytes == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"registers": "168"}, "registers"),
        ({"registers": True}, "registers"),
        ({"spill_load_bytes": -1}, "spill_load_bytes"),
        ({"num_warps": 0}, "num_warps"),
        ({"grid": [1, 2, 3, 4]}, "grid"),
        ({"grid": [1, 2.5]}, "grid[1]"),
        ({"config": {"BLOCK_M": 1.5}}, "config.BLOCK_M"),
        ({"config": {"BLOCK_M": False}}, "config.BLOCK_M"),
        ({"arch": "hopper"}, "arch"),
        ({"kernel": ""}, "kernel"),
        ({"colour": "red"}, "colour"),
        ({"registers": 10**5000}, "registers"),  # over Python's 4300-digit str() limit
        ({"grid": [1, 2**64]}, "grid[1]"),
        ({"arch": 10**5000}, "arch"),
    ],
)
def test_from_json_names_the_bad_field(change: dict, field: str) -> None:
    data = record().to_json()
    data.update(change)
    with pytest.raises(BadInput, match=re.escape(f"case7.{field}:")):
        KernelResources.from_json(data, "case7")


def test_from_json_names_a_missing_field() -> None:
    data = record().to_json()
    del data["shared_bytes"]
    with pytest.raises(BadInput, match=r"r\.shared_bytes: missing"):
        KernelResources.from_json(data, "r")


def test_diff_lists_what_changed() -> None:
    base = [record(), record(arch="sm_89", registers=255, num_stages=2)]
    head = [
        record(registers=190, config={"BLOCK_M": 128, "BLOCK_N": 64, "source": "PINNED[sm_90]"}),
        record(arch="sm_89", registers=255, num_stages=2),
    ]
    changes = diff(base, head)
    assert [str(c) for c in changes] == [
        "sm_90 _attn_fwd: config.BLOCK_M 64 -> 128",
        "sm_90 _attn_fwd: registers 168 -> 190",
    ]
    assert changes[1].delta == 22
    assert changes[0].to_json()["text"] == "sm_90 _attn_fwd: config.BLOCK_M 64 -> 128"
    assert diff(base, base) == []


def test_diff_pairs_a_renamed_kernel_and_reports_added_and_removed() -> None:
    renamed = diff([record(kernel="old")], [record(kernel="new", path="tma_ws")])
    assert [str(c) for c in renamed] == [
        "sm_90 new: kernel old -> new",
        "sm_90 new: path pointer -> tma_ws",
    ]
    two = diff([record(kernel="a"), record(kernel="b")], [record(kernel="c")])
    assert sorted(str(c) for c in two) == [
        "sm_90 a: removed",
        "sm_90 b: removed",
        "sm_90 c: added",
    ]
    grid = diff([record()], [record(grid=(4, 8, 1))])
    assert [str(c) for c in grid] == ["sm_90 _attn_fwd: grid 2x8x1 -> 4x8x1"]


def test_diff_cases_keeps_changed_cases_present_on_both_sides() -> None:
    base = {"k/a": (record(),), "k/b": (record(),), "k/gone": (record(),)}
    head = {"k/a": (record(),), "k/b": (record(shared_bytes=73728),), "k/new": (record(),)}
    out = diff_cases(base, head)
    assert list(out) == ["k/b"]
    assert out["k/b"] == [ResourceChange("sm_90", "_attn_fwd", "shared_bytes", 57344, 73728)]


def test_report_round_trips_and_refuses_a_newer_schema() -> None:
    report = ResourceReport(
        arches=("sm_90", "sm_89"),
        cases={"triton_flash/x": (record(), record(arch="sm_89"))},
        skipped={"cuda_flash/x": {"sm_90": "nvcc not found"}},
        tree="/some/tree",
        elapsed_s=1.5,
    )
    assert ResourceReport.from_json(report.to_json()) == report
    data = report.to_json()
    data["schema_version"] = 2
    with pytest.raises(BadInput, match="newer guard"):
        ResourceReport.from_json(data, "f.json")


def test_parse_arch() -> None:
    assert parse_arch("sm_90") == 90
    assert parse_arch("sm_90a") == 90
    assert parse_arch("sm_89") == 89
    for bad in ("sm90", "hopper", "sm_91"):
        with pytest.raises(ValueError):
            parse_arch(bad)


# ------------------------------------------------------------------ ptxas -v parser


def test_parser_reads_the_cuda_kernels_report() -> None:
    entries = parse_ptxas((FIXTURES / "cuda_flash_sm90a.txt").read_text())
    assert len(entries) == 8
    assert {e.target for e in entries} == {"sm_90a"}
    got = {cuda_flash_resources.instantiation(e.symbol): e.registers for e in entries}
    assert got == {
        ("__half", 128, False): 220,
        ("__half", 128, True): 230,
        ("__half", 64, False): 168,
        ("__half", 64, True): 164,
        ("__nv_bfloat16", 128, False): 220,
        ("__nv_bfloat16", 128, True): 230,
        ("__nv_bfloat16", 64, False): 168,
        ("__nv_bfloat16", 64, True): 164,
    }
    assert all(e.spill_store_bytes == e.spill_load_bytes == e.stack_bytes == 0 for e in entries)
    assert all(e.barriers == 1 and e.static_shared_bytes == 0 for e in entries)


def test_parser_reads_spills_and_stack() -> None:
    (entry,) = parse_ptxas((FIXTURES / "triton_attn_fwd_sm89_spills.txt").read_text())
    assert (entry.symbol, entry.target, entry.registers) == ("_attn_fwd", "sm_89", 255)
    assert (entry.spill_store_bytes, entry.spill_load_bytes, entry.stack_bytes) == (3164, 2764, 992)


def test_parser_reads_static_smem_and_ignores_other_functions_properties() -> None:
    (entry,) = parse_ptxas((FIXTURES / "static_smem_noinline_sm89.txt").read_text())
    assert entry.symbol == "_Z16with_static_smemPKfPf"
    assert (entry.registers, entry.static_shared_bytes, entry.stack_bytes) == (40, 8192, 256)


def test_cuda_record_from_a_captured_report() -> None:
    params = {"shape": [4, 16, 1000, 128], "dtype": "bfloat16", "causal": True}
    source = cuda_flash.KERNEL_SOURCE.read_text()
    (rec,) = cuda_flash_resources.records_from_report(
        (FIXTURES / "cuda_flash_sm90a.txt").read_text(), "sm_90", params, source
    )
    res = KernelResources.from_json(rec)
    assert res.kernel == "flash_fwd_kernel<__nv_bfloat16, 128, true>"
    assert (res.registers, res.num_warps, res.num_stages) == (230, 8, 2)
    assert res.shared_bytes == 69632  # the 69.6 KB the extension launches with (H100)
    assert res.grid == (8, 16, 4)  # BLOCK_M 128
    assert res.config == {"BLOCK_M": 128, "BLOCK_N": 64, "target": "sm_90a"}
    with pytest.raises(ResourcesUnavailable, match=r"no TileConfig<96>"):
        cuda_flash_resources.records_from_report(
            (FIXTURES / "cuda_flash_sm90a.txt").read_text(),
            "sm_90",
            {**params, "shape": [1, 1, 64, 96]},
            source,
        )


def test_cuda_hook_without_nvcc_is_skipped_with_a_reason(
    tmp_path: Path, caches: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda_flash, "find_nvcc", lambda: None)
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        "schema_version: 1\nname: t\nkernels: [cuda_flash, sdpa]\n"
        "cases:\n  - {shape: [1, 2, 128, 64]}\n"
    )
    report = collect_resources(load_suite(suite_file), ["sm_90"])
    assert report.cases == {"cuda_flash/b1-h2-s128-d64-full": ()}  # sdpa: no hook
    assert "nvcc not found" in report.skipped["cuda_flash/b1-h2-s128-d64-full"]["sm_90"]
    with pytest.raises(BadInput, match="arch"):
        collect_resources(load_suite(suite_file), ["hopper"])


def test_cuda_kernel_report_from_nvcc(caches: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if cuda_flash.find_nvcc() is None:
        pytest.skip("nvcc not found (no CUDA toolkit on this machine)")
    # Small enough that the mma.sync kernel runs on sm_90 too (the Hopper kernel's
    # records come from its own TUs: tests/test_cuda_flash.py).
    params = {"shape": [1, 8, 128, 64], "dtype": "float16", "causal": False}
    (rec,) = cuda_flash_resources.resources(params, "sm_90")
    res = KernelResources.from_json(rec)
    assert res.kernel == "flash_fwd_kernel<__half, 64, false>"
    assert res.config["target"] == "sm_90a"  # built as the extension builds Hopper
    assert 64 < res.registers <= 255
    assert res.spill_bytes == 0
    assert res.toolchain.startswith("nvcc ")
    cached = list((caches / "guard-cache" / "resources").glob("cuda_flash-*-sm_90.txt"))
    assert len(cached) == 1

    # The second call reads the cached report (keyed by source, nvcc version, arch):
    # no compile.
    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again despite the cached report")

    monkeypatch.setattr(cuda_flash, "compile_object", no_compile)
    assert cuda_flash_resources.resources(params, "sm_90") == [rec]


# ------------------------------------------------------------------ compiles (child processes)


def test_triton_and_gluon_kernels_compile_for_sm90_and_sm89_without_a_gpu(
    tmp_path: Path, caches: Path
) -> None:
    from kernels import flash_plan

    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        "schema_version: 1\nname: t\nkernels: [triton_flash, gluon_flash, sdpa]\n"
        "cases:\n  - {shape: [1, 2, 128, 64], causal: false}\n"
        "  - {shape: [1, 2, 2048, 128], causal: true}\n"
    )
    report = collect_in_tree(ROOT, suite_file, ["sm_90", "sm_89"], timeout_s=600)
    small, large = "b1-h2-s128-d64-full", "b1-h2-s2048-d128-causal"
    triton_ids = [f"triton_flash/{small}", f"triton_flash/{large}"]
    gluon_ids = [f"gluon_flash/{small}", f"gluon_flash/{large}"]
    assert sorted(report.cases) == sorted(gluon_ids + triton_ids), report.skipped
    assert report.tree == str(ROOT)
    # triton_flash: the Triton kernel's pointer path on both arches, on both shapes
    # (never the Gluon kernel, which the entry point takes for the large one on sm_90).
    for case_id, head_dim, causal in ((triton_ids[0], 64, False), (triton_ids[1], 128, True)):
        by_arch = {r.arch: r for r in report.cases[case_id]}
        assert sorted(by_arch) == ["sm_89", "sm_90"]
        for arch, res in by_arch.items():
            config = flash_plan.PINNED[(arch, head_dim, causal)]
            assert res.kernel == "_attn_fwd"
            assert res.path == "pointer"
            assert 0 < res.registers <= 255
            assert res.shared_bytes > 0
            assert res.num_warps == config.num_warps
            assert res.num_stages == config.num_stages
            assert res.config["BLOCK_M"] == config.kwargs["BLOCK_M"]
            assert res.config["BLOCK_N"] == config.kwargs["BLOCK_N"]
            assert res.config["source"] == f"PINNED[{arch}]"
            seq = 128 if head_dim == 64 else 2048
            assert res.grid == (-(-seq // config.kwargs["BLOCK_M"]), 2, 1)
            assert res.toolchain.startswith("triton ")
    # gluon_flash: the Gluon kernel on sm_90 at any length, FASTER's variant for
    # (head_dim, causal); on sm_89 no record, and the reason says why.
    simple = report.cases[gluon_ids[0]]
    assert [(r.arch, r.kernel, r.path) for r in simple] == [
        ("sm_90", "_attn_fwd_simple", "gluon-simple")
    ]
    (ws,) = report.cases[gluon_ids[1]]
    assert (ws.arch, ws.kernel, ws.path) == (
        "sm_90", "_attn_fwd_ws_persistent", "gluon-ws-persistent"
    )  # fmt: skip
    assert ws.config["source"] == "flash_plan.FASTER"
    assert ws.grid == (2048 // 128 * 2, 1, 1)  # one CTA per tile (fewer than 132 SMs)
    assert ws.spill_bytes == 0
    assert sorted(report.skipped) == sorted(gluon_ids)
    for reasons in report.skipped.values():
        assert list(reasons) == ["sm_89"] and "needs sm_90" in reasons["sm_89"], reasons


def test_collect_in_tree_times_out_cleanly(tmp_path: Path) -> None:
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(
        "schema_version: 1\nname: t\nkernels: [triton_flash]\ncases:\n  - {shape: [1, 1, 64, 64]}\n"
    )
    with pytest.raises(InfraError, match="timed out"):
        collect_in_tree(ROOT, suite_file, ["sm_90"], timeout_s=0.2)


def test_collect_in_tree_passes_on_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="suite file not found"):
        collect_in_tree(ROOT, tmp_path / "missing.yaml", ["sm_90"], timeout_s=120)


TINY_REGISTRY = '''\
"""A registry of one kernel, for tests/test_resources.py."""
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class KernelSpec:
    name: str
    resources: Callable[[dict, str], list] | None = None


def _tiny_resources(params: dict[str, Any], arch: str) -> list:
    from kernels import tiny

    return tiny.resources(params, arch)


REGISTRY = {"tiny": KernelSpec("tiny", _tiny_resources)}


def get(name: str) -> KernelSpec:
    return REGISTRY[name]
'''

TINY_KERNEL = '''\
"""A tiled matmul C = A @ B: the smallest kernel whose tile decides its resources."""
import torch
import triton
import triton.language as tl

from kernel_reports.triton_compile import compile_only, kernel_record

BLOCK = {block}


@triton.jit
def _tiny_matmul(A, B, C, N, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for k in range(0, N, BLOCK):
        a = tl.load(A + offs_m[:, None] * N + (k + offs_k)[None, :])
        b = tl.load(B + (k + offs_k)[:, None] * N + offs_n[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(C + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))


def launch(a, b, c):
    n = a.shape[0]
    _tiny_matmul[(n // BLOCK, n // BLOCK)](a, b, c, n, BLOCK=BLOCK, num_warps=4, num_stages=2)


def resources(params, arch):
    n = params["shape"][2]
    a, b, c = (torch.empty(n, n, dtype=torch.float16) for _ in range(3))
    with compile_only(arch) as launches:
        launch(a, b, c)
        return [kernel_record(x, arch, config={{"BLOCK": BLOCK}}, path="pointer")
                for x in launches]
'''

TINY_SUITE = """\
schema_version: 1
name: tiny
kernels: [tiny]
cases:
  - {shape: [1, 1, 256, 64], causal: false}
"""


def test_a_bigger_tile_in_the_head_commit_shows_in_the_diff(tmp_path: Path, caches: Path) -> None:
    """Two commits of a tiny kernels tree; the second doubles the tile (32 -> 64)."""
    repo = tmp_path / "repo"
    pkg = repo / "kernels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(ROOT / "kernels" / "arch.py", pkg / "arch.py")
    reports = repo / "kernel_reports"  # the real compile-only machinery
    reports.mkdir()
    for name in ("__init__.py", "ptxas.py", "triton_compile.py"):
        shutil.copy(ROOT / "kernel_reports" / name, reports / name)
    (pkg / "registry.py").write_text(TINY_REGISTRY)
    (pkg / "tiny.py").write_text(TINY_KERNEL.format(block=32))
    (repo / "suite.yaml").write_text(TINY_SUITE)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "tiny: 32x32 tile")
    base_commit = _git(repo, "rev-parse", "HEAD")
    (pkg / "tiny.py").write_text(TINY_KERNEL.format(block=64))
    _git(repo, "commit", "-qam", "tiny: 64x64 tile")

    base_tree = tmp_path / "base"
    _git(repo, "worktree", "add", "-q", "--detach", str(base_tree), base_commit)
    base = collect_in_tree(base_tree, base_tree / "suite.yaml", ["sm_90"], timeout_s=600)
    head = collect_in_tree(repo, repo / "suite.yaml", ["sm_90"], timeout_s=600)

    case_id = "tiny/b1-h1-s256-d64-full"
    assert base.skipped == head.skipped == {}
    assert base.tree == str(base_tree.resolve()) and head.tree == str(repo.resolve())
    (old,) = base.cases[case_id]
    (new,) = head.cases[case_id]
    assert (old.config["BLOCK"], new.config["BLOCK"]) == (32, 64)
    assert (old.grid, new.grid) == ((8, 8, 1), (4, 4, 1))
    changes = {c.what: c for c in diff(base.cases[case_id], head.cases[case_id])}
    assert changes["config.BLOCK"].delta == 32
    assert changes["shared_bytes"].delta > 0, changes
    assert changes["registers"].delta > 0, changes
    assert str(changes["registers"]) == (
        f"sm_90 _tiny_matmul: registers {old.registers} -> {new.registers}"
    )
    assert diff_cases(base.cases, head.cases)[case_id] == diff(
        base.cases[case_id], head.cases[case_id]
    )


GPU_MACHINE_RECORDS = """
import json, torch
from kernels import flash_launch
from kernel_reports import triton_flash_resources as tfr

torch.cuda.is_available = lambda: True  # as on a GPU runner
flash_launch._cuda_device, flash_launch._cuda_stream = (lambda: 0), (lambda index: 0)
assert flash_launch.plans_possible()  # outside compile_only, as on a GPU
out = []
for hook, shape, causal in (
    (tfr.entry_resources, [1, 2, 128, 64], False),
    (tfr.entry_resources, [4, 16, 1024, 64], True),
    (tfr.entry_resources, [2, 8, 2048, 128], False),
    (tfr.resources, [4, 16, 1024, 64], True),
):
    params = {"shape": shape, "dtype": "float16", "causal": causal}
    out.append([(r["path"], r["registers"]) for r in hook(params, "sm_90")])
print(json.dumps(out))
"""


def test_triton_records_on_a_machine_with_a_gpu() -> None:
    """On the GPU runner torch.cuda is available inside compile_only too: the launchers
    must still not keep a launch plan (the compiled kernel cannot be loaded under the
    compile-only driver), or every triton_flash record is skipped and a PR's resource
    changes vanish from its report (seen on an H100, 2026-11-26)."""
    import json
    import subprocess
    import sys

    from guard.measure.proc import child_env

    proc = subprocess.run(
        [sys.executable, "-c", GPU_MACHINE_RECORDS],
        cwd=ROOT, env=child_env(compiled=True), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.loads(proc.stdout.strip().splitlines()[-1])
    portable, gluon, persistent, triton_only = records
    # The entry point (flash_attention) picks per shape; triton_flash never Gluon.
    assert [p for p, _ in portable] == ["pointer"]
    assert [p for p, _ in gluon] == ["gluon-simple-overlap"]
    assert [p for p, _ in persistent] == ["gluon-ws-persistent"]
    assert [p for p, _ in triton_only] == ["pointer"]
    assert all(r[0][1] > 0 for r in records)


def test_records_a_hook_could_not_make_are_a_note_not_silence(monkeypatch) -> None:
    """A case whose records are missing in either tree is named in the comparison's
    notes: an empty diff must not pass for "no resource change"."""
    from guard.decide.compare import compare_runs
    from guard.measure import resources
    from guard.ops import resources as ops_resources

    comparison = compare_runs(*data.pair())
    case_id = comparison.cases[0].case_id
    skipped = {"base": {case_id: {"sm_90": "AttributeError: no utils"}}, "head": {}}

    def collect(root: str, *args: object, **kwargs: object) -> ResourceReport:
        return ResourceReport(arches=("sm_90",), cases={}, skipped=skipped[root])

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    suite = load_suite(ROOT / "suites/default.yaml")
    out = ops_resources.with_resource_changes(comparison, suite, "base", "head")
    note = [n for n in out.notes if n.startswith("compiler resources not compared")]
    assert note == [
        f"compiler resources not compared for 1 case(s), e.g. {case_id} on sm_90: "
        "'AttributeError: no utils'"
    ]
    skipped["base"] = {}
    out = ops_resources.with_resource_changes(comparison, suite, "base", "head")
    assert not [n for n in out.notes if n.startswith("compiler resources")]


def test_ctrl_c_while_both_trees_compile_ends_both_children_at_once(monkeypatch) -> None:
    """The resource compiles of base and head run in a thread pool, each child in a
    process group of its own (no SIGINT reaches it); an interrupt must kill them, not
    wait out their timeout on the way out of the pool."""
    import os
    import signal
    import sys
    import threading
    import time

    from guard.decide.compare import compare_runs
    from guard.measure import proc, resources
    from guard.ops import resources as ops_resources

    ends: list[int | None] = []

    def collect(root: str, *args: object, **kwargs: object) -> ResourceReport:
        sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
        run = proc.run_group(sleeper, 120, os.environ, stdout_limit=100, stderr_limit=100)
        ends.append(run.returncode)
        return ResourceReport(arches=("sm_90",), cases={}, skipped={})

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def ctrl_c_once_both_run() -> None:
        deadline = time.monotonic() + 60
        while len(proc._RUNNING) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)

    monkeypatch.setattr(resources, "collect_in_tree", collect)
    suite = load_suite(ROOT / "suites/default.yaml")
    comparison = compare_runs(*data.pair())
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        threading.Thread(target=ctrl_c_once_both_run, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            ops_resources.with_resource_changes(comparison, suite, "base", "head")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    # Killed: not slept to their end (0) nor stopped at their timeout (None).
    assert ends == [-signal.SIGKILL, -signal.SIGKILL]


def test_exponentials_under_pv_counts_only_between_the_two_waits():
    # Two stretches from "leave one wgmma group" (0x1) to "wait for all" (0x0); the
    # largest counts. Exponentials after the wait for all (the plain kernel's softmax)
    # and a 0x1 wait with no 0x0 after it count nothing.
    ex2 = "        MUFU.EX2 R1, R2 ;\n"
    sass = (
        "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;\n" + ex2 * 3 + "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
        + "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;\n" + ex2 * 5 + "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n"
        + ex2 * 9 + "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;\n" + ex2 * 7
    )  # fmt: skip
    assert exponentials_under_pv(sass) == 5
    assert exponentials_under_pv("WARPGROUP.DEPBAR.LE gsb0, 0x0 ;\n" + ex2 * 4) == 0
