"""Small inline SVG plots for the HTML report, drawn from data in plain Python.

Pure functions from numbers to SVG text: no I/O, no matplotlib, no script, so the
report is one file that opens anywhere without network. Every text that comes from
data is XML-escaped here; callers may insert the result as markup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

import numpy as np

from guard.base.limits import MAX_PLOT_POINTS, MAX_PLOT_ROUNDS

# Tableau 10: distinguishable categorical colours for rounds.
ROUND_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
ARM_COLORS = {"baseline": "#78909c", "candidate": "#1e88e5"}
VERDICT_COLORS = {
    "regression": "#c62828",
    "improvement": "#2e7d32",
    "unchanged": "#546e7a",
    "inconclusive": "#ef6c00",
}
FONT = 'font-family="system-ui, sans-serif"'


def _n(x: float) -> str:
    """A coordinate: one decimal, no trailing zeros (keeps the markup small)."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'width="{_n(width)}" height="{_n(height)}" role="img" aria-label="{escape(label)}" '
        f'class="plot" {FONT} font-size="11">' + "".join(body) + "</svg>"
    )


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(target, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    i = first
    while i * step <= hi + step * 1e-9:
        ticks.append(round(i * step, 12))
        i += 1
    return ticks


def time_unit(seconds: float) -> tuple[float, str]:
    """(multiplier, unit) that writes ``seconds`` as a number between 1 and 1000."""
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if seconds * scale >= 1.0:
            return scale, unit
    return 1e9, "ns"


def fmt_tick(value: float) -> str:
    return f"{value:.6g}"


class _Scale:
    """Maps [lo, hi] onto pixels [a, b], linearly or on a log scale (lo > 0)."""

    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool = False) -> None:
        self.log = log and lo > 0
        self.lo, self.hi, self.a, self.b = lo, hi, a, b
        self._f = math.log if self.log else float

    def __call__(self, v: float) -> float:
        if self.hi == self.lo:
            return (self.a + self.b) / 2
        if self.log:
            v = max(v, self.lo * 1e-3)
        lo, hi = self._f(self.lo), self._f(self.hi)
        return self.a + (self._f(v) - lo) / (hi - lo) * (self.b - self.a)


