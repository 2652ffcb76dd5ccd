"""Hostile or extreme input through the real CLI: exit 2 with one line naming the file
or option at fault, never a traceback, never an overflowed number."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys

import pytest
from conftest import ROOT, make_case, make_run

from guard.base import limits
from guard.base.errors import InfraError
from guard.commands.main import main
from guard.measure import resources
from guard.store import results


def _save(tmp_path, name, rounds):
    path = tmp_path / name
    results.save(make_run({make_case(): rounds}, label=name), path)
    return path


@pytest.fixture
def slowdown(tmp_path):
    """A baseline and a candidate three times slower, six rounds each."""
    base = tuple((1e-4 * (1 + 0.01 * i),) * 3 for i in range(6))
    cand = tuple(tuple(3 * x for x in r) for r in base)
    return _save(tmp_path, "base.json", base), _save(tmp_path, "cand.json", cand)


@pytest.mark.parametrize("alpha", ["1e-300", "2", "0", "nan", "-0.01", "x"])
def test_alpha_out_of_range_exits_two_naming_the_option(slowdown, capsys, alpha):
    assert main(["compare", *map(str, slowdown), "--alpha", alpha]) == 2
    err = capsys.readouterr().err
    assert "--alpha" in err and "Traceback" not in err
    assert main(["report", str(slowdown[1]), "--baseline", str(slowdown[0]), "--alpha", alpha]) == 2


def test_alpha_in_range_still_finds_the_slowdown(slowdown, capsys):
    assert main(["compare", *map(str, slowdown), "--alpha", "1e-6"]) == 1
    assert main(["compare", *map(str, slowdown), "--alpha", "0.2"]) == 1


def _pb_file(path, data):
    doc = {"machine_info": {}, "commit_info": {}, "datetime": "", "version": "5.2.3"}
    doc["benchmarks"] = [{"name": "t", "fullname": "t", "stats": {"data": data}}]
    path.write_text(json.dumps(doc))
    return path


def test_extreme_samples_give_json_without_inf_or_nan(tmp_path, capsys):
    """Once: "Out of range float values are not JSON compliant" (a traceback)."""
    fast = _pb_file(tmp_path / "fast.json", [1e-12, 2e-12, 1e-12])
    slow = _pb_file(tmp_path / "slow.json", [1e5, 9e4, 1e5])
    assert main(["compare", str(fast), str(slow), "--json"]) == 2  # one round each: no verdict
    out = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert out["cases"][0]["ratio"] == pytest.approx(1e17)
    # Two rounds a side whose interval would overflow: capped, finite, inconclusive.
    wild = _save(tmp_path, "wild.json", ((1e-12,), (1e5,)))
    calm = _save(tmp_path, "calm.json", ((1e-4,), (1e-4,)))
    assert main(["compare", str(wild), str(calm), "--json", "--alpha", "1e-6"]) == 0
    [case] = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)["cases"]
    assert case["verdict"] == "inconclusive" and all(math.isfinite(x) for x in case["ci"])
    assert main(["report", str(slow), "--json"]) == 0
    json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    # Beyond the range of a time: refused, naming the field.
    _pb_file(tmp_path / "huge.json", [1e300, 1e308])
    assert main(["compare", str(fast), str(tmp_path / "huge.json"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "huge.json: benchmarks[0].stats.data[0]: must be a time" in err
    assert len(err.strip().splitlines()) == 1


def test_files_at_the_limits_compare_and_report(tmp_path, capsys):
    """Bounded in memory and time (measured by hand: see guard/base/limits.py); no timing here."""
    n, per = limits.MAX_ROUNDS_PER_CASE, limits.MAX_SAMPLES_PER_CASE // limits.MAX_ROUNDS_PER_CASE
    base = tuple(tuple(1e-4 * (1 + 0.001 * ((i + j) % 7)) for j in range(per)) for i in range(n))
    cand = tuple(tuple(3 * x for x in r) for r in base)
    a, b = _save(tmp_path, "a.json", base), _save(tmp_path, "b.json", cand)
    assert a.stat().st_size <= limits.MAX_FILE_BYTES
    assert main(["compare", str(a), str(b), "--json"]) == 1
    [case] = json.loads(capsys.readouterr().out)["cases"]
    assert case["verdict"] == "regression" and case["ratio"] == pytest.approx(3.0)
    html = tmp_path / "r.html"
    assert main(["report", str(b), "--baseline", str(a), "--html", str(html)]) == 0
    text = html.read_text()
    assert "20 of 200 rounds drawn" in text and "points per round (quantiles)" in text
    assert len(text) < 2_000_000

    one = [1e-4 * (1 + 0.001 * (i % 13)) for i in range(limits.MAX_SAMPLES_PER_ROUND)]
    pa = _pb_file(tmp_path / "pa.json", one)
    pb = _pb_file(tmp_path / "pb.json", [x * 1.5 for x in one])
    assert main(["compare", str(pa), str(pb), "--json"]) == 2  # one round each: no verdict
    [case] = json.loads(capsys.readouterr().out)["cases"]
    assert case["status"] == "too-few-rounds" and case["ratio"] == pytest.approx(1.5)


def test_many_cases_at_the_limit_compare(tmp_path, capsys):
    cases = {
        make_case(f"c{i}"): ((1e-4 * (1 + i % 5 * 1e-3),), (1.01e-4,))
        for i in range(limits.MAX_CASES)
    }
    a = tmp_path / "a.json"
    results.save(make_run(cases, label="a"), a)
    assert main(["compare", str(a), str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["cases"]) == limits.MAX_CASES


def test_huge_names_from_a_file_are_cut_in_error_messages(tmp_path, capsys):
    a = _save(tmp_path, "a.json", ((1e-4,), (1e-4,)))
    doc = json.loads(a.read_text())
    doc["guard"]["environment"]["gpu_name"] = "<img src=x>" * 100_000
    doc["guard"]["environment"]["gpu_slug"] = "other"
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    assert main(["compare", str(b), str(a)]) == 2
    err = capsys.readouterr().err
    assert "cut at 200 characters" in err and len(err) < 1000


# ------------------------------------------------- inputs that are not regular files


def _bounded_child(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` in a child killed at a (generous) timeout, for opening a FIFO used to wait
    for a writer for ever, and held to 3 GiB of address space, for reading /dev/zero
    used to fill memory (the guard without torch needs under 1 GiB)."""

    def hold() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run(
        argv, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=300, preexec_fn=hold,
    )  # fmt: skip


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return path


