"""Which launch paths of each gated kernel a suite runs, and which none of its cases do.

A kernel's registry entry may say which path a workload takes on a GPU arch (its
compiled kernel, config and host rule: ``KernelSpec.launch_path``) and list all of them
(``KernelSpec.every_path``); to the guard a path is an opaque label. A path no case runs
is a path a change can slow down unseen: ``guard list --coverage`` names each, and the
PR check reports its suite's coverage with the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guard.store.suite import Case, Suite, is_module_kernel

ARCH = "sm_90"  # the arch the gated kernels' paths are listed for (Hopper)


@dataclass(frozen=True)
class KernelCoverage:
    """One gated kernel's paths on ``arch``: every one, and those the cases run."""

    kernel: str
    arch: str
    paths: frozenset[str]
    by_cases: frozenset[str]  # the suite's own cases
    by_surface: frozenset[str]  # its cases and its surface's

    @property
    def missing(self) -> tuple[str, ...]:
        """Paths that no case of the suite or its surface runs."""
        return tuple(sorted(self.paths - self.by_surface))

    def line(self) -> str:
        n = len(self.paths)
        return (
            f"{self.kernel} on {self.arch}: {len(self.by_cases & self.paths)} of {n} paths "
            f"run by the suite's cases, {len(self.by_surface & self.paths)} of {n} with its surface"
        )


def _paths(kernel: str, cases: Sequence[Case], arch: str) -> frozenset[str]:
    import kernels

    label = kernels.get(kernel).launch_path
    if label is None:
        return frozenset()
    return frozenset(label(c.params(), arch) for c in cases if c.kernel == kernel)


def coverage(suite: Suite, arch: str = ARCH) -> tuple[KernelCoverage, ...]:
    """Each gated kernel's coverage (those whose registry entry lists paths; a
    ``module:function`` kernel lists none)."""
    gated = {c.kernel for c in (*suite.cases, *suite.surface) if c.gate}
    gated = {k for k in gated if not is_module_kernel(k)}
    if not gated:
        return ()
    import kernels

    out = []
    for name in sorted(gated):
        every = kernels.get(name).every_path
        if every is None:
            continue
        out.append(
            KernelCoverage(
                name,
                arch,
                every(arch),
                _paths(name, suite.cases, arch),
                _paths(name, (*suite.cases, *suite.surface), arch),
            )
        )
    return tuple(out)
