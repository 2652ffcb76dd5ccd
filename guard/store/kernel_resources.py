"""A compiler-resource record: what the compiler made of one kernel for one arch, as
launched for one case (``KernelResources``), validated from JSON. Results files carry
these records per case (``results``); ``guard.measure.resources`` collects them and
lists what changed between two trees."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from guard.base.errors import BadInput, shown

_ARCH = re.compile(r"sm_\d+a?")

ConfigValue = int | str


# ------------------------------------------------------------------------ validation


def _where(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


MAX_COUNT = 1 << 53  # registers, bytes, grid sizes: exact as a float beyond any GPU's


def _int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        raise BadInput(f"{where}: must be an integer from {minimum} to 2**53, got {shown(value)}")
    return value


def _str(value: Any, where: str, *, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        kind = "a" if empty else "a non-empty"
        raise BadInput(f"{where}: must be {kind} string, got {shown(value)}")
    return value


def _arch(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _ARCH.fullmatch(value):
        raise BadInput(f"{where}: must be an arch like 'sm_90', got {shown(value)}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BadInput(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


# ------------------------------------------------------------------------ data


@dataclass(frozen=True)
class KernelResources:
    """What the compiler made of one kernel for one arch, as launched for one case.

    ``registers`` per thread; spills and stack in bytes per thread; ``shared_bytes``
    per block (static + dynamic); ``num_warps`` as compiled (under warp specialization,
    all warp groups); ``grid`` the launch grid; ``config`` what the launcher chose
    (tile sizes, where the choice came from); ``path`` the code path ("pointer",
    "tma_ws", "mma_sync"); ``toolchain`` the compilers that produced it.
    """

    arch: str
    kernel: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    num_warps: int
    num_stages: int
    grid: tuple[int, ...]
    config: Mapping[str, ConfigValue] = field(default_factory=dict)
    path: str = ""
    stack_bytes: int = 0
    toolchain: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.arch, self.kernel)

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "kernel": self.kernel,
            "registers": self.registers,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "stack_bytes": self.stack_bytes,
            "shared_bytes": self.shared_bytes,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "grid": list(self.grid),
            "config": dict(self.config),
            "path": self.path,
            "toolchain": self.toolchain,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "resources") -> KernelResources:
        """Validate and build; BadInput naming the field (``where.field``) at fault."""
        data = _mapping(data, where or "resources")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadInput(f"{_where(where, unknown[0])}: unknown field")
        required = ("arch", "kernel", "registers", "spill_store_bytes", "spill_load_bytes",
                    "shared_bytes", "num_warps", "num_stages", "grid")  # fmt: skip
        for name in required:
            if name not in data:
                raise BadInput(f"{_where(where, name)}: missing")
        grid = data["grid"]
        if not isinstance(grid, (list, tuple)) or not 1 <= len(grid) <= 3:
            raise BadInput(f"{_where(where, 'grid')}: must be a list of 1 to 3 integers")
        config = _mapping(data.get("config", {}), _where(where, "config"))
        checked: dict[str, ConfigValue] = {}
        for key, value in config.items():
            at = _where(where, f"config.{key}")
            _str(key, at, empty=False)
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise BadInput(f"{at}: must be an integer or a string, got {shown(value)}")
            checked[key] = value
        return cls(
            arch=_arch(data["arch"], _where(where, "arch")),
            kernel=_str(data["kernel"], _where(where, "kernel"), empty=False),
            registers=_int(data["registers"], _where(where, "registers")),
            spill_store_bytes=_int(data["spill_store_bytes"], _where(where, "spill_store_bytes")),
            spill_load_bytes=_int(data["spill_load_bytes"], _where(where, "spill_load_bytes")),
            shared_bytes=_int(data["shared_bytes"], _where(where, "shared_bytes")),
            num_warps=_int(data["num_warps"], _where(where, "num_warps"), minimum=1),
            num_stages=_int(data["num_stages"], _where(where, "num_stages")),
            grid=tuple(_int(n, _where(where, f"grid[{i}]")) for i, n in enumerate(grid)),
            config=checked,
            path=_str(data.get("path", ""), _where(where, "path")),
            stack_bytes=_int(data.get("stack_bytes", 0), _where(where, "stack_bytes")),
            toolchain=_str(data.get("toolchain", ""), _where(where, "toolchain")),
        )
