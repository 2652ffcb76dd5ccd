"""The history store (append, query, versioning) and its step detection."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import report_data as data

from guard.base.errors import BadInput
from guard.commands import main as commands_main
from guard.report import render
from guard.store import history
from guard.store.results import CRASHED, CaseResult

CASE = "triton_flash/b1-h8-s512-d64-full"
FLAT = "sdpa_flash/b1-h8-s512-d64-full"


# ----------------------------------------------------------------- the store


def test_append_and_query(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "h.sqlite"  # the folder is created
    runs = data.history_runs(n=5, step_at=3)
    ids = [history.append(r, db) for r in runs]
    assert ids == [1, 2, 3, 4, 5]
    t = history.trend(db, CASE)
    assert t.gpu_slug == "nvidia-h100-80gb-hbm3"
    assert [p.commit for p in t.points] == [r.environment.commit for r in runs]
    assert [p.created for p in t.points] == [r.created for r in runs]
    first = runs[0].case(CASE)
    assert first is not None
    p0 = t.points[0]
    assert p0.median == pytest.approx(float(np.median(first.samples)))
    assert p0.round_medians == pytest.approx([float(np.median(r)) for r in first.rounds])
    assert p0.suite_hash == "5eed5eed5eed5eed" and p0.status == "ok"
    assert p0.min_effect == pytest.approx(0.02)
    assert history.case_ids(db)[0] == "sdpa_efficient/b1-h8-s512-d64-causal"
    assert len(history.case_ids(db)) == 9


def test_a_run_of_fastest_samples_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """min:N% rounds are fastest samples; the history's times are round medians."""
    from guard.base.stats import Threshold

    db = tmp_path / "h.sqlite"
    run = data.history_runs(n=1)[0]
    first = run.cases[0]
    fastest = replace(first, case=replace(first.case, threshold=Threshold.parse("min:5%")))
    run = replace(run, cases=(fastest, *run.cases[1:]), label="r.json")
    with pytest.raises(BadInput, match=r"r\.json: case .* has threshold min:5%: its rounds"):
        history.append(run, db)
    assert not db.exists()


def test_append_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    run = data.history_runs(n=1)[0]
    assert history.append(run, db) == history.append(run, db)
    assert len(history.trend(db, CASE).points) == 1


def test_runs_of_one_commit_in_the_same_second_are_two_runs(tmp_path: Path) -> None:
    """Concurrent CI jobs: same date (to the second), commit, GPU and suite, other
    samples. Both are kept; appending either again still stores nothing new."""
    db = tmp_path / "h.sqlite"
    first, other = data.history_runs(n=2)
    second = replace(other, created=first.created, environment=first.environment)
    ids = [history.append(first, db), history.append(second, db)]
    assert ids[0] != ids[1]
    assert history.append(second, db) == ids[1] and history.append(first, db) == ids[0]
    points = history.trend(db, CASE).points
    assert [p.run_id for p in points] == ids
    assert points[0].median != points[1].median


