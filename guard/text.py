"""Text for people and for GitHub: Markdown escaping, workflow commands, numbers.

Standard library only: the PR-comment workflow renders with it without installing the
project's dependencies (``guard.comment``).

Everything that comes from a file, a suite or a kernel (case names, exception
messages, GPU names, labels, notes) is data, never markup: Markdown goes through
``md_text`` (or ``md_code`` inside backticks), GitHub workflow commands through
``gh_command``. A case named ``<img src=x onerror=...>`` or ``a|b`` must not draw an
image or split a table cell; one holding a newline must not start a second
``::error`` command.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}x"


_MD_SPECIAL = re.compile(
    r"""
    [\\`*~|]                # escapes, code spans, emphasis, strikethrough, table cells
    | \](?=[(\[:])          # a link, image, reference or link definition needs "](", "][", "]:"
    | (?<![A-Za-z0-9])_ | _(?![A-Za-z0-9])   # "_" is emphasis unless inside a word
    """,
    re.VERBOSE,
)
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_text(text: object) -> str:
    """``text`` as literal Markdown text on one line (GitHub-flavoured, table-safe).

    HTML's ``& < >`` become entities (no tag, no autolink), Markdown's punctuation is
    backslash-escaped where it could mean something (``\\ ` * ~ |``, a ``]`` that
    would close a link, an ``_`` at a word's edge), line breaks become spaces. Plain
    names such as ``triton_flash/b1-h8-s512-d64-full`` or ``test_attn[fp16]`` come out
    unchanged.
    """
    escaped = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), one_line(text))
    return re.sub(r"[&<>]", lambda m: _HTML[m.group(0)], escaped)


def md_code(text: object) -> str:
    """``text`` as an inline code span: literal (no Markdown, no HTML inside), on one
    line, with a backtick fence longer than any run of backticks it holds."""
    body = one_line(text)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", body)), default=0) + 1)
    if body.startswith("`") or body.endswith("`") or (body[:1] == body[-1:] == " "):
        body = f" {body} "
    return f"{fence}{body}{fence}"


def md_block(text: str) -> str:
    """``text`` as a fenced code block that nothing inside it can close."""
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}\n{text}\n{fence}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; every cell (header included) is text, escaped by ``md_text``."""
    lines = ["| " + " | ".join(md_text(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_text(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def one_line(text: object) -> str:
    """``text`` for a plain log line: line breaks become spaces, so that nothing read
    from a file or a kernel starts a line of its own (under GitHub Actions a line
    starting with ``::`` is a workflow command)."""
    return re.sub(r"[\r\n]+", " ", str(text))


def gh_escape(text: object, *, prop: bool = False) -> str:
    """A workflow command's message (``prop``: a property value such as ``title``),
    escaped as GitHub's toolkit does (``escapeData`` / ``escapeProperty``): a newline
    cannot end the command and start another one."""
    out = str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        out = out.replace(":", "%3A").replace(",", "%2C")
    return out


def gh_command(level: str, message: object, **props: object) -> str:
    """``::level k=v,...::message`` with every property and the message escaped."""
    head = ",".join(f"{k}={gh_escape(v, prop=True)}" for k, v in props.items() if v != "")
    return f"::{level}{' ' + head if head else ''}::{gh_escape(message)}"


def md_url(url: str) -> str:
    """A link destination: as it is when plain, else inside ``<...>`` with whitespace
    and angle brackets percent-encoded, so that nothing in it can end the link."""
    if re.fullmatch(r"[^\s()<>\\]+", url):
        return url
    return "<" + re.sub(r"[\s<>\\]", lambda m: f"%{ord(m.group(0)):02X}", url) + ">"


def emit_commands(lines: Sequence[str]) -> None:
    """Print GitHub workflow commands (``gh_command`` lines), only under GitHub Actions."""
    if os.environ.get("GITHUB_ACTIONS"):
        for line in lines:
            print(line, flush=True)


def annotate(level: str, title: str, message: str, file: str = "") -> None:
    """One annotation (only under GitHub Actions); every part is escaped, so a newline
    in a case name cannot start another command."""
    emit_commands([gh_command(level, message, file=file, title=title)])


def append_step_summary(markdown: str) -> None:
    """Append to the job summary (``$GITHUB_STEP_SUMMARY``) when running in Actions."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown.rstrip("\n") + "\n\n")
