"""``guard merge OUTCOME...``: decide the shards of one check together at the family
false-alarm rate and write one outcome (the ``meta.json`` the PR comment reads). Exit
codes are the check's: 0 pass, 1 regression or wrong results, 2 bad input (shards of
another base, head or suite; the field is named) or no verdict, 3 infrastructure (a
shard missing, or one that failed before it measured)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from guard.base import text
from guard.base.errors import GuardError
from guard.decide import merge as merge_mod
from guard.decide.outcome import Outcome
from guard.ops.shards import failed_outcome, merge_files, read_shard
from guard.report import comment, render
from guard.store import atomic


def cmd_merge(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``guard merge``: decide the shards together; write and print the outcome."""
    context: Outcome | None = None
    for path in args.outcomes:  # context for a failure: the first shard that reads
        try:
            context = read_shard(path)
            break
        except GuardError:
            continue
    every_case = ""
    try:
        merged = merge_files(args.outcomes)
        outcome = merge_mod.merged_outcome(merged)
        every_case = render.comparison_markdown(merged.comparison)
    except GuardError as exc:
        outcome = failed_outcome(exc, context)
    if args.out:
        atomic.write_atomic(args.out, json.dumps(outcome.to_json(), indent=1) + "\n")
    summary = comment.markdown([outcome]).replace(comment.MARKER + "\n", "")
    if every_case:
        summary += "\n<details><summary>Every case</summary>\n\n" + every_case
        summary += "\n</details>\n"
    if args.markdown:
        atomic.write_atomic(args.markdown, summary)
    text.append_step_summary(summary)
    text.emit_commands(render.annotations(outcome))
    if args.json:
        print(json.dumps(outcome.to_json(), indent=1))
    else:
        print(text.one_line(outcome.headline))
    print(
        f"[guard] merge: verdict {outcome.verdict.value}, exit code {int(outcome.exit_code)}",
        file=sys.stderr,
    )
    return int(outcome.exit_code)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="join the outcome files of a sharded check into one verdict",
        description="Decide the shards' cases together at the family false-alarm rate "
        "(every shard of one check: same base, head and suite; a missing shard is an "
        "infrastructure failure, exit 3).",
    )
    p.add_argument("outcomes", nargs="+", metavar="OUTCOME", help="each shard's meta.json")
    p.add_argument("--out", type=Path, help="write the merged outcome (meta.json) here")
    p.add_argument("--markdown", type=Path, help="write the Markdown summary here")
    p.add_argument("--json", action="store_true", help="print the merged outcome as JSON")
    p.set_defaults(func=cmd_merge)