# The format-1 schema, as 2026-11's guard wrote it (a fixture of the old version).
V1_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, created TEXT NOT NULL, commit_sha TEXT NOT NULL,
    commit_dirty INTEGER NOT NULL, branch TEXT NOT NULL, device TEXT NOT NULL,
    gpu_name TEXT NOT NULL, gpu_slug TEXT NOT NULL, suite_name TEXT NOT NULL,
    suite_hash TEXT NOT NULL, torch TEXT NOT NULL, triton TEXT NOT NULL,
    driver TEXT NOT NULL, UNIQUE (created, commit_sha, gpu_slug, suite_hash)
);
CREATE TABLE case_medians (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    case_id TEXT NOT NULL, kernel TEXT NOT NULL, status TEXT NOT NULL, median REAL,
    round_medians TEXT NOT NULL, host_median REAL, min_effect REAL NOT NULL,
    kernel_hash TEXT NOT NULL, PRIMARY KEY (run_id, case_id)
);
CREATE INDEX case_medians_by_case ON case_medians (case_id);
PRAGMA user_version = 1;
"""


def test_format_1_is_read_as_is_and_migrated_by_an_append(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    first, other = data.history_runs(n=2)
    with sqlite3.connect(db) as conn:
        conn.executescript(V1_SCHEMA)
        conn.execute(
            "INSERT INTO runs VALUES (7, ?, ?, 0, 'main', 'cuda', 'H1', ?, 's', ?, 't', 't', 'd')",
            (first.created, first.environment.commit, first.environment.gpu_slug, first.suite_hash),
        )
        conn.execute(
            "INSERT INTO case_medians VALUES (7, ?, 'triton_flash', 'ok', 2e-5, '[2e-5]', NULL,"
            " 0.02, 'k')",
            (CASE,),
        )
    assert [p.run_id for p in history.trend(db, CASE).points] == [7]  # read-only: as it is
    second = replace(other, created=first.created, environment=first.environment)
    new_id = history.append(second, db)  # the old key would have called it run 7
    assert new_id != 7
    points = history.trend(db, CASE).points
    assert [p.run_id for p in points] == [7, new_id]
    assert points[0].median == pytest.approx(2e-5)  # the rebuild kept the old case rows
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.HISTORY_SCHEMA_VERSION
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "case_medians_by_time" in indexes and "case_medians_by_case" not in indexes
        old_row = "SELECT created, gpu_slug FROM case_medians WHERE run_id = 7"
        assert conn.execute(old_row).fetchone() == (first.created, first.environment.gpu_slug)


def test_format_2_is_read_within_the_limit_and_migrated_by_an_append(tmp_path: Path) -> None:
    """A format-2 file (no date or GPU in case_medians) is read as it is, its window
    chosen through ``runs``; the next append copies them in and builds the index."""
    db = tmp_path / "v2.sqlite"
    runs = data.history_runs(n=6)
    with sqlite3.connect(db) as conn:
        conn.executescript(V1_SCHEMA)
        history.migrate_to_2(conn)
        conn.execute("PRAGMA user_version = 2")
        for i, r in enumerate(runs[:5], start=1):
            env = r.environment
            conn.execute(
                "INSERT INTO runs VALUES (?, NULL, ?, ?, 0, 'main', 'cuda', 'H', ?, 's', ?,"
                " 't', 't', 'd')",
                (i, r.created, env.commit, env.gpu_slug, r.suite_hash),
            )
            conn.execute(
                "INSERT INTO case_medians VALUES (?, ?, 'k', 'ok', ?, '[]', NULL, 0.02, 'k')",
                (i, CASE, i * 1e-5),
            )
    t = history.trend(db, CASE, limit=3)
    assert [p.run_id for p in t.points] == [3, 4, 5] and t.truncated
    assert [p.median for p in t.points] == pytest.approx([3e-5, 4e-5, 5e-5])
    new_id = history.append(runs[5], db)
    t = history.trend(db, CASE, limit=3)
    assert [p.run_id for p in t.points] == [4, 5, new_id] and t.truncated
    assert len(history.trend(db, CASE, limit=None).points) == 6
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.HISTORY_SCHEMA_VERSION
        plan = " ".join(
            r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {history._POINT_SQL}", (CASE, "g", 3))
        )
    assert "case_medians_by_time" in plan


def _loosen(db: Path) -> None:
    """Drop case_medians' NOT NULL constraints, as a file written by another tool might."""
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "CREATE TABLE loose AS SELECT * FROM case_medians; DROP TABLE case_medians;"
            " ALTER TABLE loose RENAME TO case_medians;"
        )


BAD_ROWS = {
    1: ("median = 'fast'", "median is not a number ('fast')"),
    2: ("round_medians = '[1e-5, '", "round_medians is not a JSON list"),
    3: ("round_medians = '[[2e-5], [2e-5]]'", "round_medians[] is not a number ([2e-05])"),
    4: ("min_effect = NULL", "min_effect is not a fraction in [0, 1) (None)"),
    5: ("median = -2e-5", "median is not a positive time (-2e-05)"),
    6: ("median = 0", "median is not a positive time (0.0)"),
}


