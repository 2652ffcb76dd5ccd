"""Compile Triton kernels for a GPU architecture without a GPU, and report their resources.

Triton compiles for a target without a driver when the active driver only answers
``get_current_target``; inside ``compile_only(arch)`` every launch ``kernel[grid](...)``
becomes a compile (``warmup``), so a kernel's real launcher, with the runtime's own
argument specialization (16-divisible integers, 16-byte aligned pointers), runs
unchanged on CPU tensors of the workload's shapes and nothing is launched.
``kernel_record`` turns one such compile into the record every resource hook returns:
registers and spills from ``ptxas -v`` of the kernel's PTX with triton's bundled ptxas
(the one triton itself assembles with), shared memory, warps and stages from the
compiled metadata, and the grid the launcher asked for.

``compile_only`` replaces process-wide triton state (the active driver, the allocator,
``JITFunction.run``) until it exits: run it in a process of its own, never beside real
launches. Each architecture gets its own device index, so one process may compile for
several: triton keys its per-device caches (and the target in them) on that index.

Used by the registry's resource hooks (``kernel_reports/triton_flash_resources.py``)
and by ``benchmarks/compile_report.py``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

from kernel_reports.ptxas import parse_ptxas, ptxas_report, tool_version
from kernels.arch import parse_arch

if TYPE_CHECKING:
    # Typing only: the compile machinery works under any tree's registry.
    from kernels.registry import ResourceRecord


class TargetOnlyDriver:
    """A triton driver that knows its target and nothing else: compiles, never runs."""

    # Read by the launchers (``flash_launch.plans_possible``): on a machine with a
    # GPU, torch.cuda is available inside ``compile_only`` too, but nothing launches.
    launches = False

    def __init__(self, capability: int) -> None:
        self.capability = capability
        self.target = GPUTarget("cuda", capability, 32)

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        # One device index per target: JITFunction caches per device, target included.
        return self.capability

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


# A launch's grid as ``kernel[grid]`` takes it: the sizes, or a function of the named
# arguments (constexprs included) that returns them.
_Grid = Sequence[int] | Callable[[dict[str, Any]], Sequence[int]]


@dataclass(frozen=True)
class CompiledLaunch:
    """One launch turned into a compile: the compiled kernel and how it was launched."""

    kernel: Any  # triton.compiler.CompiledKernel
    grid: tuple[int, int, int]
    arguments: dict[str, Any]  # the launch's named arguments, constexprs included


@contextlib.contextmanager
def compile_only(arch: str) -> Iterator[list[CompiledLaunch]]:
    """Within the block, launches compile for ``arch`` (``"sm_90"``) and launch nothing.

    Yields the list that each launch appends its ``CompiledLaunch`` to.
    """
    capability = parse_arch(arch)
    launches: list[CompiledLaunch] = []
    run = JITFunction.run

    def compile_run(
        self: JITFunction, *args: Any, grid: _Grid, warmup: bool, **kwargs: Any
    ) -> Any:  # the CompiledKernel
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        # Defaults are not in args, nor in named.
        named: dict[str, Any] = dict(zip(self.arg_names, args, strict=False))
        named.update(kwargs)
        size = tuple(int(n) for n in (grid(named) if callable(grid) else grid))
        x, y, z = (*size, 1, 1)[:3]
        launches.append(CompiledLaunch(kernel, (x, y, z), named))
        return kernel

    allocation = triton.runtime._allocation
    previous_allocator = allocation._allocator.get()
    previous_driver = driver._active  # None until first use: reset_active() would
    # create the real driver, which fails without a GPU.
    driver.set_active(TargetOnlyDriver(capability))
    JITFunction.run = compile_run
    # Kernels with device-side tensor descriptors ask for scratch at launch only; a
    # launcher that installs its own allocator when none is set must see one.
    triton.set_allocator(lambda size, alignment, stream: None)
    try:
        yield launches
    finally:
        JITFunction.run = run
        allocation._allocator.set(previous_allocator)
        driver._active = previous_driver


@functools.cache
def ptxas_for(capability: int) -> tuple[str, str]:
    """The ptxas that triton uses for ``capability`` (90: sm_90), and its GPU name."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    return get_ptxas(capability).path, sm_arch_from_capability(capability)


def toolchain(arch: str = "sm_90") -> str:
    """The compilers a Triton record for ``arch`` comes from: "triton 3.6.0, ptxas 12.8.93"."""
    ptxas, _ = ptxas_for(parse_arch(arch))
    return f"triton {triton.__version__}, ptxas {tool_version(ptxas)}"


def kernel_record(
    launch: CompiledLaunch, arch: str, *, config: dict[str, int | str], path: str
) -> ResourceRecord:
    """The resource record (the registry's ``ResourceRecord``) of one compile.

    ``config`` names what the launcher chose (tile sizes, where the choice came from);
    ``path`` the code path taken ("pointer", "tma_ws", ...).
    """
    kernel = launch.kernel
    meta = kernel.metadata
    ptxas, gpu_name = ptxas_for(parse_arch(arch))
    flags = ("-lineinfo",) + (() if getattr(meta, "enable_fp_fusion", True) else ("--fmad=false",))
    report = ptxas_report(kernel.asm["ptx"], gpu_name, ptxas, extra_flags=flags)
    entries = [e for e in parse_ptxas(report) if e.symbol == meta.name]
    if not entries:
        raise RuntimeError(f"no ptxas report for {meta.name} in:\n{report[-2000:]}")
    entry = entries[0]
    return {
        "arch": arch,
        "kernel": meta.name,
        "registers": entry.registers,
        "spill_store_bytes": entry.spill_store_bytes,
        "spill_load_bytes": entry.spill_load_bytes,
        "stack_bytes": entry.stack_bytes,
        "shared_bytes": int(meta.shared) + entry.static_shared_bytes,
        "num_warps": int(meta.num_warps),
        "num_stages": int(meta.num_stages),
        "grid": list(launch.grid),
        "config": dict(config),
        "path": path,
        "toolchain": toolchain(arch),
    }
