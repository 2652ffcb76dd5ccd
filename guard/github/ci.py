"""The pull-request check's entry point: ``python -m guard.ci``.

The judge is the base commit. ``.github/workflows/perf-guard.yml`` checks out the PR's
base into ``judge/`` and the commit under test into ``pr/``, installs ``judge/`` and
runs, from ``judge/``::

    python -m guard.ci --device cuda --base "$BASE_SHA" --candidate-tree ../pr \
        --out-dir ../perf-guard-out --html

so the policy (suite cases, gates, thresholds, tolerances, timing plan, alpha), the
baselines and every line of code that measures and decides are the base commit's;
only ``kernels/`` is imported from the PR's tree. What the check does is
``guard.ops.check.run_check``; this module parses the command line into its typed
request and publishes the outcome.

Without ``--candidate-tree`` (a local run in a checkout of the PR) the base commit's
kernels are measured from a temporary worktree of ``--base`` and the candidate is this
tree; the policy still comes from the base commit's suite file.

Another project's check (``.github/workflows/guard-reusable.yml``): its suite names
``module:function`` kernels; ``judge/`` is that project's base commit (its suite, and
the base arm's modules), the guard is installed from a trusted ref of this repository,
and only the modules the suite names are imported from ``pr/``. Such a project needs
no ``kernels/`` package.

Scaling out (docs/CI.md, "Scaling out"): ``--shard I/N`` measures one share of the
suite, balanced by time in this GPU's baseline, and its ``meta.json`` carries the
evidence ``guard merge`` decides the union from at the family false-alarm rate (the
workflow's merge job); ``--gpus N|all|0,2,...`` runs one such shard per GPU of this
host, each in its own process (``CUDA_VISIBLE_DEVICES``), and merges them here.

This module is GitHub plumbing only: it calls ``run_check``, renders the ``Outcome`` the
``run_check`` builds, and writes the job summary, the annotations, ``$GITHUB_OUTPUT`` and the
files of ``--out-dir`` (``meta.json``, the outcome, is what the PR-comment workflow reads). Exit
codes are the guard's: 0 pass, 1 regression or wrong results, 2 bad input or no
verdict, 3 infrastructure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import stat
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from guard.base import files, text
from guard.base.errors import BadInput, ExitCode, GuardError, cut
from guard.decide.outcome import Outcome
from guard.measure import sandbox
from guard.ops.check import OUTCOME_FILE, CheckLabels, CheckRequest, run_check
from guard.ops.compare import SURFACE_MODES
from guard.ops.shards import DEFAULT_GPU_TIMEOUT_S, GPU_SPLIT_HELP, GPU_SPLITS
from guard.report import comment, render, terminal
from guard.store import atomic

MAX_EVENT_BYTES = 25 * 1024 * 1024  # GitHub caps a webhook payload (the event file) at 25 MB
MAX_LISTED_ANNOTATIONS = 20  # baseline-change annotations; the rest are counted


# --------------------------------------------------------------------------- GitHub


def print_untrusted(message: str) -> None:
    """Print ``message`` (a traceback quoting a kernel's message, say) to stderr so that
    none of its lines runs as a workflow command: under GitHub Actions it goes between
    ``::stop-commands::TOKEN`` and ``::TOKEN::``, the runner's documented way."""
    if not os.environ.get("GITHUB_ACTIONS"):
        print(message, file=sys.stderr, flush=True)
        return
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}\n{message}\n::{token}::", file=sys.stderr, flush=True)


def write_outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for key, value in values.items():
                fh.write(f"{key}={text.one_line(value)}\n")


def _run_url() -> str:
    server = os.environ.get("GITHUB_SERVER_URL", "")
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    run_id = os.environ.get("GITHUB_RUN_ID", "")
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else ""


def _named(var: str) -> str:
    """``VAR=value`` of an environment variable, for an error message (one line, cut)."""
    return cut(text.one_line(f"{var}={os.environ.get(var, '')}"))


def _pr_number() -> int | None:
    """The PR's number: ``$PR_NUMBER``, else ``pull_request.number`` of the event file;
    None when neither has one. BadInput for a PR_NUMBER that is not a positive ASCII
    number (``str.isdigit`` accepts "²", which ``int`` refuses) and for an event file
    that cannot be read: a directory, a device (``/dev/zero``), over the size limit,
    not JSON."""
    number = os.environ.get("PR_NUMBER", "")
    if number:
        if not re.fullmatch(r"[0-9]{1,18}", number) or int(number) == 0:
            raise BadInput(f"{_named('PR_NUMBER')}: not a pull-request number (1, 2, ...)")
        return int(number)
    path = os.environ.get("GITHUB_EVENT_PATH", "")
    if not path:
        return None
    try:
        event = json.loads(files.read_text(path, MAX_EVENT_BYTES))
    except (OSError, UnicodeDecodeError) as exc:  # files.FileRefused is an OSError
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = _named("GITHUB_EVENT_PATH")
        raise BadInput(f"{where}: cannot read the event file ({why})") from None
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{_named('GITHUB_EVENT_PATH')}: not JSON ({cut(str(exc))})") from None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    found = pr.get("number") if isinstance(pr, dict) else None
    if isinstance(found, int) and not isinstance(found, bool) and found > 0:
        return found
    return None