_LOADS = """
import sys
from guard.store import results, suite
from guard.base.errors import BadInput

for path in sys.argv[1:]:
    for load in (results.load, lambda p: suite.load_suite(p, known_kernels=set())):
        try:
            load(path)
        except BadInput as exc:
            print(exc)
"""


def test_results_and_suite_loads_refuse_what_is_not_a_regular_file(tmp_path, fifo):
    """A FIFO hung the load, /dev/zero filled memory (stat says 0 bytes for both)."""
    child = _bounded_child([sys.executable, "-c", _LOADS, str(fifo), "/dev/zero", str(tmp_path)])
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == [
        f"{fifo}: not a regular file (a FIFO)",
        f"{fifo}: suite file: not a regular file (a FIFO)",
        "/dev/zero: not a regular file (a character device)",
        "/dev/zero: suite file: not a regular file (a character device)",
        f"{tmp_path}: not a regular file (a directory)",
        f"{tmp_path}: suite file: not a regular file (a directory)",
    ]


@pytest.mark.parametrize(
    "args, bad",
    [
        (["compare", "{bad}", "{good}"], "fifo"),
        (["report", "{good}", "--baseline", "{bad}"], "/dev/zero"),
        (["list", "--suite", "{bad}"], "fifo"),
    ],
    ids=["compare-fifo", "report-baseline-dev-zero", "suite-fifo"],
)
def test_cli_given_a_fifo_or_a_device_exits_two_naming_it(tmp_path, fifo, args, bad):
    good = _save(tmp_path, "good.json", ((1e-4,), (1e-4,)))
    path = str(fifo) if bad == "fifo" else bad
    argv = [a.format(bad=path, good=good) for a in args]
    child = _bounded_child([sys.executable, "-m", "guard", *argv])
    assert child.returncode == 2, child.stderr
    kind = "a FIFO" if bad == "fifo" else "a character device"
    assert child.stderr.splitlines() == [
        f"guard: error: {path}: {'suite file: ' if 'list' in args else ''}"
        f"not a regular file ({kind})"
    ]


def test_the_resources_childs_output_is_read_within_the_file_limit(tmp_path):
    """The JSON the resources child writes is read only up to the results-file limit
    (it was read whole). A stand-in child writes a sparse file one byte over it."""
    child = tmp_path / "python"
    child.write_text(
        '#!/bin/sh\nwhile [ "$1" != --out ]; do shift; done\n'
        f'truncate -s {limits.MAX_FILE_BYTES + 1} "$2"\n'
    )
    child.chmod(0o755)
    suite = ROOT / "suites" / "default.yaml"
    over = rf"unreadable JSON .*over the {limits.MAX_FILE_BYTES}-byte limit"
    with pytest.raises(InfraError, match=over):
        resources.collect_in_tree(ROOT, suite, ["sm_90"], python=str(child))
