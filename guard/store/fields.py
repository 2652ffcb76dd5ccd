"""Reading the guard's JSON inputs strictly (results, baselines, pytest-benchmark files):
typed field access (``Reader``), numbers that a float can hold (``check_numbers``), and
the errors of reading a file (``reading``). Every failure is a ``BadInput`` that names
the file and, where there is one, the field.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from guard.base import files, limits
from guard.base.errors import BadInput, cut, shown


class Reader:
    """Typed field access that names the file and field on failure."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.samples = 0  # read so far, against MAX_SAMPLES_PER_FILE

    def fail(self, where: str, msg: str) -> BadInput:
        return BadInput(f"{self.source}: {where}: {msg}")

    def get(
        self, data: Any, key: str, where: str, kind: type | tuple[type, ...], default: Any = ...
    ) -> Any:
        if not isinstance(data, dict):
            raise self.fail(where, "must be an object")
        if key not in data:
            if default is ...:
                raise self.fail(f"{where}.{key}" if where else key, "missing")
            return default
        value = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(f"{where}.{key}" if where else key, f"must be {kinds[0].__name__}")
        if not isinstance(value, kinds):
            raise self.fail(
                f"{where}.{key}" if where else key,
                f"must be {' or '.join(k.__name__ for k in kinds)}, got {type(value).__name__}",
            )
        return value

    def times(self, value: Any, where: str) -> tuple[float, ...]:
        """Per-call seconds, each in [MIN_TIME_S, MAX_TIME_S]: outside that range a
        time is no measurement, and inside it every ratio and sum stays finite."""
        if not isinstance(value, list):
            raise self.fail(where, "must be a list of times")
        self.at_most(len(value), limits.MAX_SAMPLES_PER_ROUND, "samples in one round", where)
        self.samples += len(value)
        self.at_most(self.samples, limits.MAX_SAMPLES_PER_FILE, "samples in the file so far", where)
        out = []
        for i, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise self.fail(f"{where}[{i}]", f"must be a number, got {type(x).__name__}")
            if not limits.MIN_TIME_S <= x <= limits.MAX_TIME_S:
                raise self.fail(
                    f"{where}[{i}]",
                    f"must be a time from {limits.MIN_TIME_S:g} to {limits.MAX_TIME_S:g} "
                    f"seconds, got {shown(x)}",
                )
            out.append(float(x))
        return tuple(out)

    def at_most(self, count: int, limit: int, what: str, where: str) -> None:
        if count > limit:
            raise self.fail(where, f"{count} {what}, over the limit of {limit}")

    def opt_float(self, data: dict[str, Any], key: str, where: str) -> float | None:
        value = self.get(data, key, where, (int, float, type(None)), None)
        if value is not None and not math.isfinite(value):
            raise self.fail(f"{where}.{key}", "must be finite")
        return None if value is None else float(value)


def _bad_number(value: Any) -> str:
    """Why a JSON value is a number that a float cannot hold ("" if it is not)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if isinstance(value, int) and abs(value) > limits.MAX_INT:
        return f"an integer of {len(str(value))} digits is out of range"
    return ""


def check_numbers(reader: Reader, data: Any) -> None:
    """Refuse, naming its field, any number that a float cannot hold: JSON reads
    ``1e999`` as inf, and an integer of hundreds of digits overflows ``float()``.
    A first pass only looks (no paths: cheap on big files); a second one names."""

    def walk(with_paths: bool) -> None:
        stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
        while stack:
            node, path = stack.pop()
            for key, value in node.items() if isinstance(node, dict) else enumerate(node):
                if isinstance(value, (dict, list)):
                    stack.append((value, (*path, key) if with_paths else ()))
                elif (what := _bad_number(value)) and not with_paths:
                    return walk(True)
                elif what:
                    where = "".join(
                        f"[{k}]" if isinstance(k, int) else f".{k}" for k in (*path, key)
                    )
                    raise reader.fail(cut(where.lstrip(".")), what)
        return None

    walk(False)


def not_an_object(source: str) -> BadInput:
    """What a reader raises for a document whose top level is not a JSON object."""
    return BadInput(f"{source}: not a results file (the top level must be a JSON object)")


@contextlib.contextmanager
def reading(source: str) -> Iterator[None]:
    """Turn the errors of reading the file ``source`` names into ``BadInput`` naming it:
    not found, refused (``guard.base.files``: not a regular file, over its limit), or
    unreadable. A parser's own errors are the caller's to name."""
    try:
        yield
    except FileNotFoundError:
        raise BadInput(f"{source}: file not found") from None
    except files.FileRefused as exc:
        raise BadInput(f"{source}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{source}: cannot read ({exc})") from None
