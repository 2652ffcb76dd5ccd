"""The one error type the guard's core raises, and the exit codes it maps to."""

from __future__ import annotations

import enum


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