def test_unreadable_rows_are_skipped_and_counted(tmp_path: Path, capsys) -> None:
    """Rows that do not hold what the schema says are left out of the trend, with a
    note naming the database, how many and why; `guard history` and `guard report
    --history` still exit 0."""
    db = tmp_path / "h.sqlite"
    runs = data.history_runs(n=10)
    ids = [history.append(r, db) for r in runs]
    _loosen(db)
    with sqlite3.connect(db) as conn:
        for index, (change, _) in BAD_ROWS.items():
            conn.execute(
                f"UPDATE case_medians SET {change} WHERE run_id = ? AND case_id = ?",
                (ids[index], CASE),
            )
    t = history.trend(db, CASE)
    assert [p.run_id for p in t.points] == [i for k, i in enumerate(ids) if k not in BAD_ROWS]
    assert len(t.skipped) == len(BAD_ROWS)
    for note, (k, (_, why)) in zip(t.skipped, BAD_ROWS.items(), strict=True):
        assert note.startswith(f"run {ids[k]}: {why}"), note
    assert t.skipped_note(db).startswith(f"{db}: skipped 6 unreadable row(s) of {CASE!r}")
    assert history.trend_json(t)["skipped"] == list(t.skipped)

    from guard.commands import main as commands_main
    from guard.store import results

    assert commands_main.main(["history", CASE, "--db", str(db)]) == 0
    assert f"{db}: skipped 6 unreadable row(s)" in capsys.readouterr().err
    res = tmp_path / "r.json"
    results.save(runs[-1], res)
    assert (
        commands_main.main(
            ["report", str(res), "--history", str(db), "--html", str(tmp_path / "r.html")]
        )
        == 0
    )
    assert "skipped 6 unreadable row(s)" in capsys.readouterr().err
    assert "6 unreadable row(s) left out" in (tmp_path / "r.html").read_text()


def test_append_without_timings_stores_nothing(tmp_path: Path) -> None:
    run = data.history_runs(n=1)[0]
    untimed = replace(run, cases=tuple(replace(c, rounds=()) for c in run.cases))
    assert history.append(untimed, tmp_path / "h.sqlite") is None
    assert not (tmp_path / "h.sqlite").exists()


