"""Suite files: the default suite, and every malformed field named in the error."""

from __future__ import annotations

import pytest
import yaml

from guard.base import limits
from guard.base.errors import BadInput
from guard.store.suite import flops, load_suite, parse_suite

KNOWN = {"reference", "sdpa", "triton_flash"}
VALID = {
    "schema_version": 1,
    "name": "s",
    "kernels": ["reference", "sdpa"],
    "gate": ["reference"],
    "cases": [{"shape": [1, 2, 64, 32]}, {"shape": [1, 2, 64, 32], "causal": True}],
}


def test_default_suite_has_seven_prefill_shapes_and_two_decode_steps():
    suite = load_suite("suites/default.yaml")
    prefill = [c for c in suite.cases if c.shape.as_tuple()[2] > 1]
    shapes = sorted({(c.shape.as_tuple(), c.causal) for c in prefill})
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
    assert all(c.dtype == "float16" for c in prefill)
    decode = sorted(
        {(c.shape.as_tuple(), c.shape.sk, c.shape.hkv, c.dtype) for c in suite.cases}
        - {(c.shape.as_tuple(), c.shape.sk, c.shape.hkv, c.dtype) for c in prefill}
    )
    assert decode == [
        ((4, 32, 1, 128), 32768, 8, "bfloat16"),
        ((64, 32, 1, 128), 4096, 8, "bfloat16"),
    ]
    kernels = {c.kernel for c in suite.cases}
    assert {"triton_flash", "sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"} <= kernels
    gated = {c.kernel for c in suite.cases if c.gate}
    assert gated == {"triton_flash", "gluon_flash", "cuda_flash"}
    # the minimum effect and noise floor the calibration study chose
    assert all(c.threshold.min_effect == pytest.approx(0.02) for c in suite.cases)
    assert suite.timing.margin == pytest.approx(0.005)
    assert suite.timing.rounds == 6 and suite.timing.max_rounds == 20
    assert suite.timing.load == "sustained"


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


SMALL = """\
schema_version: 1
name: s
kernels: [reference]
cases:
  - {shape: [1, 2, 64, 32]}
"""


def _load_text(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_suite(path, KNOWN)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("timing: " + "[" * 100_000 + "]" * 100_000, r"line 6: nested deeper than 16 levels"),
        ("timing: " + "{a: " * 50_000 + "1" + "}" * 50_000, r"line 6: nested deeper than"),
        ('threshold: "median:2%"\nthreshold: "median:90%"', r"line 7: duplicate key 'threshold'"),
        ("timing: {rounds: 6, rounds: 3}", r"duplicate key 'rounds'"),
        ("timing: {rounds: " + "9" * 5000 + "}", r"line 6: integer of 5000 characters"),
        ("timing: {sample_target_ms: 1.0e+999}", r"timing\.sample_target_ms: .* got inf"),
        ("timing: {alpha: .nan}", r"timing\.alpha: .* got nan"),
        ("timing: {rounds: 1000000}", r"timing\.rounds: must be an integer from 1 to 200"),
    ],
    ids=["deep-list", "deep-map", "dup-top", "dup-inline", "5000-digits", "1e999", "nan", "rounds"],
)
def test_hostile_yaml_is_refused_with_the_line_or_field(tmp_path, extra, message):
    with pytest.raises(BadInput, match=message):
        _load_text(tmp_path, SMALL + extra + "\n")


def test_yaml_aliases_are_refused_before_they_expand(tmp_path):
    # "billion laughs": nine levels of nine aliases each expand to 9**9 strings.
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    text = SMALL.replace("cases:\n  - {shape: [1, 2, 64, 32]}\n", "cases:\n  - {shape: *a8}\n")
    text += "laughs:\n" + "".join(f"  {line}\n" for line in lines)
    with pytest.raises(BadInput, match=r"aliases \(\*name\) are not allowed") as err:
        _load_text(tmp_path, text)
    assert len(str(err.value)) < 300


def test_huge_numbers_and_values_in_messages_are_cut(tmp_path):
    huge = "9" * 400
    with pytest.raises(BadInput, match=r"timing\.sample_target_ms: must be a finite") as err:
        _load_text(tmp_path, SMALL + f"timing: {{sample_target_ms: {huge}.0}}\n")
    assert len(str(err.value)) < 400
    with pytest.raises(BadInput, match=r"cases\[0\]\.name: .*cut at 200 characters") as err:
        _load_text(tmp_path, SMALL.replace("32]}", "32], name: '" + "a/" * 5000 + "'}"))
    assert len(str(err.value)) < 400
    with pytest.raises(BadInput, match=r"line 5: integer of 400 characters"):
        _load_text(tmp_path, SMALL.replace("64, 32", f"{huge}, 32"))
    with pytest.raises(BadInput, match=r"cases\[0\]\.shape\[2\]: must be an integer from 1 to"):
        _load_text(tmp_path, SMALL.replace("64, 32", f"{huge[:30]}, 32"))