def _check_appendable(var: str) -> None:
    """BadInput unless ``$var`` (a file GitHub reads after the step) can be appended to:
    a directory or a path under a regular file would fail only after measuring."""
    path = os.environ.get(var, "")
    if not path:
        return
    # O_NONBLOCK: a FIFO without a reader fails here instead of blocking.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        raise BadInput(f"{_named(var)}: cannot append to it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):  # a file, or /dev/null
        raise BadInput(f"{_named(var)}: not a regular file")


def check_setup(args: argparse.Namespace) -> int | None:
    """What the check needs from its environment, checked before anything is measured
    (a bad one used to fail only when the results were written); the PR's number.
    BadInput naming the option or variable at fault."""
    out_dir: Path = args.out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why, where = exc.strerror or exc, cut(text.one_line(out_dir))
        raise BadInput(f"--out-dir {where}: cannot create the folder ({why})") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise BadInput(f"--out-dir {cut(text.one_line(out_dir))}: not writable")
    _check_appendable("GITHUB_OUTPUT")
    _check_appendable("GITHUB_STEP_SUMMARY")
    return _pr_number()


# --------------------------------------------------------------------------- the check


def publish(outcome: Outcome, out_dir: Path, every_case: str = "") -> None:
    """Everything GitHub sees, rendered from the one outcome."""
    atomic.write_atomic(out_dir / OUTCOME_FILE, json.dumps(outcome.to_json(), indent=1) + "\n")
    text.emit_commands(render.annotations(outcome))
    listed = outcome.baseline_changes[:MAX_LISTED_ANNOTATIONS]
    for path in listed:
        message = f"{path}: takes effect after merge"
        file = path.split(" (")[0] if path.endswith(": not read)") else path  # "x (a link: ...)"
        text.annotate("warning", "This PR changes a baseline", message, file)
    if len(outcome.baseline_changes) > len(listed):
        more = len(outcome.baseline_changes) - len(listed)
        text.annotate("warning", "This PR changes a baseline", f"and {more} more file(s)")
    if outcome.policy_changes:
        text.annotate(
            "warning",
            "This PR changes the policy",
            "judged by the base commit's suite; takes effect after merge: "
            + "; ".join(outcome.policy_changes[:10]),
        )
    summary = comment.markdown([outcome]).replace(comment.MARKER + "\n", "")
    if every_case:
        summary += "\n<details><summary>Every case</summary>\n\n" + every_case
        summary += "\n</details>\n"
    text.append_step_summary(summary)
    write_outputs(
        {
            "exit_code": str(int(outcome.exit_code)),
            "verdict": outcome.verdict.value,
            "baseline_changed": "true" if outcome.baseline_changes else "false",
            "policy_changed": "true" if outcome.policy_changes else "false",
        }
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m guard.ci",
        description="The PR check: this checkout (the base commit) judges the kernels of "
        "--candidate-tree, paired on this machine; reports for GitHub Actions.",
    )
    p.add_argument("--base", help="the PR's base commit (default: $BASE_SHA or $GITHUB_BASE_REF)")
    p.add_argument(
        "--candidate-tree",
        help="the checkout of the commit under test; only its kernels/ are imported "
        "(default: this checkout is the candidate, and --base is checked out as the base)",
    )
    p.add_argument("--suite", default="suites/default.yaml", help="suite YAML file")
    p.add_argument("--baselines", default="baselines", help="baseline folder (context)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--out-dir", type=Path, default=Path("perf-guard-out"), help="reports here")
    p.add_argument("--html", action="store_true", help="also write the HTML report")
    p.add_argument(
        "--kernels",
        nargs="+",
        help="only these kernels of the judge's suite (measurement studies; not in CI)",
    )
    p.add_argument(
        "--time-identical",
        action="store_true",
        help="time cases whose kernel is identical in base and head too",
    )
    p.add_argument(
        "--trusted-cache",
        metavar="DIR",
        help="a compile cache built by a trusted job on main (guard warm-cache DIR): each "
        "tree's workers start from a copy of it; it is never written",
    )
    p.add_argument(
        "--sandbox",
        choices=sandbox.MODES,
        default="auto",
        help="run each tree's code in bubblewrap, read-only but its own caches: bwrap "
        "(exit 3 where it cannot), auto (where it can; the default), none",
    )
    p.add_argument(
        "--surface",
        choices=SURFACE_MODES,
        default="changed",
        help="the suite's surface cases to add: those whose compiled kernels or launches "
        "differ between base and head (changed, the default), all, or none",
    )
    p.add_argument(
        "--shard",
        metavar="I/N",
        help="measure only shard I of N (counted from 1; balanced by time in this GPU's "
        "baseline); meta.json then carries what `guard merge` needs",
    )
    p.add_argument(
        "--gpus",
        metavar="N|all|0,2,...",
        help="spread the check over these GPUs of this host (how: --gpu-split) and "
        "decide every case together",
    )
    p.add_argument("--gpu-split", choices=GPU_SPLITS, default="rounds", help=GPU_SPLIT_HELP)
    p.add_argument(
        "--gpu-timeout",
        type=float,
        default=DEFAULT_GPU_TIMEOUT_S,
        help=argparse.SUPPRESS,  # seconds one GPU's process may take (tests)
    )
    return p


