"""The terminal side of the CLI: tables, JSON on stdout, and argparse's number types.

Shared by ``guard.cli`` and ``guard.cli_report`` (neither imports the other's
internals). Every string in a table is plain text, never rich markup.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from guard import stats


def print_table(header: list[str], rows: list[list[str]], title: str = "") -> None:
    """A terminal table. Every string is plain text (``rich.text.Text``), never rich
    markup: case names such as ``test_attn[fp16]`` and kernel messages holding ``[/]``
    are data, shown as they are."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title) if title else None, show_lines=False)
    for h in header:
        table.add_column(Text(h), overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    Console(width=max(120, Console().width)).print(table)


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=1, allow_nan=False))


def alpha(text: str) -> float:
    """``--alpha``: a number in the range guard.stats allows (argparse exits 2 otherwise)."""
    try:
        return stats.check_alpha(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """An argparse type: a count of at least 1 (argparse names the flag and exits 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value
