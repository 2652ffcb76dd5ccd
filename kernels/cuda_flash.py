"""CUDA C++ FlashAttention forward, built on first use as a torch extension.

Two kernels behind one entry point: on Hopper (sm_90) the CuTe/CUTLASS kernel of
``csrc/flash_fwd_sm90.cuh`` (wgmma, TMA, a producer warp and 2-3 consumer warpgroups,
FlashAttention-3's structure; its notes are in that file), built for sm_90a against the
headers of the pinned ``nvidia-cutlass`` wheel; on every other GPU the ``mma.sync`` one
below.

Algorithm: FlashAttention-2 (Dao, 2023) with ``mma.sync.m16n8k16`` tensor-core
instructions: one block owns 64 (head_dim 64) or 128 (head_dim 128) query rows, each
warp 16 of them with Q and the fp32 output accumulator in registers; K and V stream
through shared memory in 64-key tiles (16-byte ``cp.async``, double-buffered, read
with ``ldmatrix``); the softmax is the online one, in fp32 with ``exp2``. The source
and its fragment-layout notes are in ``csrc/flash_fwd.cu``; ``csrc/binding.cpp`` is
the torch entry point ``flash_fwd(q, k, v, causal, scale)``.

Limits: forward only (the output does not track gradients); float16 and bfloat16;
head_dim 64 or 128; GPUs of compute capability 8.0 or newer (A100, L4, H100, H200).
Causal masking is top-left aligned like torch SDPA's ``is_causal`` (flash-attn aligns
bottom-right).

Build: ``torch.utils.cpp_extension.load`` with ninja, for the one architecture of the
device in use (``sm_90a`` on Hopper), into
``$ATTN_GUARD_CACHE/cuda_ext/<hash>-<arch>`` (default ``~/.cache/attn-guard``), where the
hash covers the sources, the flags, torch and CUDA versions: a rebuild happens only
when one of them changes, and concurrent processes share the build through torch's
lock file. The sources are built from a copy inside that directory, so two checkouts
of the same sources share one build. A failed build raises ``CudaBuildError``
carrying the compiler's output.
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
KERNEL_SOURCE = CSRC / "flash_fwd.cu"  # torch-free: compiles with a plain nvcc
BINDING_SOURCE = CSRC / "binding.cpp"
SOURCES = (BINDING_SOURCE, KERNEL_SOURCE)
# The Hopper kernel: a dispatcher and one instantiation per (dtype, head_dim), which
# the build compiles in parallel (each takes ~40 s of one core).
HOPPER_KERNEL_HEADER = CSRC / "flash_fwd_sm90.cuh"
HOPPER_SOURCES = (
    CSRC / "flash_fwd_sm90.cu",
    *(CSRC / f"flash_fwd_sm90_{dt}_hdim{hd}.cu" for dt in ("fp16", "bf16") for hd in (64, 128)),
)
# Its parts, which the header includes, named as FlashAttention-3's hopper/ files are.
HOPPER_PARTS = tuple(
    CSRC / name
    for name in (
        "named_barrier.hpp",
        "utils.h",
        "softmax.h",
        "mask.h",
        "tile_scheduler.hpp",
        "mainloop_fwd_sm90_tma_gmma_ws.hpp",
        "epilogue_fwd.hpp",
    )
)
# Every header a build copies beside the sources (_sources_in) and hashes (source_hash).
HEADERS = (CSRC / "flash_fwd.h", HOPPER_KERNEL_HEADER, *HOPPER_PARTS)
HOPPER = (9, 0)
CUTLASS_PIN = "nvidia-cutlass==4.2.0.0"  # also in install.sh and ci/setup-runner.sh

# Hidden host symbols: the launcher's per-device statics (a template's function-local
# statics, otherwise bound process-wide by the dynamic linker) stay in their own build,
# so two builds of the extension in one process (tuning variants side by side) do not
# share them (the second would skip its kernels' shared-memory attribute and fail).
NVCC_FLAGS = ("-O3", "--use_fast_math", "-std=c++17", "-Xcompiler=-fvisibility=hidden")
HOPPER_NVCC_FLAGS = ("--expt-relaxed-constexpr", "-DFLASH_SM90")
KERNEL_PATHS = {"auto": 0, "mma_sync": 1, "hopper": 2}
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MIN_CAPABILITY = (8, 0)  # mma.sync with bf16 and cp.async need sm_80

_BUILD_LOG_TAIL_CHARS = 6000


class CudaFlashExtension(Protocol):
    """The built extension module: the entry point of ``csrc/binding.cpp``."""

    def flash_fwd(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        scale: float,
        out: torch.Tensor | None = None,
        path: int = 0,
    ) -> torch.Tensor: ...


class CudaBuildError(RuntimeError):
    """The extension failed to build; the message ends with the compiler's output."""


