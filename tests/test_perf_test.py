"""The GPU check's gate (``python -m guard.github.perf_test``) against a fake GitHub API: only
a maintainer's dispatch for the pull request's head now opens the check run; the check
run passes only when every GPU kind's verdict passed and the measuring jobs ran; the
comment links the run GitHub names, not one from the artifact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_comment_hostile import _meta, _valid

from guard.github import comment as github_comment
from guard.github import perf_test
from guard.github.perf_test import Refused, Request

HEAD, BASE, OTHER = "a" * 40, "b" * 40, "c" * 40
DISPATCH = {"EVENT_NAME": "workflow_dispatch", "ACTOR": "maintainer", "INPUT_PR": "7",
            "INPUT_SHA": HEAD}  # fmt: skip


class FakeApi:
    """GitHub as the gate sees it: who has which access, the PR, the check runs made."""

    def __init__(self, permission: str = "write", head: str = HEAD, state: str = "open"):
        self.permission, self.head, self.state = permission, head, state
        self.calls: list[tuple[str, str, Mapping[str, Any] | None]] = []

    def __call__(self, method: str, path: str, body: Mapping[str, Any] | None) -> Any:
        self.calls.append((method, path, body))
        if path.endswith("/permission"):
            return {"permission": self.permission} if self.permission else {}
        if "/pulls/" in path:
            return {"state": self.state, "head": {"sha": self.head}, "base": {"sha": BASE}}
        if method == "POST" and path.endswith("/check-runs"):
            return {"id": 42}
        return {}

    def check_runs(self) -> list[Mapping[str, Any] | None]:
        return [b for m, p, b in self.calls if m == "POST" and p.endswith("check-runs")]


def test_a_maintainers_dispatch_for_the_head_opens_the_check_run() -> None:
    api = FakeApi()
    accepted = perf_test.authorize(perf_test.request_from(DISPATCH), "o/r", api, "https://x/1")
    assert (accepted.base_sha, accepted.check_run) == (BASE, 42)
    (body,) = api.check_runs()
    assert body is not None and body["head_sha"] == HEAD and body["name"] == "perf-guard"


@pytest.mark.parametrize(
    ("api", "why"),
    [
        (FakeApi(permission="read"), "has read access"),
        (FakeApi(permission="triage"), "has triage access"),
        (FakeApi(permission=""), "has no access"),
        (FakeApi(head=OTHER), "head is " + OTHER),  # pushed after the maintainer looked
        (FakeApi(state="closed"), "is not open"),
    ],
)
def test_anyone_else_or_another_commit_is_refused(api: FakeApi, why: str) -> None:
    with pytest.raises(Refused, match=why):
        perf_test.authorize(perf_test.request_from(DISPATCH), "o/r", api)
    assert api.check_runs() == []  # no check run: the commit cannot pass on a skipped job


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        ({"EVENT_NAME": "pull_request"}, "only a workflow_dispatch"),
        ({"EVENT_NAME": "issue_comment"}, "only a workflow_dispatch"),
        ({"INPUT_SHA": "main"}, "40 hex digits"),
        ({"INPUT_SHA": HEAD.upper()}, "40 hex digits"),
        ({"INPUT_PR": "7; rm -rf /"}, "not a pull request number"),
        ({"INPUT_PR": "0"}, "not a pull request number"),
        ({"ACTOR": "a b"}, "not a GitHub login"),
    ],
)
def test_malformed_requests_are_refused(edit: dict[str, str], why: str) -> None:
    with pytest.raises(Refused, match=why):
        perf_test.request_from({**DISPATCH, **edit})


def test_refused_is_exit_1_with_an_annotation(monkeypatch, capsys) -> None:
    monkeypatch.setattr(perf_test, "github_api", lambda *_: FakeApi(permission="read"))
    monkeypatch.setattr("os.environ", {**DISPATCH, "REPO": "o/r"})
    assert perf_test.main(["authorize"]) == 1
    assert "::error title=perf-guard not started::@maintainer has read access" in (
        capsys.readouterr().out
    )


def test_authorize_writes_the_approved_commits(monkeypatch, tmp_path: Path) -> None:
    out = tmp_path / "github_output"
    monkeypatch.setattr(perf_test, "github_api", lambda *_: FakeApi())
    monkeypatch.setattr("os.environ", {**DISPATCH, "REPO": "o/r", "GITHUB_OUTPUT": str(out)})
    assert perf_test.main(["authorize"]) == 0
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert lines == {"pr": "7", "head_sha": HEAD, "base_sha": BASE, "check_run": "42",
                     "requester": "maintainer"}  # fmt: skip


@pytest.mark.parametrize(
    ("verdicts", "measured", "expected"),
    [
        (["pass", "pass"], "success", "success"),
        (["pass", "regression"], "success", "failure"),
        (["pass"], "skipped", "failure"),  # GPU jobs skipped: never a pass
        (["pass"], "cancelled", "failure"),
        ([], "success", "failure"),  # no GPU kind reported
    ],
)
def test_the_check_run_passes_only_on_measured_passes(
    tmp_path: Path, verdicts: list[str], measured: str, expected: str
) -> None:
    metas = []
    for i, verdict in enumerate(verdicts):
        exit_code = 0 if verdict == "pass" else 1
        headline = "PASS" if verdict == "pass" else "FAIL: 1 significant regression(s)"
        data = _valid(verdict=verdict, headline=headline, exit_code=exit_code)
        metas.append(_meta(tmp_path, data, f"meta{i}.json"))
    result, title, summary = perf_test.conclusion(metas, measured)
    assert result == expected, (title, summary[:500])
    if measured != "success":
        assert measured in title


def test_an_unreadable_verdict_fails_the_check_run(tmp_path: Path) -> None:
    bad = tmp_path / "meta.json"
    bad.write_text("{")
    result, title, _ = perf_test.conclusion([bad], "success")
    assert result == "failure" and "no verdict" in title


def test_the_comment_links_the_run_github_names(tmp_path: Path) -> None:
    meta = _meta(tmp_path, _valid(run_url="https://evil.example/phish"))
    out = tmp_path / "c.md"
    run = "https://github.com/o/r/actions/runs/99"
    assert github_comment.main(["--meta", str(meta), "--out", str(out), "--run-url", run]) == 0
    text = out.read_text()
    assert run in text and "evil.example" not in text


def test_request_is_frozen() -> None:
    request = perf_test.request_from(DISPATCH)
    assert request == Request("maintainer", 7, HEAD)
    with pytest.raises(AttributeError):
        request.sha = OTHER  # type: ignore[misc]
