"""The pull-request check's entry point: ``python -m guard.ci``.

What ``.github/workflows/perf-guard.yml`` runs on the GPU runner, in a checkout of the
PR (the merge commit) with the base commit in its history:

1. resolve the base commit (``--base``, else ``BASE_SHA``, else ``origin/$GITHUB_BASE_REF``);
2. call out a PR that touches ``baselines/`` (job summary + a ``::warning`` per file):
   the baseline is read from the base commit, so such an edit does not change this
   check, but a reviewer should know;
3. ``guard check`` (correctness only); wrong results or a kernel that cannot run stop
   here, with one ``::error`` per case;
4. ``guard compare --baseline-ref BASE [--confirm-against BASE]``: the guard writes the
   Markdown table to ``$GITHUB_STEP_SUMMARY`` and prints the ``::error`` annotations;
5. write ``exit_code=N``, ``verdict=...`` and ``baseline_changed=...`` to
   ``$GITHUB_OUTPUT``, the reports and ``meta.json`` (read by the PR-comment workflow)
   to ``--out-dir``, and exit with the guard's exit code.

Exit codes are the guard's: 0 pass, 1 regression or wrong results, 2 bad input or no
baseline for this GPU (``--missing-baseline neutral`` turns the latter into 0), 3
infrastructure. The guard itself (``guard.cli``) is called in-process, never edited.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import secrets
import subprocess
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard import cli, render, results
from guard.errors import BadInput, ExitCode
from guard.render import md_code, md_text

META_SCHEMA_VERSION = 1  # meta.json; the comment workflow refuses other versions
REFRESH_WORKFLOW = ".github/workflows/baseline-refresh.yml"
MAX_MOVED_CASES = 30  # rows of moved cases kept in meta.json for the PR comment

# verdict -> what the check says; the comment workflow accepts only these words.
VERDICTS = {
    "pass": "no significant regression",
    "regression": "significant performance regression",
    "wrong-results": "wrong results",
    "no-baseline": "no baseline for this GPU",
    "bad-input": "bad input or configuration",
    "infrastructure": "infrastructure failure (no GPU, build failure, crash, timeout)",
    "error": "the guard stopped unexpectedly",
}


@dataclass
class Outcome:
    exit_code: int
    verdict: str
    headline: str
    moved: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- helpers


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, timeout=120)


def resolve_base(explicit: str | None) -> str:
    """The base commit's full SHA; BadInput when none is given or it is not here."""
    candidates: list[str] = []
    if explicit:
        candidates = [explicit]
    elif os.environ.get("BASE_SHA"):
        candidates = [os.environ["BASE_SHA"]]
    elif os.environ.get("GITHUB_BASE_REF"):
        ref = os.environ["GITHUB_BASE_REF"]
        candidates = [f"origin/{ref}", ref]
    else:
        raise BadInput("no base commit: pass --base, or set BASE_SHA or GITHUB_BASE_REF")
    for cand in candidates:
        proc = _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{cand}^{{commit}}")
        if proc.returncode == 0:
            return proc.stdout.strip()
    raise BadInput(
        f"base commit {candidates[0]!r} is not in this checkout "
        "(fetch the PR's base: actions/checkout with fetch-depth: 0)"
    )


def changed_baselines(base: str, baselines_dir: str) -> list[str]:
    """Files under ``baselines_dir`` that this tree changes relative to ``base``."""
    # Three dots: changes since the merge base, so a branch that is merely behind its
    # base does not look as if it edited the base's baselines.
    proc = _git("diff", "--name-only", f"{base}...HEAD", "--", baselines_dir)
    if proc.returncode != 0:
        proc = _git("diff", "--name-only", base, "HEAD", "--", baselines_dir)
    if proc.returncode != 0:
        return []
    return [line for line in proc.stdout.splitlines() if line.strip()]


def annotate(level: str, title: str, message: str, file: str = "") -> None:
    """Print a GitHub workflow command (only under GitHub Actions); every part is
    escaped (``render.gh_command``), so a newline in a case name cannot start another."""
    if not os.environ.get("GITHUB_ACTIONS"):
        return
    print(render.gh_command(level, message, file=file, title=title), flush=True)


def print_untrusted(text: str) -> None:
    """Print ``text`` (a traceback quoting a kernel's message, say) to stderr so that
    none of its lines runs as a workflow command: under GitHub Actions it goes between
    ``::stop-commands::TOKEN`` and ``::TOKEN::``, the runner's documented way."""
    if not os.environ.get("GITHUB_ACTIONS"):
        print(text, file=sys.stderr, flush=True)
        return
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}\n{text}\n::{token}::", file=sys.stderr, flush=True)


