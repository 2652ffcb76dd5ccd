"""Text for people and for GitHub: Markdown escaping, workflow commands, numbers.

Standard library only: the PR-comment workflow renders with it without installing the
project's dependencies (``guard.github.comment``).

Everything that comes from a file, a suite or a kernel (case names, exception
messages, GPU names, labels, notes) is data, never markup: Markdown goes through
``md_text`` (or ``md_code`` inside backticks), GitHub workflow commands through
``gh_command``. A case named ``<img src=x onerror=...>`` or ``a|b`` must not draw an
image or split a table cell; one holding a newline must not start a second
``::error`` command; an ``@name`` must not mention (notify) anyone on GitHub; a lone
surrogate (valid in a JSON string, not in UTF-8) must not stop the text being written.
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
# What a line starting with the text would open: a heading ("# x"), a list item ("- x",
# "+ x", "1. x", "1) x"), a thematic break or setext underline ("---", "==="). Escaping
# its first character keeps it text where md_text starts a line ("> note", "- item").
# (A digit cannot be backslash-escaped: "1." is escaped at its dot.)
_BLOCK_START = re.compile(r"^( {0,3}\d{1,9})([.)])(?=\s|$)|^( {0,3})(#|[-+](?=[-+\s]|$)|=)")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# GitHub notifies "@name" (and "@org/team") when it follows no word character; a zero
# width space after every "@" shows the same text and mentions no one. Entities such
# as "&#64;" are not enough: GitHub finds mentions in the rendered text, where
# "&#64;" is "@" again (Dependabot and Renovate insert U+200B for this reason).
_NO_MENTION = "@\u200b"


def md_text(text: object) -> str:
    """``text`` as literal Markdown text on one line (GitHub-flavoured, table-safe).

    HTML's ``& < >`` become entities (no tag, no autolink), Markdown's punctuation is
    backslash-escaped where it could mean something (``\\ ` * ~ |``, a ``]`` that
    would close a link, an ``_`` at a word's edge, a leading ``#``, ``-``, ``+``,
    ``=`` or ``1.`` that would open a block), line breaks become spaces, ``@`` is
    followed by a zero-width space (no mention). Plain names such as
    ``triton_flash/b1-h8-s512-d64-full`` or ``test_attn[fp16]`` come out unchanged.
    """
    escaped = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), one_line(text))
    escaped = _BLOCK_START.sub(
        lambda m: f"{m.group(1) or m.group(3)}\\{m.group(2) or m.group(4)}", escaped
    )
    escaped = re.sub(r"[&<>]", lambda m: _HTML[m.group(0)], escaped)
    return escaped.replace("@", _NO_MENTION)


def md_code(text: object) -> str:
    """``text`` as an inline code span: literal (no Markdown, no HTML inside), on one
    line, with a backtick fence longer than any run of backticks it holds. GitHub
    links no mention inside code, but a plain-text copy of the comment (an e-mail
    reply) would: ``@`` is followed by a zero-width space here too."""
    body = one_line(text).replace("@", _NO_MENTION)
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
    return scrub(re.sub(r"[\r\n]+", " ", str(text)))


def scrub(text: str) -> str:
    """``text`` with each lone surrogate (``"\\ud800"`` is valid in a JSON string,
    not in UTF-8) replaced by U+FFFD, so that it can be written as UTF-8."""
    return re.sub(r"[\ud800-\udfff]", "\ufffd", text)


def clip(text: str, most: int) -> str:
    """``text`` shortened to at most ``most`` characters, an ellipsis marking the cut.
    Cut before escaping, so that no escape or entity is cut in half."""
    return text if len(text) <= most else text[: max(most - 1, 0)] + "…"


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
    """A link destination: as it is when plain, else inside ``<...>`` with whitespace,
    control characters and angle brackets percent-encoded (as UTF-8), so that nothing
    in it can end the link. Any scheme passes: build links to data with ``md_link``,
    which links only web URLs."""
    url = scrub(url)
    if re.fullmatch(r"[^\s\x00-\x1f\x7f()<>\\]+", url):
        return url
    return "<" + re.sub(r"[\s\x00-\x1f\x7f<>\\]", lambda m: _percent(m.group(0)), url) + ">"


def _percent(char: str) -> str:
    return "".join(f"%{b:02X}" for b in char.encode("utf-8"))


def is_web_url(url: str) -> bool:
    """An absolute http(s) URL with a host, in printable ASCII without spaces: the only
    URLs read from data that become links (not ``javascript:``, ``data:``, ``//host``
    or a relative path)."""
    return re.fullmatch(r"(?i)https?://[^/?#\s@]+(?:[/?#][!-~]*)?", url) is not None and (
        re.fullmatch(r"[!-~]+", url) is not None
    )


def md_link(label: str, url: str) -> str:
    """``[label](url)`` when ``url`` is a web URL (``is_web_url``); else the label and
    the URL as text, not a link. ``label`` is text (escaped here)."""
    if is_web_url(url):
        return f"[{md_text(label)}]({md_url(url)})"
    return f"{md_text(label)}: {md_code(url)} (not linked: not an http(s) URL)"


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
