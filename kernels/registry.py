"""The kernels the guard can measure, by name.

A kernel is a callable ``fn(q, k, v, *, causal, scale) -> out`` over tensors shaped
(batch, heads, seq, head_dim), as ``torch.nn.functional.scaled_dot_product_attention``
takes them. Each entry says where it can run; ``unavailable_reason`` explains why not.
Kernel modules are imported lazily so that a missing Triton or a failing CUDA build
breaks only the kernel that needs it, never the registry.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import torch


class ResourceRecord(TypedDict):
    """What a resource hook returns per compiled kernel: ``KernelResources`` as JSON.

    The guard validates every record (``guard.store.kernel_resources.KernelResources.
    from_json``): a hook may come from another tree.
    """

    arch: str
    kernel: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int  # static + dynamic, per block
    num_warps: int
    num_stages: int
    grid: list[int]
    config: dict[str, int | str]
    path: str
    toolchain: str


KernelFn = Callable[..., torch.Tensor]
# (a suite case's params(), arch like "sm_90") -> resource records (see KernelSpec).
ResourcesFn = Callable[[Mapping[str, Any], str], list[ResourceRecord]]
# (a suite case's params(), arch) -> the launch path's label (see KernelSpec).
PathFn = Callable[[Mapping[str, Any], str], str]
# arch -> every launch path of the kernel there.
EveryPathFn = Callable[[str], frozenset[str]]

_HERE = Path(__file__).resolve().parent
# What the three FlashAttention names share: the path chooser and configs, the wrappers.
_FLASH_SHARED = ("flash_plan.py", "flash_launch.py", "dispatch_table.py")
_FLASH_KERNELS = ("triton_flash.py", "triton_decode.py", "gluon_flash_fwd.py")


@dataclass(frozen=True)
class KernelSpec:
    """One registered kernel.

    ``loader`` returns the callable (imports, builds) and may raise; ``probe`` returns
    a reason the kernel cannot run on ``device`` here, or None when it can.
    ``accepts_out``: the callable takes ``out=`` (the guard then poisons that buffer).
    ``resources``: compiles the kernel for a workload and a GPU arch without a GPU and
    returns one record per compiled kernel (``ResourceRecord``: registers, spills,
    shared memory, warps, stages, grid, config, path); raises
    ``kernel_reports.ptxas.ResourcesUnavailable`` when it cannot here. None: the kernel
    has no such report (torch's own kernels). The hooks live in ``kernel_reports/``,
    which imports this package: named here by module, imported when called.
    ``launch_path`` and ``every_path``: the path a workload takes on an arch (its
    compiled kernel, config, host rule: ``kernels.launch_paths``), and all of them, so
    that the guard can say which paths a suite leaves unrun. None: not listed.
    """

    name: str
    description: str
    loader: Callable[[], KernelFn]
    probe: Callable[[str], str | None]
    source_files: tuple[str, ...] = ()
    accepts_out: bool = False
    resources: ResourcesFn | None = None
    launch_path: PathFn | None = None
    every_path: EveryPathFn | None = None

    def source_hash(self) -> str:
        """Hash of the kernel's own source files (part of the comparability record)."""
        digest = hashlib.sha256()
        for rel in self.source_files:
            path = _HERE / rel
            digest.update(rel.encode())
            if path.is_file():
                digest.update(path.read_bytes())
            elif path.is_dir():
                for sub in sorted(p for p in path.rglob("*") if p.is_file()):
                    digest.update(str(sub.relative_to(_HERE)).encode())
                    digest.update(sub.read_bytes())
        return digest.hexdigest()[:16]


def _from_module(module: str, attr: str) -> Callable[[], KernelFn]:
    def load() -> KernelFn:
        fn: KernelFn = getattr(importlib.import_module(module), attr)
        return fn

    return load


def _resources_from(module: str, attr: str = "resources") -> ResourcesFn:
    """The hook ``module.attr`` (a module of ``kernel_reports``), imported on first call:
    the reports compile the kernels, so the kernels never import them."""

    def resources(params: Mapping[str, Any], arch: str) -> list[ResourceRecord]:
        hook: ResourcesFn = getattr(importlib.import_module(module), attr)
        return hook(params, arch)

    return resources


def _path_of(kernel: str) -> tuple[PathFn, EveryPathFn]:
    def path(params: Mapping[str, Any], arch: str) -> str:
        from kernels import launch_paths

        return launch_paths.launch_path(kernel, params, arch)

    def every(arch: str) -> frozenset[str]:
        from kernels import launch_paths

        return launch_paths.every_path(kernel, arch)

    return path, every


def _needs_cuda(device: str) -> str | None:
    if device != "cuda":
        return "needs a CUDA GPU"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def _any_device(device: str) -> str | None:
    if device == "cuda" and not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def _triton_probe(device: str) -> str | None:
    reason = _needs_cuda(device)
    if reason:
        return reason
    try:
        importlib.import_module("triton")
    except ImportError as exc:
        return f"triton is not installed ({exc})"
    return None


def _gluon_probe(device: str) -> str | None:
    reason = _triton_probe(device)
    if reason:
        return reason
    try:
        importlib.import_module("kernels.gluon_flash_fwd")
    except ImportError as exc:
        return f"this triton has no Gluon for Hopper ({exc})"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"needs an sm_90 GPU (Hopper: wgmma, TMA); this one is sm_{major}{minor}"
    return None


def _sdpa_backend_probe(backend: str) -> Callable[[str], str | None]:
    def probe(device: str) -> str | None:
        reason = _needs_cuda(device)
        if reason:
            return reason
        from kernels import sdpa

        return sdpa.backend_unavailable_reason(backend)

    return probe


def _cuda_ext_probe(device: str) -> str | None:
    reason = _needs_cuda(device)
    if reason:
        return reason
    from kernels import cuda_flash

    return cuda_flash.unavailable_reason()


REGISTRY: dict[str, KernelSpec] = {
    spec.name: spec
    for spec in (
        KernelSpec(
            name="reference",
            description="plain-torch attention in the input dtype (matmul, softmax, matmul)",
            loader=_from_module("kernels.reference", "attention"),
            probe=_any_device,
            source_files=("reference.py",),
        ),
        KernelSpec(
            name="sdpa",
            description="torch scaled_dot_product_attention, default backend choice",
            loader=_from_module("kernels.sdpa", "sdpa_default"),
            probe=_any_device,
            source_files=("sdpa.py",),
        ),
        *(
            KernelSpec(
                name=f"sdpa_{backend}",
                description=f"torch SDPA, {label} backend only",
                loader=_from_module("kernels.sdpa", f"sdpa_{backend}"),
                probe=_sdpa_backend_probe(backend),
                source_files=("sdpa.py",),
            )
            for backend, label in (
                ("flash", "FlashAttention"),
                ("efficient", "memory-efficient"),
                ("cudnn", "cuDNN"),
            )
        ),
        KernelSpec(
            name="triton_flash",
            description="this repository's Triton FlashAttention forward (never the Gluon kernel)",
            loader=_from_module("kernels.triton_flash", "flash_attention_fwd"),
            probe=_triton_probe,
            source_files=("triton_flash.py", "triton_decode.py", *_FLASH_SHARED),
            accepts_out=True,
            resources=_resources_from("kernel_reports.triton_flash_resources"),
            launch_path=_path_of("triton_flash")[0],
            every_path=_path_of("triton_flash")[1],
        ),
        KernelSpec(
            name="gluon_flash",
            description="this repository's Gluon FlashAttention forward for sm_90 (Hopper)",
            loader=_from_module("kernels.gluon_flash_fwd", "flash_attention_fwd"),
            probe=_gluon_probe,
            source_files=("gluon_flash_fwd.py", *_FLASH_SHARED),
            accepts_out=True,
            resources=_resources_from("kernel_reports.triton_flash_resources", "gluon_resources"),
            launch_path=_path_of("gluon_flash")[0],
            every_path=_path_of("gluon_flash")[1],
        ),
        KernelSpec(
            name="flash_attention",
            description="kernels.flash_attention.flash_attention_fwd as users call it: "
            "gluon_flash where measured faster on sm_90, else triton_flash",
            loader=_from_module("kernels.flash_attention", "flash_attention_fwd"),
            probe=_triton_probe,
            source_files=(
                "flash_attention.py",
                "triton_flash_fwd.py",
                "dispatch",  # the measured choice of kernel per GPU model
                *_FLASH_KERNELS,
                *_FLASH_SHARED,
            ),
            accepts_out=True,
            resources=_resources_from("kernel_reports.triton_flash_resources", "entry_resources"),
        ),
        KernelSpec(
            name="cuda_flash",
            description="this repository's CUDA C++ FlashAttention-2 forward (torch extension)",
            loader=_from_module("kernels.cuda_flash", "flash_attention_fwd"),
            probe=_cuda_ext_probe,
            source_files=("cuda_flash.py", "csrc"),
            accepts_out=False,
            resources=_resources_from("kernel_reports.cuda_flash_resources"),
            launch_path=_path_of("cuda_flash")[0],
            every_path=_path_of("cuda_flash")[1],
        ),
    )
}


def get(name: str) -> KernelSpec:
    """The kernel called ``name``; KeyError names the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def register(spec: KernelSpec) -> None:
    """Add a kernel (tests use this for fault-injection kernels)."""
    REGISTRY[spec.name] = spec
