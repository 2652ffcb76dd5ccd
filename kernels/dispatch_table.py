"""The entry point's measured choice of kernel: a table of grid shapes, each with the kernel
that was fastest there on one GPU model, read by ``kernels.flash_plan.choose``.

A table is a JSON file in ``kernels/dispatch/`` written by
``benchmarks/dispatch_table.py build`` from a grid measured on that GPU (its data file
and command are named in the table). A call takes the kernel of the nearest measured
shape with the same head_dim and causal mask (``DispatchTable.kernel_for``): the
distance adds the differences of log2(seq_q * seq_k), log2(CTA tiles) and, at half
weight, log2(query heads per KV head) and log2(seq_q / seq_k); a point of the call's
dtype is preferred. At a measured shape the call gets the kernel measured fastest there;
between two shapes it gets the nearer one's, which at a crossover is within noise of
the other (both kernels take about the same time where the winner changes).

On a GPU model without a table (its name is not one of the tables'), the measured
defaults in ``flash_plan`` (``FASTER``, ``FASTER_FROM``) stand. ``ATTN_DISPATCH_TABLE``
names another table file to use, or ``off`` for the measured defaults everywhere.

Pure: reading a table is the only I/O here; nothing queries a device.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1
TABLE_DIR = Path(__file__).resolve().parent / "dispatch"
TABLE_ENV = "ATTN_DISPATCH_TABLE"  # a table file's path, or "off"
OFF = "off"
KERNELS = ("triton", "gluon")
DTYPES = ("float16", "bfloat16")
TableKernel = Literal["triton", "gluon"]


class TableError(ValueError):
    """A table file that cannot be read (the message names the file and the field)."""


@dataclass(frozen=True)
class Point:
    """One measured grid shape and the kernel that was fastest there."""

    head_dim: int
    causal: bool
    dtype: str
    seq_q: int
    seq_k: int
    batch_heads: int  # batch x query heads
    group: int  # query heads per KV head (1: no GQA)
    kernel: TableKernel
    triton_us: float
    gluon_us: float  # -1: the Gluon kernel cannot run here

    def features(self) -> tuple[float, float, float, float]:
        return features(self.seq_q, self.seq_k, self.batch_heads, self.group)


@dataclass(frozen=True)
class DispatchTable:
    """The measured points of one GPU model, and where they came from."""

    gpu: str  # torch.cuda.get_device_name(), e.g. "NVIDIA H200"
    source: str  # the data file the table was built from (repository path)
    command: str  # what measured it
    points: tuple[Point, ...]

    def kernel_for(
        self,
        *,
        head_dim: int,
        causal: bool,
        dtype: str,
        seq_q: int,
        seq_k: int,
        batch_heads: int,
        group: int,
    ) -> TableKernel | None:
        """The kernel of the nearest point with this head_dim and mask (one of this dtype
        where there is one), or None where the table has no such point."""
        same = [p for p in self.points if p.head_dim == head_dim and p.causal == causal]
        same = [p for p in same if p.dtype == dtype] or same
        if not same:
            return None
        at = features(seq_q, seq_k, batch_heads, group)
        # min() keeps the first of equal distances: the table's order decides ties.
        best = min(same, key=lambda p: _distance(at, p.features()))
        return best.kernel


ROWS_PER_TILE = 128  # query rows of one CTA tile (flash_plan.ROWS_PER_TILE)
WEIGHTS = (1.0, 1.0, 0.5, 0.5)  # product, tiles, group, aspect


def features(
    seq_q: int, seq_k: int, batch_heads: int, group: int
) -> tuple[float, float, float, float]:
    """Where a call lies in the table's space: log2 of seq_q * seq_k, of the CTA tiles
    (batch x heads x row blocks), of the GQA group and of seq_q / seq_k."""
    tiles = batch_heads * -(-seq_q // ROWS_PER_TILE)
    return (
        math.log2(max(1, seq_q * seq_k)),
        math.log2(max(1, tiles)),
        math.log2(max(1, group)),
        math.log2(max(1, seq_q) / max(1, seq_k)),
    )


def _distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum(w * abs(x - y) for w, x, y in zip(WEIGHTS, a, b, strict=True))


_POINT_FIELDS = {
    "head_dim": int, "causal": bool, "dtype": str, "seq_q": int, "seq_k": int,
    "batch_heads": int, "group": int, "kernel": str, "triton_us": float, "gluon_us": float,
}  # fmt: skip


def _point(raw: Any, where: str) -> Point:
    if not isinstance(raw, dict):
        raise TableError(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - set(_POINT_FIELDS))
    if unknown:
        raise TableError(f"{where}: unknown field {unknown[0]!r}")
    values: dict[str, Any] = {}
    for name, kind in _POINT_FIELDS.items():
        value = raw.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if not ok:
            raise TableError(f"{where}.{name}: must be {kind.__name__}, got {value!r}")
        values[name] = value
    if values["kernel"] not in KERNELS:
        raise TableError(f"{where}.kernel: must be one of {KERNELS}, got {values['kernel']!r}")
    if values["dtype"] not in DTYPES:
        raise TableError(f"{where}.dtype: must be one of {DTYPES}, got {values['dtype']!r}")
    for name in ("head_dim", "seq_q", "seq_k", "batch_heads", "group"):
        if values[name] < 1:
            raise TableError(f"{where}.{name}: must be >= 1, got {values[name]}")
    return Point(**values)


def parse(data: Any, source: str) -> DispatchTable:
    """A table from its JSON form; TableError naming ``source`` and the field at fault."""
    if not isinstance(data, dict):
        raise TableError(f"{source}: must be a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TableError(
            f"{source}: schema_version {version!r} is not one this reader knows ({SCHEMA_VERSION})"
        )
    unknown = sorted(set(data) - {"schema_version", "gpu", "source", "command", "points"})
    if unknown:
        raise TableError(f"{source}: unknown field {unknown[0]!r}")
    for name in ("gpu", "source", "command"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise TableError(f"{source}: {name} must be a non-empty string")
    points = data.get("points")
    if not isinstance(points, list) or not points:
        raise TableError(f"{source}: points must be a non-empty list")
    return DispatchTable(
        gpu=data["gpu"],
        source=data["source"],
        command=data["command"],
        points=tuple(_point(p, f"{source}: points[{i}]") for i, p in enumerate(points)),
    )


def to_json(table: DispatchTable) -> dict[str, Any]:
    """The JSON form ``parse`` reads."""
    return {
        "schema_version": SCHEMA_VERSION,
        "gpu": table.gpu,
        "source": table.source,
        "command": table.command,
        "points": [{name: getattr(p, name) for name in _POINT_FIELDS} for p in table.points],
    }


def read(path: Path) -> DispatchTable:
    """The table in ``path`` (TableError naming the file when it cannot be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: {exc}") from exc
    return parse(data, str(path))


@functools.cache
def packaged() -> tuple[DispatchTable, ...]:
    """The tables in ``kernels/dispatch/``, one per GPU model."""
    return tuple(read(path) for path in sorted(TABLE_DIR.glob("*.json")))


@functools.cache
def _from_file(path: str) -> DispatchTable:
    return read(Path(path))


def table_for(gpu: str | None, setting: str | None) -> DispatchTable | None:
    """The table a call on ``gpu`` uses: ``setting`` (ATTN_DISPATCH_TABLE) names a file
    or ``off``; unset, the packaged table of this GPU model, or None (the defaults)."""
    if setting == OFF:
        return None
    if setting:
        return _from_file(setting)
    if gpu is None:
        return None
    return next((t for t in packaged() if t.gpu == gpu), None)
