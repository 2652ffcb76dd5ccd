"""Performance history: per-case medians over commits, in an embedded SQLite file.

``append(run, db)`` stores, for every timed case of a run, the median of all its
samples and the median of each round, with the run's commit, date, GPU slug and
suite hash. A run is identified by a hash of its whole content (``run_key``): the
same run appended twice is stored once, two runs made in the same second of one
commit (concurrent CI jobs) are two runs. ``trend(db, case_id)`` reads one case's
series back in the order the runs were made, on one GPU (timings from two GPU models
never share a series), and flags its step changes with ``detect_steps``. Every read
is bounded: a trend is the last ``limit`` runs (default ``DEFAULT_LIMIT``; None for
all), chosen in SQL through an index on (case, GPU, date), so that only the rows
shown are fetched however long the history grows. The number a point shows and the
step detection reads is ``HistoryPoint.time``: ``stats.case_time`` of its round
medians, as every other report shows a run (the pooled median is kept as stored, for
rows written without round medians).

The store is one SQLite file (stdlib ``sqlite3``; default ``.guard/history.sqlite``)
so that CI can cache or upload it like any artifact. Its format is versioned with
SQLite's ``user_version``, independently of the package version:
  1 (2026-11): first version.
  2 (2026-11): ``runs.run_key`` (the run's content hash) identifies a run; the
     UNIQUE (created, commit_sha, gpu_slug, suite_hash) key is gone (two runs of one
     commit in the same second were stored as one). Readers read format 1 as it is
     (they do not use ``run_key``); the next append migrates it.
  3 (2026-11): ``case_medians`` carries its run's ``created`` and ``gpu_slug`` with
     the index ``case_medians_by_time`` (case, GPU, date, run), so that the last N
     runs of a case are an index range; the ``case_id``-only index is gone. Readers
     read formats 1 and 2 through ``runs`` (a scan: still N rows fetched).
A writer creates a new file (schema and format version) in one write transaction,
so that writers starting together on a missing file never see it half made; an
empty file is one being created. Writers migrate older files, readers and writers
refuse newer ones; any other failure to read raises ``BadInput`` naming the file.
A row that does not hold what the schema says (a text median, broken
``round_medians`` JSON, a NULL threshold, a median that is not a positive time: a
file edited or written by something else) is left out of the trend and counted in
``Trend.skipped``, with its run and the reason.

A pytest-benchmark case is stored under its id as the run names it: since results
schema 3 ``pytest/`` and its node id verbatim, before that with the node id's "/" as
"|". The form changed, not the store's format: a case's rows are read under both ids
(``_stored_ids``), so one benchmark keeps one series, listed by its verbatim id.

Step detection is ``guard.store.changepoint.detect_steps`` (pure code, no I/O); this
module only feeds it a case's timed medians and maps its indexes back.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import math
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guard.base import limits, stats
from guard.base.errors import BadInput, shown
from guard.store import results
from guard.store.changepoint import Step, detect_steps
from guard.store.pytest_benchmark import is_pytest_id, pairing_key, unfold_v2_name
from guard.store.results import OK, RunResult

DEFAULT_DB = Path(".guard/history.sqlite")
HISTORY_SCHEMA_VERSION = 4
OLDEST_READABLE_VERSION = 1  # readers read 1..HISTORY_SCHEMA_VERSION without migrating
DEFAULT_LIMIT = 1000  # runs per trend unless told otherwise (None: every run)

_RUNS = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY,
    run_key TEXT UNIQUE,            -- sha256 of the run's results JSON; NULL before v2
    created TEXT NOT NULL,          -- the run's own timestamp (ISO 8601, UTC)
    commit_sha TEXT NOT NULL,
    commit_dirty INTEGER NOT NULL,
    branch TEXT NOT NULL,
    device TEXT NOT NULL,
    gpu_name TEXT NOT NULL,
    gpu_slug TEXT NOT NULL,
    suite_name TEXT NOT NULL,
    suite_hash TEXT NOT NULL,
    torch TEXT NOT NULL,
    triton TEXT NOT NULL,
    driver TEXT NOT NULL
);
"""
_RUN_COLUMNS = (
    "id, created, commit_sha, commit_dirty, branch, device, gpu_name, gpu_slug, suite_name,"
    " suite_hash, torch, triton, driver"
)

