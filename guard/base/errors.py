"""The one error type the guard's core raises, and the exit codes it maps to."""

from __future__ import annotations

import enum
import reprlib

from guard.base.limits import MAX_SHOWN_CHARS


class ExitCode(enum.IntEnum):
    PASS = 0
    FAIL = 1  # a significant regression, or wrong results
    BAD_INPUT = 2  # bad files, options or configuration
    INFRA = 3  # no GPU where one is required, build failure, crash, timeout


class GuardError(Exception):
    """A failure the CLI reports as one line and an exit code (never a traceback)."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(GuardError):
    """A file, field or option is wrong; the message names it."""

    exit_code = ExitCode.BAD_INPUT


class InfraError(GuardError):
    """The machine or a worker failed (no GPU, build failure, crash, timeout)."""

    exit_code = ExitCode.INFRA


_REPR = reprlib.Repr()  # Python 3.11 has no keyword arguments for these
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_SHOWN_CHARS + 20  # then cut below


def shown(value: object) -> str:
    """``repr(value)`` for an error message: a value read from a file, cut to
    ``MAX_SHOWN_CHARS`` (saying so), so that a huge value makes no huge message.
    ``reprlib`` looks at a few items per level only, so this is cheap on any value."""
    try:
        return cut(_REPR.repr(value))
    except ValueError:  # an integer over Python's 4300-digit str() limit
        return f"<{type(value).__name__} too large to show>"


def cut(text: str) -> str:
    """``text`` (a field's path, a name) cut to ``MAX_SHOWN_CHARS``, saying so."""
    if len(text) > MAX_SHOWN_CHARS:
        return f"{text[:MAX_SHOWN_CHARS]}... (cut at {MAX_SHOWN_CHARS} characters)"
    return text