def wall_line(total_s: float, measured_s: float | None) -> str:
    """Where the check's wall time went: measuring (the rounds and the decisions between
    them) against the rest (set-up; profiles, reports), which sharding does not divide."""
    line = f"wall {total_s:.0f} s"
    if measured_s is not None:
        rest = max(0.0, total_s - measured_s)
        line += f": measuring {measured_s:.0f} s, the rest {rest:.0f} s (set-up, reports)"
    return line


def request_from(args: argparse.Namespace, argv: Sequence[str]) -> CheckRequest:
    """The parsed command line as the check's typed request."""
    return CheckRequest(
        suite=args.suite,
        baselines=args.baselines,
        device=args.device,
        out_dir=args.out_dir,
        base=args.base,
        candidate_tree=args.candidate_tree,
        html=args.html,
        kernels=tuple(args.kernels or ()),
        time_identical=args.time_identical,
        trusted_cache=args.trusted_cache,
        sandbox=args.sandbox,
        surface=args.surface,
        shard=args.shard,
        gpus=args.gpus,
        gpu_split=args.gpu_split,
        gpu_timeout=args.gpu_timeout,
        argv=tuple(argv),
    )


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()
    args = build_parser().parse_args(argv)
    command_line = list(sys.argv[1:] if argv is None else argv)  # --gpus passes them on
    if args.shard and args.gpus:
        print("[perf-guard] error: --gpus and --shard: give one", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    if args.gpu_split != "rounds" and not args.gpus:
        print("[perf-guard] error: --gpu-split: only with --gpus", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    try:
        pr_number = check_setup(args)
    except GuardError as exc:  # before measuring: nothing to publish, one line
        text.annotate("error", "perf-guard", str(exc))
        print(f"[perf-guard] error: {text.one_line(exc)}", file=sys.stderr)
        return int(exc.exit_code)
    labels = CheckLabels(
        gpu=os.environ.get("GPU_LABEL", ""),
        head_sha=os.environ.get("HEAD_SHA", ""),
        tested_commit=os.environ.get("TESTED_SHA", "") or os.environ.get("HEAD_SHA", ""),
        pr_number=pr_number,
        run_url=_run_url(),
    )
    progress = terminal.ProgressPrinter(prefix="[perf-guard]")
    try:
        check = run_check(request_from(args, command_line), labels, print_untrusted, progress)
    finally:
        progress.close()
    outcome, every_case = check.outcome, check.every_case
    try:
        publish(outcome, args.out_dir, every_case)
    except OSError as exc:  # checked writable before measuring; a full disk, say
        code = outcome.exit_code if outcome.exit_code != ExitCode.PASS else ExitCode.INFRA
        print(f"[perf-guard] error: publishing the outcome failed: {exc}", file=sys.stderr)
        print(f"[perf-guard] {text.one_line(outcome.headline)}, exit code {int(code)}",
              file=sys.stderr)  # fmt: skip
        return int(code)
    print(f"[perf-guard] {text.one_line(outcome.headline)}", file=sys.stderr)
    print(
        f"[perf-guard] {wall_line(time.monotonic() - started, check.measured_s)}", file=sys.stderr
    )
    print(
        f"[perf-guard] verdict {outcome.verdict.value}, exit code {int(outcome.exit_code)}",
        file=sys.stderr,
    )
    return int(outcome.exit_code)


def entry() -> None:
    """The process: ``main``'s exit code; a crash of the guard exits 3, never 1
    (a "regression")."""
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(int(ExitCode.INFRA))


if __name__ == "__main__":
    entry()