# One statement each: they run in the caller's transaction (executescript would commit).
_SCHEMA: tuple[str, ...] = (
    _RUNS.format(name="runs"),
    """
CREATE TABLE IF NOT EXISTS case_medians (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    case_id TEXT NOT NULL,
    kernel TEXT NOT NULL,
    status TEXT NOT NULL,
    median REAL,                    -- seconds per call, all samples pooled; NULL unless ok
    round_medians TEXT NOT NULL,    -- JSON list, seconds per call, one per round
    host_median REAL,
    min_effect REAL NOT NULL,       -- the case's threshold when it ran
    kernel_hash TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT '',   -- runs.created and runs.gpu_slug of run_id: the
    gpu_slug TEXT NOT NULL DEFAULT '',  -- index below orders a case's runs on one GPU
    PRIMARY KEY (run_id, case_id)
)""",
    "CREATE INDEX IF NOT EXISTS case_medians_by_time"
    " ON case_medians (case_id, gpu_slug, created, run_id)",
)
# Which commit made a step (``guard bisect --record``): the step of a case between the
# run at ``good`` and the first run after it, at ``bad``.
_STEP_COMMITS = """
CREATE TABLE IF NOT EXISTS step_commits (
    case_id TEXT NOT NULL,
    good TEXT NOT NULL,             -- the last commit known good
    bad TEXT NOT NULL,              -- the first commit known bad
    first_bad TEXT NOT NULL,        -- the commit that made the step; '' while still open
    open_range TEXT NOT NULL,       -- JSON list: the commits still left when not found
    recorded TEXT NOT NULL,         -- when the bisection ended (ISO 8601, UTC)
    PRIMARY KEY (case_id, good, bad)
)"""
_SCHEMA = (*_SCHEMA, _STEP_COMMITS)


def migrate_to_2(conn: sqlite3.Connection) -> None:
    """Rebuild ``runs`` without the (created, commit, GPU, suite) key, with ``run_key``
    (NULL for the runs already stored). SQLite cannot drop a constraint in place: a
    new table, a copy, a rename (foreign keys are off meanwhile: see ``_migrate``)."""
    conn.execute(_RUNS.format(name="runs_v2"))
    conn.execute(f"INSERT INTO runs_v2 ({_RUN_COLUMNS}) SELECT {_RUN_COLUMNS} FROM runs")
    conn.execute("DROP TABLE runs")
    conn.execute("ALTER TABLE runs_v2 RENAME TO runs")


def migrate_to_3(conn: sqlite3.Connection) -> None:
    """Copy each run's date and GPU into its case rows and index them (case, GPU, date,
    run); the ``case_id`` index is a prefix of the new one. Columns added with defaults
    (as the fresh schema has them), so the table is not rebuilt."""
    for column in ("created", "gpu_slug"):
        conn.execute(f"ALTER TABLE case_medians ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
    conn.execute(
        "UPDATE case_medians SET (created, gpu_slug) ="
        " (SELECT created, gpu_slug FROM runs WHERE runs.id = case_medians.run_id)"
        " WHERE run_id IN (SELECT id FROM runs)"
    )
    conn.execute("DROP INDEX IF EXISTS case_medians_by_case")
    conn.execute(_SCHEMA[2])


def migrate_to_4(conn: sqlite3.Connection) -> None:
    """Add the table of which commit made each step (``record_step_commit``)."""
    conn.execute(_STEP_COMMITS)


# MIGRATIONS[n] turns a version n-1 store into version n (in place, in a transaction).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: migrate_to_2,
    3: migrate_to_3,
    4: migrate_to_4,
}


@dataclass(frozen=True)
class HistoryPoint:
    """One run's result for one case."""

    run_id: int
    created: str
    commit: str
    commit_dirty: bool
    branch: str
    gpu_slug: str
    suite_hash: str
    status: str
    median: float | None
    round_medians: tuple[float, ...]
    host_median: float | None
    min_effect: float
    kernel_hash: str

    @functools.cached_property  # step detection and every renderer read it: computed once
    def time(self) -> float | None:
        """The run's time for this case as every other number the guard shows it
        (``stats.case_time`` of the round medians); the pooled ``median`` for a row
        without round medians. None unless the case was timed."""
        if self.median is None or not self.round_medians:
            return self.median
        return stats.case_time([[m] for m in self.round_medians])


