"""The ``guard publish`` command: the history store as a static site (``guard.report.
site``). Parses, reads the history (``guard.store.history.every_trend``), renders, and
writes the files; ``guard.commands.main.build_parser`` calls ``register``.

The output folder is the site's own: a folder that holds other files and no
``.guard-site`` manifest from an earlier build is refused (exit 2), so that a typo never
overwrites someone's folder. Each file is written atomically; case pages that an earlier
build wrote and this one does not (a case gone from the history) are removed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from guard.base import text
from guard.base.errors import BadInput
from guard.ops.outputs import write_output
from guard.report import site, terminal
from guard.store import history, results

MANIFEST = ".guard-site"  # the files of the last build, one per line
MAX_MANIFEST_BYTES = 1 << 22  # 4 MiB: some 50,000 page names


def _manifest(path: Path) -> set[str]:
    """The page names a manifest lists: a regular file (not a link), bounded, UTF-8."""
    if path.is_symlink() or not path.is_file():
        raise BadInput(f"--out {path}: not a regular file; remove it or give a new folder")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"--out {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise BadInput(f"--out {path}: over {MAX_MANIFEST_BYTES} bytes, not a site's manifest")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BadInput(f"--out {path}: not UTF-8 (byte {exc.start})") from None
    return {line for line in lines if line}


def _no_links(out: Path, rels: list[str]) -> None:
    """Refuse a site folder, or a folder inside it, that is a symbolic link: writing
    through it would write (and remove stale pages) outside the site."""
    if out.is_symlink():
        raise BadInput(f"--out {out}: is a symbolic link; give the folder itself")
    for folder in sorted({str(Path(rel).parent) for rel in rels} - {"."}):
        path = out
        for part in Path(folder).parts:
            path = path / part
            if path.is_symlink():
                raise BadInput(f"--out {path}: is a symbolic link inside the site; remove it")


def _previous(out: Path) -> set[str]:
    """The files the last build wrote here; refuse a folder that is not a site's."""
    if out.exists() and not out.is_dir():
        raise BadInput(f"--out {out}: is not a directory")
    manifest = out / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        return _manifest(manifest)
    if out.is_dir() and any(out.iterdir()):
        raise BadInput(
            f"--out {out}: holds files and no {MANIFEST} of an earlier `guard publish`; "
            "give an empty or new folder"
        )
    return set()


def write_site(files: dict[str, str], out: Path) -> int:
    """Write the site's files under ``out``; return how many stale pages were removed."""
    previous = _previous(out)
    _no_links(out, [*files, *previous])
    for rel, body in files.items():
        write_output("--out", out / rel, body)
    stale = sorted(p for p in previous - set(files) if p.startswith("cases/") and "/.." not in p)
    for rel in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out / rel)
    write_output("--out", out / MANIFEST, "".join(f"{p}\n" for p in sorted(files)))
    return len(stale)


def _repo_url(args: argparse.Namespace) -> str:
    if args.repo_url is not None:
        if args.repo_url and not text.is_web_url(args.repo_url):
            raise BadInput(f"--repo-url {args.repo_url!r}: not an http(s) URL")
        return str(args.repo_url)
    server, repo = os.environ.get("GITHUB_SERVER_URL", ""), os.environ.get("GITHUB_REPOSITORY", "")
    url = f"{server.rstrip('/')}/{repo}" if server and repo else ""
    return url if text.is_web_url(url) else ""


def cmd_publish(args: argparse.Namespace, argv: Sequence[str]) -> int:
    out = Path(args.out)
    _no_links(out, sorted(_previous(out)))  # refuse a foreign folder before reading anything
    for path in args.append or ():
        run_id = history.append(results.load(path), args.db)
        what = f"run {run_id}" if run_id is not None else "nothing (no timed case)"
        print(f"[guard] history: {path}: {what} in {args.db}", file=sys.stderr)
    for path in args.bisections or ():
        from guard.ops import bisect

        records = bisect.read_records(results.read_json_text(path), str(path))
        for r in records:
            history.record_step_commit(
                args.db, r.case_ids, good=r.good, bad=r.bad, first_bad=r.first_bad,
                open_range=r.open_range,
            )  # fmt: skip
        print(f"[guard] history: {path}: {len(records)} bisection(s) recorded", file=sys.stderr)
    trends = history.every_trend(args.db, limit=None if args.all else args.limit, alpha=args.alpha)
    for t in trends:
        if t.skipped:
            print(f"[guard] {text.one_line(t.skipped_note(args.db))}", file=sys.stderr)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    files = site.build_site(
        trends,
        repo_url=_repo_url(args),
        title=args.title,
        generated=generated,
        source=Path(args.db).name,
    )
    removed = write_site(files, out)
    cases = len(site.site_pages(files))
    print(
        f"site: {out / 'index.html'} ({cases} case page(s), {len(trends)} series"
        + (f", {removed} stale page(s) removed" if removed else "")
        + ")",
        file=sys.stderr,
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``publish`` to the ``guard`` subcommands."""
    p = sub.add_parser(
        "publish",
        help="write the history as a static site (trends per GPU, change points)",
        description="Render every case's history on every GPU as static HTML: an index "
        "(latest time, last step, sparkline per case and GPU) and a page per case (time "
        "over commits with its interval band, change points linked to their commits). "
        "Inline CSS and SVG, no script, nothing fetched: opens from a folder or GitHub Pages.",
    )
    p.add_argument("--db", type=Path, default=history.DEFAULT_DB, help="the history DB")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the site's folder")
    p.add_argument(
        "--bisections",
        action="append",
        metavar="FILE",
        help="record the steps' commits that `guard bisect-pending` found (repeatable)",
    )
    p.add_argument(
        "--repo-url",
        metavar="URL",
        help="link commits to URL/commit/SHA (default: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY "
        "when set; '' for no links)",
    )
    p.add_argument(
        "--append",
        action="append",
        metavar="RESULTS",
        help="first append this results or baseline file to --db (repeatable; a run "
        "already stored is stored once)",
    )
    p.add_argument("--title", default="Performance history", help="the pages' title")
    window = p.add_mutually_exclusive_group()
    window.add_argument(
        "--limit",
        type=terminal.positive_int,
        default=history.DEFAULT_LIMIT,
        metavar="N",
        help=f"the last N runs per case and GPU (default {history.DEFAULT_LIMIT})",
    )
    window.add_argument("--all", action="store_true", help="every run")
    p.add_argument(
        "--alpha", type=terminal.alpha, default=0.01, help="false-step rate per scan (0.01)"
    )
    p.set_defaults(func=cmd_publish)
