"""The PR comment (and the job summary's verdict): Markdown from check outcomes.

    python -m guard.github.comment --meta OUTCOME.json [--meta ...] --out COMMENT.md

Reads each GPU's ``meta.json`` (``guard.decide.outcome``; an unknown schema version or a
malformed field is refused with exit 2 and the field named) and writes one comment:
the verdict per GPU first, the cases that moved, what the PR changes in the policy and
the baselines (taking effect after merge), and a link to the run. The comment workflow
runs this from the default branch with no dependencies installed: standard library
only, and every string from an outcome file is escaped as data (no markup, no
``@`` mention, only http(s) links).

GitHub refuses a comment body over 65,536 characters; a valid outcome file at the
reader's limits holds far more. The comment is kept within ``MAX_COMMENT_BYTES`` by
showing less, in this order: long texts clipped, then fewer list entries (resource
notes, policy and baseline changes, notes) and profiles, then fewer table rows (the
failing cases stay longest), each cut saying how much more the run shows. Nothing is
cut inside a Markdown construct: whole rows and entries go, and texts are clipped
before they are escaped.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from guard.base.files import FileRefused
from guard.base.text import one_line
from guard.decide.outcome import OutcomeFileError
from guard.report.comment import MAX_FILES, markdown, read


def write(path: Path, body: str) -> None:
    """Write the comment to a regular file (created or truncated); FileRefused for a
    FIFO or device, OSError as ``open`` raises it (a directory, a missing parent)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o666)  # 0o666 & ~umask, as open() gives
    with os.fdopen(fd, "wb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise FileRefused("not a regular file")
        # The text helpers replace lone surrogates; "replace" keeps writing total anyway.
        fh.write(body.encode("utf-8", "replace"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guard.github.comment", description=__doc__)
    parser.add_argument("--meta", type=Path, action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--run-url",
        help="the run to link (the workflow_run event's html_url), in place of the links "
        "the outcome files carry (which whoever wrote them chose)",
    )
    args = parser.parse_args(argv)

    def error(message: str, code: int = 2) -> int:
        print(f"guard.github.comment: error: {one_line(message)}", file=sys.stderr)
        return code

    if len(args.meta) > MAX_FILES:
        return error(f"--meta: {len(args.meta)} files, at most {MAX_FILES}")
    try:
        outcomes = [read(path) for path in args.meta]
    except OutcomeFileError as exc:
        return error(str(exc))
    if args.run_url is not None:
        outcomes = [replace(o, run_url=args.run_url) for o in outcomes]
    try:
        write(args.out, markdown(outcomes))
    except OSError as exc:
        infra = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO)
        return error(
            f"--out {args.out}: cannot write it ({exc.strerror or exc})", 3 if infra else 2
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