def test_failed_case_is_a_point_without_median(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    runs = data.history_runs(n=12, step_at=8, factor=1.2)
    broken = runs[4]
    cases = tuple(
        CaseResult(c.case, CRASHED, reason="planted") if c.id == CASE else c for c in broken.cases
    )
    runs[4] = replace(broken, cases=cases)
    for r in runs:
        history.append(r, db)
    t = history.trend(db, CASE)
    assert len(t.points) == 12 and t.points[4].median is None
    assert t.points[4].status == CRASHED
    assert [s.index for s in t.steps] == [8]  # indexes count the failed run
    assert t.steps[0].ratio == pytest.approx(1.2, rel=0.02)


def test_trend_per_gpu(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    h100 = data.history_runs(n=3)
    h200 = [
        replace(
            r,
            environment=data.env(gpu_name="NVIDIA H200", gpu_slug="nvidia-h200"),
            created=r.created.replace("2026-10", "2026-11"),
        )
        for r in data.history_runs(n=2)
    ]
    for r in (*h100, *h200):
        history.append(r, db)
    latest = history.trend(db, CASE)
    assert latest.gpu_slug == "nvidia-h200" and len(latest.points) == 2
    assert latest.gpu_slugs == ("nvidia-h200", "nvidia-h100-80gb-hbm3")
    assert len(history.trend(db, CASE, gpu_slug="nvidia-h100-80gb-hbm3").points) == 3
    assert len(history.trend(db, CASE, gpu_slug="nvidia-h100-80gb-hbm3", limit=2).points) == 2
    with pytest.raises(BadInput, match="no history on GPU 'l4'"):
        history.trend(db, CASE, gpu_slug="l4")
    only = history.trends(db, [CASE, "nope/x"], gpu_slug="nvidia-h200")
    assert list(only) == [CASE]


def test_bad_databases(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no history database"):
        history.trend(tmp_path / "missing.sqlite", CASE)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all " * 100)
    with pytest.raises(BadInput, match=r"junk\.sqlite"):
        history.trend(junk, CASE)
    with pytest.raises(BadInput, match=r"junk\.sqlite"):
        history.append(data.history_runs(n=1)[0], junk)
    newer = tmp_path / "newer.sqlite"
    history.append(data.history_runs(n=1)[0], newer)
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {history.HISTORY_SCHEMA_VERSION + 1}")
    with pytest.raises(BadInput, match="newer than this guard understands"):
        history.trend(newer, CASE)
    with pytest.raises(BadInput, match="newer than this guard understands"):
        history.append(data.history_runs(n=2)[1], newer)
    empty = tmp_path / "empty.sqlite"
    empty.touch()  # as a writer leaves it before its first commit
    with pytest.raises(BadInput, match="empty history database"):
        history.trend(empty, CASE)
    assert history.append(data.history_runs(n=1)[0], empty) == 1  # a writer makes it
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(BadInput, match="not a guard history database"):
        history.append(data.history_runs(n=1)[0], other)
    with pytest.raises(BadInput, match="alpha"):
        history.trend(newer, CASE, alpha=0.0)


def test_history_rows_flag_the_step(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    for r in data.history_runs(n=10, step_at=6, factor=1.1):
        history.append(r, db)
    t = history.trend(db, CASE)
    rows = render.history_rows(t)
    assert len(rows) == 10
    assert [i for i, r in enumerate(rows) if r[-1]] == [6]
    assert rows[6][-1].startswith("STEP slower 1.1")
    assert rows[0][5] == "—" and rows[1][5].endswith("%")
    flat = history.trend(db, FLAT)
    assert flat.steps == ()
    js = history.trend_json(t)
    assert js["steps"][0]["commit"] == t.points[6].commit and len(js["points"]) == 10


def test_a_step_names_the_commit_that_made_it_or_that_bisection_is_pending(
    tmp_path: Path, capsys
) -> None:
    db = tmp_path / "h.sqlite"
    for r in data.history_runs(n=10, step_at=6, factor=1.1):
        history.append(r, db)
    t = history.trend(db, CASE)
    [step] = t.steps
    good, bad = t.step_range(step)
    assert (good, bad) == (t.points[5].commit, t.points[6].commit)
    assert t.attribution(step) == "bisection pending"
    assert history.trend_json(t)["steps"][0]["bisection"] == "pending"
    # A bisection that ran out of steps leaves the range open.
    history.record_step_commit(db, [CASE], good=good, bad=bad, first_bad="", open_range=["a", "b"])
    t = history.trend(db, CASE)
    assert t.attribution(step) == f"between {good[:10]} and {bad[:10]}: 2 commit(s) left to bisect"
    assert history.trend_json(t)["steps"][0]["bisection"] == "open"
    culprit = "c" * 40
    history.record_step_commit(db, [CASE], good=good, bad=bad, first_bad=culprit)
    t = history.trend(db, CASE)
    assert t.attribution(step) == f"made by {culprit[:10]}"
    js = history.trend_json(t)["steps"][0]
    assert (js["bisection"], js["made_by"], js["good"]) == ("found", culprit, good)
    # Another case's step is not this one's.
    assert history.trend(db, FLAT).made_by == ()
    assert commands_main.main(["history", CASE, "--db", str(db)]) == 0
    assert f"made by {culprit[:10]}" in capsys.readouterr().out


def test_a_format_3_database_is_read_with_every_step_pending(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    for r in data.history_runs(n=10, step_at=6, factor=1.1):
        history.append(r, db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE step_commits")
        conn.execute("PRAGMA user_version = 3")
    t = history.trend(db, CASE)
    assert [t.attribution(s) for s in t.steps] == ["bisection pending"]
    history.record_step_commit(db, [CASE], good="g", bad="b", first_bad="f")  # migrates
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.HISTORY_SCHEMA_VERSION


def test_a_point_shows_the_case_time_not_the_pooled_median() -> None:
    """The history shows the number every other report shows for a run
    (``stats.case_time``: trimmed geometric mean of round medians), not the median of
    all samples pooled, which one long round can move."""
    point = history.HistoryPoint(
        run_id=1, created="2026-11-26T00:00:00", commit="abc", commit_dirty=False,
        branch="main", gpu_slug="gpu", suite_hash="h", status="ok", median=2.0e-6,
        round_medians=(1.0e-6, 1.1e-6, 1.2e-6, 1.3e-6, 9.0e-6), host_median=None,
        min_effect=0.02, kernel_hash="k",
    )  # fmt: skip
    # 20%-trimmed: the 9 µs round is dropped, so neither it nor the pooled 2 µs shows.
    assert point.time is not None and 1.1e-6 < point.time < 1.3e-6
    assert replace(point, round_medians=()).time == point.median  # an old row: as stored
    assert replace(point, median=None).time is None  # not timed
    trend = history.Trend("k/c", "gpu", (point,), ())
    assert render.history_rows(trend)[0][3] == render.fmt_time(point.time)
    assert history.trend_json(trend)["points"][0]["time_s"] == point.time


# ------------------------------------------------------ concurrency and size


def _append_after(barrier: Any, run: Any, db: Path, out: Any) -> None:
    """A writer process: wait for the others, then append; report the id or the error.
    Each schema statement is slowed (as on a busy machine), so that the others come
    while a creator is between its statements."""
    real_connect = sqlite3.connect

    def slow_schema(statement: str) -> None:
        if statement.lstrip().upper().startswith("CREATE"):
            time.sleep(0.02)

    def connect(*args: Any, **kw: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kw)
        conn.set_trace_callback(slow_schema)
        return conn

    history.sqlite3.connect = connect  # this forked process only
    barrier.wait(timeout=120)
    try:
        out.put(("ok", history.append(run, db)))
    except Exception as exc:  # every failure is the finding: report it, never a traceback
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def test_writers_creating_one_database_at_once_lose_no_run(tmp_path: Path) -> None:
    """CI jobs appending to a history file that does not exist yet: 12 processes start
    together on a fresh file, 5 times. The file gets its schema and format version in
    one transaction, so no writer finds it half made ("no format version") and every
    run is stored."""
    ctx = multiprocessing.get_context("fork")  # cheap: no re-import per process
    runs = data.history_runs(n=12)
    for trial in range(5):
        db = tmp_path / f"t{trial}" / "h.sqlite"
        barrier, out = ctx.Barrier(len(runs)), ctx.Queue()
        procs = [ctx.Process(target=_append_after, args=(barrier, r, db, out)) for r in runs]
        for proc in procs:
            proc.start()
        got = [out.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=120)
        assert [kind for kind, _ in got] == ["ok"] * len(runs), (trial, got)
        assert sorted(run_id for _, run_id in got) == list(range(1, len(runs) + 1))
        t = history.trend(db, CASE)
        assert sorted(p.commit for p in t.points) == sorted(r.environment.commit for r in runs)


def _long_history(db: Path, n: int, step_at: int) -> list[str]:
    """``n`` runs of CASE after one real run, written straight with executemany (a few
    seconds); 0.3% noise, 10% slower from run ``step_at`` on. Returns their dates."""
    first = data.history_runs(n=1)[0]
    history.append(first, db)  # the schema, at the current format
    gpu = first.environment.gpu_slug
    minutes = np.datetime64("2027-01-01T00:00") + np.arange(n) * np.timedelta64(1, "m")
    created: list[str] = np.datetime_as_string(minutes, unit="s").tolist()
    rng = np.random.default_rng(7)
    times = 2e-5 * np.where(np.arange(n) >= step_at, 1.1, 1.0) * rng.normal(1.0, 0.003, n)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA synchronous = OFF")
        conn.executemany(
            "INSERT INTO runs (id, run_key, created, commit_sha, commit_dirty, branch, device,"
            " gpu_name, gpu_slug, suite_name, suite_hash, torch, triton, driver)"
            " VALUES (?, ?, ?, ?, 0, 'main', 'cuda', 'H100', ?, 's', 'h', 't', 't', 'd')",
            ((i + 2, f"bulk{i}", created[i], f"{i:040x}", gpu) for i in range(n)),
        )
        conn.executemany(
            "INSERT INTO case_medians (run_id, case_id, kernel, status, median, round_medians,"
            " host_median, min_effect, kernel_hash, created, gpu_slug)"
            " VALUES (?, ?, 'triton_flash', 'ok', ?, ?, NULL, 0.02, 'k', ?, ?)",
            ((i + 2, CASE, t, f"[{t!r}]", created[i], gpu) for i, t in enumerate(times.tolist())),
        )
    return created


def test_a_long_history_is_read_through_the_index_and_shows_the_last_runs(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """100k runs of one case: `guard history` shows the last DEFAULT_LIMIT of them,
    chosen in SQL along the (case, GPU, date) index. Bounded by count, not by time:
    the plan searches the index with no sort, only the rows shown are turned into
    points, and the whole read costs far fewer SQLite steps than the table has rows.
    The step in that window is still found (the change-point scan runs on it)."""
    db = tmp_path / "long.sqlite"
    n, limit = 100_000, history.DEFAULT_LIMIT
    created = _long_history(db, n, step_at=n - 300)

    with sqlite3.connect(db) as conn:
        plan = " | ".join(
            r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {history._POINT_SQL}", (CASE, "g", 5))
        )
    assert "SEARCH m USING INDEX case_medians_by_time (case_id=? AND gpu_slug=?)" in plan, plan
    assert "TEMP B-TREE" not in plan and "SCAN" not in plan, plan

    made: list[int] = []  # run ids turned into points
    ticks: list[int] = []  # one per 100 SQLite VM instructions, over every query
    real_point, real_connect = history._point, sqlite3.connect

    def counted_point(row: tuple[Any, ...]) -> history.HistoryPoint:
        made.append(row[0])
        return real_point(row)

    def tick() -> int:
        ticks.append(1)
        return 0  # go on

    def counted_connect(*args: Any, **kw: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kw)
        conn.set_progress_handler(tick, 100)
        return conn

    monkeypatch.setattr(history, "_point", counted_point)
    monkeypatch.setattr(history.sqlite3, "connect", counted_connect)
    t = history.trend(db, CASE)
    assert len(made) == limit  # only the rows shown, not the 99k before them
    assert len(ticks) * 100 < n  # fewer VM instructions than rows: no scan anywhere
    assert t.truncated and len(t.points) == limit
    assert [p.created for p in t.points] == created[-limit:]  # the newest, oldest first
    assert [s.index for s in t.steps] == [limit - 300]
    assert t.steps[0].ratio == pytest.approx(1.1, rel=0.01)

    made.clear()
    assert (
        commands_main.main(["history", CASE, "--db", str(db), "--json"]) == 0
    )  # the CLI's default
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["points"]) == len(made) == limit and shown["truncated"] is True
    assert shown["steps"][0]["index"] == limit - 300


def test_history_window_flags(tmp_path: Path, capsys) -> None:
    """`--limit N` (default DEFAULT_LIMIT) shows the last N runs and says older ones
    exist; `--all` shows every run; the two together are refused."""
    db = tmp_path / "h.sqlite"
    for r in data.history_runs(n=5):
        history.append(r, db)
    assert commands_main.build_parser().parse_args(["history", CASE]).limit == history.DEFAULT_LIMIT
    base = ["history", CASE, "--db", str(db)]
    assert commands_main.main([*base, "--limit", "2"]) == 0
    assert "the last 2 runs; --all for older ones" in " ".join(capsys.readouterr().out.split())
    assert commands_main.main([*base, "--all", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert len(every["points"]) == 5 and every["truncated"] is False
    assert commands_main.main([*base, "--limit", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["truncated"] is False  # nothing older
    assert commands_main.main([*base, "--all", "--limit", "2"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(BadInput, match="limit: must be a positive count"):
        history.trend(db, CASE, limit=0)


def test_a_huge_row_is_skipped_unread_and_every_run_is_bounded(tmp_path: Path, monkeypatch) -> None:
    """A row of 5M round medians (no guard writes one: 200 rounds a case at most) is
    named and skipped, not parsed; "every run" stops at MAX_TREND_POINTS, marked cut."""
    db = tmp_path / "h.sqlite"
    runs = data.history_runs(n=6)
    ids = [history.append(r, db) for r in runs]
    huge = "[" + ",".join(["2e-05"] * 5_000_000) + "]"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE case_medians SET round_medians = ? WHERE run_id = ? AND case_id = ?",
            (huge, ids[2], CASE),
        )
    t = history.trend(db, CASE, limit=None)
    assert ids[2] not in [p.run_id for p in t.points]
    assert len(t.skipped) == 1 and "over 6400 characters, not read" in t.skipped[0]
    monkeypatch.setattr(history, "MAX_TREND_POINTS", 3)
    cut = history.trend(db, CASE, limit=None)
    assert len(cut.points) <= 3 and cut.truncated
