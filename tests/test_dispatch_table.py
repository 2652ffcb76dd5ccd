"""The entry point's measured dispatch table: reading it, the nearest-point rule, and
``flash_plan.choose`` following it (pure: no GPU)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from benchmarks import dispatch_table as bench
from kernels import dispatch_table, flash_plan
from kernels.dispatch_table import DispatchTable, Point, TableError

ROOT = Path(__file__).resolve().parents[1]


def _point(**kw: Any) -> Point:
    fields: dict[str, Any] = dict(
        head_dim=128, causal=False, dtype="bfloat16", seq_q=1024, seq_k=1024,
        batch_heads=64, group=1, kernel="gluon", triton_us=10.0, gluon_us=9.0,
    )  # fmt: skip
    fields.update(kw)
    return Point(**fields)


def _table(*points: Point) -> DispatchTable:
    return DispatchTable(gpu="NVIDIA H200", source="data.jsonl", command="cmd", points=points)


def _choose(table: DispatchTable | None, **kw: Any) -> flash_plan.Choice:
    args: dict[str, Any] = dict(
        head_dim=128, causal=False, seq_q=1024, seq_k=1024, batch_heads=64, elem_size=2,
        capability=90, smem_budget=227 * 1024, tma_aligned=True, env=flash_plan.Env(),
        table=table, dtype="bfloat16",
    )  # fmt: skip
    args.update(kw)
    return flash_plan.choose(**args)


def test_the_nearest_point_decides() -> None:
    short = _point(seq_q=256, seq_k=256, kernel="triton")
    long = _point(seq_q=4096, seq_k=4096, kernel="gluon")
    table = _table(short, long)
    at = dict(head_dim=128, causal=False, dtype="bfloat16", batch_heads=64, group=1)
    assert table.kernel_for(seq_q=256, seq_k=256, **at) == "triton"
    assert table.kernel_for(seq_q=300, seq_k=300, **at) == "triton"
    assert table.kernel_for(seq_q=3000, seq_k=3000, **at) == "gluon"
    assert table.kernel_for(seq_q=65536, seq_k=65536, **at) == "gluon"
    # Another head_dim or mask: the table has nothing to say.
    assert table.kernel_for(**{**at, "head_dim": 64}, seq_q=256, seq_k=256) is None
    assert table.kernel_for(**{**at, "causal": True}, seq_q=256, seq_k=256) is None


def test_a_point_of_the_calls_dtype_is_preferred() -> None:
    table = _table(_point(dtype="float16", kernel="triton"), _point(seq_q=2048, kernel="gluon"))
    at = dict(head_dim=128, causal=False, seq_q=1024, seq_k=1024, batch_heads=64, group=1)
    assert table.kernel_for(dtype="float16", **at) == "triton"
    assert table.kernel_for(dtype="bfloat16", **at) == "gluon"


def test_every_point_of_a_grid_gets_its_own_kernel() -> None:
    rng = random.Random()
    points = []
    for shape in bench.GRID:
        b, hq, hkv, sq, sk, d, causal, dtype = shape
        points.append(
            _point(head_dim=d, causal=causal, dtype=dtype, seq_q=sq, seq_k=sk,
                   batch_heads=b * hq, group=hq // hkv, kernel=rng.choice(["triton", "gluon"]))
        )  # fmt: skip
    table = _table(*points)
    for p in points:
        got = table.kernel_for(
            head_dim=p.head_dim, causal=p.causal, dtype=p.dtype, seq_q=p.seq_q,
            seq_k=p.seq_k, batch_heads=p.batch_heads, group=p.group,
        )  # fmt: skip
        assert got == p.kernel, p


def test_choose_follows_the_table_against_the_defaults() -> None:
    # FASTER alone takes the Gluon kernel at hd 128 from 960^2; a table can say otherwise.
    assert _choose(None).kernel == "gluon"
    assert _choose(_table(_point(kernel="triton"))).kernel == "triton"
    # ...and the other way below the defaults' threshold.
    small = dict(seq_q=256, seq_k=256, batch_heads=8)
    assert _choose(None, **small).kernel == "triton"
    table = _table(_point(seq_q=256, seq_k=256, batch_heads=8, kernel="gluon"))
    assert _choose(table, **small).kernel == "gluon"
    # The switches and the Gluon kernel's limits still hold over the table.
    gluon_everywhere = _table(_point(kernel="gluon"))
    assert _choose(gluon_everywhere, env=flash_plan.Env(gluon=False)).kernel == "triton"
    assert _choose(gluon_everywhere, tma_aligned=False).kernel == "triton"
    # A table without points for this head_dim leaves the defaults.
    assert _choose(_table(_point(head_dim=64, kernel="triton"))).kernel == "gluon"
    # The Gluon kernel's variant stays the measured one for the shape.
    assert (
        _choose(gluon_everywhere).variant
        == flash_plan.faster_variant(128, False, 1024, 1024, 64)[0]
    )


def test_which_table_a_gpu_uses(tmp_path: Path) -> None:
    assert dispatch_table.table_for("NVIDIA H200", dispatch_table.OFF) is None
    assert dispatch_table.table_for("A GPU nobody measured", None) is None
    assert dispatch_table.table_for(None, None) is None
    path = tmp_path / "t.json"
    path.write_text(json.dumps(dispatch_table.to_json(_table(_point(kernel="triton")))))
    got = dispatch_table.table_for("A GPU nobody measured", str(path))
    assert got is not None and got.points[0].kernel == "triton"


def test_the_switch_reaches_the_env() -> None:
    env = flash_plan.Env.read({dispatch_table.TABLE_ENV: "off"}.get)
    assert env.table == "off"
    assert flash_plan.Env.read({}.get).table is None


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d.update(schema_version=2), "schema_version 2"),
        (lambda d: d.update(extra=1), "unknown field 'extra'"),
        (lambda d: d.update(gpu=""), "gpu must be"),
        (lambda d: d.update(points=[]), "points must be"),
        (lambda d: d["points"][0].update(kernel="cuda"), "points[0].kernel"),
        (lambda d: d["points"][0].update(dtype="float32"), "points[0].dtype"),
        (lambda d: d["points"][0].update(seq_q=0), "points[0].seq_q"),
        (lambda d: d["points"][0].update(causal=1), "points[0].causal"),
        (lambda d: d["points"][0].update(head_dim=True), "points[0].head_dim"),
        (lambda d: d["points"][0].update(speed=1), "unknown field 'speed'"),
    ],
)
def test_a_bad_table_is_refused_naming_the_field(edit: Any, named: str) -> None:
    data = dispatch_table.to_json(_table(_point()))
    edit(data)
    with pytest.raises(TableError, match=r"t\.json") as info:
        dispatch_table.parse(data, "t.json")
    assert named in str(info.value)


def test_an_unreadable_table_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(TableError, match=r"broken\.json"):
        dispatch_table.read(path)


def test_the_packaged_tables_read_and_name_their_data() -> None:
    tables = dispatch_table.packaged()
    assert tables, "kernels/dispatch/ holds at least the measured H200 table"
    assert len({t.gpu for t in tables}) == len(tables), "one table per GPU model"
    for table in tables:
        assert (ROOT / table.source).is_file(), table.source
        assert not Path(table.source).is_absolute()
        # Rebuilt from its data, the table is what is packaged.
        rebuilt = bench.build(ROOT / table.source, table.gpu, table.source, table.command)
        assert rebuilt == table
        # At each measured point the entry point chooses the kernel measured faster there.
        for p in table.points:
            choice = _choose(
                table, head_dim=p.head_dim, causal=p.causal, dtype=p.dtype, seq_q=p.seq_q,
                seq_k=p.seq_k, batch_heads=p.batch_heads,
            )  # fmt: skip
            assert choice.kernel == p.kernel or choice.path == flash_plan.SPLIT_KV, p


def _rows(shape: list[Any], **arms: list[float]) -> list[dict[str, Any]]:
    return [
        {"shape": shape, "arm": arm, "us_rounds": us, "us_med": sorted(us)[len(us) // 2],
         "gpu": "NVIDIA H200"}
        for arm, us in arms.items()
    ]  # fmt: skip


def test_build_takes_the_faster_kernel(tmp_path: Path) -> None:
    a = [2, 16, 16, 1024, 1024, 128, False, "bfloat16"]
    b = [2, 16, 16, 4096, 4096, 64, True, "float16"]
    c = [1, 8, 8, 64, 64, 128, False, "bfloat16"]
    rows = _rows(a, triton_flash=[10.0, 11.0], gluon_flash=[9.0, 9.5])
    rows += _rows(b, triton_flash=[20.0, 20.5], gluon_flash=[21.0, 22.0])
    rows += [{"shape": c, "arm": "gluon_flash", "refused": "no", "gpu": "NVIDIA H200"}]
    rows += _rows(c, triton_flash=[3.0, 3.1])
    data = tmp_path / "grid.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = bench.build(data, "NVIDIA H200", "grid.jsonl", "cmd")
    assert [p.kernel for p in table.points] == ["gluon", "triton", "triton"]
    assert table.points[1].group == 1 and table.points[1].batch_heads == 32
    assert table.points[2].gluon_us == -1.0


def test_check_flags_an_entry_slower_than_its_fastest_kernel(tmp_path: Path) -> None:
    a = [2, 16, 16, 1024, 1024, 128, False, "bfloat16"]
    b = [2, 16, 16, 2048, 2048, 128, False, "bfloat16"]
    rows = _rows(a, flash_attention=[10.0, 10.1, 10.0], triton_flash=[12.0] * 3,
                 gluon_flash=[10.0, 10.0, 10.1])  # fmt: skip
    rows += _rows(b, flash_attention=[13.0, 13.2, 13.1], triton_flash=[12.0] * 3,
                  gluon_flash=[15.0] * 3)  # fmt: skip
    data = tmp_path / "check.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines, over = bench.check(data, 0.02)
    assert over == 1
    assert "**" in lines[-1] and "**" not in lines[-2]


def test_build_refuses_mixed_runs(tmp_path: Path) -> None:
    a = [2, 16, 16, 1024, 1024, 128, False, "bfloat16"]
    data = tmp_path / "grid.jsonl"
    rows = _rows(a, triton_flash=[10.0, 11.0], gluon_flash=[9.0, 9.5])
    other = [{**r, "gpu": "NVIDIA H100 80GB HBM3"} for r in _rows(a, triton_flash=[8.0, 8.0])]
    for extra, named in ((other, "NVIDIA H100"), (rows[:1], "measured twice")):
        data.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
        with pytest.raises(ValueError, match=named):
            bench.build(data, "NVIDIA H200", "grid.jsonl", "cmd")
    assert bench.main(["build", str(data), "--gpu", "NVIDIA H200", "--source", "g",
                       "--out", str(tmp_path / "t.json")]) == 2  # fmt: skip
    assert not (tmp_path / "t.json").exists()
