"""Tests of the CUDA C++ FlashAttention-2 forward (kernels/cuda_flash.py, kernels/csrc).

CPU: the mma.sync kernel TU compiles with the machine's nvcc for sm_80, sm_89, sm_90 and
sm_90a (no register spills on sm_90a), the Hopper kernel's TUs compile for sm_90a against
the pinned CUTLASS headers with no spills (a planted spill and a planted shared-memory
overflow are caught), a torch-free stub links and runs, the torch binding type-checks
against torch's headers, and the Python wrapper validates its arguments.
GPU (``-m gpu``): results against a float32 reference, with the tolerance "max abs
error at most 2x that of torch SDPA in the same dtype, plus one eps of the dtype at the
output's magnitude".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from attention_checks import Yardstick
from conftest import KERNEL_SEED

from kernel_reports import cuda_flash_resources as res
from kernel_reports.ptxas import exponentials_under_pv, find_cuobjdump
from kernels import cuda_flash
from kernels import cuda_flash_plan as plan

# --------------------------------------------------------------------------------------
# CPU: compile checks with the machine's nvcc
# --------------------------------------------------------------------------------------

GENCODES = {
    "sm_80": "-gencode=arch=compute_80,code=sm_80",
    "sm_89": "-gencode=arch=compute_89,code=sm_89",
    "sm_90": "-gencode=arch=compute_90,code=sm_90",
    "sm_90a": "-gencode=arch=compute_90a,code=sm_90a",  # what the runner builds on Hopper
}
# A compile gets a core of its own (at most one nvcc per core at a time), so on a busy
# 2-core machine an sm_90a translation unit of the CUTLASS kernel takes minutes, not
# tens of minutes; a compile past this says so in one line instead of a traceback.
_COMPILE_TIMEOUT_S = 900
_WORKERS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
# Successful compiles, by a hash of their command, of every file of kernels/csrc and of
# the compiler: a second run of the tests compiles nothing that did not change.
_CACHE = Path(
    os.environ.get("ATTN_GUARD_NVCC_TEST_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attn-guard-nvcc-tests"
)


def _compile_key(cmd: list[str], out_dir: Path) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([a.replace(str(out_dir), "<out>") for a in cmd]).encode())
    for path in sorted(cuda_flash.CSRC.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    for arg in cmd:  # sources the test wrote (the mask check) and the compiler itself
        path = Path(arg)
        if arg.startswith(str(out_dir)) and path.is_file():
            digest.update(path.read_bytes())
    nvcc = Path(cmd[0]).resolve()
    info = nvcc.stat()
    digest.update(f"{nvcc}:{info.st_size}:{info.st_mtime_ns}:{torch.__version__}".encode())
    return digest.hexdigest()[:32]


def _cached_run(
    cmd: list[str], out_dir: Path, outputs: list[Path]
) -> subprocess.CompletedProcess[str]:
    """``cmd`` run once per change: a successful result (its output and the files in
    ``outputs``) is kept in ``_CACHE`` and given back on the next run."""
    entry = _CACHE / _compile_key(cmd, out_dir)
    record = entry / "result.json"
    if record.is_file():
        try:
            kept = json.loads(record.read_text())
            for out in outputs:
                shutil.copy2(entry / out.name, out)
            return subprocess.CompletedProcess(cmd, 0, kept["stdout"], kept["stderr"])
        except (OSError, ValueError, KeyError):
            pass  # a damaged entry: compile again
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        name = Path(next((a for a in cmd if a.endswith((".cu", ".cpp"))), cmd[0])).name
        why = f"nvcc took longer than {_COMPILE_TIMEOUT_S} s for {name} on this machine (busy?)"
        return subprocess.CompletedProcess(cmd, -9, "", why)
    if proc.returncode == 0 and all(out.is_file() for out in outputs):
        try:
            staging = Path(tempfile.mkdtemp(dir=_CACHE.parent if _CACHE.parent.is_dir() else None))
            for out in outputs:
                shutil.copy2(out, staging / out.name)
            (staging / "result.json").write_text(
                json.dumps({"stdout": proc.stdout, "stderr": proc.stderr})
            )
            _CACHE.mkdir(parents=True, exist_ok=True)
            os.replace(staging, entry)  # whole or not at all
        except OSError:
            pass  # no cache here: the next run compiles again
    return proc


def test_every_header_of_csrc_travels_with_the_build() -> None:
    # The build compiles copies of the sources (cuda_flash._sources_in): a header left out
    # of HEADERS would compile here and fail on the GPU runner.
    headers = {p for p in cuda_flash.CSRC.iterdir() if p.suffix in (".h", ".hpp", ".cuh")}
    assert headers == set(cuda_flash.HEADERS)


def _nvcc_or_skip() -> str:
    nvcc = cuda_flash.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (no CUDA toolkit on this machine; set CUDA_HOME)")
    return nvcc


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S, check=False
    )


def _binding_check_cmd(nvcc: str, out_dir: Path) -> list[str]:
    """Type-check binding.cpp against torch's headers (host code only, no object file).

    FLASH_HOST_SYNTAX_ONLY stands in for the c10/cuda headers that a CPU-only torch
    wheel lacks; everything else in the file compiles as it does in the real build.
    """
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return [
        nvcc,
        "-c",
        str(cuda_flash.BINDING_SOURCE),
        "-o",
        str(out_dir / "binding.o"),
        "-std=c++20",  # torch >= 2.10 headers want C++20, as its extension builds use
        "-Xcompiler",
        "-fsyntax-only",
        "-DFLASH_HOST_SYNTAX_ONLY",
        "-DTORCH_EXTENSION_NAME=flash_syntax_check",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        *[arg for inc in includes for arg in ("-isystem", inc)],
    ]


# Configurations that must fail the checks below: a 192x192 tile of head_dim 64 holds S
# (96 floats a thread), P (48) and O (32) in registers, more than the 160 each of three
# consumer warpgroups gets, so it spills; four stages of 192-key tiles of head_dim 128
# need more shared memory than a Hopper block has.
HOPPER_PLANTS = [
    (
        "spill_plant",
        "flash_fwd_sm90_fp16_hdim64.cu",
        ("-DFLASH_SM90_D64_FULL_M=192", "-DFLASH_SM90_D64_FULL_N=192"),
    ),
    ("smem_plant", "flash_fwd_sm90_fp16_hdim128.cu", ("-DFLASH_SM90_STAGES=4",)),
    # K released as soon as Q K^T is done: ptxas then waits for P V before the softmax.
    ("overlap_plant", "flash_fwd_sm90_bf16_hdim64.cu", ("-DFLASH_SM90_LATE_K_RELEASE=0",)),
]
# FlashAttention-3's head_dim 64 tiles (192 query rows, three consumer warpgroups at 160
# registers each; 128 keys), causal and not, must compile without spills too.
HOPPER_VARIANTS = [
    # FlashAttention-3's non-causal head_dim 128 tiles: 176 keys, with the softmax under P V.
    ("d128_176", "flash_fwd_sm90_fp16_hdim128.cu", ("-DFLASH_SM90_D128_FULL_N=176",)),
    (
        "d64_192x128",
        "flash_fwd_sm90_fp16_hdim64.cu",
        (
            "-DFLASH_SM90_D64_CAUSAL_M=192",
            "-DFLASH_SM90_D64_FULL_M=192",
            "-DFLASH_SM90_D64_FULL_N=128",
        ),
    ),
]

# A host program that runs the kernel's mask (apply_mask) on random scores for every
# consumer thread of several tiles and compares each element with the mask its own
# (row, col) coordinates give; argv[1] seeds the scores and the block positions.
MASK_CHECK_SOURCE = r"""
#include "flash_fwd_sm90.cuh"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
using namespace cute;