@dataclass(frozen=True)
class StepCommit:
    """A bisected step: the commit that made it, or the range still open."""

    good: str
    bad: str
    first_bad: str
    open_range: tuple[str, ...]
    recorded: str

    def text(self) -> str:
        if self.first_bad:
            return f"made by {self.first_bad[:10]}"
        return (
            f"between {self.good[:10]} and {self.bad[:10]}: "
            f"{len(self.open_range)} commit(s) left to bisect"
        )


@dataclass(frozen=True)
class Trend:
    """One case's series on one GPU, oldest first; ``steps`` index into ``points``."""

    case_id: str
    gpu_slug: str
    points: tuple[HistoryPoint, ...]
    steps: tuple[Step, ...]
    gpu_slugs: tuple[str, ...] = ()  # every GPU the case has history on
    skipped: tuple[str, ...] = ()  # rows left out as unreadable: "run N: why"
    truncated: bool = False  # older runs exist before the first point (the limit cut them)
    made_by: tuple[StepCommit | None, ...] = ()  # per step: its bisection, None: pending

    def step_range(self, step: Step) -> tuple[str, str]:
        """(good, bad): the commits of the run before the step and of its first run."""
        return self.points[step.index - 1].commit, self.points[step.index].commit

    def attribution(self, step: Step) -> str:
        """Which commit made ``step``: "made by C", "between G and B, N commits left",
        or "bisection pending"."""
        i = self.steps.index(step)
        found = self.made_by[i] if i < len(self.made_by) else None
        return "bisection pending" if found is None else found.text()

    def skipped_note(self, db: str | Path) -> str:
        """One line saying how many rows were left out and why ("" when none)."""
        if not self.skipped:
            return ""
        shown = "; ".join(self.skipped[:3]) + ("; ..." if len(self.skipped) > 3 else "")
        return (
            f"{db}: skipped {len(self.skipped)} unreadable row(s) of {self.case_id!r} "
            f"on {self.gpu_slug} ({shown})"
        )

    @property
    def timed(self) -> list[HistoryPoint]:
        return [p for p in self.points if p.time is not None]


# ----------------------------------------------------------------------- storage


@contextlib.contextmanager
def _connect(path: str | Path, *, create: bool) -> Iterator[sqlite3.Connection]:
    path = Path(path)
    if not create and not path.is_file():
        raise BadInput(f"{path}: no history database (append runs with --history {path})")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=30)
        else:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    except (sqlite3.Error, OSError) as exc:
        raise BadInput(f"{path}: cannot open the history database ({exc})") from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        _check_version(conn, path, create=create)
        yield conn
    except sqlite3.DatabaseError as exc:
        raise BadInput(f"{path}: not a readable history database ({exc})") from None
    finally:
        conn.close()


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' LIMIT 1").fetchone()
    return row is not None


def _refuse_newer(version: int, path: Path) -> None:
    if version > HISTORY_SCHEMA_VERSION:
        raise BadInput(
            f"{path}: history format {version} is newer than this guard understands "
            f"({HISTORY_SCHEMA_VERSION}); upgrade the guard"
        )


def _check_version(conn: sqlite3.Connection, path: Path, *, create: bool) -> None:
    version = _version(conn)
    _refuse_newer(version, path)
    if version == HISTORY_SCHEMA_VERSION:
        return
    if create:
        _initialise(conn, path)
        if _version(conn) < HISTORY_SCHEMA_VERSION:
            _migrate(conn)
        return
    if version == 0:
        if not _has_tables(conn):
            raise BadInput(f"{path}: empty history database (no run appended yet)")
        raise BadInput(f"{path}: not a guard history database (no format version)")
    if version < OLDEST_READABLE_VERSION:
        raise BadInput(f"{path}: history format {version} is old; append a run to upgrade it")


