"""The ``guard bisect`` command: which commit made a step (``guard.ops.bisect``). Parses,
calls it, prints; ``guard.commands.main.build_parser`` calls ``register``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from guard.base.errors import BadInput
from guard.commands.common import measure_options, suite_from
from guard.ops import bisect
from guard.ops.measure import DEFAULT_SUITE
from guard.report import terminal
from guard.store.suite import Suite


def _select(suite: Suite, case_ids: Sequence[str], source: str) -> Suite:
    """``suite`` with only ``case_ids`` (KERNEL/NAME); BadInput names those it lacks."""
    kernels, names = set(), set()
    for case_id in case_ids:
        kernel, sep, name = case_id.partition("/")
        if not sep:
            raise BadInput(f"case {case_id!r}: give KERNEL/NAME, as `guard list` names cases")
        kernels.add(kernel)
        names.add(name)
    missing = sorted(set(case_ids) - {c.id for c in suite.cases})
    if missing:
        raise BadInput(f"case(s) {', '.join(missing)}: not in {source}")
    chosen = suite.select(sorted(kernels), sorted(names))
    return chosen.with_cases(tuple(c for c in chosen.cases if c.id in set(case_ids)))


def cmd_bisect(args: argparse.Namespace, argv: Sequence[str]) -> int:

    chosen = _select(suite_from(args), args.case, args.suite)
    result = bisect.bisect(
        chosen,
        args.good,
        args.bad,
        opts=measure_options(args),
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


def cmd_bisect_pending(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from guard.measure import env as guard_env
    from guard.store import atomic, history

    suite = suite_from(args)
    opts = measure_options(args)
    gpu = args.gpu or guard_env.device_slug(guard_env.pick_device(args.device)[0])
    trends = [t for t in history.every_trend(args.db, limit=None) if t.gpu_slug == gpu]
    pending = bisect.pending_steps(trends, parent=lambda commit: bisect.first_parent(commit))
    print(f"[guard] bisect-pending: {len(pending)} step(s) on {gpu}", file=sys.stderr)
    known = {c.id for c in suite.cases}

    def run(step: bisect.PendingStep, max_steps: int) -> bisect.Bisection:
        cases = [c for c in step.case_ids if c in known]
        if not cases:
            raise BadInput(f"none of {', '.join(step.case_ids)} is in {args.suite}")
        good, bad = step.ends
        return bisect.bisect(
            _select(suite, cases, args.suite), good, bad, opts=opts, max_steps=max_steps,
            progress=lambda line: print(f"[guard] bisect: {line}", file=sys.stderr),
        )  # fmt: skip

    records = bisect.bisect_pending(
        pending, run, budget_steps=args.budget_steps,
        progress=lambda line: print(f"[guard] bisect-pending: {line}", file=sys.stderr),
    )  # fmt: skip
    atomic.write_atomic(args.out, json.dumps(bisect.records_json(records), indent=1) + "\n")
    found = sum(1 for r in records if r.first_bad)
    opened = len(records) - found
    print(f"{len(records)} step(s) bisected ({found} found, {opened} open): {args.out}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bisect`` and ``bisect-pending`` to the ``guard`` subcommands."""
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
    p.add_argument("--suite", default=str(DEFAULT_SUITE), help="suite YAML file")
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

    q = sub.add_parser(
        "bisect-pending",
        help="bisect the history's steps that no commit is named for yet, within a budget",
        description="Every step of the history DB on this GPU that no bisection has named "
        "a commit for, newest first, cases of one range together: bisected (as guard "
        "bisect) until --budget-steps paired runs are spent; a range cut short is written "
        "open, and the next call goes on from it. Writes the outcomes to --out, for "
        "`guard publish --bisections` to record in the history.",
    )
    q.add_argument("--db", required=True, help="the history DB (read only)")
    q.add_argument("--out", required=True, help="the bisections file to write")
    q.add_argument("--gpu", help="the GPU's slug in the history (default: this machine's)")
    q.add_argument(
        "--budget-steps", type=terminal.positive_int, default=12,
        help="paired runs at most, over every step (12)",
    )  # fmt: skip
    q.add_argument("--suite", default=str(DEFAULT_SUITE), help="suite YAML file")
    q.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    q.add_argument("--rounds", type=terminal.positive_int, help="timing rounds per step")
    q.add_argument("--max-rounds", type=terminal.positive_int, help="ceiling per step")
    q.add_argument("--fault-module", action="append", help=argparse.SUPPRESS)
    q.add_argument("--worker-path", action="append", help=argparse.SUPPRESS)
    q.set_defaults(func=cmd_bisect_pending, kernels=None, cases=None)
