"""``guard list``, ``guard check`` (correctness only) and ``guard run`` (correctness,
then timing)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from guard.commands.common import add_common, measure_with, suite_from
from guard.ops.measure import check, list_cases, run
from guard.report import terminal


def cmd_list(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.coverage:
        return _list_coverage(args)
    rows = list_cases(suite_from(args), args.device)
    if args.json:
        terminal.emit_json([{"id": i, "kernel": k, "availability": a} for i, k, a in rows])
    else:
        terminal.print_table(["case", "kernel", "availability"], [list(r) for r in rows])
    return 0


def _list_coverage(args: argparse.Namespace) -> int:
    """``guard list --coverage``: each gated kernel's launch paths, and those that no
    case of the suite or its surface runs (exit 1 when there are any)."""
    from guard.measure import coverage

    kernels_ = coverage.coverage(suite_from(args), args.arch)
    if args.json:
        terminal.emit_json(
            [
                {
                    "kernel": k.kernel,
                    "arch": k.arch,
                    "paths": sorted(k.paths),
                    "run_by_cases": sorted(k.by_cases & k.paths),
                    "run_with_surface": sorted(k.by_surface & k.paths),
                    "missing": list(k.missing),
                }
                for k in kernels_
            ]
        )
    else:
        rows = [
            [k.kernel, path, "case" if path in k.by_cases else "surface" if path in k.by_surface
             else "MISSING"]
            for k in kernels_
            for path in sorted(k.paths)
        ]  # fmt: skip
        terminal.print_table(["kernel", "launch path", "run by"], rows)
        for k in kernels_:
            print(k.line())
    return 1 if any(k.missing for k in kernels_) else 0


def cmd_check(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return measure_with(args, check, "checking the correctness of the other kernels")


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return measure_with(args, run, "checking and timing the other kernels")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("list", help="list the suite's cases and where each kernel can run")
    add_common(p, measure=False)
    p.add_argument(
        "--coverage",
        action="store_true",
        help="list each gated kernel's launch paths and the case or surface case that runs "
        "it; exit 1 when one is run by none",
    )
    p.add_argument("--arch", default="sm_90", help="the GPU arch of --coverage's paths")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="correctness only")
    add_common(p)
    p.add_argument(
        "--sanitize",
        action="store_true",
        help="run each worker under compute-sanitizer memcheck (GPU; slow) so "
        "out-of-bounds accesses fail their case",
    )
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("run", help="check correctness, then time every case")
    add_common(p)
    p.set_defaults(func=cmd_run)
