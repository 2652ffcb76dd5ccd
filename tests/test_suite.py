"""Suite files: the default suite, and every malformed field named in the error."""

from __future__ import annotations

import pytest
import yaml

from guard.errors import BadInput
from guard.suite import flops, load_suite, parse_suite

KNOWN = {"reference", "sdpa", "triton_flash"}
VALID = {
    "schema_version": 1,
    "name": "s",
    "kernels": ["reference", "sdpa"],
    "gate": ["reference"],
    "cases": [{"shape": [1, 2, 64, 32]}, {"shape": [1, 2, 64, 32], "causal": True}],
}


def test_default_suite_has_the_seven_shapes():
    suite = load_suite("suites/default.yaml")
    shapes = sorted({(c.shape.as_tuple(), c.causal) for c in suite.cases})
    assert shapes == sorted(
        [
            ((1, 8, 128, 64), False),
            ((1, 8, 512, 64), False),
            ((1, 8, 512, 64), True),
            ((1, 16, 1024, 64), False),
            ((4, 16, 1024, 64), True),
            ((2, 8, 2048, 128), False),
            ((2, 8, 2048, 128), True),
        ]
    )
    assert all(c.dtype == "float16" for c in suite.cases)
    kernels = {c.kernel for c in suite.cases}
    assert {"triton_flash", "sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"} <= kernels
    assert {c.kernel for c in suite.cases if c.gate} == {"triton_flash", "cuda_flash"}
    # the band the calibration study chose
    assert all(c.threshold.min_effect == pytest.approx(0.005) for c in suite.cases)
    assert suite.timing.rounds == 6 and suite.timing.max_rounds == 20


def test_suite_hash_is_stable_and_sensitive():
    a = parse_suite(VALID, "a.yaml", KNOWN)
    b = parse_suite(dict(VALID), "b.yaml", KNOWN)
    assert a.hash == b.hash
    changed = {**VALID, "cases": [{"shape": [1, 2, 64, 16]}]}
    assert parse_suite(changed, "c.yaml", KNOWN).hash != a.hash


def bad(**changes):
    data = {**VALID, **changes}
    return data


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (bad(kernels=["nope"]), "kernels[0]"),
        (bad(schema_version=9), "schema_version"),
        (bad(cases=[{"shape": [1, 2, 64]}]), "cases[0].shape"),
        (bad(cases=[{"shape": [1, 2, -64, 32]}]), "cases[0].shape[2]"),
        (bad(cases=[{"shape": [1, 2, 64, 32], "dtype": "float8"}]), "cases[0].dtype"),
        (bad(cases=[{"shape": [1, 2, 64, 32], "causal": "yes"}]), "cases[0].causal"),
        (bad(cases=[{"shape": [1, 2, 64, 32], "threshold": "mean:5%"}]), "cases[0].threshold"),
        (bad(cases=[{"shape": [1, 2, 64, 32], "name": "a/b"}]), "cases[0].name"),
        (
            bad(cases=[{"shape": [1, 2, 8, 8], "name": "x"}, {"shape": [1, 2, 9, 8], "name": "x"}]),
            "cases[1].name",
        ),
        (bad(cases=[{"shape": [1, 3, 8, 8], "kv_heads": 2}]), "cases[0].kv_heads"),
        (bad(gate=["sdpa_flash"]), "gate"),
        (bad(timing={"rounds": 1}), "timing.rounds"),
        (bad(timing={"samples_per_round": 2.5}), "timing.samples_per_round"),
        (bad(timing={"sample_target_ms": float("nan")}), "timing.sample_target_ms"),
        (bad(timing={"bogus": 1}), "timing"),
        (bad(timing={"alpha": 1e-300}), "timing.alpha"),
        (bad(timing={"alpha": 0.3}), "timing.alpha"),
        (bad(cpu_timing={"alpha": 1}), "cpu_timing.alpha"),
        (bad(tolerances={"float16": {"factor": -1}}), "tolerances.float16.factor"),
        (bad(extra=1), "top level"),
        (bad(cases=[]), "cases"),
    ],
)
def test_bad_suites_name_the_field(data, field):
    with pytest.raises(BadInput) as err:
        parse_suite(data, "suite.yaml", KNOWN)
    assert str(err.value).startswith(f"suite.yaml: {field}")


def test_unreadable_and_malformed_files(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        load_suite(tmp_path / "missing.yaml", KNOWN)
    broken = tmp_path / "broken.yaml"
    broken.write_text("cases: [1, 2\n")
    with pytest.raises(BadInput, match=r"broken.yaml: not valid YAML"):
        load_suite(broken, KNOWN)
    listy = tmp_path / "list.yaml"
    listy.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(BadInput, match="mapping"):
        load_suite(listy, KNOWN)


def test_flops_halves_for_causal():
    suite = parse_suite(VALID, "s", KNOWN)
    full, causal = suite.cases[0], suite.cases[2]
    assert flops(full.shape, False) == 4 * 1 * 2 * 64 * 64 * 32
    assert flops(causal.shape, True) == flops(full.shape, False) / 2


def test_select_unknown_names_fail():
    suite = parse_suite(VALID, "s.yaml", KNOWN)
    assert len(suite.select(["sdpa"]).cases) == 2
    with pytest.raises(BadInput, match="triton_flash"):
        suite.select(["triton_flash"])
    with pytest.raises(BadInput, match="no case named"):
        suite.select(None, ["zzz"])
