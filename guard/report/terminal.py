"""The terminal side of the CLI: tables, JSON on stdout, argparse's number types, and
progress.

Shared by ``guard.commands`` and ``guard.github.ci`` (neither imports the other's
internals). Every string in a table is plain text, never rich markup.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from typing import Any

from guard.base import stats
from guard.base.text import one_line
from guard.measure.runner import Progress


def print_table(header: list[str], rows: list[list[str]], title: str = "") -> None:
    """A terminal table. Every string is plain text (``rich.text.Text``), never rich
    markup: case names such as ``test_attn[fp16]`` and kernel messages holding ``[/]``
    are data, shown as they are.

    In a terminal, long cells fold to fit the window; piped or redirected (a CI log,
    ``| grep``), a cell is never broken: a case id split over two lines cannot be
    searched for or copied, so the table is as wide as its widest row needs."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    terminal = sys.stdout.isatty()
    table = Table(title=Text(title) if title else None, show_lines=False)
    for h in header:
        table.add_column(Text(h), overflow="fold", no_wrap=not terminal)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    if terminal:
        width = max(120, Console().width)
    else:
        probe = Console(file=io.StringIO(), width=UNBOUNDED_WIDTH)
        width = max(Measurement.get(probe, probe.options, table).maximum, cell_len(title))
    Console(width=width).print(table)


# Wide enough for any table the guard prints (a cell's text is bounded by its source).
UNBOUNDED_WIDTH = 1_000_000


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=1, allow_nan=False))


def alpha(text: str) -> float:
    """``--alpha``: a number in the range guard.base.stats allows (argparse exits 2 otherwise)."""
    try:
        return stats.check_alpha(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_COUNT = 10**9  # any count a command takes: beyond it, SQLite's and numpy's integers


def positive_int(text: str) -> int:
    """An argparse type: a count from 1 to ``MAX_COUNT`` (argparse names the flag and
    exits 2)."""
    try:
        value = int(text[:40])  # a 5000-digit string is not worth converting
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text[:40]!r}") from None
    if not 1 <= value <= MAX_COUNT or len(text) > 40:
        got = text[:40]
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_COUNT}, got {got!r}")
    return value


class ProgressPrinter:
    """Live progress in a terminal (rich); plain lines elsewhere (CI logs): one as each
    round starts and ends, and in a round of a few cases (the extension of inconclusive
    ones) each case as it starts, so a run stopped by a timeout says what it was
    measuring."""

    NAMED = 3  # rounds of at most this many cases name them

    def __init__(self, enabled: bool = True, prefix: str = "[guard]") -> None:
        self.enabled = enabled
        self.prefix = prefix
        self.live = enabled and sys.stderr.isatty() and not os.environ.get("CI")
        self._bar: Any = None
        self._task: Any = None
        self._key: tuple[str, str, int] | None = None
        self._named: set[str] = set()  # cases named in this round already
        self._t0 = time.monotonic()

    def __call__(self, ev: Progress) -> None:
        if not self.enabled:
            return
        key = (ev.phase, ev.arm, ev.round)
        label = f"{ev.phase} {ev.arm}" + (
            f" round {ev.round}/{ev.total_rounds}" if ev.round else ""
        )
        if self.live:
            self._live(ev, key, label)
            return
        if key != self._key:
            self._key, self._named = key, set()
            self._print(f"{label}: {ev.total} case(s)")
        if ev.case and ev.total <= self.NAMED and ev.case not in self._named:
            self._named.add(ev.case)  # a round announces each case once a pass
            self._print(f"{label}: {ev.case}")
        elif not ev.case and ev.done == ev.total:
            self._print(f"{label}: done ({time.monotonic() - self._t0:.0f} s elapsed)")

    def _print(self, line: str) -> None:
        print(_log_line(f"{self.prefix} {line}"), file=sys.stderr, flush=True)

    def _live(self, ev: Progress, key: tuple[str, str, int], label: str) -> None:
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        if self._bar is None:
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=True,
            )
            self._bar.start()
        if key != self._key:
            self._key = key
            self._task = self._bar.add_task(escape(label), total=ev.total)
        # Case names are user data: escaped, so that "[fp16]" or "[/]" is shown as
        # written instead of being read as rich markup, and kept on one line.
        description = escape(one_line(f"{label} {ev.case}".strip()))
        self._bar.update(self._task, completed=ev.done, description=description)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _log_line(line: str) -> str:
    """A progress line for a log: one line (a case name holding a newline must not start
    a line of its own) that does not start with ``::`` (under GitHub Actions such a
    line is a workflow command, e.g. ``::error::``)."""
    line = one_line(line)
    return f"> {line}" if line.lstrip().startswith("::") else line
