"""Step (change-point) detection in a case's history of medians: pure code, no I/O.

Plain sequences in (positive times, oldest first), frozen dataclasses out
(``Step``). ``guard.store.history`` feeds it the timed medians of one case on one GPU;
nothing here knows about SQLite, runs or cases.

How: binary segmentation with t-tests
-------------------------------------
A history is short (tens to a few hundred commits) and each point is already a
median of several rounds, so an exhaustive scan of every split is cheap and exact.
``detect_steps`` is binary segmentation in the spirit of asv's ``step_detect``:
in a segment, every split leaving at least ``min_size`` points on each side is
scored with Student's two-sample t statistic (pooled variance) on the log medians,
all splits at once from cumulative sums; the largest |t| is the least-squares
location of a mean shift (what ``ruptures.Binseg`` with its "l2" cost finds). That
split is a step when its p-value (``scipy.stats.t``), Bonferroni-corrected for the
number of splits scanned, is below ``alpha`` *and* the segment medians differ by at
least ``min_effect`` (the guard's own threshold, so that history flags what a PR
check would fail on, not every significant wobble). Both halves are then scanned
again. A segment with no single step is also scanned for a run that differs from
what lies on both sides of it (a dip and back: every single split mixes the two levels
on one side, so binary segmentation alone misses it): every interval of at least
``min_size`` points, inside against outside, at ``alpha / INTERVAL_SHARE`` with
Bonferroni over the intervals; both its ends are steps. On flat noise this keeps false
steps under ``alpha`` per scanned segment
(Bonferroni over correlated splits is conservative). The pooled variance (noise is
a property of the machine, alike on both sides of a step) gives the power to see a
step three commits back; medians (not means) measure the effect, so a single 3x
outlier commit is no step.

Why not a library (docs/notes/changepoints.md, ``benchmarks/changepoint_study.py``):
on synthetic histories like ours (30 and 100 runs, 0.5% and 1.5% noise, planted 2%
and 5% steps), at the same false-alarm rate on flat histories, ``ruptures`` Pelt or
Binseg (l2 cost; the penalty scaled by a noise estimate from the history, as CI would
have to) found fewer steps: 313 vs 342 of 800 two-percent steps, 775 vs 794 of 800
five-percent steps, the loss in short noisy histories; it matches this only when told
the true noise. Apache Otava's default analysis found about as many or fewer, and its
wheel pins ``numpy==2.2.0.*`` and pulls BigQuery, Slack and Postgres clients. The
cost of this method: after a real step, each half is tested again at ``alpha``, so a
stepped history shows more false extra steps than a flat one (43 vs ruptures' 21 in
1600 stepped histories).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = ["Step", "detect_steps"]


@dataclass(frozen=True)
class Step:
    """A step change: ``index`` is the first point after it."""

    index: int
    before: float  # median of the segment before
    after: float  # median of the segment after
    p_value: float  # Bonferroni-adjusted over the splits scanned

    @property
    def ratio(self) -> float:
        return self.after / self.before

    @property
    def kind(self) -> str:
        return "slower" if self.after > self.before else "faster"


def _best_split(logs: np.ndarray, min_size: int) -> tuple[int, float, int]:
    """(split, two-sided p-value, splits scanned) of the split with the largest |t|.

    Student's two-sample t with pooled variance, for every split at once from
    cumulative sums; maximising |t| is minimising the two segments' summed squared
    error, i.e. the least-squares location of a single mean shift.
    """
    n = logs.size
    k = np.arange(min_size, n - min_size + 1)
    y = logs - logs.mean()  # centred, so the sums below keep their precision
    cs, cs2 = np.cumsum(y), np.cumsum(y * y)
    n1, n2 = k.astype(float), (n - k).astype(float)
    s1 = cs[k - 1]
    s2 = cs[-1] - s1
    diff = s2 / n2 - s1 / n1
    sse = np.maximum(cs2[-1] - s1**2 / n1 - s2**2 / n2, 0.0)
    scale = np.sqrt(sse / (n - 2) * (1.0 / n1 + 1.0 / n2))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale > 0, np.abs(diff) / scale, np.where(diff != 0, np.inf, 0.0))
    best = int(np.argmax(t))
    p = float(2.0 * sps.t.sf(t[best], df=n - 2))
    return int(k[best]), p, int(k.size)


# Segments up to this long are also scanned for a run that differs from what lies on
# both sides of it (two steps, there and back): an (n+1)^2 table of sums.
MAX_INTERVAL_SCAN = 2000
INTERVAL_SHARE = 4  # the interval scan is held to alpha / INTERVAL_SHARE


def _best_interval(logs: np.ndarray, min_size: int) -> tuple[int, int, float, int]:
    """(start, end, two-sided p-value, intervals scanned) of the run ``[start, end)``
    that differs most from the rest of the segment (``rest`` on both sides of it).

    A single split cannot see such a run (a dip and back, a regression fixed later):
    the segments on either side of any one split mix both levels. Student's t with
    pooled variance, inside against outside, for every interval of at least
    ``min_size`` points that leaves at least one point on each side and ``min_size``
    outside in all.
    """
    n = logs.size
    y = logs - logs.mean()
    cs = np.concatenate(([0.0], np.cumsum(y)))
    total2 = float(np.sum(y * y))
    a = np.arange(n + 1)[:, None]
    b = np.arange(n + 1)[None, :]
    n_in = (b - a).astype(float)
    n_out = n - n_in
    valid = (a >= 1) & (b <= n - 1) & (n_in >= min_size) & (n_out >= min_size)
    if not valid.any():
        return 0, 0, 1.0, 0
    with np.errstate(divide="ignore", invalid="ignore"):
        s_in = cs[None, :] - cs[:, None]
        s_out = cs[-1] - s_in
        diff = s_in / n_in - s_out / n_out
        sse = np.maximum(total2 - s_in**2 / n_in - s_out**2 / n_out, 0.0)
        scale = np.sqrt(sse / (n - 2) * (1.0 / n_in + 1.0 / n_out))
        t = np.where(scale > 0, np.abs(diff) / scale, np.where(diff != 0, np.inf, 0.0))
    t = np.where(valid, t, -1.0)
    flat = int(np.argmax(t))
    start, end = divmod(flat, n + 1)
    p = float(2.0 * sps.t.sf(t.flat[flat], df=n - 2))
    return start, end, p, int(valid.sum())


def detect_steps(
    values: Sequence[float],
    *,
    alpha: float = 0.01,
    min_effect: float = 0.02,
    min_size: int = 3,
) -> tuple[Step, ...]:
    """Step changes in a series of positive times (oldest first); see the module doc.

    ``min_size``: fewest points on each side of a step (a step in the last one or two
    commits cannot be told from an outlier, so it is reported once more runs exist).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must lie in (0, 1)")
    if min_size < 2:
        raise ValueError("min_size must be at least 2 (a t-test needs two points a side)")
    x = np.asarray(values, dtype=float)
    if x.size and (not np.all(np.isfinite(x)) or np.any(x <= 0)):
        raise ValueError("history values must be finite positive times")
    logs = np.log(x)
    found: list[Step] = []
    pending = [(0, int(x.size))]
    while pending:
        lo, hi = pending.pop()
        if hi - lo < 2 * min_size:
            continue
        k, p, scanned = _best_split(logs[lo:hi], min_size)
        split = lo + k
        adjusted = min(1.0, p * scanned)
        before = float(np.median(x[lo:split]))
        after = float(np.median(x[split:hi]))
        if adjusted < alpha and abs(after / before - 1.0) >= min_effect:
            found.append(Step(split, before, after, adjusted))
            pending += [(lo, split), (split, hi)]
            continue
        if hi - lo > MAX_INTERVAL_SCAN:
            continue
        a, b, p, scanned = _best_interval(logs[lo:hi], min_size)
        # A second scan of the same segment: its own share of alpha, so that the two
        # together keep false steps on flat noise under alpha.
        adjusted = min(1.0, p * scanned * INTERVAL_SHARE)
        inside = float(np.median(x[lo + a : lo + b]))
        outside = float(np.median(np.concatenate((x[lo : lo + a], x[lo + b : hi]))))
        if scanned and adjusted < alpha and abs(inside / outside - 1.0) >= min_effect:
            found.append(Step(lo + a, outside, inside, adjusted))
            found.append(Step(lo + b, inside, outside, adjusted))
            pending += [(lo, lo + a), (lo + a, lo + b), (lo + b, hi)]
    # Report each step against its neighbouring segments, not the halves it split.
    found.sort(key=lambda s: s.index)
    edges = [0, *(s.index for s in found), int(x.size)]
    return tuple(
        Step(
            s.index,
            float(np.median(x[edges[i] : s.index])),
            float(np.median(x[s.index : edges[i + 2]])),
            s.p_value,
        )
        for i, s in enumerate(found)
    )