template <int kHeadDim, int kBlockM, int kBlockN>
bool check(std::mt19937& rng, long& elements, long& masked) {
  using T = flash_sm90::Traits<kHeadDim, kBlockM, kBlockN, 2, cutlass::half_t>;
  typename T::TiledMmaQK mma;
  auto tile = select<0, 1>(typename T::TileShape{});
  Tensor cS = make_identity_tensor(tile);
  std::uniform_real_distribution<float> score(-8.f, 8.f);
  std::uniform_int_distribution<int> block(0, 5), seq(1, 7 * kBlockN);
  for (int thread = 0; thread < T::kMmaThreads; ++thread) {
    Tensor tScS = mma.get_thread_slice(thread).partition_C(cS);
    for (int trial = 0; trial < 24; ++trial) {
      const int mode = trial % 3;  // 0: seq_k only, 1: causal only, 2: both
      const int m_block = block(rng), n_block = block(rng), seq_k = seq(rng);
      Tensor s = partition_fragment_C(mma, tile);
      Tensor before = partition_fragment_C(mma, tile);
      for (int i = 0; i < size(s); ++i) before(i) = s(i) = score(rng);
      if (mode == 0) flash_sm90::apply_mask<T, true, false>(s, thread, seq_k, m_block, n_block);
      if (mode == 1) flash_sm90::apply_mask<T, false, true>(s, thread, seq_k, m_block, n_block);
      if (mode == 2) flash_sm90::apply_mask<T, true, true>(s, thread, seq_k, m_block, n_block);
      for (int i = 0; i < size(s); ++i) {
        const int row = int(get<0>(tScS(i))), col = int(get<1>(tScS(i)));
        const bool past_seq = col >= seq_k - n_block * kBlockN;
        const bool future = col > row + m_block * kBlockM - n_block * kBlockN;
        const bool want = (mode != 1 && past_seq) || (mode != 0 && future);
        const float expect = want ? -INFINITY : before(i);
        if (!(s(i) == expect)) {
          std::printf("hd%d %dx%d thread %d mode %d m_block %d n_block %d seq_k %d: "
                      "(row %d, col %d) is %g, expected %g\n", kHeadDim, kBlockM, kBlockN,
                      thread, mode, m_block, n_block, seq_k, row, col, s(i), expect);
          return false;
        }
        ++elements;
        masked += want;
      }
    }
  }
  return true;
}

// Two partitions of shared memory that are the same elements in the same order.
template <typename A, typename B>
bool same_elements(A const& a, B const& b) {
  if (size(a) != size(b)) return false;
  for (int i = 0; i < size(a); ++i) {
    if (&a(i) != &b(i)) return false;
  }
  return true;
}

// Q's, K's and V's shared-memory partitions (what the wgmma descriptors are made from) of
// every consumer thread are those of its warpgroup's first thread, and differ from the
// next warpgroup's (so that the comparison can tell): FLASH_SM90_UNIFORM_DESCRIPTORS
// takes them there.
template <int kHeadDim, int kBlockM, int kBlockN>
bool descriptors() {
  using T = flash_sm90::Traits<kHeadDim, kBlockM, kBlockN, 2, cutlass::half_t>;
  std::vector<cutlass::half_t> q(cute::cosize_v<typename T::SmemLayoutQ>);
  std::vector<cutlass::half_t> kv(cute::cosize_v<typename T::SmemLayoutK>);
  Tensor sQ = make_tensor(make_smem_ptr(q.data()), typename T::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(kv.data()), typename T::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(kv.data()), typename T::SmemLayoutVt{});
  typename T::TiledMmaQK qk;
  typename T::TiledMmaPV pv;
  for (int thread = 0; thread < T::kMmaThreads; ++thread) {
    const int first = thread / 128 * 128;
    auto mine_qk = qk.get_thread_slice(thread), first_qk = qk.get_thread_slice(first);
    auto mine_pv = pv.get_thread_slice(thread), first_pv = pv.get_thread_slice(first);
    if (!same_elements(mine_qk.partition_A(sQ), first_qk.partition_A(sQ)) ||
        !same_elements(mine_qk.partition_B(sK), first_qk.partition_B(sK)) ||
        !same_elements(mine_pv.partition_B(sVt), first_pv.partition_B(sVt))) {
      std::printf("hd%d %dx%d thread %d: not its warpgroup's partition\n", kHeadDim,
                  kBlockM, kBlockN, thread);
      return false;
    }
  }
  if (same_elements(qk.get_thread_slice(0).partition_A(sQ),
                    qk.get_thread_slice(128).partition_A(sQ))) {
    std::printf("hd%d %dx%d: two warpgroups' Q partitions compare equal\n", kHeadDim,
                kBlockM, kBlockN);
    return false;
  }
  return true;
}