def arch_flags(capability: tuple[int, int]) -> list[str]:
    """nvcc ``-gencode`` flags for one device of compute ``capability``.

    Hopper (9.0) gets ``sm_90a``, written in the ``-gencode`` form that nvcc 13.0
    assembles without a plain sm_90 pass; others get their own ``sm_XY``.
    """
    major, minor = capability
    arch = f"{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def _arch_tag(capability: tuple[int, int]) -> str:
    major, minor = capability
    return f"sm{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")


def cutlass_include() -> Path | None:
    """The CUTLASS/CuTe headers: ``$CUTLASS_INCLUDE``, else the ``nvidia-cutlass`` wheel's
    ``cutlass_library/source/include`` (found without importing the package)."""
    import importlib.util

    env = os.environ.get("CUTLASS_INCLUDE")
    if env:
        return Path(env) if (Path(env) / "cute" / "tensor.hpp").is_file() else None
    spec = importlib.util.find_spec("cutlass_library")
    for location in (spec.submodule_search_locations or []) if spec else []:
        include = Path(location) / "source" / "include"
        if (include / "cute" / "tensor.hpp").is_file():
            return include
    return None


def tuning_flags(variant: str | None = None) -> list[str]:
    """A tuning build's extra nvcc flags: ``variant``, else ``$ATTN_GUARD_HOPPER_FLAGS``.

    E.g. ``-DFLASH_SM90_D128_FULL_N=128`` (the macros at the top of
    ``flash_fwd_sm90.cuh``); part of the build's hash, so each variant has its own build
    and its own module name, and several load into one process side by side."""
    text = os.environ.get("ATTN_GUARD_HOPPER_FLAGS", "") if variant is None else variant
    return text.split()


def hopper_flags(variant: str | None = None) -> list[str]:
    """nvcc flags of the Hopper TUs: CuTe's include path and the kernel's defines."""
    include = cutlass_include()
    if include is None:
        raise FileNotFoundError(
            f"the CUTLASS/CuTe headers are not installed: pip install {CUTLASS_PIN} "
            "(or set CUTLASS_INCLUDE to a CUTLASS include/ folder)"
        )
    return [f"-I{include}", *HOPPER_NVCC_FLAGS, *tuning_flags(variant)]


def torch_nvcc_flags() -> list[str]:
    """The defines torch's extension build passes to nvcc (no half operators etc.)."""
    from torch.utils import cpp_extension

    return list(getattr(cpp_extension, "COMMON_NVCC_FLAGS", ()))


