"""The Gluon launch plan keeps encoded TMA descriptors per address (no GPU needed).

The plan calls the compiled kernel's raw C launcher, which it digs out of triton 3.6's
``wrap_handle_tensordesc`` closure: these tests build that closure with triton's own
function, so a triton whose launcher no longer looks like this fails here, not on a
runner. The descriptor encoder is replaced by a recorder (encoding needs a driver).
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

pytest.importorskip("triton.experimental.gluon.language.nvidia.hopper")
driver = pytest.importorskip("triton.backends.nvidia.driver")

from kernels import gluon_flash_fwd as gf  # noqa: E402

_SIGNATURE = {i: "tensordesc<fp16[1, 1, 64, 64]>" for i in range(4)} | {
    4: "fp32",
    5: "i32",
    6: "i32",
}
_META = [{"swizzle": 3, "elem_size": 2, "elem_type": 6, "block_size": [1, 1, 64, 64],
          "fp4_padded": False} for _ in range(4)]  # fmt: skip


def _launcher(meta: Any = _META, scratch: int = 0) -> types.SimpleNamespace:
    calls: list[tuple[object, ...]] = []

    def raw(*args: object) -> None:
        calls.append(args)

    return types.SimpleNamespace(
        launch=driver.wrap_handle_tensordesc(raw, _SIGNATURE, meta),
        raw=raw,
        calls=calls,
        global_scratch_size=scratch,
        profile_scratch_size=0,
    )


def test_raw_launcher_found_in_triton_closure() -> None:
    launcher = _launcher()
    found = gf._raw_launcher(launcher)
    assert found is not None
    assert found[0] is launcher.raw


@pytest.mark.parametrize(
    "launcher",
    [_launcher(meta=None), _launcher(scratch=128), types.SimpleNamespace(launch=print)],
    ids=["no-tma-metadata", "scratch", "not-a-closure"],
)
def test_raw_launcher_refuses_what_it_cannot_bypass(launcher: Any) -> None:
    assert gf._raw_launcher(launcher) is None


def test_encoder_passes_metadata_of_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[object, ...]] = []

    def fill(ptr: int, swizzle: int, elem: int, dtype: int, block: list[int], shape: list[int],
             strides: list[int], padding: int) -> str:  # fmt: skip
        seen.append((ptr, swizzle, elem, dtype, tuple(block), tuple(shape), tuple(strides)))
        return "map"

    fake = types.SimpleNamespace(utils=types.SimpleNamespace(fill_tma_descriptor=fill))
    monkeypatch.setattr(driver.triton.runtime.driver, "_active", fake)
    found = gf._raw_launcher(_launcher())
    assert found is not None
    t = torch.randn(2, 3, 64, 64, dtype=torch.float16)
    encoded = found[1](gf._Desc(t, list(t.shape), list(t.stride())), 2)
    assert encoded == ("map", *t.shape, *t.stride())
    assert seen == [(t.data_ptr(), 3, 2, 6, (1, 1, 64, 64), tuple(t.shape), t.stride())]


def _plan(encode: Any, launch: Any, shape: tuple[int, ...]) -> gf._Plan:
    plan = gf._Plan()
    plan.launch, plan.encode = launch, encode
    plan.head = ("function", False, False, None, None, "metadata", None, None, None)
    plan.grid, plan.tail = (8, 16, 4), (0.18, 1024, 1)
    t = torch.empty(shape)
    plan.geometry = tuple((list(t.shape), list(t.stride())) for _ in range(4))
    plan.maps = ({}, {}, {}, {})
    plan.shape, plan.dtype, plan.device = t.shape, torch.float16, t.device
    plan.device_index, plan.stream = 0, lambda index: 1234
    return plan


def test_plan_encodes_each_address_once() -> None:
    encoded: list[tuple[int, int]] = []
    launched: list[tuple[object, ...]] = []

    def encode(desc: gf._Desc, slot: int) -> tuple[object, ...]:
        encoded.append((slot, desc.base.data_ptr()))
        return (f"map{slot}@{desc.base.data_ptr()}", *desc.shape)

    shape = (1, 2, 64, 64)
    plan = _plan(encode, lambda *args: launched.append(args), shape)
    q, k, v, out = (torch.randn(shape, dtype=torch.float16) for _ in range(4))
    assert plan(q, k, v, out) is out
    assert plan(q, k, v, out) is out
    assert encoded == [(slot, t.data_ptr()) for slot, t in enumerate((q, k, v, out))]
    first = launched[0]
    assert first[:4] == (8, 16, 4, 1234)
    assert first[4:13] == plan.head
    assert first[13:18] == (f"map0@{q.data_ptr()}", *shape)
    assert first[-3:] == (0.18, 1024, 1)
    assert launched[1] == first
    # A new tensor at another address is encoded; the others are reused.
    q2 = torch.randn(shape, dtype=torch.float16)
    plan(q2, k, v, out)
    assert encoded[-1] == (0, q2.data_ptr()) and len(encoded) == 5
    assert launched[-1][13] == f"map0@{q2.data_ptr()}"


def test_plan_cache_is_bounded() -> None:
    plan = _plan(lambda desc, slot: (desc.base.data_ptr(),), lambda *args: None, (1, 1, 8, 64))
    keep = [torch.randn(1, 1, 8, 64) for _ in range(gf._MAPS_PER_SLOT + 5)]
    for t in keep:
        plan(t, t, t, t)
    assert all(0 < len(m) <= gf._MAPS_PER_SLOT for m in plan.maps)
