"""The gate of the GPU check: a maintainer's word for an exact commit, and its report.

``.github/workflows/perf-guard.yml`` runs as defined on the default branch and starts
from a ``workflow_dispatch`` with the PR's number and the head commit a maintainer
reviewed (GitHub lets only users with write access dispatch). Nothing a pull request
contains decides whether a GPU job runs. Its first job, on a GitHub-hosted runner with
the default branch's code, runs ``python -m guard.github.perf_test authorize``:

- who dispatched must have write access to the repository (admin, maintain or write:
  ``collaborators/<user>/permission``), checked again here;
- the sha must be the pull request's head *now*, and the pull request open (a push
  after the request needs a new one: a maintainer vouches for code they saw);
- it then opens the check run ``perf-guard`` on that sha (``checks: write``), which
  branch protection requires: a commit nobody approved has no check run, so it cannot
  merge on a skipped job.

The GPU jobs measure that sha against the PR's base, and the last job runs
``python -m guard.github.perf_test report``: the check run's conclusion is success only when
every GPU kind's merged verdict passed and the measuring jobs ran (skipped or
cancelled measuring is a failure, never a pass).

Standard library only (urllib), like ``guard.report.comment``: the jobs install nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guard.base.text import one_line
from guard.decide.outcome import OutcomeFileError
from guard.report.comment import MAX_FILES, markdown, read

CHECK_NAME = "perf-guard"
WRITERS = frozenset({"admin", "maintain", "write"})
MAX_SUMMARY = 60000  # a check run's output summary holds 65535 characters
API_TIMEOUT_S = 30

# (method, path under the API, JSON body or None) -> the decoded JSON answer
Api = Callable[[str, str, Mapping[str, Any] | None], Any]


class Refused(Exception):
    """The request is not one the gate accepts; the message says why, for the log."""


@dataclass(frozen=True)
class Request:
    """Who asks to measure which commit of which pull request."""

    requester: str
    pr: int
    sha: str


@dataclass(frozen=True)
class Authorized:
    """A request the gate accepted, and the check run it opened."""

    request: Request
    base_sha: str
    check_run: int


def request_from(env: Mapping[str, str]) -> Request:
    """The request a dispatch carries (``EVENT_NAME``, ``ACTOR``, ``INPUT_PR``,
    ``INPUT_SHA``, as the workflow passes them); Refused names the field at fault."""
    event = env.get("EVENT_NAME", "")
    if event != "workflow_dispatch":
        raise Refused(f"event {event!r}: only a workflow_dispatch starts the check")
    requester, pr, sha = env.get("ACTOR", ""), env.get("INPUT_PR", ""), env.get("INPUT_SHA", "")
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise Refused(f"sha {sha[:60]!r}: give the pull request's head commit, 40 hex digits")
    if not re.fullmatch(r"[1-9][0-9]{0,8}", pr):
        raise Refused(f"pull request {pr[:20]!r}: not a pull request number")
    if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?", requester):
        raise Refused(f"requester {requester[:60]!r}: not a GitHub login")
    return Request(requester, int(pr), sha)


def authorize(request: Request, repo: str, call: Api, run_url: str = "") -> Authorized:
    """Check the requester's access and the commit (module doc), then open the check
    run on it. Refused says which condition failed."""
    answer = call("GET", f"repos/{repo}/collaborators/{request.requester}/permission", None)
    permission = str(answer.get("permission", "")) if isinstance(answer, dict) else ""
    if permission not in WRITERS:
        raise Refused(
            f"@{request.requester} has {permission or 'no'} access: only a maintainer "
            "(write access) starts the GPU check"
        )
    pr = call("GET", f"repos/{repo}/pulls/{request.pr}", None)
    if not isinstance(pr, dict) or pr.get("state") != "open":
        raise Refused(f"pull request #{request.pr} is not open")
    head = str((pr.get("head") or {}).get("sha", ""))
    base = str((pr.get("base") or {}).get("sha", ""))
    if head != request.sha:
        raise Refused(
            f"#{request.pr}'s head is {head[:40]}, not {request.sha}: a maintainer names the "
            "commit they reviewed, the head now"
        )
    if not re.fullmatch(r"[0-9a-f]{40}", base):
        raise Refused(f"#{request.pr} has no base commit")
    check = call(
        "POST",
        f"repos/{repo}/check-runs",
        {
            "name": CHECK_NAME,
            "head_sha": request.sha,
            "status": "in_progress",
            **({"details_url": run_url} if run_url.startswith("https://") else {}),
            "output": {
                "title": "measuring on the GPU runners",
                "summary": f"Requested by @{request.requester} for {request.sha}.",
            },
        },
    )
    run_id = check.get("id") if isinstance(check, dict) else None
    if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id <= 0:
        raise Refused("the check run was not created")
    return Authorized(request, base, run_id)


def conclusion(metas: Sequence[Path], measured: str) -> tuple[str, str, str]:
    """(conclusion, title, summary) of the check run: success only when the measuring
    jobs succeeded (``measured``: the merge jobs' result) and every outcome passed."""
    outcomes = []
    problems = []
    for path in metas[:MAX_FILES]:
        try:
            outcomes.append(read(path))
        except OutcomeFileError as exc:
            problems.append(one_line(exc))
    if measured != "success" or not outcomes or problems:
        why = (
            f"the measuring jobs ended {measured or 'without a result'}"
            if measured != "success"
            else problems[0]
            if problems
            else "no GPU kind reported a verdict"
        )
        summary = markdown(outcomes) if outcomes else ""
        return "failure", f"no verdict: {why}"[:200], (summary or why)[:MAX_SUMMARY]
    failed = [o for o in outcomes if o.exit_code != 0]
    title = "; ".join(f"{o.gpu or 'gpu'}: {o.headline}" for o in (failed or outcomes))
    return ("failure" if failed else "success"), title[:200], markdown(outcomes)[:MAX_SUMMARY]


def github_api(token: str, api_url: str = "https://api.github.com") -> Api:
    """A caller of the REST API with ``token`` (never on a command line)."""

    def call(method: str, path: str, body: Mapping[str, Any] | None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(f"{api_url.rstrip('/')}/{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=API_TIMEOUT_S) as answer:
                return json.loads(answer.read(1 << 22) or b"null")
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404):
                return {}  # no access, or no such user or pull request: refused by the caller
            raise

    return call


def _output(values: Mapping[str, str]) -> None:
    path = os.environ.get("GITHUB_OUTPUT", "")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            for key, value in values.items():
                fh.write(f"{key}={one_line(value)}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guard.github.perf_test", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("authorize", help="check the request (environment) and open the check run")
    rep = sub.add_parser("report", help="complete the check run from the merged verdicts")
    rep.add_argument("--check-run", type=int, required=True)
    rep.add_argument("--measured", required=True, help="the measuring jobs' result")
    rep.add_argument("--meta", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    env = os.environ
    repo = env.get("REPO", "")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        print("guard.github.perf_test: error: REPO must be owner/name", file=sys.stderr)
        return 2
    call = github_api(env.get("GH_TOKEN", ""), env.get("API_URL") or "https://api.github.com")
    if args.command == "authorize":
        try:
            accepted = authorize(request_from(env), repo, call, env.get("RUN_URL", ""))
        except Refused as exc:
            print(f"::error title=perf-guard not started::{one_line(exc)}")
            return 1
        request = accepted.request
        _output(
            {
                "pr": str(request.pr),
                "head_sha": request.sha,
                "base_sha": accepted.base_sha,
                "check_run": str(accepted.check_run),
                "requester": request.requester,
            }
        )
        print(f"perf-guard: #{request.pr} at {request.sha}, requested by @{request.requester}")
        return 0
    result, title, summary = conclusion(args.meta, args.measured)
    call(
        "PATCH",
        f"repos/{repo}/check-runs/{args.check_run}",
        {
            "status": "completed",
            "conclusion": result,
            "output": {"title": title or result, "summary": summary or title or result},
        },
    )
    print(f"perf-guard: check run {args.check_run} completed: {result}: {title}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
