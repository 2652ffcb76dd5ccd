"""The ``guard report`` and ``guard history`` commands, and ``--history`` for the
measuring commands. Parses, calls ``guard.report.report`` and ``guard.store.history``,
renders; ``guard.commands.main.build_parser`` calls ``register``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from guard.base import text
from guard.decide.compare import compare_runs
from guard.ops.measure import DEFAULT_SUITE, open_suite
from guard.ops.outputs import check_output_path, write_output
from guard.report import render, report, terminal
from guard.store import history, results

HISTORY_HELP = (
    f"append this run's per-case medians to the SQLite history DB (e.g. {history.DEFAULT_DB})"
)


def append_history(args: argparse.Namespace, run: results.RunResult) -> None:
    """After a measuring command saved its results: append them where --history says."""
    db = getattr(args, "history", None)
    if not db:
        return
    run_id = history.append(run, db)
    what = f"run {run_id}" if run_id is not None else "nothing (no timed case)"
    print(f"[guard] history: appended {what} to {db}", file=sys.stderr)


def cmd_report(args: argparse.Namespace, argv: Sequence[str]) -> int:
    for option, path in (("--html", args.html), ("--markdown", args.markdown)):
        if path:
            check_output_path(option, path)
    run = results.load(args.results)
    comparison = None
    if args.baseline:
        plan = open_suite(args.suite).timing  # the suite's margin, drift and alpha
        comparison = compare_runs(results.load(args.baseline), run, alpha=args.alpha, plan=plan)
    trends = {}
    if args.history:
        trends = history.trends(
            args.history,
            [c.id for c in run.cases],
            gpu_slug=run.environment.gpu_slug,
            limit=args.history_limit,
        )
        for t in trends.values():
            if t.skipped:
                print(f"[guard] {text.one_line(t.skipped_note(args.history))}", file=sys.stderr)
    if args.html:
        write_output("--html", args.html, report.html_report(run, comparison, trends=trends))
    markdown = (
        render.comparison_markdown(comparison, report_url=args.report_url)
        if comparison is not None
        else render.run_markdown(run)
    )
    if args.markdown:
        write_output("--markdown", args.markdown, markdown)
    if args.json:
        data: dict[str, Any] = (
            render.comparison_json(comparison)
            if comparison is not None
            else {"headline": report.run_headline(run)[0], "results": results.to_json(run)}
        )
        data["html"] = args.html
        data["history"] = {k: history.trend_json(t) for k, t in trends.items()}
        terminal.emit_json(data)
    elif not args.html and not args.markdown:
        print(markdown, end="")
    elif args.html:
        print(f"report: {args.html}", file=sys.stderr)
    return 0


def cmd_history(args: argparse.Namespace, argv: Sequence[str]) -> int:

    trend = history.trend(
        args.db,
        args.case_id,
        gpu_slug=args.gpu,
        limit=None if args.all else args.limit,
        alpha=args.alpha,
        min_effect=args.min_effect,
    )
    if trend.skipped:
        print(f"[guard] {text.one_line(trend.skipped_note(args.db))}", file=sys.stderr)
    if args.json:
        terminal.emit_json(history.trend_json(trend))
        return 0
    shown = f"{len(trend.points)} runs"
    if trend.truncated:
        shown = f"the last {shown}; --all for older ones"
    terminal.print_table(
        render.HISTORY_HEADER,
        render.history_rows(trend),
        title=f"{trend.case_id} on {trend.gpu_slug} ({shown})",
    )
    others = [g for g in trend.gpu_slugs if g != trend.gpu_slug]
    if others:
        print(text.one_line(f"also measured on: {', '.join(others)} (pick one with --gpu)"))
    if trend.steps:
        for s in trend.steps:
            p = trend.points[s.index]
            print(
                text.one_line(
                    f"step at {p.commit[:10] or '?'} ({p.created[:10]}): {s.kind}, "
                    f"{text.fmt_time(s.before)} -> {text.fmt_time(s.after)} "
                    f"({s.ratio:.3f}x, p={s.p_value:.1e}); {trend.attribution(s)}"
                )
            )
    else:
        print("no step change detected")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` and ``history`` to the ``guard`` subcommands."""

    p = sub.add_parser(
        "report",
        help="write the HTML report (and Markdown) for a results file",
        description="Render a results file, alone or against a baseline file, as one "
        "self-contained HTML file (inline CSS and SVG, no script, nothing fetched) and/or "
        "Markdown. Exits 0 once written; `guard compare` is what decides.",
    )
    p.add_argument("results", metavar="RESULTS", help="results JSON of the run to report")
    p.add_argument("--baseline", metavar="FILE", help="compare with this results/baseline file")
    p.add_argument("--html", metavar="FILE", help="write the HTML report here")
    p.add_argument("--markdown", metavar="FILE", help="write the Markdown summary here")
    p.add_argument(
        "--history", metavar="DB", type=Path, help="draw each case's history from this DB"
    )
    p.add_argument(
        "--history-limit",
        type=terminal.positive_int,
        default=60,
        metavar="N",
        help="last N runs (default 60)",
    )
    p.add_argument(
        "--alpha",
        type=terminal.alpha,
        default=None,
        help="family false-alarm rate (default: the suite's timing.alpha)",
    )
    p.add_argument(
        "--suite",
        default=str(DEFAULT_SUITE),
        help="suite YAML file whose timing plan decides --baseline",
    )
    p.add_argument("--report-url", default="", help="link the Markdown to the HTML report")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_report)

    h = sub.add_parser(
        "history",
        help="show a case's median over past runs, with step changes flagged",
        description="One case's history on one GPU, oldest first. Steps are found by "
        "binary segmentation with t-tests on the log medians (see guard/store/changepoint.py).",
    )
    h.add_argument("case_id", metavar="CASE_ID", help="e.g. triton_flash/b1-h8-s512-d64-full")
    h.add_argument(
        "--db", type=Path, default=history.DEFAULT_DB, help=f"default {history.DEFAULT_DB}"
    )
    h.add_argument("--gpu", metavar="SLUG", help="GPU slug (default: the last one measured)")
    window = h.add_mutually_exclusive_group()
    window.add_argument(
        "--limit",
        type=terminal.positive_int,
        default=history.DEFAULT_LIMIT,
        metavar="N",
        help=f"only the last N runs, steps found among them (default {history.DEFAULT_LIMIT})",
    )
    window.add_argument("--all", action="store_true", help="every run (no --limit; may be slow)")
    h.add_argument("--alpha", type=float, default=0.01, help="false-step rate per scan")
    h.add_argument(
        "--min-effect",
        type=float,
        metavar="FRACTION",
        help="smallest step to flag (default: the case's threshold)",
    )
    h.add_argument("--json", action="store_true", help="print machine-readable JSON")
    h.set_defaults(func=cmd_history)
