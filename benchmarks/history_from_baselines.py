"""Fill a history DB from the baselines committed over the repository's history.

Every committed version of ``baselines/*.json`` is a real GPU run (``guard baseline
refresh`` on that GPU); this reads each one with ``git show`` and appends it with the
guard's own ``guard.store.history.append``, so that the published site
(``guard publish``) shows how every case moved over the refreshes of main. A file
committed again unchanged is one run (the store keys runs by their content); a run
whose copy was re-committed with an edited field (same GPU and date) is taken once,
from its last commit. ``--extra`` appends other real results files too.

    python benchmarks/history_from_baselines.py --db history.sqlite
    guard publish --db history.sqlite --out site/
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
from pathlib import Path

from guard.store import history, results
from guard.store.results import RunResult


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], check=True, capture_output=True, text=True, encoding="utf-8"
    ).stdout


def committed_runs(rev: str = "HEAD", folder: str = "baselines") -> list[tuple[str, RunResult]]:
    """(commit that holds it, run) for every distinct baseline run committed up to
    ``rev``, oldest run first; one run per (GPU, date), from the last commit holding it."""
    found: dict[tuple[str, str], tuple[str, RunResult]] = {}
    for sha in _git("log", "--reverse", "--format=%H", rev, "--", f"{folder}/").split():
        for name in _git("ls-tree", "--name-only", sha, f"{folder}/").split():
            if not name.endswith(".json"):
                continue
            run = results.loads(_git("show", f"{sha}:{name}"), f"{sha[:10]}:{name}")
            found[(run.environment.gpu_slug, run.created)] = (sha, run)
    return sorted(found.values(), key=lambda x: (x[1].created, x[1].environment.gpu_slug))


def _load(path: Path) -> RunResult:
    """A results file, gzip-compressed (``.gz``, as docs/data keeps the large ones) or not."""
    if path.suffix == ".gz":
        return results.loads(gzip.decompress(path.read_bytes()).decode(), str(path))
    return results.load(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="history DB (created if missing)")
    ap.add_argument("--rev", default="HEAD", help="walk the baselines committed up to REV")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="results file")
    args = ap.parse_args(argv)
    runs = committed_runs(args.rev)
    runs += [("(file)", _load(p)) for p in args.extra]
    for sha, run in runs:
        run_id = history.append(run, args.db)
        timed = sum(1 for c in run.cases if c.rounds)
        print(
            f"{run.environment.gpu_slug:24} {run.created}  "
            f"tree {run.environment.commit[:10] or '?':10}"
            f"  from {sha[:10]:10}  {timed:3} timed case(s)  -> run {run_id}"
        )
    print(f"{len(runs)} run(s) in {args.db}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