def log_ticks(lo: float, hi: float) -> list[float]:
    """1, 2, 5 times powers of ten inside [lo, hi] (lo > 0), for a log axis."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo <= v <= hi:
                out.append(v)
    return out if len(out) >= 2 else nice_ticks(lo, hi, 5)


WIDE = 8.0  # a range wider than this factor is drawn on a log scale


def _padded(lo: float, hi: float, frac: float = 0.05) -> tuple[float, float]:
    if hi <= lo:
        pad = abs(lo) * frac or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * frac
    return lo - pad, hi + pad


def _x_axis(
    x: _Scale,
    y: float,
    ticks: Sequence[float],
    fmt: Callable[[float], str],
    label: str,
    grid_top: float,
) -> list[str]:
    out = [f'<line x1="{_n(x.a)}" y1="{_n(y)}" x2="{_n(x.b)}" y2="{_n(y)}" stroke="#444"/>']
    for t in ticks:
        px = x(t)
        if px < x.a - 0.5 or px > x.b + 0.5:
            continue
        out.append(
            f'<line x1="{_n(px)}" y1="{_n(grid_top)}" x2="{_n(px)}" y2="{_n(y)}" '
            'stroke="#e0e0e0"/>'
            f'<line x1="{_n(px)}" y1="{_n(y)}" x2="{_n(px)}" y2="{_n(y + 4)}" stroke="#444"/>'
            f'<text x="{_n(px)}" y="{_n(y + 15)}" text-anchor="middle">{escape(fmt(t))}</text>'
        )
    out.append(
        f'<text x="{_n(x.b)}" y="{_n(y + 29)}" text-anchor="end" fill="#555">{escape(label)}</text>'
    )
    return out


# ------------------------------------------------------------------ distributions


def _thinned(
    rounds: Sequence[Sequence[float]],
) -> tuple[list[tuple[int, Sequence[float]]], str]:
    """The (round index, dots) to draw for one arm: at most ``MAX_PLOT_ROUNDS`` lanes
    (evenly spaced rounds) and ``MAX_PLOT_POINTS`` dots (per lane, evenly spaced
    quantiles of the round), and a note saying what was left out ("" if nothing)."""
    n = len(rounds)
    picked = sorted({int(i) for i in np.linspace(0, n - 1, min(n, MAX_PLOT_ROUNDS)).round()})
    per_lane = max(5, MAX_PLOT_POINTS // len(picked))
    out: list[tuple[int, Sequence[float]]] = []
    cut = False
    for i in picked:
        r = rounds[i]
        if len(r) > per_lane:
            r, cut = [float(v) for v in np.quantile(r, np.linspace(0, 1, per_lane))], True
        out.append((i, r))
    notes = []
    if len(picked) < n:
        notes.append(f"{len(picked)} of {n} rounds drawn")
    if cut:
        notes.append(f"at most {per_lane} points per round (quantiles)")
    return out, ", ".join(notes)


def distribution_svg(
    arms: Sequence[tuple[str, Sequence[Sequence[float]]]], *, width: float = 760
) -> str:
    """Box plot of all samples per arm, and below it one strip per round.

    Each round (one fresh process) has its own lane and colour, with its median as a
    dark tick, so a round that ran slow stands out from noise within rounds.
    ``arms``: (name, rounds of per-call seconds), e.g. baseline then candidate.
    Big arms are thinned (``_thinned``) and the plot says so under its axis.
    Returns "" when no arm holds samples.
    """
    drawn = [(name, [list(r) for r in rounds if len(r)]) for name, rounds in arms]
    drawn = [(name, rounds) for name, rounds in drawn if rounds]
    if not drawn:
        return ""
    values = np.concatenate([np.asarray(r, dtype=float) for _, rs in drawn for r in rs])
    scale, unit = time_unit(float(np.median(values)))
    left, right = 118.0, 16.0
    vmin, vmax = float(values.min()) * scale, float(values.max()) * scale
    log = vmax / vmin > WIDE
    if log:
        lo, hi = vmin / 1.08, vmax * 1.08
    else:
        lo, hi = _padded(vmin, vmax, 0.04)
    x = _Scale(lo, hi, left, width - right, log=log)
    box_h, lane_h, gap = 18.0, 10.0, 14.0
    body: list[str] = []
    y = 8.0
    grid_top = y
    cut_notes = []
    for name, rounds in drawn:
        color = ARM_COLORS.get(name, "#1e88e5")
        arr = np.concatenate([np.asarray(r, dtype=float) for r in rounds]) * scale
        q1, med, q3 = (float(v) for v in np.percentile(arr, [25, 50, 75]))
        iqr = q3 - q1
        w_lo = float(arr[arr >= q1 - 1.5 * iqr].min())
        w_hi = float(arr[arr <= q3 + 1.5 * iqr].max())
        cy = y + box_h / 2
        body.append(
            f"<g><title>{escape(name)}: {len(arr)} samples in {len(rounds)} rounds; "
            f"median {fmt_tick(med)} {unit}, IQR {fmt_tick(q1)}–{fmt_tick(q3)} {unit}</title>"
            f'<text x="4" y="{_n(cy + 4)}" font-weight="600">{escape(name)}</text>'
            f'<line x1="{_n(x(w_lo))}" y1="{_n(cy)}" x2="{_n(x(w_hi))}" y2="{_n(cy)}" '
            f'stroke="{color}"/>'
            f'<line x1="{_n(x(w_lo))}" y1="{_n(cy - 5)}" x2="{_n(x(w_lo))}" y2="{_n(cy + 5)}" '
            f'stroke="{color}"/>'
            f'<line x1="{_n(x(w_hi))}" y1="{_n(cy - 5)}" x2="{_n(x(w_hi))}" y2="{_n(cy + 5)}" '
            f'stroke="{color}"/>'
            f'<rect x="{_n(x(q1))}" y="{_n(y + 2)}" width="{_n(max(x(q3) - x(q1), 1.0))}" '
            f'height="{_n(box_h - 4)}" fill="{color}" fill-opacity="0.25" stroke="{color}"/>'
            f'<line x1="{_n(x(med))}" y1="{_n(y + 1)}" x2="{_n(x(med))}" '
            f'y2="{_n(y + box_h - 1)}" stroke="{color}" stroke-width="3"/></g>'
        )
        y += box_h + 2
        lanes, note = _thinned(rounds)
        if note:
            cut_notes.append(f"{name}: {note}")
        for i, r in lanes:
            rc = ROUND_COLORS[i % len(ROUND_COLORS)]
            ly = y + lane_h / 2
            rmed = float(np.median(rounds[i])) * scale
            dots = "".join(
                f'<circle cx="{_n(x(v * scale))}" cy="{_n(ly + ((j % 3) - 1) * 1.8)}" r="2.2"/>'
                for j, v in enumerate(r)
            )
            body.append(
                f'<g class="round"><title>{escape(name)} round {i + 1}: {len(rounds[i])} '
                f"samples, median {fmt_tick(rmed)} {unit}</title>"
                f'<text x="{_n(left - 6)}" y="{_n(ly + 3)}" text-anchor="end" font-size="9" '
                f'fill="#666">round {i + 1}</text>'
                f'<g fill="{rc}" fill-opacity="0.75">{dots}</g>'
                f'<line x1="{_n(x(rmed))}" y1="{_n(y)}" x2="{_n(x(rmed))}" y2="{_n(y + lane_h)}" '
                'stroke="#222" stroke-width="1.5"/></g>'
            )
            y += lane_h
        y += gap
    axis_y = y - gap + 6
    ticks = log_ticks(lo, hi) if log else nice_ticks(lo, hi, 6)
    axis_label = f"time per call ({unit}{', log scale' if log else ''})"
    body = _x_axis(x, axis_y, ticks, fmt_tick, axis_label, grid_top) + body
    height = axis_y + 34
    if cut_notes:
        body.append(
            f'<text x="4" y="{_n(height + 4)}" fill="#555" class="cut">thinned: '
            f"{escape('; '.join(cut_notes))}</text>"
        )
        height += 16
    label = "per-call times: " + ", ".join(f"{name} ({len(rs)} rounds)" for name, rs in drawn)
    return _svg(width, height, body, label)


# ----------------------------------------------------------------------- ratio


def ratio_svg(
    ratio: float,
    low: float,
    high: float,
    min_effect: float,
    *,
    verdict: str = "",
    confidence: float | None = None,
    width: float = 760,
) -> str:
    """The ratio (candidate / baseline) and its interval against the band
    [1 - min_effect, 1 + min_effect], which is shaded. Log axis (ratios are symmetric
    there); an interval reaching past a factor ``WIDE`` of the band is cut, with an arrow.
    """
    band_lo, band_hi = 1.0 - min_effect, 1.0 + min_effect
    # Keep the axis positive (log scale) even for bands of 50% and more.
    near_lo = min(ratio, max(1.0 - 2 * min_effect, band_lo / 2))
    near_hi = max(ratio, 1.0 + 2 * min_effect)
    lo = max(min(low, near_lo), near_lo / WIDE) / 1.03
    hi = min(max(high, near_hi), near_hi * WIDE) * 1.03
    left, right, top = 118.0, 16.0, 8.0
    x = _Scale(lo, hi, left, width - right, log=True)
    mid = top + 16
    color = VERDICT_COLORS.get(verdict, "#333")
    level = f" at {confidence * 100:.2f}%" if confidence is not None else ""
    x_low, x_high = x(max(low, lo)), x(min(high, hi))
    caps = []
    for value, px, sign in ((low, x_low, -1), (high, x_high, 1)):
        if lo <= value <= hi:
            caps.append(
                f'<line x1="{_n(px)}" y1="{_n(mid - 7)}" x2="{_n(px)}" y2="{_n(mid + 7)}" '
                f'stroke="{color}" stroke-width="2"/>'
            )
        else:  # cut: an arrow head pointing off the axis
            caps.append(
                f'<path d="M{_n(px + sign * 8)},{_n(mid)}l{-sign * 9},-6v12z" fill="{color}"/>'
            )
    body = [
        f'<rect x="{_n(x(band_lo))}" y="{_n(top)}" width="{_n(x(band_hi) - x(band_lo))}" '
        f'height="32" fill="#c8e6c9" fill-opacity="0.6"><title>band ±{min_effect * 100:g}%: '
        "changes inside it are too small to matter</title></rect>",
        f'<line x1="{_n(x(1.0))}" y1="{_n(top)}" x2="{_n(x(1.0))}" y2="{_n(top + 32)}" '
        'stroke="#555" stroke-dasharray="3 3"/>',
        f'<text x="4" y="{_n(mid + 4)}" font-weight="600">ratio</text>',
        f"<g><title>ratio {ratio:.4f}× (candidate / baseline), interval "
        f"[{low:.4g}, {high:.4g}]{escape(level)}</title>"
        f'<line x1="{_n(x_low)}" y1="{_n(mid)}" x2="{_n(x_high)}" y2="{_n(mid)}" '
        f'stroke="{color}" stroke-width="4" stroke-linecap="butt"/>' + "".join(caps) + ""
        f'<circle cx="{_n(x(ratio))}" cy="{_n(mid)}" r="5" fill="#fff" stroke="{color}" '
        'stroke-width="2.5"/></g>',
    ]
    ticks = log_ticks(lo, hi) if hi / lo > 3 else nice_ticks(lo, hi, 6)
    body = _x_axis(x, top + 36, ticks, lambda t: f"{t:.4g}×", "candidate / baseline", top) + body
    label = f"ratio {ratio:.3f}, interval {low:.3g} to {high:.3g}, band ±{min_effect * 100:g}%"
    return _svg(width, top + 36 + 34, body, label)


# ----------------------------------------------------------------------- trend


def trend_svg(
    labels: Sequence[str],
    values: Sequence[float | None],
    *,
    titles: Sequence[str] = (),
    steps: Sequence[tuple[int, str, bool]] = (),
    segments: Sequence[tuple[int, int, float]] = (),
    width: float = 760,
    height: float = 220,
) -> str:
    """A line chart of seconds per call over runs (oldest left).

    ``labels``: one per point (a short commit); ``values``: None for a run in which
    the case failed (drawn as a red cross on the axis); ``steps``: (index of the first
    point after the step, text, slower?); ``segments``: (start, end, median seconds)
    drawn as dashed levels between steps. Returns "" without points.
    """
    n = len(values)
    if n == 0:
        return ""
    known = [v for v in values if v is not None] + [s[2] for s in segments]
    if not known:
        known = [1e-3]
    scale, unit = time_unit(float(np.median(known)))
    lo, hi = _padded(min(known) * scale, max(known) * scale, 0.12)
    left, right, top, bottom = 64.0, 16.0, 18.0, 58.0
    plot_bottom = height - bottom
    x = _Scale(0, max(n - 1, 1), left + 10, width - right - 10)
    if n == 1:
        x = _Scale(0, 0, left, width - right)
    y = _Scale(lo, hi, plot_bottom, top)
    body: list[str] = []
    for t in nice_ticks(lo, hi, 5):
        py = y(t)
        if py < top - 0.5 or py > plot_bottom + 0.5:
            continue
        body.append(
            f'<line x1="{_n(left)}" y1="{_n(py)}" x2="{_n(width - right)}" y2="{_n(py)}" '
            f'stroke="#e0e0e0"/><text x="{_n(left - 6)}" y="{_n(py + 4)}" '
            f'text-anchor="end">{escape(fmt_tick(t))}</text>'
        )
    body.append(
        f'<line x1="{_n(left)}" y1="{_n(plot_bottom)}" x2="{_n(width - right)}" '
        f'y2="{_n(plot_bottom)}" stroke="#444"/>'
        f'<text x="6" y="{_n(top - 6)}" fill="#555">{unit} per call</text>'
    )
    for start, end, level in segments:
        if end <= start:
            continue
        body.append(
            f'<line x1="{_n(x(start))}" y1="{_n(y(level * scale))}" x2="{_n(x(end - 1))}" '
            f'y2="{_n(y(level * scale))}" stroke="#90a4ae" stroke-width="2" '
            'stroke-dasharray="6 3"/>'
        )
    for index, text, slower in steps:
        if not 0 < index < n:
            continue
        px = (x(index - 1) + x(index)) / 2
        color = VERDICT_COLORS["regression" if slower else "improvement"]
        body.append(
            f'<g class="step"><title>{escape(text)}</title>'
            f'<line x1="{_n(px)}" y1="{_n(top)}" x2="{_n(px)}" y2="{_n(plot_bottom)}" '
            f'stroke="{color}" stroke-width="1.5" stroke-dasharray="4 3"/>'
            f'<text x="{_n(px + 3)}" y="{_n(top + 10)}" fill="{color}" font-weight="600">'
            f"{escape(text.split(':')[0])}</text></g>"
        )
    path = []
    for i, v in enumerate(values):
        if v is None:
            path.append("")
            continue
        path.append(f"{_n(x(i))},{_n(y(v * scale))}")
    runs: list[list[str]] = [[]]
    for pt in path:
        if pt:
            runs[-1].append(pt)
        elif runs[-1]:
            runs.append([])
    for r in runs:
        if len(r) > 1:
            body.append(
                f'<polyline points="{" ".join(r)}" fill="none" stroke="#1e88e5" '
                'stroke-width="1.5"/>'
            )
    every = max(1, math.ceil(n / 14))
    for i, v in enumerate(values):
        px = x(i)
        tip = escape(titles[i]) if i < len(titles) else ""
        if v is None:
            py = plot_bottom
            body.append(
                f'<g><title>{tip}</title><path d="M{_n(px - 4)},{_n(py - 4)}l8,8m0,-8l-8,8" '
                'stroke="#c62828" stroke-width="2"/></g>'
            )
        else:
            body.append(
                f'<circle cx="{_n(px)}" cy="{_n(y(v * scale))}" r="3" fill="#1e88e5">'
                f"<title>{tip}</title></circle>"
            )
        if i % every == 0 or i == n - 1:
            ly = plot_bottom + 12
            label = labels[i] if i < len(labels) else ""
            body.append(
                f'<text x="{_n(px)}" y="{_n(ly)}" text-anchor="end" font-size="9" '
                f'transform="rotate(-35 {_n(px)} {_n(ly)})">{escape(label)}</text>'
            )
    return _svg(width, height, body, f"history of {n} runs")