def find_nvcc() -> str | None:
    """An nvcc to compile with: ``$CUDA_HOME/bin/nvcc``, else nvcc on PATH, else the
    default install; None when there is none."""
    from torch.utils import cpp_extension

    for home in (
        cpp_extension.CUDA_HOME,
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
    ):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    on_path = shutil.which("nvcc")
    if on_path:
        return on_path
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def unavailable_reason() -> str | None:
    """Why the kernel cannot run here, or None. Never builds anything."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a build without CUDA"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CAPABILITY:
        return (
            f"needs a CUDA GPU of compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} "
            f"or newer; this one is {capability[0]}.{capability[1]}"
        )
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home is None or not (Path(home) / "bin" / "nvcc").is_file():
        return "CUDA compiler nvcc not found (set CUDA_HOME) to build the CUDA extension"
    if not cpp_extension.is_ninja_available():
        return "ninja not found: torch's CUDA extension build needs it (pip install ninja)"
    if capability == HOPPER and cutlass_include() is None:
        return f"the Hopper kernel's CUTLASS/CuTe headers are missing: pip install {CUTLASS_PIN}"
    return None


def source_hash(extra: Sequence[str] = ()) -> str:
    """Hash of the sources, headers, build flags, torch and CUDA versions."""
    digest = hashlib.sha256()
    for path in (*SOURCES, *HOPPER_SOURCES, *HEADERS):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    for item in (*NVCC_FLAGS, *HOPPER_NVCC_FLAGS, CUTLASS_PIN, *extra):
        digest.update(item.encode())
    for item in (torch.__version__, str(torch.version.cuda)):
        digest.update(item.encode())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    """``$ATTN_GUARD_CACHE/cuda_ext``, else ``~/.cache/attn-guard/cuda_ext``."""
    base = os.environ.get("ATTN_GUARD_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "attn-guard"
    return root / "cuda_ext"


def build_directory(capability: tuple[int, int], variant: str | None = None) -> Path:
    """Where the extension for ``capability`` is built: ``<cache_root>/<hash>-<arch>``."""
    flags = [*arch_flags(capability), *tuning_flags(variant)]
    return cache_root() / f"{source_hash(flags)}-{_arch_tag(capability)}"


def _sources_in(build_dir: Path, sources: Sequence[Path]) -> list[Path]:
    """The sources, copied into the build directory, which is keyed by their hash.

    The build files record the paths they compiled: built from the checkout itself,
    two checkouts of one source (``--against``'s two trees) would each look like a
    change to the other and rebuild at every switch. From the copy, every tree with
    these sources shares one build and one shared object."""
    src = build_dir / "src"
    src.mkdir(exist_ok=True)
    for path in (*SOURCES, *HOPPER_SOURCES, *HEADERS):
        target = src / path.name
        if not target.is_file() or target.read_bytes() != path.read_bytes():
            tmp = target.with_suffix(target.suffix + f".{os.getpid()}.tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, target)  # atomic: a concurrent build sees old or new, whole
    return [src / path.name for path in sources]


BUILT_MARKER = "built"  # in a build directory: the extension there was built whole


def _import_built(build_dir: Path, name: str) -> CudaFlashExtension | None:
    """The extension a finished build left in ``build_dir`` (its marker names it),
    imported as it is; None when there is none. A copy of a cache (a trusted one, in
    another folder) loads without ninja, which would rebuild everything because the
    build files record the folder they were written in."""
    import importlib.machinery
    import importlib.util

    marker, built = build_dir / BUILT_MARKER, build_dir / f"{name}.so"
    try:
        if marker.read_text(encoding="utf-8").strip() != name or not built.is_file():
            return None
    except (OSError, UnicodeDecodeError):
        return None
    loader = importlib.machinery.ExtensionFileLoader(name, str(built))
    spec = importlib.util.spec_from_file_location(name, built, loader=loader)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    found: CudaFlashExtension = module  # a pybind11 module
    return found


@functools.cache
def load_extension(capability: tuple[int, int], variant: str | None = None) -> CudaFlashExtension:
    """Build (or reuse) and import the extension for one compute capability.

    ``variant``: a tuning build's flags (``tuning_flags``); None: the environment's."""
    from torch.utils import cpp_extension

    flags = arch_flags(capability)
    build_dir = build_directory(capability, variant)
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"attn_guard_cuda_flash_{build_dir.name.split('-')[0]}"  # the hash
    try:
        ready = _import_built(build_dir, name)
    except ImportError:
        ready = None  # a damaged file: build it again
    if ready is not None:
        return ready
    sources: tuple[Path, ...] = SOURCES
    cflags: list[str] = []
    try:
        if capability == HOPPER:
            sources = (*SOURCES, *HOPPER_SOURCES)
            flags = [*flags, *hopper_flags(variant)]
            cflags = ["-DFLASH_SM90"]
        module: CudaFlashExtension = cpp_extension.load(
            name=name,
            sources=[str(path) for path in _sources_in(build_dir, sources)],
            extra_cflags=cflags,
            extra_cuda_cflags=[*NVCC_FLAGS, *flags],
            build_directory=str(build_dir),
            verbose=False,
        )
    except (RuntimeError, OSError, ImportError, subprocess.SubprocessError) as exc:
        text = str(exc)
        tail = text[-_BUILD_LOG_TAIL_CHARS:]
        if len(text) > len(tail):
            tail = "...\n" + tail
        raise CudaBuildError(
            f"building the CUDA flash-attention extension for {_arch_tag(capability)} "
            f"in {build_dir} failed:\n{tail}"
        ) from exc
    tmp = build_dir / f"{BUILT_MARKER}.{os.getpid()}.tmp"
    try:
        tmp.write_text(name + "\n", encoding="utf-8")
        os.replace(tmp, build_dir / BUILT_MARKER)  # atomic: whole, or not there
    except OSError:
        pass  # a read-only cache: the next process builds (ninja finds it up to date)
    return module


def object_command(
    source: Path,
    gencode: str,
    output: Path,
    *,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
) -> list[str]:
    """The nvcc command of ``compile_object``."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    return [
        nvcc, "-c", str(source), "-o", str(output), gencode,
        *NVCC_FLAGS, *torch_nvcc_flags(), *extra_flags,
    ]  # fmt: skip


