"""The ``guard bisect`` command: which commit made a step (``guard.bisect``). Parses,
calls the core, prints; ``guard.cli.build_parser`` calls ``register``."""

from __future__ import annotations

import argparse
import sys

from guard import bisect, core
from guard.base.errors import BadInput
from guard.report import terminal


def cmd_bisect(args: argparse.Namespace) -> int:
    from guard import cli  # the measuring options every command shares

    suite = cli._suite(args)
    kernels, names = set(), set()
    for case_id in args.case:
        kernel, sep, name = case_id.partition("/")
        if not sep:
            raise BadInput(f"case {case_id!r}: give KERNEL/NAME, as `guard list` names cases")
        kernels.add(kernel)
        names.add(name)
    chosen = suite.select(sorted(kernels), sorted(names))
    chosen = chosen.with_cases(tuple(c for c in chosen.cases if c.id in set(args.case)))
    missing = sorted(set(args.case) - {c.id for c in chosen.cases})
    if missing:
        raise BadInput(f"case(s) {', '.join(missing)}: not in {args.suite}")
    result = bisect.bisect(
        chosen,
        args.good,
        args.bad,
        opts=cli._opts(args),
        max_steps=args.max_steps,
        progress=lambda line: print(f"[guard] bisect: {line}", file=sys.stderr),
    )
    print(bisect.describe(result))
    if args.record:
        record(args.record, args.case, result)
        print(f"recorded in {args.record}: {len(args.case)} case(s)")
    return 0 if result.first_bad else 2


def record(db: str, case_ids: list[str], result: bisect.Bisection) -> None:
    """Store which commit made the cases' step (or the range still open) in the history
    database, where ``guard history`` and the published site name it."""
    from guard.store import history

    history.record_step_commit(
        db, case_ids, good=result.good, bad=result.bad, first_bad=result.first_bad or "",
        open_range=result.open_range,
    )  # fmt: skip


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bisect`` to the ``guard`` subcommands."""
    p = sub.add_parser(
        "bisect",
        help="find the commit that made a step: paired runs over the commit range",
        description="Bisect the first-parent commits after --good up to --bad: each "
        "midpoint measured against --good, paired and decided by the guard's own rule, on "
        "the cases given. Prints the first slower commit (exit 0), or the range left when "
        "--max-steps runs out (exit 2); a range whose ends do not differ is exit 2.",
    )
    p.add_argument("case", nargs="+", metavar="CASE", help="KERNEL/NAME of a stepped case")
    p.add_argument("--good", required=True, metavar="REV", help="the last commit known good")
    p.add_argument("--bad", required=True, metavar="REV", help="the first commit known bad")
    p.add_argument("--suite", default=str(core.DEFAULT_SUITE), help="suite YAML file")
    p.add_argument(
        "--record",
        metavar="DB",
        help="store the commit that made the step (or the range left) in this history "
        "database: guard history and the published site then name it",
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--rounds", type=terminal.positive_int, help="timing rounds per step")
    p.add_argument("--max-rounds", type=terminal.positive_int, help="ceiling per step")
    p.add_argument(
        "--max-steps", type=terminal.positive_int, default=12, help="paired runs at most (12)"
    )
    p.add_argument("--fault-module", action="append", help=argparse.SUPPRESS)
    p.add_argument("--worker-path", action="append", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_bisect, kernels=None, cases=None)
