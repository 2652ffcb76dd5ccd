"""Compiler resources per case: what the compiler made of each kernel, for each GPU arch.

"Why did this case get slower?" often has a compile-time answer: more registers per
thread (fewer blocks per SM), spills to local memory, more shared memory, another
config or code path. A kernel in the registry with a ``resources`` hook
(``kernels/registry.py``) compiles itself for a workload and an arch (``"sm_90"``,
``"sm_89"``) without a GPU and returns records; this module holds them as
``KernelResources``, collects them for a suite (``collect_resources``), and lists what
changed between two trees (``diff``, ``diff_cases``).

Compiling replaces process-wide triton state (its active driver), so collection runs in
a child process: ``collect_in_tree`` starts ``python -m guard.measure.resources`` with this
guard's code and the given tree's kernels (as ``guard.measure.worker`` does for an arm), under a
timeout, and reads back the JSON it writes (``ResourceReport``, schema below).

Report file format (``schema_version``):
  1: first version: arches, tree, elapsed_s, cases {case id: [record]},
     skipped {case id: {arch: reason}}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guard.base import files, limits
from guard.base.errors import BadInput, ExitCode, GuardError, InfraError
from guard.measure.proc import child_env, local_kernels_root, run_group, strays_text
from guard.store.kernel_resources import KernelResources, _arch, _mapping, _str

if TYPE_CHECKING:
    from guard.store.suite import Suite

SCHEMA_VERSION = 1
_REASON_CHARS = 600


@dataclass(frozen=True)
class ResourceChange:
    """One difference between a case's base and head records, e.g. "registers 168 -> 190".

    ``what`` is a field name ("registers", "config.BLOCK_M", ...), or "kernel" for a
    kernel added (base None), removed (head None) or renamed.
    """

    arch: str
    kernel: str
    what: str
    base: Any
    head: Any

    @property
    def delta(self) -> int | None:
        """head - base for numeric fields, else None."""
        numbers = all(
            isinstance(v, int) and not isinstance(v, bool) for v in (self.base, self.head)
        )
        return self.head - self.base if numbers else None

    def __str__(self) -> str:
        def show(value: Any) -> str:
            if value is None:
                return "(none)"
            if isinstance(value, tuple):
                return "x".join(str(n) for n in value)
            return str(value)

        if self.what == "kernel" and self.base is None:
            return f"{self.arch} {self.kernel}: added"
        if self.what == "kernel" and self.head is None:
            return f"{self.arch} {self.kernel}: removed"
        return f"{self.arch} {self.kernel}: {self.what} {show(self.base)} -> {show(self.head)}"

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return list(value) if isinstance(value, tuple) else value

        return {
            "arch": self.arch,
            "kernel": self.kernel,
            "what": self.what,
            "base": plain(self.base),
            "head": plain(self.head),
            "text": str(self),
        }


# Compared in this order: what the launcher chose, then what the compiler made of it.
_FIELDS = ("path", "num_warps", "num_stages", "registers", "spill_store_bytes",
           "spill_load_bytes", "stack_bytes", "shared_bytes", "grid", "toolchain")  # fmt: skip


def _record_changes(base: KernelResources, head: KernelResources) -> list[ResourceChange]:
    arch, kernel = head.arch, head.kernel
    changes: list[ResourceChange] = []
    if base.kernel != head.kernel:
        changes.append(ResourceChange(arch, kernel, "kernel", base.kernel, head.kernel))
    if base.path != head.path:
        changes.append(ResourceChange(arch, kernel, "path", base.path, head.path))
    for key in sorted(set(base.config) | set(head.config)):
        old, new = base.config.get(key), head.config.get(key)
        if old != new:
            changes.append(ResourceChange(arch, kernel, f"config.{key}", old, new))
    for name in _FIELDS[1:]:
        old, new = getattr(base, name), getattr(head, name)
        if old != new:
            changes.append(ResourceChange(arch, kernel, name, old, new))
    return changes


def diff(base: Sequence[KernelResources], head: Sequence[KernelResources]) -> list[ResourceChange]:
    """What changed between one case's base and head records, per arch and kernel.

    Records pair up by (arch, kernel); within an arch, a single unpaired record on each
    side is taken as the same kernel renamed. Empty when nothing changed.
    """
    changes: list[ResourceChange] = []
    arches = list(dict.fromkeys([r.arch for r in base] + [r.arch for r in head]))
    for arch in arches:
        old = {r.kernel: r for r in base if r.arch == arch}
        new = {r.kernel: r for r in head if r.arch == arch}
        for name in [n for n in new if n in old]:
            changes += _record_changes(old[name], new[name])
        gone = [r for n, r in old.items() if n not in new]
        added = [r for n, r in new.items() if n not in old]
        if len(gone) == 1 and len(added) == 1:
            changes += _record_changes(gone[0], added[0])
            continue
        changes += [ResourceChange(arch, r.kernel, "kernel", r.kernel, None) for r in gone]
        changes += [ResourceChange(arch, r.kernel, "kernel", None, r.kernel) for r in added]
    return changes


def diff_cases(
    base: Mapping[str, Sequence[KernelResources]], head: Mapping[str, Sequence[KernelResources]]
) -> dict[str, list[ResourceChange]]:
    """``diff`` for every case present on both sides that changed."""
    out: dict[str, list[ResourceChange]] = {}
    for case_id in head:
        if case_id in base and (changes := diff(base[case_id], head[case_id])):
            out[case_id] = changes
    return out


@dataclass(frozen=True)
class ResourceReport:
    """The records of a suite's cases for some arches, and why some are missing.

    ``cases`` has every case whose kernel has a resources hook (a case with no record
    for an arch has a reason in ``skipped[case id][arch]``); kernels without a hook
    (torch's own) are absent.
    """

    arches: tuple[str, ...]
    cases: Mapping[str, tuple[KernelResources, ...]]
    skipped: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    tree: str = ""
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "arches": list(self.arches),
            "tree": self.tree,
            "elapsed_s": round(self.elapsed_s, 3),
            "cases": {cid: [r.to_json() for r in recs] for cid, recs in self.cases.items()},
            "skipped": {cid: dict(reasons) for cid, reasons in self.skipped.items()},
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "resources") -> ResourceReport:
        data = _mapping(data, source)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise BadInput(
                f"{source}: schema_version: expected {SCHEMA_VERSION}, got {version!r}"
                + (" (written by a newer guard)" if newer else "")
            )
        arches = data.get("arches")
        if not isinstance(arches, list):
            raise BadInput(f"{source}: arches: must be a list")
        elapsed = data.get("elapsed_s", 0.0)
        if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)):
            raise BadInput(f"{source}: elapsed_s: must be a number, got {elapsed!r}")
        cases: dict[str, tuple[KernelResources, ...]] = {}
        for cid, recs in _mapping(data.get("cases", {}), f"{source}: cases").items():
            if not isinstance(recs, list):
                raise BadInput(f"{source}: cases.{cid}: must be a list")
            cases[cid] = tuple(
                KernelResources.from_json(r, f"{source}: cases.{cid}[{i}]")
                for i, r in enumerate(recs)
            )
        skipped: dict[str, dict[str, str]] = {}
        for cid, reasons in _mapping(data.get("skipped", {}), f"{source}: skipped").items():
            reasons = _mapping(reasons, f"{source}: skipped.{cid}")
            skipped[cid] = {
                _arch(a, f"{source}: skipped.{cid}"): _str(r, f"{source}: skipped.{cid}.{a}")
                for a, r in reasons.items()
            }
        return cls(
            arches=tuple(_arch(a, f"{source}: arches[{i}]") for i, a in enumerate(arches)),
            cases=cases,
            skipped=skipped,
            tree=_str(data.get("tree", ""), f"{source}: tree"),
            elapsed_s=float(elapsed),
        )


# ------------------------------------------------------------------------ collection


def _reason(exc: BaseException) -> str:
    if type(exc).__name__ == "ResourcesUnavailable":  # kernel_reports.ptxas: by name, any tree
        text = str(exc)
    else:
        text = f"failed: {type(exc).__name__}: {exc}"
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


def collect_resources(suite: Suite, arches: Sequence[str]) -> ResourceReport:
    """Compile every case of ``suite`` whose kernel has a resources hook, for each arch.

    Compiles in this process with the ``kernels`` package on ``sys.path`` and replaces
    triton's active driver: call it in a process of its own (``collect_in_tree``). A
    hook that cannot report (no nvcc, a compile error) costs only that (case, arch),
    recorded in ``skipped``. BadInput for an arch that is not like "sm_90".
    """
    from kernels import registry

    arches = tuple(_arch(a, "arch") for a in arches)
    start = time.perf_counter()
    cases: dict[str, tuple[KernelResources, ...]] = {}
    skipped: dict[str, dict[str, str]] = {}
    for case in suite.cases:
        hook = getattr(registry.get(case.kernel), "resources", None)
        if hook is None:
            continue
        records: list[KernelResources] = []
        for arch in arches:
            try:
                raw = hook(case.params(), arch)
                got = [
                    KernelResources.from_json(r, f"{case.id} {arch} record {i}")
                    for i, r in enumerate(raw)
                ]
                wrong = [r.arch for r in got if r.arch != arch]
                if wrong:
                    raise BadInput(f"{case.id}: asked for {arch}, the hook reported {wrong[0]}")
            except Exception as exc:
                skipped.setdefault(case.id, {})[arch] = _reason(exc)
                continue
            records += got
        cases[case.id] = tuple(records)
    return ResourceReport(
        arches=arches,
        cases=cases,
        skipped=skipped,
        tree=local_kernels_root(),
        elapsed_s=time.perf_counter() - start,
    )


_TAIL = 4000  # characters of the resources child's output kept for an error message


def collect_in_tree(
    tree: str | Path,
    suite_path: str | Path,
    arches: Sequence[str],
    timeout_s: float = 900.0,
    *,
    kernels: Sequence[str] = (),
    case_names: Sequence[str] = (),
    case_ids: Sequence[str] = (),
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> ResourceReport:
    """``collect_resources`` in a child process over ``tree``'s kernels.

    The child runs this guard's code (``python -m guard.measure.resources``, as a worker does)
    with ``tree`` first on ``sys.path``, so ``tree/kernels`` is what compiles (through
    the hooks its registry names: this repository's are in ``tree/kernel_reports``) and
    the suite's kernel names are checked against that tree's registry. ``kernels`` and
    ``case_names`` select cases (``Suite.select``), ``case_ids`` exactly these (a shard's
    cases are not every kernel by every name). ``env`` and ``wrapper``: the tree's own
    caches and sandbox (``runner.Arm``). The child runs at the lowest CPU priority
    (it compiles while the GPU measures). The child and everything it starts
    (nvcc, ptxas) run in their own process group, killed at ``timeout_s``.

    Raises InfraError when the child fails, times out or writes nothing, BadInput when
    it rejected its input (the suite, an arch).
    """
    tree = Path(tree).resolve()
    suite_path = Path(suite_path).resolve()
    child = {**child_env(compiled=True), **(env or {})}  # ``env``: the tree's own caches
    # The report is written where the child may write: its own TMPDIR (``wrapper``, a
    # sandbox, keeps every other folder read-only). A note, never a verdict.
    with tempfile.TemporaryDirectory(prefix="guard-resources-", dir=child.get("TMPDIR")) as tmp:
        out = Path(tmp) / "resources.json"
        cmd = [*wrapper, python or sys.executable, "-m", "guard.measure.resources",
               "--kernels-root", str(tree), "--suite", str(suite_path), "--out", str(out),
               "--arch", *arches]  # fmt: skip
        if kernels:
            cmd += ["--kernels", *kernels]
        if case_names:
            cmd += ["--cases", *case_names]
        if case_ids:
            cmd += ["--case-ids", *case_ids]
        try:
            run = run_group(cmd, timeout_s, child, stdout_limit=_TAIL, stderr_limit=_TAIL)
        except OSError as exc:
            raise InfraError(f"cannot start the resources process ({exc})") from None
        if run.returncode is None:
            raise InfraError(f"compiling for resources in {tree} timed out after {timeout_s:g} s")
        if run.strays:  # killed by run_group; the tree's code must not leave any
            left = strays_text(run.strays)
            raise InfraError(f"compiling {tree} left {left} running: killed")
        rc, output = run.returncode, (run.stdout + run.stderr)[-_TAIL:]
        if rc == ExitCode.BAD_INPUT:
            last = output.strip().splitlines()[-1] if output.strip() else "bad input"
            raise BadInput(last.removeprefix("error: "))
        if rc != 0 or not out.is_file():
            raise InfraError(f"the resources process for {tree} failed (rc {rc}):\n{output}")
        try:
            data = json.loads(files.read_text(out, limits.MAX_FILE_BYTES))
        except (OSError, ValueError) as exc:
            raise InfraError(f"the resources process wrote unreadable JSON ({exc})") from None
    return ResourceReport.from_json(data, f"resources of {tree}")


# ------------------------------------------------------------------------ child entry


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m guard.measure.resources``: the child process of ``collect_in_tree``."""
    parser = argparse.ArgumentParser(
        prog="python -m guard.measure.resources",
        description="Compile a suite's kernels for GPU arches without a GPU and write "
        "their compiler resources (registers, spills, shared memory, config) as JSON.",
    )
    parser.add_argument("--suite", required=True, help="suite YAML file")
    parser.add_argument("--arch", nargs="+", default=["sm_90"], help="e.g. sm_90 sm_89")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--kernels-root", help="a tree whose kernels/ to compile")
    parser.add_argument("--kernels", nargs="*", default=None, help="only these kernels")
    parser.add_argument("--cases", nargs="*", default=None, help="only these case names")
    parser.add_argument("--case-ids", nargs="*", default=None, help="only these case ids")
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)  # a background compile: the measuring worker keeps the CPU it needs
    try:
        if args.kernels_root:  # its kernels (and no other tree's), this guard
            from guard.measure.proc import import_kernels_from

            import_kernels_from(args.kernels_root)
        from guard.store.atomic import write_atomic
        from guard.store.suite import load_suite

        suite = load_suite(args.suite).select(args.kernels, args.cases)
        if args.case_ids is not None:
            unknown = sorted(set(args.case_ids) - {c.id for c in suite.cases})
            if unknown:
                raise BadInput(f"{args.suite}: no case with id {', '.join(unknown)}")
            suite = replace(suite, cases=tuple(c for c in suite.cases if c.id in args.case_ids))
        report = collect_resources(suite, args.arch)
        write_atomic(args.out, json.dumps(report.to_json(), indent=1) + "\n")
    except GuardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except Exception:
        traceback.print_exc()
        return int(ExitCode.INFRA)
    return 0


if __name__ == "__main__":
    sys.exit(main())