def compile_object(
    source: Path,
    gencode: str,
    output: Path,
    *,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """Compile one torch-free source of ``csrc/`` alone, with the extension's flags.

    For the CPU compile tests and the ``-Xptxas -v`` reports. ``gencode`` is one
    ``-gencode=...`` flag; the result's stdout/stderr hold the compiler output.
    """
    cmd = object_command(source, gencode, output, extra_flags=extra_flags, nvcc=nvcc)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def compile_kernel_object(
    gencode: str,
    output: Path,
    *,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """``compile_object`` of the mma.sync kernel, ``csrc/flash_fwd.cu``."""
    return compile_object(
        KERNEL_SOURCE, gencode, output, extra_flags=extra_flags, nvcc=nvcc, timeout=timeout
    )


def _validate(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None
) -> float:
    """The softmax scale to use; ValueError naming the first bad argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{name} must be float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but q has {q.dtype}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dims (batch, heads, seq, head_dim), got shape {tuple(t.shape)}"
            )
        if t.shape[-1] not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"{name} head_dim must be 64 or 128, got {t.shape[-1]}")
        if t.shape[-1] != q.shape[-1]:
            raise ValueError(f"{name} head_dim {t.shape[-1]} differs from q's {q.shape[-1]}")
        if t.shape[0] != q.shape[0]:
            raise ValueError(f"{name} batch {t.shape[0]} differs from q's {q.shape[0]}")
    if k.shape[1] != v.shape[1]:
        raise ValueError(f"v has {v.shape[1]} heads but k has {k.shape[1]}")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q heads ({q.shape[1]}) must be a multiple of k heads ({k.shape[1]})")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"v has seq {v.shape[2]} but k has {k.shape[2]}")
    if max(q.shape[0], q.shape[1]) > 65535:
        raise ValueError(f"q batch and heads must be at most 65535, got {tuple(q.shape)}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale_value = 1.0 / math.sqrt(q.shape[-1])
    else:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise ValueError(f"scale must be a number or None, got {type(scale).__name__}")
        scale_value = float(scale)
        if not math.isfinite(scale_value):
            raise ValueError(f"scale must be finite, got {scale_value}")
    # Devices last, so that every other check also runs (and is tested) on the CPU.
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(f"{name} must be a CUDA tensor, got device {t.device}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on device {t.device} but q is on {q.device}")
    return scale_value


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    kernel: str = "auto",
    tuning: str | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v with the CUDA FlashAttention forward kernels.

    Args:
        q: (batch, heads, seq_q, head_dim) CUDA tensor, float16 or bfloat16,
            head_dim 64 or 128. Any strides (the binding copies a tensor whose last
            dim is not contiguous or whose strides are not multiples of 8).
        k, v: (batch, heads_kv, seq_k, head_dim), same dtype and device as ``q``;
            ``heads`` must be a multiple of ``heads_kv`` (grouped-query attention).
            ``seq_k`` may differ from ``seq_q``.
        causal: mask keys after the query, top-left aligned as torch SDPA's
            ``is_causal``: query ``i`` sees keys ``j <= i`` whatever ``seq_q`` and
            ``seq_k`` are (flash-attn's own kernels align bottom-right instead).
        scale: softmax scale; ``1 / sqrt(head_dim)`` when None.
        out: where to write the result: q's shape, dtype and device, any strides.
        kernel: "auto" (the Hopper kernel on sm_90, mma.sync elsewhere), "hopper" or
            "mma_sync" to force one (for benchmarks; "hopper" needs an sm_90 GPU).
        tuning: a tuning build's extra nvcc flags (``tuning_flags``), each its own
            build, so that variants run side by side in one process (for benchmarks);
            None: ``$ATTN_GUARD_HOPPER_FLAGS``.

    Returns:
        (batch, heads, seq_q, head_dim) contiguous tensor in ``q``'s dtype; zeros
        where ``seq_k`` is 0. Forward only: the result does not track gradients.

    Raises:
        ValueError: an argument is of the wrong type, device, dtype or shape (the
            message names it); checked before anything is built.
        CudaBuildError: the extension failed to build.
    """
    scale_value = _validate(q, k, v, causal, scale)
    capability = torch.cuda.get_device_capability(q.device)
    if capability < MIN_CAPABILITY:
        raise ValueError(
            f"q is on {q.device} of compute capability {capability[0]}.{capability[1]}; "
            f"the kernel needs {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer"
        )
    if kernel not in KERNEL_PATHS:
        raise ValueError(f"kernel must be one of {sorted(KERNEL_PATHS)}, got {kernel!r}")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
            raise ValueError(
                f"out must match q: got shape {tuple(out.shape)}, {out.dtype} on {out.device}; "
                f"q is {tuple(q.shape)}, {q.dtype} on {q.device}"
            )
    if kernel == "hopper" and capability != HOPPER:
        raise ValueError(f"kernel='hopper' needs an sm_90 GPU; {q.device} is {capability}")
    return load_extension(capability, tuning).flash_fwd(
        q, k, v, causal, scale_value, out, KERNEL_PATHS[kernel]
    )
