"""Older results files brought to the current format as they are read.

``MIGRATIONS[n]`` turns a version n-1 ``guard`` record into version n; ``to_current``
runs them in order up to the version this guard writes (``results.SCHEMA_VERSION``,
where the versions are listed) and refuses a newer file or an invalid version, naming
the file and the field. A migration works on the raw record before it is validated, so
it leaves alone what it does not recognize for the reader to name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guard.store.fields import Reader
from guard.store.pytest_benchmark import PYTEST_KERNEL, unfold_v2_name


def migrate_to_2(record: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had no fingerprints or resources: every case reads as unknown."""
    for case in record.get("cases", []) if isinstance(record.get("cases"), list) else []:
        if isinstance(case, dict):
            case.setdefault("fingerprint", "")
            case.setdefault("resources", [])
    return record


def migrate_to_3(record: dict[str, Any]) -> dict[str, Any]:
    """Version 2 named a pytest case by its node id with "/" and "\\" as "|": the path's
    "/" come back (``unfold_v2_name``); the rest pairs by ``pairing_key``."""
    for case in record.get("cases", []) if isinstance(record.get("cases"), list) else []:
        data = case.get("case") if isinstance(case, dict) else None
        if (
            isinstance(data, dict)
            and data.get("kernel") == PYTEST_KERNEL
            and isinstance(data.get("name"), str)
        ):
            data["name"] = unfold_v2_name(data["name"])
            if isinstance(case.get("id"), str):
                case["id"] = f"{PYTEST_KERNEL}/{data['name']}"
    return record


# Migrations: MIGRATIONS[n] turns a version n-1 "guard" record into version n.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    2: migrate_to_2,
    3: migrate_to_3,
}


def to_current(reader: Reader, record: dict[str, Any], current: int) -> dict[str, Any]:
    """The ``guard`` record ``record`` at version ``current`` (its ``schema_version``
    set to it), through ``MIGRATIONS`` from its own version."""
    version = reader.get(record, "schema_version", "guard", int)
    if version > current:
        raise reader.fail(
            "guard.schema_version",
            f"version {version} is newer than this guard understands ({current}); "
            "upgrade the guard",
        )
    if version < 1:
        raise reader.fail("guard.schema_version", f"invalid version {version}")
    while version < current:
        version += 1
        record = MIGRATIONS[version](record)
        record["schema_version"] = version
    return record