def _initialise(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in an empty file, in one write transaction with its format
    version: a writer that comes second waits for the lock and then finds the file
    made, never half made. A file with tables but no version is someone else's."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _version(conn)
        _refuse_newer(version, path)
        if version == 0:
            if _has_tables(conn):
                raise BadInput(f"{path}: not a guard history database (no format version)")
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {HISTORY_SCHEMA_VERSION}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _migrate(conn: sqlite3.Connection) -> None:
    """Run the migrations one version at a time, each in its own write transaction.

    Foreign keys are off meanwhile: rebuilding ``runs`` drops the old table, which
    with them on would delete every case row through ON DELETE CASCADE. The version
    is read again under the write lock, so that two processes upgrading one file at
    once migrate it once.
    """
    conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: before BEGIN
    try:
        for target in sorted(MIGRATIONS):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if _version(conn) < target:
                    MIGRATIONS[target](conn)
                    conn.execute(f"PRAGMA user_version = {target}")
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def run_key(run: RunResult) -> str:
    """A run's identity in the store: the hash of its whole results JSON (samples,
    environment, date), so that appending it again is a no-op and two runs never
    share a key by coming in the same second."""
    text = json.dumps(results.to_json(run), sort_keys=True, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append(run: RunResult, db: str | Path = DEFAULT_DB) -> int | None:
    """Store the run's per-case medians; return its row id (None: nothing was timed).

    Appending the same run twice stores it once (``run_key``); two different runs
    are two rows whatever their dates.
    """
    fastest = [c for c in run.cases if c.case.threshold.statistic != "median"]
    if fastest:  # the history's times are trimmed means of round medians, nothing else
        raise BadInput(
            f"{run.label or 'run'}: case {shown(fastest[0].id)} has threshold "
            f"{fastest[0].case.threshold}: its rounds are fastest samples, and the history "
            "keeps round medians only"
        )
    timed = [c for c in run.cases if c.status == OK and c.rounds]
    if not timed:
        return None
    env = run.environment
    key = run_key(run)
    with _connect(db, create=True) as conn, conn:
        conn.execute("BEGIN IMMEDIATE")  # the look-up and the insert under one write lock
        row = conn.execute("SELECT id FROM runs WHERE run_key = ?", (key,)).fetchone()
        if row is not None:
            return int(row[0])
        cur = conn.execute(
            "INSERT INTO runs (run_key, created, commit_sha, commit_dirty, branch, device,"
            " gpu_name, gpu_slug, suite_name, suite_hash, torch, triton, driver)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key,
                run.created,
                env.commit,
                int(env.commit_dirty),
                env.branch,
                env.device,
                env.gpu_name,
                env.gpu_slug,
                run.suite_name,
                run.suite_hash,
                env.torch,
                env.triton,
                env.driver,
            ),
        )
        run_id = int(cur.lastrowid or 0)
        rows = []
        for c in run.cases:
            timed_ok = c.status == OK and bool(c.rounds)
            host = stats.pooled(c.host_rounds)
            rows.append(
                (
                    run_id,
                    c.id,
                    c.case.kernel,
                    c.status,
                    float(np.median(stats.pooled(c.rounds))) if timed_ok else None,
                    json.dumps([float(m) for m in stats.round_medians(c.rounds)]),
                    float(np.median(host)) if timed_ok and host.size else None,
                    c.case.threshold.min_effect,
                    c.kernel_hash,
                    run.created,
                    env.gpu_slug,
                )
            )
        conn.executemany(
            "INSERT INTO case_medians (run_id, case_id, kernel, status, median, round_medians,"
            " host_median, min_effect, kernel_hash, created, gpu_slug)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    return run_id


# A row's round medians as read: at most MAX_ROUNDS_PER_CASE of them fit in
# ROUND_MEDIANS_CHARS characters; a longer text (no run of the guard writes one) is not
# read at all but named, and the row skipped.
ROUND_MEDIANS_CHARS = limits.MAX_ROUNDS_PER_CASE * 32
TOO_LONG = "(too long)"  # not JSON: no stored text is it
_ROUNDS_SQL = (
    f"CASE WHEN length(m.round_medians) <= {ROUND_MEDIANS_CHARS} THEN m.round_medians "
    f"ELSE '{TOO_LONG}' END"
)
# Points per trend, even for "every run" (limit None): beyond it the oldest are cut
# (``Trend.truncated``), so one case cannot hold a page or a scan for minutes.
MAX_TREND_POINTS = 20_000

# The last N rows of one case on one GPU, newest first (LIMIT -1: all of them). From
# format 3 the WHERE and ORDER BY are a range of ``case_medians_by_time`` read
# backwards, so only the rows returned are touched; CROSS JOIN keeps the planner on
# that index (``m`` outer, each run by its primary key).
_POINT_SQL = """
SELECT r.id, r.created, r.commit_sha, r.commit_dirty, r.branch, r.gpu_slug, r.suite_hash,
       m.status, m.median, {ROUNDS}, m.host_median, m.min_effect, m.kernel_hash
FROM case_medians m CROSS JOIN runs r
WHERE m.case_id = ? AND m.gpu_slug = ? AND r.id = m.run_id
ORDER BY m.created DESC, m.run_id DESC
LIMIT ?
""".replace("{ROUNDS}", _ROUNDS_SQL)
# Formats 1 and 2 (read as they are): the date and GPU are only in ``runs``. A scan
# of the case's rows, but SQLite's sorter keeps only LIMIT of them.
_POINT_SQL_V2 = """
SELECT r.id, r.created, r.commit_sha, r.commit_dirty, r.branch, r.gpu_slug, r.suite_hash,
       m.status, m.median, {ROUNDS}, m.host_median, m.min_effect, m.kernel_hash
FROM case_medians m JOIN runs r ON r.id = m.run_id
WHERE m.case_id = ? AND r.gpu_slug = ?
ORDER BY r.created DESC, r.id DESC
LIMIT ?
""".replace("{ROUNDS}", _ROUNDS_SQL)


class _BadRow(ValueError):
    """A stored row that does not hold what the schema says; the message says why."""


def _time(value: Any, column: str) -> float:
    """A stored time: a finite positive number (SQLite hands back whatever was put in)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadRow(f"{column} is not a number ({value!r:.40})")
    if not (math.isfinite(value) and value > 0):
        raise _BadRow(f"{column} is not a positive time ({value!r})")
    return float(value)


def _text(value: Any, column: str) -> str:
    if value is None:
        raise _BadRow(f"{column} is NULL")
    return str(value)


def _point(row: tuple[Any, ...]) -> HistoryPoint:
    """One row as a point; ``_BadRow`` when a column does not hold what it should."""
    if row[9] == TOO_LONG:
        raise _BadRow(f"round_medians: over {ROUND_MEDIANS_CHARS} characters, not read")
    try:
        rounds = json.loads(row[9]) if isinstance(row[9], str) else None
    except (ValueError, RecursionError):
        rounds = None
    if not isinstance(rounds, list):
        raise _BadRow(f"round_medians is not a JSON list ({row[9]!r:.40})")
    min_effect = row[11]
    if (
        isinstance(min_effect, bool)
        or not isinstance(min_effect, (int, float))
        or not 0.0 <= min_effect < 1.0
    ):
        raise _BadRow(f"min_effect is not a fraction in [0, 1) ({min_effect!r:.40})")
    if isinstance(row[0], bool) or not isinstance(row[0], int):
        raise _BadRow(f"run id is not an integer ({row[0]!r:.40})")
    return HistoryPoint(
        run_id=row[0],
        created=_text(row[1], "created"),
        commit=_text(row[2], "commit_sha"),
        commit_dirty=bool(row[3]),
        branch=_text(row[4], "branch"),
        gpu_slug=_text(row[5], "gpu_slug"),
        suite_hash=_text(row[6], "suite_hash"),
        status=_text(row[7], "status"),
        median=None if row[8] is None else _time(row[8], "median"),
        round_medians=tuple(_time(x, "round_medians[]") for x in rounds),
        host_median=None if row[10] is None else _time(row[10], "host_median"),
        min_effect=float(min_effect),
        kernel_hash=_text(row[12], "kernel_hash"),
    )


def _distinct(conn: sqlite3.Connection, column: str, case_id: str | None = None) -> list[str]:
    """The distinct values of a ``case_medians`` column (of one case if given), sorted:
    each the least above the last, one index seek apiece where DISTINCT reads every row."""
    sql = f"SELECT MIN({column}) FROM case_medians WHERE " + (
        "case_id = ?" if case_id is not None else "1"
    )
    scope = [case_id] if case_id is not None else []
    values: list[str] = []
    value = conn.execute(sql, scope).fetchone()[0]
    while value is not None:
        values.append(str(value))
        value = conn.execute(f"{sql} AND {column} > ?", [*scope, value]).fetchone()[0]
    return values


def _stored_ids(case_id: str) -> tuple[str, ...]:
    """The ids a case's rows may be stored under: its own, and for a pytest case the
    form a guard of results schema 2 appended (``pytest_benchmark.pairing_key``: its node
    id's "/" as "|"), so that one benchmark keeps one series across that change."""
    folded = pairing_key(case_id)
    return (case_id,) if folded == case_id else (case_id, folded)


def _case_ids(conn: sqlite3.Connection) -> list[str]:
    """Every case id with history, sorted; a pytest case appended in schema 2's form
    ("|" for "/") under its verbatim node id when a later run stored that, else with its
    path's "/" restored (``pytest_benchmark.unfold_v2_name``; ``_stored_ids`` finds it)."""
    ids = _distinct(conn, "case_id")
    verbatim = {k for i in ids if (k := pairing_key(i)) != i}
    out = set()
    for case_id in ids:
        if is_pytest_id(case_id) and pairing_key(case_id) == case_id:
            if case_id in verbatim:  # read with the rows of its verbatim id
                continue
            kernel, _, name = case_id.partition("/")
            case_id = f"{kernel}/{unfold_v2_name(name)}"
        out.add(case_id)
    return sorted(out)


def _gpus_of(conn: sqlite3.Connection, case_id: str) -> list[str]:
    """GPU slugs holding this case, the most recently measured first."""
    ids = _stored_ids(case_id)
    if _version(conn) < 3:
        marks = ", ".join("?" * len(ids))
        rows = conn.execute(
            "SELECT r.gpu_slug FROM case_medians m JOIN runs r ON r.id = m.run_id WHERE"
            f" m.case_id IN ({marks}) GROUP BY r.gpu_slug"
            " ORDER BY MAX(r.created) DESC, MAX(r.id) DESC",
            ids,
        ).fetchall()
        return [str(r[0]) for r in rows]
    latest: dict[str, tuple[str, int]] = {}
    for stored in ids:
        for gpu in _distinct(conn, "gpu_slug", stored):
            created, run_id = conn.execute(
                "SELECT created, run_id FROM case_medians WHERE case_id = ? AND gpu_slug = ?"
                " ORDER BY created DESC, run_id DESC LIMIT 1",
                (stored, gpu),
            ).fetchone()
            latest[gpu] = max(latest.get(gpu, ("", -1)), (str(created), int(run_id)))
    return [gpu for _, gpu in sorted(((v, g) for g, v in latest.items()), reverse=True)]


def _trend(
    conn: sqlite3.Connection,
    case_id: str,
    gpu_slug: str | None,
    limit: int | None,
    alpha: float,
    min_effect: float | None,
) -> Trend | None:
    gpus = _gpus_of(conn, case_id)
    if not gpus or (gpu_slug is not None and gpu_slug not in gpus):
        return None
    gpu = gpu_slug or gpus[0]
    sql = _POINT_SQL if _version(conn) >= 3 else _POINT_SQL_V2
    limit = MAX_TREND_POINTS if limit is None else min(limit, MAX_TREND_POINTS)
    # One row more than shown says whether older runs exist (``Trend.truncated``).
    ids = _stored_ids(case_id)
    rows = [row for stored in ids for row in conn.execute(sql, (stored, gpu, limit + 1))]
    if len(ids) > 1:  # each newest first; merged the same way (a bad row sorts as oldest)
        rows.sort(key=_newest_first, reverse=True)
    truncated = limit is not None and len(rows) > limit
    points: list[HistoryPoint] = []
    skipped: list[str] = []
    for row in reversed(rows[:limit]):  # oldest first
        try:
            points.append(_point(row))
        except _BadRow as exc:
            skipped.append(f"run {row[0]!r:.20}: {exc}")
    timed = [(i, p, t) for i, p in enumerate(points) if (t := p.time) is not None]
    effect = min_effect if min_effect is not None else (timed[-1][1].min_effect if timed else 0.02)
    raw = detect_steps([t for _, _, t in timed], alpha=alpha, min_effect=effect)
    steps = tuple(
        Step(timed[s.index][0], s.before, s.after, s.p_value) for s in raw
    )  # index into ``points``, failed runs included
    made_by = tuple(
        _step_commit(conn, case_id, points[s.index - 1].commit, points[s.index].commit)
        for s in steps
    )
    return Trend(
        case_id, gpu, tuple(points), steps, tuple(gpus), tuple(skipped), truncated, made_by
    )


def _newest_first(row: tuple[Any, ...]) -> tuple[str, int]:
    """A point row's order (its run's date, then its id) for ``sort(reverse=True)``."""
    run_id = row[0] if isinstance(row[0], int) and not isinstance(row[0], bool) else -1
    return (row[1] if isinstance(row[1], str) else "", run_id)


def _step_commit(conn: sqlite3.Connection, case_id: str, good: str, bad: str) -> StepCommit | None:
    if _version(conn) < 4 or not good or not bad:
        return None
    for stored in _stored_ids(case_id):
        row = conn.execute(
            "SELECT first_bad, open_range, recorded FROM step_commits"
            " WHERE case_id = ? AND good = ? AND bad = ?",
            (stored, good, bad),
        ).fetchone()
        if row is not None:
            break
    if row is None:
        return None
    try:
        left = json.loads(row[1])
    except (TypeError, ValueError):
        left = []
    commits = tuple(str(c) for c in left) if isinstance(left, list) else ()
    return StepCommit(good, bad, _text(row[0], "first_bad"), commits, _text(row[2], "recorded"))


def record_step_commit(
    db: str | Path,
    case_ids_: Sequence[str],
    *,
    good: str,
    bad: str,
    first_bad: str,
    open_range: Sequence[str] = (),
) -> None:
    """Record which commit made the step of ``case_ids_`` between the runs at ``good``
    and ``bad`` (full commit ids, as the runs store them), or the range still open."""
    recorded = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with _connect(db, create=True) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for case_id in case_ids_:
                conn.execute(
                    "INSERT OR REPLACE INTO step_commits VALUES (?, ?, ?, ?, ?, ?)",
                    (case_id, good, bad, first_bad, json.dumps(list(open_range)), recorded),
                )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise


def _check_params(alpha: float, min_effect: float | None, limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadInput(f"limit: must be a positive count of runs or None (all), got {limit!r}")
    if not 0.0 < alpha < 1.0:
        raise BadInput(f"alpha: must lie in (0, 1), got {alpha!r}")
    if min_effect is not None and not 0.0 <= min_effect < 1.0:
        raise BadInput(f"min_effect: must lie in [0, 1), got {min_effect!r}")


def case_ids(db: str | Path = DEFAULT_DB) -> list[str]:
    """Every case id with history, sorted (one index seek per case, not a scan)."""
    with _connect(db, create=False) as conn:
        return _case_ids(conn)


def trend(
    db: str | Path,
    case_id: str,
    *,
    gpu_slug: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
    alpha: float = 0.01,
    min_effect: float | None = None,
) -> Trend:
    """One case's last ``limit`` runs on one GPU (default: the GPU it was last measured
    on; ``limit=None``: every run). Unreadable rows in that window are skipped.

    ``min_effect`` defaults to the case's threshold at its latest run.
    """
    _check_params(alpha, min_effect, limit)
    with _connect(db, create=False) as conn:
        found = _trend(conn, case_id, gpu_slug, limit, alpha, min_effect)
        if found is not None:
            return found
        gpus = _gpus_of(conn, case_id)
    if gpus:
        raise BadInput(
            f"{db}: case {case_id!r} has no history on GPU {gpu_slug!r} "
            f"(it has on: {', '.join(gpus)})"
        )
    known = case_ids(db)
    hint = f"; known cases: {', '.join(known[:8])}" + (" ..." if len(known) > 8 else "")
    raise BadInput(f"{db}: no history for case {case_id!r}" + (hint if known else ""))


def trends(
    db: str | Path,
    case_ids_: Sequence[str],
    *,
    gpu_slug: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
    alpha: float = 0.01,
) -> dict[str, Trend]:
    """Trends of several cases on one GPU; cases without history there are left out."""
    _check_params(alpha, None, limit)
    out: dict[str, Trend] = {}
    with _connect(db, create=False) as conn:
        for case_id in case_ids_:
            found = _trend(conn, case_id, gpu_slug, limit, alpha, None)
            if found is not None:
                out[case_id] = found
    return out


def every_trend(
    db: str | Path, *, limit: int | None = DEFAULT_LIMIT, alpha: float = 0.01
) -> tuple[Trend, ...]:
    """Every case's trend on every GPU it was measured on, read in one connection
    (``guard publish``): by case id, then the GPU measured last first. An empty file
    (created, no run appended yet) and a store without runs have none."""
    _check_params(alpha, None, limit)
    path = Path(db)
    if path.is_file() and path.stat().st_size == 0:
        return ()
    out: list[Trend] = []
    with _connect(db, create=False) as conn:
        for case_id in _case_ids(conn):
            for gpu in _gpus_of(conn, case_id):
                found = _trend(conn, case_id, gpu, limit, alpha, None)
                if found is not None:
                    out.append(found)
    return tuple(out)


class PointJson(TypedDict):
    """A ``HistoryPoint`` in ``trend_json``; times in seconds per call."""

    run_id: int
    created: str
    commit: str
    commit_dirty: bool
    branch: str
    suite_hash: str
    status: str
    time_s: float | None  # stats.case_time of the round medians: the number shown
    median_s: float | None  # all samples pooled, as stored
    round_medians_s: list[float]
    host_median_s: float | None
    min_effect: float
    kernel_hash: str


class StepJson(TypedDict):
    """A ``Step`` in ``trend_json``, with the commit of its first point and of the run
    before it, and which commit made it (``made_by``: "" while pending or open)."""

    index: int
    commit: str
    good: str
    made_by: str
    bisection: str  # "found", "open" or "pending"
    before_s: float
    after_s: float
    ratio: float
    p_value: float


class TrendJson(TypedDict):
    """``guard history --json`` and each entry of ``guard report --json``'s history."""

    case_id: str
    gpu_slug: str
    gpu_slugs: list[str]
    skipped: list[str]
    truncated: bool  # older runs exist than the first point (the limit cut them)
    points: list[PointJson]
    steps: list[StepJson]


def trend_json(t: Trend) -> TrendJson:
    return {
        "case_id": t.case_id,
        "gpu_slug": t.gpu_slug,
        "gpu_slugs": list(t.gpu_slugs),
        "skipped": list(t.skipped),
        "truncated": t.truncated,
        "points": [
            {
                "run_id": p.run_id,
                "created": p.created,
                "commit": p.commit,
                "commit_dirty": p.commit_dirty,
                "branch": p.branch,
                "suite_hash": p.suite_hash,
                "status": p.status,
                "time_s": p.time,
                "median_s": p.median,
                "round_medians_s": list(p.round_medians),
                "host_median_s": p.host_median,
                "min_effect": p.min_effect,
                "kernel_hash": p.kernel_hash,
            }
            for p in t.points
        ],
        "steps": [
            {
                "index": s.index,
                "commit": t.points[s.index].commit,
                "good": t.points[s.index - 1].commit,
                "made_by": _made_by(t, i),
                "bisection": _bisection_state(t, i),
                "before_s": s.before,
                "after_s": s.after,
                "ratio": s.ratio,
                "p_value": s.p_value,
            }
            for i, s in enumerate(t.steps)
        ],
    }


def _found(t: Trend, i: int) -> StepCommit | None:
    return t.made_by[i] if i < len(t.made_by) else None


def _made_by(t: Trend, i: int) -> str:
    found = _found(t, i)
    return "" if found is None else found.first_bad


def _bisection_state(t: Trend, i: int) -> str:
    found = _found(t, i)
    if found is None:
        return "pending"
    return "found" if found.first_bad else "open"