int main(int argc, char** argv) {
  std::mt19937 rng(argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1);
  const bool same = descriptors<64, 128, 128>() && descriptors<64, 192, 128>() &&
                    descriptors<64, 128, 192>() && descriptors<128, 128, 128>() &&
                    descriptors<128, 128, 176>() && descriptors<128, 128, 192>();
  std::printf("descriptors: %s\n", same ? "every thread's are its warpgroup's" : "differ");
  long elements = 0, masked = 0;
  const bool ok = check<64, 128, 128>(rng, elements, masked) &&
                  check<64, 192, 128>(rng, elements, masked) &&
                  check<64, 128, 192>(rng, elements, masked) &&
                  check<128, 128, 192>(rng, elements, masked) &&
                  check<128, 128, 176>(rng, elements, masked);
  std::printf("checked %ld elements, %ld masked\n", elements, masked);
  return ok && same ? 0 : 1;
}
"""


@pytest.fixture(scope="module")
def compile_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every compile of this module, one nvcc per core at a time, each kept in
    ``_CACHE`` once it succeeded (``_cached_run``)."""
    nvcc = _nvcc_or_skip()
    out_dir = tmp_path_factory.mktemp("cuda_flash_build")
    commands: dict[str, tuple[list[str], list[Path]]] = {}

    def obj(name: str, source: Path, gencode: str, flags: list[str]) -> None:
        out = out_dir / f"{name.removesuffix('.cu')}.o"  # _sass finds it by the stem
        cmd = cuda_flash.object_command(source, gencode, out, extra_flags=flags, nvcc=nvcc)
        commands[name] = (cmd, [out])

    for arch, gencode in GENCODES.items():
        extra = ["-Xptxas", "-v"] if arch == "sm_90a" else []
        obj(arch, cuda_flash.KERNEL_SOURCE, gencode, extra)
    stub = out_dir / "flash_fwd_stub"
    commands["stub"] = (
        [
            nvcc, str(cuda_flash.KERNEL_SOURCE), "-o", str(stub), "-DFLASH_STANDALONE_STUB",
            GENCODES["sm_80"], *cuda_flash.NVCC_FLAGS, *cuda_flash.torch_nvcc_flags(),
        ],
        [stub],
    )  # fmt: skip
    commands["binding"] = (_binding_check_cmd(nvcc, out_dir), [])
    include = cuda_flash.cutlass_include()
    if include is not None:
        hopper = [f"-I{include}", *cuda_flash.HOPPER_NVCC_FLAGS, "-Xptxas", "-v"]
        for source in cuda_flash.HOPPER_SOURCES:
            obj(source.name, source, GENCODES["sm_90a"], hopper)
        for name, source, flags in [*HOPPER_PLANTS, *HOPPER_VARIANTS]:
            obj(name, cuda_flash.CSRC / source, GENCODES["sm_90a"], [*hopper, *flags])
        mask_source = out_dir / "mask_check.cu"
        mask_source.write_text(MASK_CHECK_SOURCE)
        mask = out_dir / "mask_check"
        commands["mask_check"] = (
            [
                nvcc, str(mask_source), "-o", str(mask), f"-I{cuda_flash.CSRC}",
                f"-I{include}", GENCODES["sm_90a"], *cuda_flash.NVCC_FLAGS,
                *cuda_flash.HOPPER_NVCC_FLAGS,
            ],
            [mask],
        )  # fmt: skip
    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        jobs = {
            name: pool.submit(_cached_run, cmd, out_dir, outputs)
            for name, (cmd, outputs) in commands.items()
        }
        results: dict[str, Any] = {name: job.result() for name, job in jobs.items()}
    results["stub_path"] = stub
    results["mask_check_path"] = out_dir / "mask_check"
    results["out_dir"] = out_dir
    return results


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stdout + proc.stderr)[-8000:]


@pytest.mark.parametrize("arch", sorted(GENCODES))
def test_kernel_compiles(compile_results: dict, arch: str) -> None:
    proc = compile_results[arch]
    assert proc.returncode == 0, f"nvcc failed for {arch}:\n{_output(proc)}"
    own_warnings = [
        line for line in _output(proc).splitlines() if "flash_fwd" in line and "warning" in line
    ]
    assert not own_warnings, "\n".join(own_warnings)


def _spill_problems(report: str) -> list[str]:
    """What ptxas's -v report says of spills and local memory (empty: none)."""
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    if not spills:
        return ["no ptxas report in the output"]
    problems = [f"{s} bytes spill stores, {ld} loads" for s, ld in spills if s != "0" or ld != "0"]
    problems += re.findall(r"[1-9]\d* bytes stack frame", report)
    return problems


def test_kernel_has_no_register_spills(compile_results: dict) -> None:
    proc = compile_results["sm_90a"]
    assert proc.returncode == 0, _output(proc)
    report = _output(proc)
    assert not _spill_problems(report), f"register spills:\n{report}"


def _hopper_results(compile_results: dict) -> dict:
    if cuda_flash.cutlass_include() is None:
        pin = cuda_flash.CUTLASS_PIN
        reason = f"the CUTLASS headers are not installed (pip install --no-deps {pin})"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; install.sh --test installs them")
        pytest.skip(reason)
    return compile_results


@pytest.mark.parametrize("source", [s.name for s in cuda_flash.HOPPER_SOURCES])
def test_hopper_kernel_compiles_for_sm90a_without_spills(
    compile_results: dict, source: str
) -> None:
    proc = _hopper_results(compile_results)[source]
    assert proc.returncode == 0, f"nvcc failed for {source}:\n{_output(proc)}"
    report = _output(proc)
    if source != "flash_fwd_sm90.cu":  # the dispatcher has no kernel
        assert "flash_fwd_sm90_kernel" in report, report
        assert not _spill_problems(report), f"register spills or local memory:\n{report}"
    # ptxas serializes every wgmma of a kernel it cannot pipeline (C7510-C7520, e.g. a
    # product whose k-blocks depend on a run-time value): an info line, not a warning,
    # and the overlaps gone from the SASS.
    serialized = [line for line in report.splitlines() if "Potential Performance Loss" in line]
    assert not serialized, "\n".join(serialized)
    own_warnings = [
        line for line in report.splitlines() if "flash_fwd" in line and "warning" in line
    ]
    assert not own_warnings, "\n".join(own_warnings)


def _cuobjdump() -> str:
    """cuobjdump of the CUDA toolkit (CUDA_HOME, beside the real nvcc, PATH), else the one
    triton bundles. None in CI fails the test (it is how CI reads the SASS); else skip."""
    tool = find_cuobjdump(cuda_flash.find_nvcc())
    if tool is not None:
        return tool
    reason = "no cuobjdump (CUDA toolkit or triton) to read the SASS with"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _ring_without_checks(kernel: res.HopperInstance) -> bool:
    """Head_dim 64's non-causal 192-key tiles wait for and release K and V on the ring's
    barriers, without CUTLASS's pipeline checks (``kRingChecks``): 3% faster on an H200,
    and ptxas then waits for P V before their softmax."""
    return kernel.head_dim == 64 and kernel.block_n == 192 and not kernel.causal


