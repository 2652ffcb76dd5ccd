"""The ``guard`` command: parse, call one command module, render. Nothing else.

Each subcommand is a module of ``guard.commands`` with a ``register`` that adds its
parser; each handler parses its options once into the typed arguments of a
``guard.ops`` function, calls it and renders what it returns.

Exit codes: 0 pass, 1 regression or wrong results, 2 bad input or configuration,
3 infrastructure (no GPU where one is required, build failure, crash, timeout).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from typing import Any

from guard.base import text
from guard.base.errors import GuardError
from guard.commands import baseline, bisect, compare, init, merge, publish, report, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guard",
        description="Correctness and statistical performance guard for attention kernels.",
        epilog="Exit codes: 0 pass, 1 regression or wrong results, 2 bad input, "
        "3 infrastructure (no GPU, build failure, crash, timeout).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    for register in (
        run.register,  # guard list, check, run
        compare.register,  # guard compare
        merge.register,  # guard merge: a sharded check's outcomes, decided together
        baseline.register,  # guard warm-cache, guard baseline refresh
        report.register,  # guard report, history
        publish.register,  # guard publish: the history as a static site
        bisect.register,  # guard bisect: the commit that made a step
        init.register,  # guard init: a starter suite and workflow for another repository
    ):
        register(sub)
    return parser


class _ReaderGone:
    """stdout or stderr, for as long as someone reads it.

    ``guard compare a b | head -1``: once ``head`` exits, a write raises
    ``BrokenPipeError``. The Python docs' "Note on SIGPIPE" says to point the file
    descriptor at ``os.devnull`` and exit quietly; this does that at the first failed
    write and lets the command finish, so that its files (results, Markdown, HTML)
    are written and it exits with its own code (0 pass, 1 regression, ...), not 1
    and a traceback.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()

    def _drop(self) -> None:
        self.gone = True
        # Whatever is still buffered goes to devnull at the next (or the final) flush.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        try:
            os.dup2(devnull, self._stream.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass  # not a real file (tests' capture): nothing is written to it any more
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ReaderGone(sys.stdout), _ReaderGone(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 2 for usage errors, 0 for --help
        return int(exc.code or 0)
    command_line = list(sys.argv[1:] if argv is None else argv)  # --gpus passes them on
    try:
        return int(args.func(args, command_line))
    except GuardError as exc:
        print(f"guard: error: {text.one_line(exc)}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("guard: interrupted; no results or baselines were written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