def test_oversized_suite_file_is_refused_before_parsing(tmp_path):
    with pytest.raises(BadInput, match=rf"over the {limits.MAX_SUITE_BYTES}-byte limit"):
        _load_text(tmp_path, SMALL + "#" * limits.MAX_SUITE_BYTES + "\n")


def test_timing_plan_cannot_ask_for_more_samples_than_a_file_may_hold():
    plan = {"max_rounds": 200, "samples_per_round": limits.MAX_SAMPLES_PER_CASE // 100}
    with pytest.raises(BadInput, match=r"timing\.samples_per_round: times max_rounds"):
        parse_suite(bad(timing=plan), "suite.yaml", KNOWN)


# ------------------------------------------------ module:function kernels (another project's)

MODULE = "toy_attention.ops:attention"
MODULE_SUITE = {
    "schema_version": 1,
    "name": "toy",
    "kernels": [MODULE, "reference"],
    "gate": [MODULE],
    "kernel_options": {MODULE: {"accepts_out": True, "devices": ["cuda"]}},
    "cases": [{"shape": [1, 2, 64, 32], "dtype": "float32"}],
}


def test_module_kernels_and_their_options():
    suite = parse_suite(MODULE_SUITE, "g.yaml", KNOWN)
    assert {c.id for c in suite.cases} == {
        f"{MODULE}/b1-h2-s64-d32-full-float32",
        "reference/b1-h2-s64-d32-full-float32",
    }
    assert [c.kernel for c in suite.cases if c.gate] == [MODULE]
    options = suite.kernel_options[MODULE]
    assert options.accepts_out and options.devices == ("cuda",)
    assert options.unavailable_reason("cpu") == "runs on cuda only (the suite's kernel_options)"
    assert options.unavailable_reason("cuda") is None
    assert suite.uses_registry  # "reference" is a registry name
    # A module kernel the file gives no options gets the defaults: no out=, every device.
    only = {**MODULE_SUITE, "kernels": [MODULE], "gate": [MODULE], "kernel_options": {}}
    plain = parse_suite(only, "g.yaml", set())
    assert not plain.uses_registry
    default = plain.kernel_options[MODULE]
    assert not default.accepts_out and default.devices == ("cpu", "cuda")
    with_options = parse_suite(
        {**only, "kernel_options": MODULE_SUITE["kernel_options"]}, "g", set()
    )
    # The options decide correctness (out= is poisoned): they are part of the hash.
    assert plain.hash != with_options.hash


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kernels": ["toy_attention.ops:"]}, "kernels[0]"),
        ({"kernels": ["toy-attention:attention"]}, "kernels[0]"),
        ({"kernels": ["a:b:c"]}, "kernels[0]"),
        (
            {"kernel_options": {MODULE: {"accepts_out": "yes"}}},
            f"kernel_options.{MODULE}.accepts_out",
        ),
        ({"kernel_options": {MODULE: {"devices": ["tpu"]}}}, f"kernel_options.{MODULE}.devices"),
        ({"kernel_options": {MODULE: {"devices": []}}}, f"kernel_options.{MODULE}.devices"),
        ({"kernel_options": {MODULE: {"registers": 64}}}, f"kernel_options.{MODULE}"),
        ({"kernel_options": {"other.mod:fn": {}}}, "kernel_options.other.mod:fn"),
        ({"kernel_options": {"reference": {}}}, "kernel_options.reference"),
        ({"kernel_options": [MODULE]}, "kernel_options"),
    ],
)
def test_bad_module_kernels_name_the_field(changes, field):
    with pytest.raises(BadInput) as err:
        parse_suite({**MODULE_SUITE, **changes}, "g.yaml", KNOWN)
    assert str(err.value).startswith(f"g.yaml: {field}:"), err.value


def test_a_suite_of_module_kernels_needs_no_registry(tmp_path, monkeypatch):
    """Another project's suite loads without this repository's kernels/registry.py (a
    project with no kernels/ package, and no torch in the guard's process); a registry
    name in it still needs one."""
    import sys

    monkeypatch.setitem(sys.modules, "kernels.registry", None)  # importing it now fails
    path = tmp_path / "guard.yaml"
    only = {**MODULE_SUITE, "kernels": [MODULE], "kernel_options": {}}
    path.write_text(yaml.safe_dump(only))
    suite = load_suite(path)
    assert [c.kernel for c in suite.cases] == [MODULE] and not suite.uses_registry
    path.write_text(yaml.safe_dump(MODULE_SUITE))
    with pytest.raises(ImportError):
        load_suite(path)


def test_an_unknown_top_level_field_is_still_refused(tmp_path):
    path = tmp_path / "guard.yaml"
    path.write_text(yaml.safe_dump({**MODULE_SUITE, "kernel_option": {}}))
    with pytest.raises(
        BadInput, match=r"guard\.yaml: top level: unknown field\(s\).*kernel_option"
    ):
        load_suite(path, KNOWN)
