"""``guard init``: a starter suite and PR-check workflow for another repository."""

from __future__ import annotations

import os

import pytest
import yaml
from test_workflows import REUSABLE, caller_problems, load, real

from guard.commands.main import main
from guard.store.suite import load_suite

REF = os.urandom(20).hex()  # any commit: the workflow pins what it is given


def test_init_writes_a_suite_and_a_workflow_that_hold(tmp_path, capsys):
    kernel = f"pkg_{os.urandom(3).hex()}.ops:attention"
    assert main(["init", str(tmp_path), "--kernel", kernel, "--guard-ref", REF]) == 0
    out = capsys.readouterr().out
    suite_file, workflow = tmp_path / "guard.yaml", tmp_path / ".github/workflows/perf.yml"
    assert out.splitlines() == [f"wrote {suite_file}", f"wrote {workflow}"]
    suite = load_suite(suite_file)
    assert {c.kernel for c in suite.cases} == {kernel} and not suite.uses_registry
    assert all(c.gate for c in suite.cases)
    text = suite_file.read_text()
    assert "#   kernel_options:" in text and "#   kernels: [" in text  # the commented example
    doc = load(workflow)
    assert caller_problems(doc, real()[REUSABLE]) == []
    assert doc["jobs"]["guard"]["with"]["guard-ref"] == REF
    assert doc["jobs"]["guard"]["with"]["suite"] == "guard.yaml"
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left


def test_init_defaults_to_here_and_this_guard_commit(tmp_path, monkeypatch, capsys):
    from guard.commands import init as cli_init

    monkeypatch.setattr(cli_init, "guard_commit", lambda: REF)
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    doc = yaml.safe_load((tmp_path / ".github/workflows/perf.yml").read_text())
    assert doc["jobs"]["guard"]["uses"].endswith(f"guard-reusable.yml@{REF}")
    assert load_suite(tmp_path / "guard.yaml").cases[0].kernel == cli_init.DEFAULT_KERNEL


@pytest.mark.parametrize("existing", ["guard.yaml", ".github/workflows/perf.yml"])
def test_init_never_replaces_a_file(tmp_path, capsys, existing):
    mine = tmp_path / existing
    mine.parent.mkdir(parents=True, exist_ok=True)
    content = f"mine {os.urandom(4).hex()}\n"
    mine.write_text(content)
    assert main(["init", str(tmp_path), "--guard-ref", REF]) == 2
    assert f"guard: error: {mine}: already exists" in capsys.readouterr().err
    assert mine.read_text() == content
    others = [p for p in tmp_path.rglob("*") if p.is_file() and p != mine]
    assert others == []  # nothing written at all


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kernel", "not a name"], "--kernel"),
        (["--kernel", "pkg.ops"], "--kernel"),
        (["--guard-ref", "main"], "--guard-ref"),
        (["--guard-repository", "no-slash"], "--guard-repository"),
    ],
)
def test_init_bad_options_exit_two(tmp_path, capsys, args, message):
    assert main(["init", str(tmp_path), "--guard-ref", REF, *args]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_init_writes_both_files_or_neither(tmp_path, capsys):
    # The suite can be written, the workflow cannot: .github is a file, not a folder.
    (tmp_path / ".github").write_text("not a folder\n")
    assert main(["init", str(tmp_path), "--guard-ref", REF]) == 2
    err = capsys.readouterr().err
    assert "perf.yml: cannot write" in err and "nothing was written" in err, err
    assert "already exists" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".github"]  # no guard.yaml left
