"""The FlashAttention path chooser (kernels/flash_plan.py) and the names that run each path.

Pure: no GPU, no interpreter, no compile. ``choose`` answers from the workload, the GPU's
capability and shared memory, the tensors' TMA alignment and the switches.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kernels import flash_plan, registry
from kernels.flash_plan import Env

ROOT = Path(__file__).resolve().parent.parent
SM90_SMEM = 232448
COMPILED = Env()  # the defaults: a GPU, no switch set

# The suite's seven shapes (suites/default.yaml): (seq, head_dim, causal).
SUITE = [
    (128, 64, False),
    (512, 64, False),
    (512, 64, True),
    (1024, 64, False),
    (1024, 64, True),
    (2048, 128, False),
    (2048, 128, True),
]


def choose(
    seq: int,
    head_dim: int,
    causal: bool,
    *,
    kernel: flash_plan.Kernel = "auto",
    capability: int | None = 90,
    env: Env = COMPILED,
    seq_k: int | None = None,
    batch_heads: int = 8,
    aligned: bool = True,
    smem: int = SM90_SMEM,
) -> flash_plan.Choice:
    return flash_plan.choose(
        head_dim=head_dim, causal=causal, seq_q=seq, seq_k=seq if seq_k is None else seq_k,
        batch_heads=batch_heads, elem_size=2, capability=capability, smem_budget=smem,
        tma_aligned=aligned, env=env,
        kernel=kernel,
    )  # fmt: skip


# On an H100: what each name runs on each suite shape.
SM90_AUTO = {
    (128, 64, False): "pointer",
    (512, 64, False): "pointer",
    (512, 64, True): "pointer",
    (1024, 64, False): "gluon-simple",
    (1024, 64, True): "gluon-simple-overlap",
    (2048, 128, False): "gluon-ws-persistent",
    (2048, 128, True): "gluon-ws-persistent",
}
SM90_TRITON = {shape: "pointer" for shape in SUITE}  # tma_ws only with ATTN_TRITON_WS=1
SM90_GLUON = {
    (seq, hd, causal): f"gluon-{flash_plan.FASTER[(hd, causal)][1]}" for seq, hd, causal in SUITE
}


@pytest.mark.parametrize(("seq", "head_dim", "causal"), SUITE)
@pytest.mark.parametrize(
    ("kernel", "expected"),
    [("auto", SM90_AUTO), ("triton", SM90_TRITON), ("gluon", SM90_GLUON)],
    ids=["auto", "triton", "gluon"],
)
def test_suite_shapes_on_sm90(kernel, expected, seq, head_dim, causal):
    choice = choose(seq, head_dim, causal, kernel=kernel)
    assert choice.label == expected[(seq, head_dim, causal)]
    assert choice.kernel == ("gluon" if choice.label.startswith("gluon") else "triton")


@pytest.mark.parametrize(
    ("seq", "seq_k", "batch_heads", "head_dim", "causal", "expected"),
    [
        # FASTER_FROM's tiers take over from their product and tile count up, both by name
        # and by dispatch (tiles: batch_heads x seq / 128).
        (2048, 2048, 16, 64, False, "gluon-ws-persistent-pingpong"),  # 256 tiles
        (1024, 4096, 32, 64, False, "gluon-ws-persistent-pingpong"),
        (2048, 2048, 15, 64, False, "gluon-simple"),  # 240 tiles
        (1024, 1024, 16, 64, False, "gluon-simple"),  # 128 tiles
        (1024, 1024, 32, 64, False, "gluon-ws-persistent-pingpong"),
        (4096, 4096, 64, 128, True, "gluon-ws-persistent"),
        (8192, 8192, 1, 128, True, "gluon-ws"),
        (16384, 16384, 64, 128, True, "gluon-ws"),
        (16384, 16384, 64, 128, False, "gluon-ws-persistent"),
        (16384, 16384, 64, 64, True, "gluon-simple-overlap"),
    ],
)
@pytest.mark.parametrize("kernel", ["auto", "gluon"])
def test_larger_workloads_take_faster_froms_variant(
    kernel, seq, seq_k, batch_heads, head_dim, causal, expected
):
    choice = choose(seq, head_dim, causal, kernel=kernel, seq_k=seq_k, batch_heads=batch_heads)
    assert choice.label == expected
    variant, overrides = flash_plan.faster_variant(head_dim, causal, seq, seq_k, batch_heads)
    assert choice == flash_plan.gluon_choice(head_dim, causal, variant, overrides)


@pytest.mark.parametrize(
    ("seq", "seq_k", "batch_heads", "split"),
    [
        (4096, 4096, 128, True),  # (4,32,32,4096,128): 4096 tiles
        (16384, 16384, 16, True),  # 2048 tiles
        (4096, 4096, 31, False),  # 992 tiles
        (2048, 2048, 64, False),  # below 4096^2
        (8192, 2048, 16, True),  # the product counts, not seq_q alone
    ],
)
def test_hd128_full_ends_on_key_runs_from_4096_squared(seq, seq_k, batch_heads, split):
    choice = choose(seq, 128, False, kernel="auto", seq_k=seq_k, batch_heads=batch_heads)
    assert choice.label == "gluon-ws-persistent"
    assert dict(choice.overrides).get("SPLIT_KEYS", 0) == int(split)
    assert dict(choice.gluon_config)["SPLIT_KEYS"] == int(split)


@pytest.mark.parametrize(
    ("seq", "batch_heads", "expected"),
    [
        (512, 256, "gluon-ws-persistent-pingpong"),  # (16,16,512,64): 1024 tiles
        (256, 512, "gluon-ws-persistent-pingpong"),  # the tier's smallest product
        (255, 512, "pointer"),
        (512, 63, "pointer"),  # 252 tiles: below 1024^2 the Triton kernel again
    ],
)
def test_many_tiles_bring_the_entry_point_below_faster_s_product(seq, batch_heads, expected):
    # Head_dim 64 non-causal: FASTER's plain kernel starts at 1024^2, the persistent tier
    # at 256^2 where there are enough tiles; the Gluon name takes the tier's variant
    # wherever it applies, else FASTER's.
    assert choose(seq, 64, False, kernel="auto", batch_heads=batch_heads).label == expected
    by_name = choose(seq, 64, False, kernel="gluon", batch_heads=batch_heads).label
    assert by_name == (expected if expected.startswith("gluon") else "gluon-simple")


@pytest.mark.parametrize(
    ("seq", "batch_heads", "expected"),
    [
        (512, 64, "gluon-simple-overlap"),  # (4,16,512,64): 256 tiles
        (256, 128, "gluon-simple-overlap"),  # the tier's smallest product
        (255, 128, "pointer"),
        (512, 8, "pointer"),  # (1,8,512,64): 32 tiles, a tie measured: the Triton kernel
    ],
)
def test_hd64_causal_takes_the_one_warpgroup_kernel_from_256_tiles(seq, batch_heads, expected):
    choice = choose(seq, 64, True, kernel="auto", batch_heads=batch_heads)
    assert choice.label == expected
    if expected.startswith("gluon"):
        assert dict(choice.gluon_config)["BLOCK_N"] == 64


def test_a_smaller_product_keeps_faster_s_variant_by_name():
    # Below FASTER's product the entry point keeps Triton; the gluon name runs FASTER's.
    assert choose(128, 64, False, kernel="auto").label == "pointer"
    assert choose(128, 64, False, kernel="gluon").label == "gluon-simple"
    assert choose(512, 128, True, kernel="gluon").label == "gluon-ws-persistent"


@pytest.mark.parametrize(("seq", "head_dim", "causal"), SUITE)
@pytest.mark.parametrize("capability", [80, 89, 86, 100, 120])
@pytest.mark.parametrize("kernel", ["auto", "triton"])
def test_off_sm90_only_the_pointer_path(kernel, capability, seq, head_dim, causal):
    choice = choose(seq, head_dim, causal, kernel=kernel, capability=capability, smem=101376)
    assert choice.path == flash_plan.POINTER and choice.kernel == "triton"
    assert choice.config is not None
    assert flash_plan.smem_bytes(choice.config, head_dim) <= 101376


@pytest.mark.parametrize("capability", [None, 80, 89, 100])
def test_gluon_name_is_sm90_only(capability):
    with pytest.raises(flash_plan.Unsupported, match="sm_90"):
        choose(2048, 128, False, kernel="gluon", capability=capability)


@pytest.mark.parametrize(
    ("head_dim", "change", "match"),
    [
        (32, {}, "head_dim"),
        (256, {}, "head_dim"),
        (64, {"aligned": False}, "aligned"),
        (64, {"seq_k": 0}, "seq_k >= 1"),
    ],
)
def test_gluon_name_refuses_what_it_cannot_take(head_dim, change, match):
    with pytest.raises(flash_plan.Unsupported, match=match):
        choose(1024, head_dim, False, kernel="gluon", **change)
    # The entry point takes the Triton kernel there instead.
    assert choose(1024, head_dim, False, **change).kernel == "triton"


@pytest.mark.parametrize(("seq", "head_dim", "causal"), SUITE)
def test_gluon_off_switch_keeps_the_entry_point_on_triton(seq, head_dim, causal):
    off = dataclasses.replace(COMPILED, gluon=False)
    assert choose(seq, head_dim, causal, env=off) == choose(seq, head_dim, causal, kernel="triton")
    # ATTN_GLUON is the entry point's switch only: the gluon_flash name ignores it.
    assert choose(seq, head_dim, causal, kernel="gluon", env=off).kernel == "gluon"


def test_ws_switch_and_rules():
    on = dataclasses.replace(COMPILED, triton_ws=True)
    assert choose(2048, 128, False, kernel="triton", env=on).path == flash_plan.TMA_WS
    # Off by default: wrong while other processes share the GPU (flash_plan.WS_ENV).
    assert choose(2048, 128, False, kernel="triton").path == flash_plan.POINTER
    for change in (
        {"seq_k": flash_plan.WS_MIN_SEQ_K - 128},  # too few keys
        {"seq_k": 2049},  # not a multiple of the tile
        {"aligned": False},
        {"capability": 80, "smem": 166912},
    ):
        assert choose(2048, 128, False, kernel="triton", env=on, **change).path == "pointer"
    assert choose(2048, 128, True, kernel="triton").path == flash_plan.POINTER  # causal
    assert choose(4096, 64, False, kernel="triton").path == flash_plan.POINTER  # hd 64


def test_faster_thresholds_are_products_of_lengths():
    # hd 128 from 960 x 960 keys x queries, in either shape, at any count of tiles.
    for causal in (False, True):
        assert choose(960, 128, causal, seq_k=960).kernel == "gluon"
        assert choose(480, 128, causal, seq_k=1920).kernel == "gluon"
        assert choose(1023, 128, causal).kernel == "gluon"  # no cliff at 1024
        assert choose(960, 128, causal, seq_k=959).kernel == "triton"


def test_hd128_tier_from_512_squared_with_many_tiles():
    # 64 (batch, head) pairs of 4 row blocks: 256 tiles, the Gluon kernel from 512^2;
    # 16 pairs (64 tiles): the Triton kernel until 960^2.
    for causal in (False, True):
        many = choose(512, 128, causal, batch_heads=64)
        assert (many.kernel, many.variant) == ("gluon", "ws-persistent")
        assert choose(512, 128, causal, batch_heads=16).kernel == "triton"
        assert choose(511, 128, causal, batch_heads=64).kernel == "triton"


def test_switches_that_override_the_gpu():
    interp = dataclasses.replace(COMPILED, interpret=True)
    for kernel in ("auto", "triton"):
        choice = choose(2048, 128, False, kernel=kernel, env=interp, capability=None)
        assert choice.path == flash_plan.INTERPRET
        assert choice.config is flash_plan.INTERPRET_CONFIG
    tune = dataclasses.replace(COMPILED, autotune=True)
    choice = choose(2048, 128, False, env=tune)
    assert choice.path == flash_plan.AUTOTUNE and choice.config is None
    # The gluon_flash name is the Gluon kernel whatever the Triton switches say.
    assert choose(2048, 128, False, kernel="gluon", env=tune).kernel == "gluon"
    with pytest.raises(flash_plan.Unsupported, match="CUDA GPU"):
        choose(128, 64, False, capability=None)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, Env(gluon=True, triton_ws=False, autotune=False, interpret=False)),
        ({"ATTN_GLUON": "0"}, Env(gluon=False)),
        ({"ATTN_GLUON": "1", "ATTN_TRITON_WS": "0"}, Env(triton_ws=False)),
        ({"ATTN_TRITON_WS": "1"}, Env(triton_ws=True)),
        ({"ATTN_TRITON_AUTOTUNE": "1"}, Env(autotune=True)),
        ({"ATTN_TRITON_AUTOTUNE": "yes"}, Env()),
        ({"TRITON_INTERPRET": "1"}, Env(interpret=True)),
    ],
)
def test_env_read(environ, expected):
    assert Env.read(environ.get) == expected


def test_gluon_choice_carries_the_config_the_kernel_launches_with():
    choice = choose(1024, 64, True, kernel="gluon")
    assert (choice.variant, choice.overrides) == ("simple-overlap", (("BLOCK_N", 64),))
    assert dict(choice.gluon_config) == flash_plan.gluon_config(64, True, "simple-overlap",
                                                                BLOCK_N=64)  # fmt: skip
    # An explicit persistent variant on a causal call runs as asked, with its config.
    explicit = flash_plan.gluon_choice(128, True, "ws-persistent", {})
    assert explicit.variant == "ws-persistent"
    assert dict(explicit.gluon_config) == flash_plan.gluon_config(128, True, "ws-persistent")
    assert dict(explicit.gluon_config)["STAGES"] == 2
    with pytest.raises(ValueError, match="variant"):
        flash_plan.gluon_choice(128, False, "fast", {})


# ----------------------------------------------------------------------------------------
# The registry's names
# ----------------------------------------------------------------------------------------


def test_each_flash_name_loads_its_own_module():
    loads = {
        "triton_flash": ("kernels.triton_flash", "flash_attention_fwd"),
        "flash_attention": ("kernels.flash_attention", "flash_attention_fwd"),
    }
    for name, (module, attr) in loads.items():
        assert registry.get(name).loader() is getattr(importlib.import_module(module), attr)
    spec = registry.get("gluon_flash")
    assert spec.accepts_out and spec.resources is not None
    # Each name's source hash covers its own kernel file, not the other kernel's.
    assert "gluon_flash_fwd.py" not in registry.get("triton_flash").source_files
    assert "triton_flash.py" not in spec.source_files
    assert {"triton_flash.py", "gluon_flash_fwd.py"} <= set(
        registry.get("flash_attention").source_files
    )
    for name in ("triton_flash", "gluon_flash", "flash_attention"):
        for f in registry.get(name).source_files:
            path = ROOT / "kernels" / f
            assert path.is_file() or any(path.glob("*.json")), path
    # The measured dispatch tables change what the entry point runs, and only that.
    assert "dispatch" in registry.get("flash_attention").source_files
    assert "dispatch" not in registry.get("triton_flash").source_files


def test_gluon_flash_unavailable_off_a_gpu():
    reason = registry.get("gluon_flash").probe("cpu")
    assert reason == "needs a CUDA GPU"


def test_gluon_flash_unavailable_off_sm90(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
    reason = registry.get("gluon_flash").probe("cuda")
    assert reason is not None and "sm_90" in reason and "sm_80" in reason


def test_the_suite_gates_each_kernel_by_its_own_name():
    # Read as plain YAML (the guard's loader validates it: tests/test_suite.py): every
    # kernel under `kernels` runs on every case, with the suite's one threshold.
    import yaml

    suite = yaml.safe_load((ROOT / "suites" / "default.yaml").read_text())
    assert set(suite["gate"]) == {"triton_flash", "gluon_flash", "cuda_flash"}
    assert set(suite["gate"]) <= set(suite["kernels"])
    assert "flash_attention" in suite["kernels"]  # measured, a control
    assert len(suite["cases"]) == 9  # 7 prefill shapes, 2 decode steps
    assert not any("kernels" in case or "threshold" in case for case in suite["cases"])
    assert all(name in registry.REGISTRY for name in suite["kernels"])


def test_kernel_modules_import_no_circle():
    # Each kernel module imports on its own, without the entry point or the other kernel.
    code = (
        "import sys; import kernels.triton_flash as t; "
        "assert 'kernels.flash_attention' not in sys.modules, 'entry'; "
        "assert 'kernels.gluon_flash_fwd' not in sys.modules, 'gluon'; "
        "import kernels.gluon_flash_fwd; "
        "assert 'kernels.flash_attention' not in sys.modules, 'entry'"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
        timeout=300, check=False,
    )  # fmt: skip
    if "No module named 'triton.experimental.gluon" in proc.stderr:
        pytest.skip("this triton has no Gluon")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_entry_points_former_module_is_an_alias():
    pytest.importorskip("triton")
    from kernels import flash_attention, triton_flash_fwd

    assert triton_flash_fwd.flash_attention_fwd is flash_attention.flash_attention_fwd
    spec = registry.get("flash_attention")
    assert spec.loader() is flash_attention.flash_attention_fwd
    assert {"flash_attention.py", "triton_flash_fwd.py"} <= set(spec.source_files)
