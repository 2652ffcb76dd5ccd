"""Every file of tests/fuzz_corpus/ (small hostile suites, results and pytest-benchmark
files) in every role the CLI reads a file in: an exit code the guard documents, never
a traceback, an error of one line, and JSON output that is valid and finite.

The CLI runs in-process (``guard.cli.main``), as in tests/test_cli.py: an exception
that escapes ``main`` is what a user would see as a traceback.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from guard.commands.main import main

CORPUS = sorted(
    p for p in (Path(__file__).parent / "fuzz_corpus").iterdir() if p.suffix in (".json", ".yaml")
)
# Files the guard accepts in their own role, with the exit codes of (compare, report)
# for results files and of list for suites; it refuses every other file with exit 2.
ACCEPTED = {
    "pb_extreme_allowed.json": (2, 0),  # one round a side: NO VERDICT
    "pb_markup_name.json": (2, 0),  # one round a side: NO VERDICT
    "pb_path_name.json": (2, 0),  # one round a side: NO VERDICT
    "pb_unicode_name.json": (2, 0),  # one round a side: NO VERDICT
    "pb_valid.json": (2, 0),  # one round a side: NO VERDICT
    "results_crashed.json": (3, 0),
    "results_extreme_times.json": (0, 0),
    "results_long_name.json": (0, 0),
    "results_markup_names.json": (0, 0),
    "results_newline_name.json": (0, 0),
    "results_one_round.json": (2, 0),  # one round a side: NO VERDICT
    "results_shape_huge.json": (0, 0),
    "results_two_wild_rounds.json": (0, 0),
    "results_unicode_names.json": (0, 0),
    "results_valid.json": (0, 0),
    "results_wrong_status.json": (1, 0),
    "suite_huge_float_field.yaml": (0,),
    "suite_markup_noslash.yaml": (0,),
    "suite_unicode.yaml": (0,),
    "suite_valid.yaml": (0,),
}
ROLES = {
    "compare": lambda path, tmp: ["compare", str(path), str(path), "--json"],
    "report": lambda path, tmp: ["report", str(path), "--markdown", str(tmp / "out.md")],
    "list": lambda path, tmp: ["list", "--suite", str(path)],
}


def _finite_json(text: str) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    json.loads(text, parse_constant=refuse)


def test_corpus_covers_every_kind_of_file():
    kinds = {p.name.split("_")[0] for p in CORPUS}
    assert kinds == {"suite", "results", "pb"} and len(CORPUS) > 80


@pytest.mark.parametrize("role", sorted(ROLES))
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_hostile_file(path, role, tmp_path, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = main(ROLES[role](path, tmp_path))
        except BaseException as exc:  # what a user would see as a traceback
            pytest.fail(f"guard {role} {path.name} raised {type(exc).__name__}: {str(exc)[:300]}")
    out, err = capsys.readouterr()
    assert code in (0, 1, 2, 3), (code, err[:300])
    assert "Traceback" not in out + err
    assert len(err.splitlines()) <= 1 and len(err) <= 1000, err[:1000]
    own = ("list",) if path.suffix == ".yaml" else ("compare", "report")
    if code == 2 and path.name in ACCEPTED and role in own:  # read; nothing decided
        assert "NO VERDICT" in out, out[:300]
    elif code == 2:
        assert err.startswith("guard: error: ") and path.name in err, err
    if role in own:
        expected = ACCEPTED.get(path.name, (2,) * len(own))[own.index(role)]
        assert code == expected, err
    if role == "compare" and role in own and path.name in ACCEPTED:  # JSON, any verdict
        _finite_json(out)
    noise = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert not noise, [str(w.message) for w in noise]  # each would be stderr lines