def _softmax_between_waits(sass: str) -> dict[str, tuple[int, int]]:
    """Per Hopper kernel that releases K after the softmax (``Traits::kReleaseKAfterSoftmax``:
    head_dim 64, and 128-key tiles) through CUTLASS's pipeline in a cuobjdump listing:
    (the most ``MUFU.EX2`` in a stretch between a wait that leaves one wgmma group in
    flight (``WARPGROUP.DEPBAR.LE gsb0, 0x1``) and the next wait for all (``0x0``), a whole
    step's exponentials a thread). A step's softmax there (64 rows x block_n keys over a
    warpgroup's 128 threads: block_n / 2 exponentials each) is the intra-warpgroup
    overlap as the GPU runs it."""
    found = {}
    for function in re.split(r"Function : ", sass)[1:]:
        name = function.split(maxsplit=1)[0]
        kernel = res.hopper_instantiation(name)
        if kernel is None or not (kernel.head_dim == 64 or kernel.block_n == 128):
            continue
        if _ring_without_checks(kernel):
            continue
        found[name] = (exponentials_under_pv(function), kernel.block_n // 2)
    return found


def _sass(compile_results: dict[str, Any], key: str) -> str:
    """The cuobjdump listing of one Hopper compile (its key in the results: a source's
    name or a plant's; the object is named after its stem)."""
    built = _hopper_results(compile_results)[key]
    name = Path(key).stem
    assert built.returncode == 0, f"{name}: {_output(built)}"
    tool = _cuobjdump()
    listing = _run([tool, "-sass", str(compile_results["out_dir"] / f"{name}.o")])
    assert listing.returncode == 0, f"{tool} on {name}.o: {_output(listing)}"
    return listing.stdout


def test_the_softmax_runs_under_the_p_v_product(compile_results: dict[str, Any]) -> None:
    sass = {
        Path(key).stem: _sass(compile_results, key)
        for key in (
            "flash_fwd_sm90_bf16_hdim64.cu",
            "flash_fwd_sm90_fp16_hdim128.cu",
            "overlap_plant",
        )
    }
    for name in ("flash_fwd_sm90_bf16_hdim64", "flash_fwd_sm90_fp16_hdim128"):
        kernels = _softmax_between_waits(sass[name])
        # causal and not (head_dim 64 non-causal with 128 keys; head_dim 128 on one CTA
        # and on clusters of two)
        assert len(kernels) >= 3, f"{name}: {kernels}"
        short = {k: v for k, v in kernels.items() if v[0] < v[1]}
        assert not short, f"{name}: (exponentials between the waits, a step's) {short}"
    # The K slot released before the softmax, as the kernel did until ptxas was seen
    # hoisting the wait for P V above it: the check must catch that.
    plant = _softmax_between_waits(sass["overlap_plant"])
    assert plant and all(found < wanted for found, wanted in plant.values()), plant


def test_head_dim_64_192_key_steps_skip_the_pipeline_checks(
    compile_results: dict[str, Any],
) -> None:
    """CUTLASS's pipeline role checks (``BPT.TRAP`` behind a branch at every consumer wait
    and release of K and V) are left out of head_dim 64's non-causal 192-key kernels:
    through the pipeline class they hold 30-40, as many as the 128-key kernel or more."""
    sass = _sass(compile_results, "flash_fwd_sm90_bf16_hdim64.cu")
    traps = {}
    for function in re.split(r"Function : ", sass)[1:]:
        kernel = res.hopper_instantiation(function.split(maxsplit=1)[0])
        if kernel is not None and not kernel.causal:
            traps[(kernel.block_n, kernel.last_keys)] = function.count("BPT.TRAP")
    checked = traps.pop((128, 128))
    assert sorted(traps) == [(192, 64), (192, 128), (192, 192)], traps
    assert all(n <= checked - 8 for n in traps.values()), (checked, traps)


def test_kernels_with_one_q_buffer_prefetch_the_next_tiles_q(
    compile_results: dict[str, Any],
) -> None:
    """Where Q has one buffer (head_dim 128's 192-key tiles) the next tile's Q can load
    only as a tile ends: the producer brings it into L2 first, a TMA prefetch
    (``UTMAPF``) in the SASS. Kernels with two Q buffers load it a tile ahead instead."""
    sass = _sass(compile_results, "flash_fwd_sm90_fp16_hdim128.cu")
    found = {}
    for function in re.split(r"Function : ", sass)[1:]:
        name = function.split(maxsplit=1)[0]
        kernel = res.hopper_instantiation(name)
        if kernel is None:
            continue
        buffers = plan.hopper_q_buffers(
            kernel.head_dim, kernel.block_m, kernel.block_n, kernel.stages
        )
        found[name] = (buffers, "UTMAPF" in function)
    assert {buffers for buffers, _ in found.values()} == {1, 2}, found
    wrong = {name: v for name, v in found.items() if v[1] != (v[0] == 1)}
    assert not wrong, f"(Q buffers, prefetches Q): {wrong}"


def test_the_spill_check_catches_a_spilling_configuration(compile_results: dict) -> None:
    proc = _hopper_results(compile_results)["spill_plant"]
    assert proc.returncode == 0, _output(proc)
    assert _spill_problems(_output(proc)), "the planted 192x192 head_dim 64 tile did not spill"


def test_flash_attention_3_176_key_tiles_compile_and_overlap(
    compile_results: dict[str, Any],
) -> None:
    """Head_dim 128's non-causal 176-key tiles (FA3's, not the default) compile on one CTA
    and on clusters without spills, run a step's softmax under its P V, and take Q K^T as
    64x176 wgmmas (without CuTe's extended shapes it splits them into 64x16 ones)."""
    proc = _hopper_results(compile_results)["d128_176"]
    assert proc.returncode == 0, _output(proc)
    assert not _spill_problems(_output(proc)), _output(proc)
    found = {
        (
            kernel.cluster,
            exponentials_under_pv(function),
            frozenset(re.findall(r"HGMMA\.64x(\d+)x16", function)),
        )
        for function in re.split(r"Function : ", _sass(compile_results, "d128_176"))[1:]
        if (kernel := res.hopper_instantiation(function.split(maxsplit=1)[0])) is not None
        and kernel.block_n == 176
    }
    assert {cluster for cluster, _, _ in found} == {1, 2}, found
    assert all(exps >= 176 // 2 for _, exps, _ in found), found
    # Q K^T 64x176, P V 64x128 (head_dim): no narrower product.
    assert all(widths == {"176", "128"} for _, _, widths in found), found


@pytest.mark.parametrize("variant", [n for n, _, _ in HOPPER_VARIANTS if n.startswith("d64")])
def test_flash_attention_3_tiles_compile_without_spills(
    compile_results: dict[str, Any], variant: str
) -> None:
    proc = _hopper_results(compile_results)[variant]
    assert proc.returncode == 0, _output(proc)
    report = _output(proc)
    entries = re.findall(
        r"Compiling entry function '\w*TraitsILi64ELi192ELi128E\w*Lb([01])E", report
    )
    assert sorted(entries) == ["0", "1"], report  # causal and not
    assert not _spill_problems(report), f"register spills or local memory:\n{report}"


def test_mask_matches_the_coordinates_of_every_element(compile_results: dict[str, Any]) -> None:
    proc = _hopper_results(compile_results)["mask_check"]
    assert proc.returncode == 0, f"mask check build failed:\n{_output(proc)}"
    seed = str(int.from_bytes(os.urandom(4), "little"))
    run = _run([str(compile_results["mask_check_path"]), seed])
    assert run.returncode == 0, f"seed {seed}: {_output(run)}"
    elements, masked = (int(n) for n in re.findall(r"\d+", run.stdout)[-2:])
    assert 0 < masked < elements, run.stdout


def test_every_thread_takes_its_warpgroups_descriptors(compile_results: dict[str, Any]) -> None:
    """The wgmma operands' shared-memory partitions depend on the warpgroup alone, so
    ``FLASH_SM90_UNIFORM_DESCRIPTORS`` (taken at the warpgroup's first thread) gives every
    thread the descriptors it would take at its own index (the mask check's program)."""
    proc = _hopper_results(compile_results)["mask_check"]
    assert proc.returncode == 0, f"mask check build failed:\n{_output(proc)}"
    run = _run([str(compile_results["mask_check_path"]), "1"])
    assert "descriptors: every thread's are its warpgroup's" in run.stdout, _output(run)
    assert run.returncode == 0, _output(run)


def test_shared_memory_beyond_the_limit_fails_the_build(compile_results: dict) -> None:
    proc = _hopper_results(compile_results)["smem_plant"]
    assert proc.returncode != 0
    assert "shared memory beyond Hopper's 227 KB per block" in _output(proc)


def test_resource_notes_name_the_hopper_instantiation_a_workload_runs(
    compile_results: dict,
) -> None:
    report = _output(_hopper_results(compile_results)["flash_fwd_sm90_fp16_hdim128.cu"])
    header = cuda_flash.HOPPER_KERNEL_HEADER.read_text()
    short = {"shape": [2, 8, 1024, 128], "dtype": "float16", "causal": False}
    long = {"shape": [1, 16, 16384, 128], "dtype": "float16", "causal": False}
    causal = {"shape": [2, 8, 2048, 128], "dtype": "float16", "causal": True}
    records = [res.hopper_records(report, p, header)[0] for p in (short, long, causal)]
    assert [(r["config"]["BLOCK_M"], r["config"]["BLOCK_N"]) for r in records] == [
        (128, 128),
        (128, 192),
        (128, 128),
    ]
    # Non-causal head_dim 128 with an even number of row blocks runs on clusters of two.
    assert [r["config"].get("CLUSTER", 1) for r in records] == [2, 2, 1]
    assert records[0]["kernel"].endswith("on clusters of 2")
    odd = {"shape": [2, 16, 4097, 128], "dtype": "float16", "causal": False}
    odd_config = res.hopper_records(report, odd, header)[0]["config"]
    assert "CLUSTER" not in odd_config
    # The ragged last key block's products: 16384 = 85 x 192 + 64 keys, 4097 = 21 x 192 + 65.
    assert records[1]["config"]["LAST_KEYS"] == 64 and odd_config["LAST_KEYS"] == 128
    assert "LAST_KEYS" not in records[0]["config"]  # 128-key steps, none ragged
    # One block only; a last block of 1, 64, 65 keys; none ragged.
    assert [plan.hopper_last_keys(header, False, n, 192) for n in (192, 193, 256, 257, 384)] == [
        192,
        64,
        64,
        128,
        192,
    ]
    assert plan.hopper_last_keys(header, True, 4096, 192) == 192
    assert plan.hopper_cluster(header, 128, False, 2304, 2560) == 2  # 14 blocks > 2 stages
    assert plan.hopper_cluster(header, 128, True, 2048, 2048) == 1
    # 192-key tiles (O in the V ring) of only two key blocks, as a -D override could make:
    # one CTA, since the cluster's O barrier needs more blocks than stages.
    short_k = "#define FLASH_SM90_D128_SHORT_K 1024"
    assert short_k in header
    overridden = header.replace(short_k, "#define FLASH_SM90_D128_SHORT_K 64")
    assert plan.hopper_cluster(overridden, 128, False, 2048, 384) == 1
    assert plan.hopper_cluster(overridden, 128, False, 2048, 640) == 2
    for record in records:
        assert record["path"] == "hopper-wgmma-tma"
        assert record["registers"] > 0 and record["spill_store_bytes"] == 0
        assert record["num_warps"] == 12  # a producer and two consumer warpgroups
    # 192-key tiles leave no room for O's own buffer (it shares the V ring) nor for a
    # second Q buffer; 128-key tiles have both.
    assert records[1]["shared_bytes"] == 128 * 128 * 2 + 2 * 2 * 192 * 128 * 2 + 1024
    q = o = 128 * 128 * 2
    assert records[0]["shared_bytes"] == 2 * q + 2 * 2 * 128 * 128 * 2 + o + 1024
    assert [r["num_stages"] for r in records] == [2, 2, 2]
    report64 = _output(_hopper_results(compile_results)["flash_fwd_sm90_bf16_hdim64.cu"])
    causal64 = {"shape": [8, 32, 1024, 64], "dtype": "bfloat16", "causal": True}
    record64 = res.hopper_records(report64, causal64, header)[0]
    assert record64["num_stages"] == 3  # head_dim 64's own ring depth
    assert record64["shared_bytes"] == 2 * 16384 + 2 * 3 * 128 * 64 * 2 + 16384 + 1024
    # Causal head_dim 64: FA3's 192 rows (three consumer warpgroups) from 1536 queries on.
    assert plan.hopper_tile(header, 64, True, 1535, 1535) == (128, 128, 3)
    assert plan.hopper_tile(header, 64, True, 1536, 1536) == (192, 128, 3)
    long64 = {"shape": [2, 32, 4096, 64], "dtype": "bfloat16", "causal": True}
    record = res.hopper_records(report64, long64, header)[0]
    assert (record["config"]["BLOCK_M"], record["config"]["BLOCK_N"]) == (192, 128)
    assert record["num_warps"] == 16 and record["spill_store_bytes"] == 0
    q = o = 192 * 64 * 2
    assert record["shared_bytes"] == 2 * q + 2 * 3 * 128 * 64 * 2 + o + 1024
    # Non-causal head_dim 64: 192 keys a step above 1024 keys, 128 up to there.
    for seq, keys in [(2048, 192), (1024, 128)]:
        full64 = {"shape": [4, 16, seq, 64], "dtype": "bfloat16", "causal": False}
        record = res.hopper_records(report64, full64, header)[0]
        assert (record["config"]["BLOCK_M"], record["config"]["BLOCK_N"]) == (128, keys)
        assert record["shared_bytes"] == 2 * 16384 + 2 * 3 * keys * 64 * 2 + 16384 + 1024
        assert record["spill_store_bytes"] == 0
    flash_h = (cuda_flash.CSRC / "flash_fwd.h").read_text()
    assert plan.uses_hopper_kernel(short, "sm_90", flash_h)
    assert not plan.uses_hopper_kernel(short, "sm_80", flash_h)
    tiny = {"shape": [1, 8, 128, 64], "dtype": "float16", "causal": False}
    assert not plan.uses_hopper_kernel(tiny, "sm_90", flash_h)  # mma.sync is faster there


def test_the_cutlass_pin_is_installed_everywhere_the_kernel_builds() -> None:
    root = Path(__file__).resolve().parent.parent
    assert f'--no-deps "{cuda_flash.CUTLASS_PIN}"' in (root / "install.sh").read_text()
    # The GPU runners: hash-locked, the wheel alone.
    assert "--require-hashes --no-deps" in (root / "ci" / "setup-runner.sh").read_text()
    locked = (root / "ci" / "requirements" / "runner.txt").read_text()
    assert f"{cuda_flash.CUTLASS_PIN} \\\n    --hash=sha256:" in locked


def test_standalone_stub_links_and_runs(compile_results: dict) -> None:
    proc = compile_results["stub"]
    assert proc.returncode == 0, f"stub build failed:\n{_output(proc)}"
    run = _run([str(compile_results["stub_path"])])
    assert run.returncode == 0, f"the dispatcher accepted head_dim 96:\n{_output(run)}"


def test_binding_compiles_against_torch_headers(compile_results: dict) -> None:
    proc = compile_results["binding"]
    assert proc.returncode == 0, f"binding.cpp does not compile:\n{_output(proc)}"


# --------------------------------------------------------------------------------------
# CPU: availability, build plumbing, argument validation
# --------------------------------------------------------------------------------------

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")


@needs_no_cuda
def test_unavailable_reason_names_cuda() -> None:
    reason = cuda_flash.unavailable_reason()
    assert isinstance(reason, str)
    assert "CUDA" in reason


@needs_no_cuda
def test_cpu_tensors_raise_value_error_naming_device() -> None:
    q = torch.randn(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"q must be a CUDA tensor, got device cpu"):
        cuda_flash.flash_attention_fwd(q, q, q)


def test_arch_flags() -> None:
    assert cuda_flash.arch_flags((9, 0)) == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert cuda_flash.arch_flags((8, 9)) == ["-gencode=arch=compute_89,code=sm_89"]
    assert cuda_flash.arch_flags((8, 0)) == ["-gencode=arch=compute_80,code=sm_80"]


def test_hopper_objects_bind_no_symbol_process_wide(compile_results: dict) -> None:
    """The launcher's per-device cache is a template's function-local static; with
    default visibility the dynamic linker binds it process-wide (STB_GNU_UNIQUE), so a
    second build of the extension in the same process (a tuning variant) would skip its
    kernels' shared-memory attribute and fail to launch."""
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not on PATH")
    results = _hopper_results(compile_results)
    for source in ("flash_fwd_sm90_bf16_hdim64.cu", "flash_fwd_sm90_fp16_hdim128.cu"):
        assert results[source].returncode == 0, _output(results[source])
        obj = compile_results["out_dir"] / f"{source.removesuffix('.cu')}.o"
        symbols = _run([readelf, "-sW", str(obj)]).stdout
        assert "flash_fwd_sm90" in symbols
        # UNIQUE binding is harmless where the symbol is hidden: the link makes it local.
        exported = [
            line for line in symbols.splitlines() if " UNIQUE " in line and " HIDDEN " not in line
        ]
        assert not exported, "\n".join(exported[:5])


def test_tuning_variants_have_builds_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTN_GUARD_CACHE", str(tmp_path))
    monkeypatch.setenv("ATTN_GUARD_HOPPER_FLAGS", "-DFLASH_SM90_D64_CAUSAL_LONG_Q=0")
    from_env = cuda_flash.build_directory((9, 0))
    assert cuda_flash.build_directory((9, 0), "-DFLASH_SM90_D64_CAUSAL_LONG_Q=0") == from_env
    assert cuda_flash.build_directory((9, 0), "") != from_env  # "": the defaults
    monkeypatch.delenv("ATTN_GUARD_HOPPER_FLAGS")
    assert cuda_flash.build_directory((9, 0)) == cuda_flash.build_directory((9, 0), "")
    assert cuda_flash.tuning_flags("-DA=1  -DB=2") == ["-DA=1", "-DB=2"]


def test_build_directory_follows_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_GUARD_CACHE", str(tmp_path))
    build_dir = cuda_flash.build_directory((9, 0))
    assert build_dir.parent == tmp_path / "cuda_ext"
    assert build_dir.name.endswith("-sm90a")
    assert build_dir.name.split("-")[0] == cuda_flash.source_hash(cuda_flash.arch_flags((9, 0)))
    assert cuda_flash.build_directory((8, 0)) != build_dir


def test_build_failure_raises_cuda_build_error_with_compiler_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils import cpp_extension

    def failing_load(**kwargs: object) -> None:
        raise RuntimeError("Error building extension: " + "x" * 10000 + "\nerror: LAST LINE")

    monkeypatch.setenv("ATTN_GUARD_CACHE", str(tmp_path))
    monkeypatch.setattr(cpp_extension, "load", failing_load)
    with pytest.raises(cuda_flash.CudaBuildError, match="LAST LINE") as info:
        cuda_flash.load_extension.__wrapped__((9, 0))
    assert isinstance(info.value, RuntimeError)
    assert len(str(info.value)) < 7000


def _t(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


BAD_ARGS = [
    ("not a tensor", lambda: ([1.0], _t(1, 2, 8, 64), _t(1, 2, 8, 64), {}), r"^q must be a torch"),
    ("float32", lambda: (_t(1, 2, 8, 64, dtype=torch.float32),) * 3 + ({},), r"^q must be float16"),
    (
        "mixed dtypes",
        lambda: (_t(1, 2, 8, 64), _t(1, 2, 8, 64, dtype=torch.bfloat16), _t(1, 2, 8, 64), {}),
        r"^k has dtype",
    ),
    ("rank 3", lambda: (_t(2, 8, 64),) * 3 + ({},), r"^q must have 4 dims"),
    ("head_dim 96", lambda: (_t(1, 2, 8, 96),) * 3 + ({},), r"^q head_dim must be 64 or 128"),
    (
        "head_dim mismatch",
        lambda: (_t(1, 2, 8, 64), _t(1, 2, 8, 128), _t(1, 2, 8, 64), {}),
        r"^k head_dim 128 differs",
    ),
    (
        "batch mismatch",
        lambda: (_t(2, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64), {}),
        r"^k batch 1 differs",
    ),
    (
        "k/v heads mismatch",
        lambda: (_t(1, 4, 8, 64), _t(1, 2, 8, 64), _t(1, 1, 8, 64), {}),
        r"^v has 1 heads",
    ),
    (
        "q heads not a multiple",
        lambda: (_t(1, 3, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64), {}),
        r"^q heads \(3\) must be a multiple",
    ),
    (
        "k/v seq mismatch",
        lambda: (_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 9, 64), {}),
        r"^v has seq 9",
    ),
    ("causal not bool", lambda: (_t(1, 2, 8, 64),) * 3 + ({"causal": 1},), r"^causal must be"),
    ("scale nan", lambda: (_t(1, 2, 8, 64),) * 3 + ({"scale": float("nan")},), r"^scale must"),
    ("scale str", lambda: (_t(1, 2, 8, 64),) * 3 + ({"scale": "0.1"},), r"^scale must"),
]


@pytest.mark.parametrize(("label", "make", "pattern"), BAD_ARGS, ids=[b[0] for b in BAD_ARGS])
def test_bad_arguments_raise_value_error(label: str, make, pattern: str) -> None:
    q, k, v, kwargs = make()
    with pytest.raises(ValueError, match=pattern):
        cuda_flash.flash_attention_fwd(q, k, v, **kwargs)


# --------------------------------------------------------------------------------------
# GPU: correctness against a float32 reference
# --------------------------------------------------------------------------------------


def _gpu_skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return cuda_flash.unavailable_reason()


_GPU_REASON = _gpu_skip_reason()
gpu = pytest.mark.skipif(_GPU_REASON is not None, reason=_GPU_REASON or "")

SEQ_PAIRS = [
    (1, 1),
    (17, 17),
    (113, 113),
    (1000, 1000),
    (2047, 2047),
    (113, 203),
    (203, 113),
    (1, 1000),
    (1000, 1),
    (17, 2047),
    (2047, 17),
]


def _inputs(
    batch: int,
    heads: int,
    heads_kv: int,
    seq_q: int,
    seq_k: int,
    head_dim: int,
    dtype: torch.dtype,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed + KERNEL_SEED)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device="cuda", dtype=dtype)

    return (
        randn(batch, heads, seq_q, head_dim),
        randn(batch, heads_kv, seq_k, head_dim),
        randn(batch, heads_kv, seq_k, head_dim),
    )


def _check_against_reference(
    out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
) -> None:
    # The worst element against SDPA's (tests/attention_checks.py).
    Yardstick.of(q, k, v, causal=causal, scale=scale).assert_max(
        out, f"(ATTN_GUARD_TEST_SEED={KERNEL_SEED})"
    )


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(("seq_q", "seq_k"), SEQ_PAIRS)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_matches_reference(
    dtype: torch.dtype, causal: bool, head_dim: int, seq_q: int, seq_k: int
) -> None:
    q, k, v = _inputs(2, 3, 3, seq_q, seq_k, head_dim, dtype, seed=seq_q * 7919 + seq_k)
    out = cuda_flash.flash_attention_fwd(q, k, v, causal=causal)
    _check_against_reference(out, q, k, v, causal=causal)


def _kernels() -> list[str]:
    """The kernel paths this GPU runs: on Hopper both the wgmma one and mma.sync."""
    if _GPU_REASON is None and torch.cuda.get_device_capability() == cuda_flash.HOPPER:
        return ["hopper", "mma_sync"]
    return ["auto"]


KERNELS = _kernels() if torch.cuda.is_available() else ["auto"]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("batch", "heads", "heads_kv", "seq_q", "seq_k"),
    [
        (1, 2, 2, 1, 1),
        (2, 3, 3, 77, 77),
        (1, 2, 2, 1000, 1000),
        (1, 2, 2, 2049, 2049),
        (1, 2, 1, 4097, 4097),  # one key head for both query heads
        (2, 4, 2, 300, 1000),  # seq_q < seq_k
        (2, 4, 2, 1000, 300),  # seq_q > seq_k
        (1, 8, 1, 129, 255),
        # 18 row blocks and more than 1024 keys (192 per step, a ragged last one): head_dim
        # 128 non-causal on clusters of two CTAs sharing K and V by multicast.
        (1, 4, 2, 2304, 2560),
        # A ragged last block of 88 and 1 keys at 192 per step (its products on 128 and on
        # 64 keys, masked), on clusters (4 row blocks) and on one CTA (3).
        (1, 2, 2, 512, 2200),
        (1, 2, 2, 300, 2113),
    ],
)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_each_kernel_matches_reference_on_odd_shapes(
    dtype: torch.dtype,
    causal: bool,
    head_dim: int,
    batch: int,
    heads: int,
    heads_kv: int,
    seq_q: int,
    seq_k: int,
    kernel: str,
) -> None:
    q, k, v = _inputs(batch, heads, heads_kv, seq_q, seq_k, head_dim, dtype, seed=seq_q + seq_k)
    out = torch.full_like(q, float("nan"))  # a poisoned buffer: every element must be written
    result = cuda_flash.flash_attention_fwd(q, k, v, causal=causal, out=out, kernel=kernel)
    assert result.data_ptr() == out.data_ptr()
    _check_against_reference(out, q, k, v, causal=causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_many_tiles_per_multiprocessor(causal: bool, head_dim: int, kernel: str) -> None:
    # 720 query tiles: the Hopper kernel's persistent CTAs each take several, so its
    # barriers change phase between tiles and O's buffer is reused while a store is out.
    q, k, v = _inputs(3, 40, 8, 700, 700, head_dim, torch.float16, seed=720 + head_dim)
    out = torch.full_like(q, float("nan"))
    cuda_flash.flash_attention_fwd(q, k, v, causal=causal, out=out, kernel=kernel)
    _check_against_reference(out, q, k, v, causal=causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_many_cluster_tiles_with_o_in_the_v_ring(kernel: str) -> None:
    # Head_dim 128 non-causal above 1024 keys: 192 keys per step, O staged in the V
    # ring's space, and clusters of two CTAs (18 row blocks a head) whose O barrier
    # changes phase between tiles: 1440 tiles, about 11 per CTA.
    q, k, v = _inputs(2, 40, 8, 2304, 2560, 128, torch.bfloat16, seed=2304)
    out = torch.full_like(q, float("nan"))
    cuda_flash.flash_attention_fwd(q, k, v, causal=False, out=out, kernel=kernel)
    _check_against_reference(out, q, k, v, causal=False)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_causal_tiles_on_repeated_launches_and_two_streams(head_dim: int, kernel: str) -> None:
    # The Hopper kernel hands causal tiles out by a counter per stream that its last CTA
    # resets: a counter left dirty would skip tiles (NaN left in the poisoned buffer) on
    # the next launch. With head_dim 128 and a 50 MB L2 (H100, H200), 8 heads of 8192
    # keys fill two L2 groups, the first a smaller one.
    q, k, v = _inputs(1, 8, 8, 8192, 8192, head_dim, torch.float16, seed=8192 + head_dim)
    outs = [torch.full_like(q, float("nan")) for _ in range(4)]
    for out in outs[:2]:
        cuda_flash.flash_attention_fwd(q, k, v, causal=True, out=out, kernel=kernel)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # concurrent with the launch below on the main stream
        cuda_flash.flash_attention_fwd(q, k, v, causal=True, out=outs[2], kernel=kernel)
    cuda_flash.flash_attention_fwd(q, k, v, causal=True, out=outs[3], kernel=kernel)
    torch.cuda.current_stream().wait_stream(side)
    _check_against_reference(outs[0], q, k, v, causal=True)
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_causal_launches_captured_in_a_cuda_graph(head_dim: int, kernel: str) -> None:
    # Under capture the Hopper kernel takes a tile counter of its own for the captured
    # launch, zeroed by a memset node at each replay; the guard times such graphs. Three
    # replays on fresh inputs copied in: a counter left dirty would skip tiles.
    static = _inputs(2, 40, 8, 700, 700, head_dim, torch.float16, seed=77 + head_dim)
    out = torch.full_like(static[0], float("nan"))
    cuda_flash.flash_attention_fwd(*static, causal=True, kernel=kernel)  # warm, uncaptured
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cuda_flash.flash_attention_fwd(*static, causal=True, out=out, kernel=kernel)
    for seed in (1, 2, 3):
        fresh = _inputs(2, 40, 8, 700, 700, head_dim, torch.float16, seed=seed * 1000)
        for buffer, tensor in zip(static, fresh, strict=True):
            buffer.copy_(tensor)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_against_reference(out, *fresh, causal=True)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_inputs_scaled_by_30(causal: bool, kernel: str) -> None:
    # Scores in the thousands: the running max moves by large steps at every key tile.
    q, k, v = _inputs(1, 4, 2, 700, 900, 128, torch.bfloat16, seed=30)
    q, k = q * 30, k * 30
    out = cuda_flash.flash_attention_fwd(q, k, v, causal=causal, kernel=kernel)
    _check_against_reference(out, q, k, v, causal=causal)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_strided_views_and_strided_out(kernel: str) -> None:
    # (B, S, H, D) memory viewed as (B, H, S, D) for q, k, v and out, as after a projection.
    gen = torch.Generator(device="cuda").manual_seed(12 + KERNEL_SEED)
    dtype = torch.float16

    def bshd(seq: int, heads: int) -> torch.Tensor:
        t = torch.randn(2, seq, heads, 128, generator=gen, device="cuda", dtype=dtype)
        return t.transpose(1, 2)

    q, k, v = bshd(517, 8), bshd(1031, 2), bshd(1031, 2)
    out = torch.full((2, 517, 8, 128), float("nan"), device="cuda", dtype=dtype).transpose(1, 2)
    cuda_flash.flash_attention_fwd(q, k, v, causal=True, out=out, kernel=kernel)
    _check_against_reference(out, q, k, v, causal=True)
    odd = torch.full((2, 8, 517, 130), float("nan"), device="cuda", dtype=dtype)[..., 1:129]
    cuda_flash.flash_attention_fwd(q, k, v, out=odd, kernel=kernel)  # not 16-byte aligned
    _check_against_reference(odd, q, k, v, causal=False)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_large_scores_and_custom_scale(dtype: torch.dtype, head_dim: int) -> None:
    # Scores of tens of units: every key tile moves the running max, so the online
    # rescaling (alpha) is exercised, not only the first tile's.
    q, k, v = _inputs(1, 4, 4, 300, 517, head_dim, dtype, seed=3)
    q = q * 4
    out = cuda_flash.flash_attention_fwd(q, k, v, causal=True, scale=0.3)
    _check_against_reference(out, q, k, v, causal=True, scale=0.3)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grouped_query_heads(causal: bool) -> None:
    q, k, v = _inputs(2, 8, 2, 257, 190, 64, torch.float16, seed=5)
    out = cuda_flash.flash_attention_fwd(q, k, v, causal=causal)
    _check_against_reference(out, q, k, v, causal=causal)


@pytest.mark.gpu
@gpu
def test_strided_inputs() -> None:
    # (batch, seq, heads, dim) memory seen as (batch, heads, seq, dim), as after a
    # projection; and a head_dim slice with stride 2, which the binding must copy.
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(11 + KERNEL_SEED)
    bshd = torch.randn(2, 333, 4, 128, generator=gen, device="cuda", dtype=dtype)
    q = bshd.transpose(1, 2)
    k = torch.randn(2, 4, 129, 128, generator=gen, device="cuda", dtype=dtype)[..., ::2]
    v = torch.randn(2, 4, 129, 64, generator=gen, device="cuda", dtype=dtype)
    out = cuda_flash.flash_attention_fwd(q[..., :64], k, v, causal=True)
    _check_against_reference(out, q[..., :64], k, v, causal=True)
    assert out.is_contiguous()


@pytest.mark.gpu
@gpu
def test_empty_keys_give_zeros_and_empty_queries_give_empty() -> None:
    q, k, v = _inputs(1, 2, 2, 5, 0, 64, torch.float16, seed=1)
    out = cuda_flash.flash_attention_fwd(q, k, v)
    assert torch.equal(out, torch.zeros_like(q))
    q, k, v = _inputs(1, 2, 2, 0, 5, 64, torch.float16, seed=1)
    assert cuda_flash.flash_attention_fwd(q, k, v).shape == (1, 2, 0, 64)


@pytest.mark.gpu
@gpu
def test_mixed_devices_raise_value_error() -> None:
    q = torch.randn(1, 2, 8, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^k must be a CUDA tensor, got device cpu"):
        cuda_flash.flash_attention_fwd(q, q.cpu(), q)


@pytest.mark.gpu
@gpu
def test_registry_entry_runs() -> None:
    from kernels import registry

    spec = registry.get("cuda_flash")
    assert spec.probe("cuda") is None
    fn = spec.loader()
    q, k, v = _inputs(1, 2, 2, 64, 64, 64, torch.float16, seed=4)
    _check_against_reference(fn(q, k, v, causal=False, scale=None), q, k, v, causal=False)
