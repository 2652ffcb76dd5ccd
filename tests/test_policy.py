"""A PR's policy edits are listed (the judge measures with the base's suite)."""

from __future__ import annotations

from pathlib import Path

import yaml

from guard.decide import policy
from guard.store.suite import load_suite

SUITE = Path(__file__).resolve().parent.parent / "suites" / "default.yaml"


def _edited(tmp_path: Path, edit) -> object:
    doc = yaml.safe_load(SUITE.read_text("utf-8"))
    edit(doc)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(doc), "utf-8")
    surface = SUITE.parent / "surface.yaml"
    (tmp_path / "surface.yaml").write_text(surface.read_text("utf-8"), "utf-8")
    return load_suite(path)


def test_the_same_suite_changes_nothing():
    assert policy.changes(load_suite(SUITE), load_suite(SUITE)) == []


def test_each_weakening_is_named(tmp_path):
    base = load_suite(SUITE)

    def weaken(doc):
        doc["gate"] = ["cuda_flash"]  # ungates triton_flash and gluon_flash
        doc["cases"] = doc["cases"][1:]  # drops a workload
        doc["timing"]["alpha"] = 1e-6
        doc["tolerances"]["float16"]["factor"] = 50.0

    text = "\n".join(policy.changes(base, _edited(tmp_path, weaken)))
    assert "ungates gluon_flash, triton_flash" in text
    assert "removes" in text and "b1-h8-s128-d64-full" in text
    assert "timing.alpha: 0.01 -> 1e-06" in text
    assert "tolerance float16" in text


def test_a_new_case_is_listed_as_new(tmp_path):
    base = load_suite(SUITE)

    def add(doc):
        doc["cases"].append({"shape": [1, 4, 256, 64], "causal": False})

    changes = policy.changes(base, _edited(tmp_path, add))
    assert any(c.startswith("adds") and "b1-h4-s256-d64-full" in c for c in changes)


def test_surface_edits_are_listed(tmp_path):
    base = load_suite(SUITE)

    def drop_surface(doc):
        doc.pop("surface")

    changes = policy.changes(base, _edited(tmp_path, drop_surface))
    removed = [c for c in changes if c.startswith("removes") and "surface case(s)" in c]
    assert removed and str(len(base.surface)) in removed[0]
