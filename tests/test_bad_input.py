"""Hostile or extreme input through the real CLI: exit 2 with one line naming the file
or option at fault, never a traceback, never an overflowed number."""

from __future__ import annotations

import pytest
from conftest import make_case, make_run

from guard import results
from guard.cli import main


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