def append_summary(markdown: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown.rstrip("\n") + "\n\n")


def write_outputs(values: dict[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for key, value in values.items():
            fh.write(f"{key}={value.replace(chr(10), ' ')}\n")


@contextlib.contextmanager
def _without_env(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def _run_url() -> str:
    server = os.environ.get("GITHUB_SERVER_URL", "")
    repo = os.environ.get("GITHUB_REPOSITORY", "")
    run_id = os.environ.get("GITHUB_RUN_ID", "")
    return f"{server}/{repo}/actions/runs/{run_id}" if server and repo and run_id else ""


def _pr_number() -> int | None:
    text = os.environ.get("PR_NUMBER", "")
    if not text and os.environ.get("GITHUB_EVENT_PATH"):
        try:
            event = json.loads(Path(os.environ["GITHUB_EVENT_PATH"]).read_text("utf-8"))
            text = str(event.get("pull_request", {}).get("number", ""))
        except (OSError, ValueError, AttributeError):
            text = ""
    return int(text) if text.isdigit() else None


# --------------------------------------------------------------------------- steps


def run_check(args: argparse.Namespace, out_dir: Path, extra: Sequence[str]) -> Outcome | None:
    """``guard check``; an Outcome when it fails (the check stops there), else None."""
    check_json = out_dir / "check.json"
    check_md = out_dir / "check.md"
    argv = [
        "check",
        "--suite",
        args.suite,
        "--device",
        args.device,
        "--out",
        str(check_json),
        "--markdown",
        str(check_md),
        *extra,
    ]
    print(f"[perf-guard] guard {' '.join(argv)}", file=sys.stderr, flush=True)
    with _without_env("GITHUB_STEP_SUMMARY"):  # only a failing check goes to the summary
        try:
            code = cli.main(argv)
        except Exception as exc:  # a bug in the guard: infrastructure, not the PR's fault
            return _crashed("guard check", exc)
    if code == ExitCode.PASS:
        return None
    moved: list[dict[str, Any]] = []
    for case in _check_cases(check_json):
        cid, status, reason = case["id"], case["status"], case["reason"]
        if status == results.WRONG:
            annotate("error", f"Wrong results: {cid}", reason or "wrong results")
            moved.append({"id": cid, "verdict": "wrong results", "fails": True})
        elif status in results.INFRA_STATUSES and case["gate"]:
            annotate("error", f"Kernel failed to run: {cid}", reason or status)
            moved.append({"id": cid, "verdict": "error", "fails": True})
    if check_md.exists():
        append_summary("### Correctness (`guard check`)\n\n" + check_md.read_text("utf-8"))
    verdict = {
        ExitCode.FAIL: "wrong-results",
        ExitCode.BAD_INPUT: "bad-input",
        ExitCode.INFRA: "infrastructure",
    }.get(code, "error")
    headline = f"FAIL: correctness check failed ({VERDICTS[verdict]}); timing was skipped"
    return Outcome(code, verdict, headline, moved)


def _crashed(what: str, exc: Exception) -> Outcome:
    """An exception escaped the guard: a bug or a broken machine, never the PR's verdict."""
    detail = "".join(traceback.format_exception(exc)).rstrip()
    print_untrusted(detail)
    message = f"{what} crashed: {type(exc).__name__}: {exc}"
    annotate("error", "perf-guard crashed", message)
    append_summary(
        f"**{md_text(message)}**\n\n<details><summary>traceback</summary>\n\n"
        f"{render.md_block(detail)}\n\n</details>"
    )
    return Outcome(int(ExitCode.INFRA), "infrastructure", message)


def _check_cases(path: Path) -> list[dict[str, Any]]:
    """(id, status, reason, gate) of each case in a ``guard check`` results file.

    Read as plain JSON, not through ``results.load``: only these four fields matter
    here, and a check-only file (no timing samples) need not pass the full reader.
    """
    try:
        data = json.loads(path.read_text("utf-8"))
        records = data["guard"]["cases"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    out = []
    for rec in records if isinstance(records, list) else []:
        if not isinstance(rec, dict):
            continue
        case = rec.get("case") if isinstance(rec.get("case"), dict) else {}
        out.append(
            {
                "id": str(rec.get("id", "")),
                "status": str(rec.get("status", "")),
                "reason": str(rec.get("reason", "")),
                "gate": bool(case.get("gate", True)),
            }
        )
    return out


def _split_json(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """``guard compare --json`` output: the JSON document, then workflow-command lines."""
    text = text.lstrip()
    if not text:
        return None, []
    try:
        data, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None, text.splitlines()
    rest = text[end:].splitlines()
    return (data if isinstance(data, dict) else None), [line for line in rest if line.strip()]


def _moved_cases(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for case in data.get("cases", []):
        verdict = case.get("verdict") or case.get("status") or ""
        if (
            case.get("fails")
            or case.get("status") in ("wrong", "error")
            or verdict in ("regression", "improvement", "inconclusive")
        ):
            out.append(
                {
                    "id": case.get("id", ""),
                    "verdict": verdict,
                    "ratio": case.get("ratio"),
                    "ci": case.get("ci"),
                    "gate": bool(case.get("gate")),
                    "fails": bool(case.get("fails")),
                }
            )
    return out[:MAX_MOVED_CASES]


def run_compare(
    args: argparse.Namespace, base: str, out_dir: Path, extra: Sequence[str]
) -> Outcome:
    argv = [
        "compare",
        "--baseline-ref",
        base,
        "--baselines",
        args.baselines,
        "--suite",
        args.suite,
        "--device",
        args.device,
        "--out",
        str(out_dir / "results.json"),
        "--markdown",
        str(out_dir / "compare.md"),
        "--json",
    ]
    if args.confirm:
        argv += ["--confirm-against", base]
    if args.html and importlib.util.find_spec("guard.report") is not None:
        argv += ["--html", str(out_dir / "report.html")]
    argv += list(extra)
    print(f"[perf-guard] guard {' '.join(argv)}", file=sys.stderr, flush=True)
    buf = io.StringIO()
    crash: Exception | None = None
    try:
        with contextlib.redirect_stdout(buf):
            code = cli.main(argv)
    except Exception as exc:
        crash = exc
    data, lines = _split_json(buf.getvalue())
    if crash is not None:
        if data is None or not isinstance(data.get("exit_code"), int):
            return _crashed("guard compare", crash)
        # The verdict was printed before the crash (e.g. in the optional HTML report):
        # keep it, and say what failed.
        code = data["exit_code"]
        detail = "".join(traceback.format_exception(crash)).rstrip()
        print_untrusted(detail)
        message = f"the HTML report failed after the verdict: {type(crash).__name__}: {crash}"
        annotate("warning", "perf-guard report", message)
        append_summary(f"> {md_text(message)}")
    for line in lines:  # the guard's ::error / ::warning lines
        print(line, flush=True)
    compare_md = out_dir / "compare.md"
    if compare_md.exists():  # the table for the job log (stdout held the JSON)
        print(compare_md.read_text("utf-8"), flush=True)
    if data is None:
        verdict = {ExitCode.BAD_INPUT: "bad-input", ExitCode.INFRA: "infrastructure"}.get(
            code, "error"
        )
        headline = f"guard compare stopped with exit code {code} (see the job log)"
        append_summary(f"**{md_text(headline)}**")
        return Outcome(code, verdict, headline)
    results.write_atomic(out_dir / "comparison.json", json.dumps(data, indent=1) + "\n")
    headline = str(data.get("headline", ""))
    if data.get("headline") == "NO VERDICT":
        reason = str(data.get("reason", ""))
        headline = f"NO VERDICT: {reason}"
        if code == ExitCode.BAD_INPUT and reason.startswith("no baseline"):
            return Outcome(code, "no-baseline", headline)
        if code == ExitCode.FAIL:
            return Outcome(code, "wrong-results", headline)
    verdict = {
        ExitCode.PASS: "pass",
        ExitCode.FAIL: "regression",
        ExitCode.BAD_INPUT: "bad-input",
        ExitCode.INFRA: "infrastructure",
    }.get(code, "error")
    moved = _moved_cases(data)
    if code == ExitCode.FAIL and any(c["verdict"] == "wrong" for c in moved):
        verdict = "wrong-results"
    return Outcome(code, verdict, headline, moved)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m guard.ci",
        description="The PR check: guard check, then guard compare against the base "
        "commit's baseline; reports for GitHub Actions. Arguments after `--` go to both "
        "guard commands.",
    )
    p.add_argument("--base", help="the PR's base commit (default: $BASE_SHA or $GITHUB_BASE_REF)")
    p.add_argument("--suite", default="suites/default.yaml", help="suite YAML file")
    p.add_argument("--baselines", default="baselines", help="baseline folder (in the base commit)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--out-dir", type=Path, default=Path("perf-guard-out"), help="reports here")
    p.add_argument(
        "--no-confirm",
        dest="confirm",
        action="store_false",
        help="skip the paired rerun against the base commit that confirms a regression",
    )
    p.add_argument("--html", action="store_true", help="also write the HTML report")
    p.add_argument(
        "--missing-baseline",
        choices=["fail", "neutral"],
        default=os.environ.get("PERF_GUARD_MISSING_BASELINE", "fail"),
        help="no baseline for this GPU: fail the check (exit 2, default) or pass with a "
        "warning (exit 0)",
    )
    return p


def _write_meta(
    out_dir: Path, outcome: Outcome, exit_code: int, base: str, changes: list[str]
) -> None:
    meta = {
        "schema_version": META_SCHEMA_VERSION,
        "pr_number": _pr_number(),
        "gpu": os.environ.get("GPU_LABEL", ""),
        "head_sha": os.environ.get("HEAD_SHA", ""),
        "base_sha": base,
        "exit_code": int(exit_code),  # the check's (after --missing-baseline neutral)
        "verdict": outcome.verdict,
        "headline": outcome.headline,
        "baseline_changes": changes,
        "moved": outcome.moved,
        "run_url": _run_url(),
    }
    results.write_atomic(out_dir / "meta.json", json.dumps(meta, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = os.environ.get("GPU_LABEL", "")
    append_summary(f"# perf-guard{f': {md_text(gpu)}' if gpu else ''}")

    base = ""
    changes: list[str] = []
    try:
        base = resolve_base(args.base)
    except BadInput as exc:
        outcome = Outcome(int(exc.exit_code), "bad-input", f"NO VERDICT: {exc}")
        annotate("error", "perf-guard: no base commit", str(exc))
        append_summary(f"**NO VERDICT: {md_text(exc)}**")
    else:
        changes = changed_baselines(base, args.baselines)
        if changes:
            files = "\n".join(f"- {md_code(f)}" for f in changes)
            append_summary(
                "> [!WARNING]\n> **This PR changes baseline files.** The check compares with "
                f"the baselines of the base commit {md_code(base[:10])}, not with these:"
                f"\n\n{files}"
            )
            for f in changes:
                annotate(
                    "warning",
                    "This PR changes a baseline",
                    f"{f} is changed by this PR; the check uses the base commit's copy",
                    file=f,
                )
        outcome = run_check(args, out_dir, extra) or run_compare(args, base, out_dir, extra)

    exit_code = outcome.exit_code
    if outcome.verdict == "no-baseline":
        hint = (
            f"No baseline for this GPU in the base commit. Record one with the baseline-refresh "
            f"workflow ({REFRESH_WORKFLOW}, gpu: {gpu or 'this runner'}) or with "
            "`guard baseline refresh` on this GPU, and merge its pull request."
        )
        append_summary(
            "> [!IMPORTANT]\n> No baseline for this GPU in the base commit. Record one with "
            f"the baseline-refresh workflow ({md_code(REFRESH_WORKFLOW)}, gpu: "
            f"{md_text(gpu or 'this runner')}) or with `guard baseline refresh` on this GPU, "
            "and merge its pull request."
        )
        if args.missing_baseline == "neutral":
            annotate("warning", "No baseline for this GPU", hint)
            exit_code = ExitCode.PASS
        else:
            annotate("error", "No baseline for this GPU", hint)
    append_summary(
        f"**perf-guard verdict: {outcome.verdict}** ({VERDICTS.get(outcome.verdict, '')}), "
        f"exit code {exit_code}"
    )
    _write_meta(out_dir, outcome, exit_code, base, changes)
    write_outputs(
        {
            "exit_code": str(exit_code),
            "verdict": outcome.verdict,
            "baseline_changed": "true" if changes else "false",
        }
    )
    print(f"[perf-guard] {outcome.headline}", file=sys.stderr)
    print(f"[perf-guard] verdict {outcome.verdict}, exit code {exit_code}", file=sys.stderr)
    return int(exit_code)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # never let a crash read as exit 1 ("regression")
        traceback.print_exc()
        sys.exit(int(ExitCode.INFRA))
