"""Bar and line charts as inline SVG, drawn on the server from figure rows."""
from __future__ import annotations

import math
from typing import Callable

from markupsafe import Markup

from gpu_tenancy.dashboard import svg

W, H, LEFT, BOTTOM, TOP = 560, 220, 48, 44, 12
PALETTE = ("#4a90d9", "#e8a33d", "#3c9a5f", "#9b59b6", "#c0392b")


def _scale(top: float) -> float:
    """A round axis maximum at or above `top` (1, 2, 2.5 or 5 times a power of ten)."""
    if top <= 0:
        return 1
    magnitude = 10 ** math.floor(math.log10(top))
    return next(nice * magnitude for nice in (1, 2, 2.5, 5, 10) if top <= nice * magnitude)


# a duration axis counts in the largest unit it spans twice, so its five ticks differ and read
# as people say them (0, 15, 30, 45, 60 min; 0, 12, 24, 36, 48 h), not as "0 min" five times
DURATION_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def duration_axis(longest: float) -> tuple[float, Callable[[float], str]]:
    """The axis maximum (seconds) at or above `longest` seconds, and its tick labels."""
    size, unit = next(((size, unit) for size, unit in DURATION_UNITS if longest >= 2 * size), (1, "s"))
    step = _scale(longest / size / 4)   # four round steps (never 6.25), none below a second
    step = max(step, 1) if size == 1 else step
    return 4 * step * size, lambda seconds: f"{seconds / size:g} {unit}"


def _axis(values: list[float], fmt, seconds: bool, top: float | None = None):
    """The axis maximum and the tick labels' format."""
    if seconds:
        return duration_axis(max(values, default=0))
    return top or _scale(max(values, default=0)), fmt


def _frame(parts: list[str], top: float, fmt) -> None:
    for i in range(5):
        value = top * i / 4
        y = H - BOTTOM - (H - BOTTOM - TOP) * i / 4
        parts.append(svg.line(LEFT, y, W - 8, y, stroke="#e3e7eb"))
        parts.append(svg.text(LEFT - 4, y + 4, fmt(value), class_="axis", text_anchor="end"))


def _labels(parts: list[str], labels: list[str], xs: list[float]) -> None:
    room = max(1, int((W - 8 - LEFT) // (7 * max((len(label) for label in labels), default=1) + 12)))
    every = max(1, math.ceil(len(labels) / room))
    for i, (label, x) in enumerate(zip(labels, xs)):
        if i % every == 0:
            parts.append(svg.text(x, H - BOTTOM + 14, label, class_="axis", text_anchor="middle"))


def _legend(parts: list[str], series: list[tuple[str, str]]) -> None:
    x = LEFT
    for i, (_, label) in enumerate(series):
        parts.append(svg.rect(x, H - 14, 10, 10, fill=PALETTE[i % len(PALETTE)]))
        parts.append(svg.text(x + 14, H - 5, label, class_="axis"))
        x += 24 + 7 * len(label)


def bars(rows: list[dict], x_key: str, series: list[tuple[str, str]], fmt=lambda v: f"{v:g}",
         label=lambda v: str(v), seconds: bool = False) -> Markup:
    """Grouped bars: one group per row, one bar per series (key, legend). `seconds`: the values
    are durations, and the axis counts them in a unit that suits their size."""
    values = [row.get(k) or 0 for row in rows for k, _ in series]
    top, tick = _axis(values, fmt, seconds)
    parts: list[str] = []
    _frame(parts, top, tick)
    group = (W - 8 - LEFT) / max(len(rows), 1)
    width = min(28, group * 0.8 / len(series))
    centres = []
    for i, row in enumerate(rows):
        x0 = LEFT + i * group + (group - width * len(series)) / 2
        centres.append(LEFT + i * group + group / 2)
        for j, (key, name) in enumerate(series):
            value = row.get(key)
            h = (H - BOTTOM - TOP) * (value or 0) / top
            parts.append(svg.rect(x0 + j * width, H - BOTTOM - h, width - 2, h, fill=PALETTE[j % len(PALETTE)],
                                  title=f"{label(row[x_key])}: {name} {fmt(value) if value is not None else 'n/a'}"))
    _labels(parts, [label(r[x_key]) for r in rows], centres)
    _legend(parts, series)
    return svg.document(W, H, parts, ", ".join(name for _, name in series))


def lines(rows: list[dict], x_key: str, series: list[tuple[str, str]], fmt=lambda v: f"{v:g}",
          label=lambda v: str(v), top: float | None = None, seconds: bool = False) -> Markup:
    """One line per series; a point per row (missing values leave a gap). `seconds`: as for bars."""
    values = [row.get(k) or 0 for row in rows for k, _ in series]
    top, tick = _axis(values, fmt, seconds, top)
    parts: list[str] = []
    _frame(parts, top, tick)
    step = (W - 8 - LEFT) / max(len(rows) - 1, 1)
    xs = [LEFT + i * step for i in range(len(rows))]
    for j, (key, name) in enumerate(series):
        colour = PALETTE[j % len(PALETTE)]
        run: list[tuple[float, float]] = []
        for x, row in zip(xs, rows):
            value = row.get(key)
            if value is None:
                if len(run) > 1:
                    parts.append(svg.polyline(run, fill="none", stroke=colour, stroke_width="2"))
                run = []
                continue
            y = H - BOTTOM - (H - BOTTOM - TOP) * value / top
            run.append((x, y))
            if len(rows) <= 60:
                parts.append(svg.circle(x, y, 3, fill=colour, title=f"{label(row[x_key])}: {name} {fmt(value)}"))
        if len(run) > 1:
            parts.append(svg.polyline(run, fill="none", stroke=colour, stroke_width="2"))
    _labels(parts, [label(r[x_key]) for r in rows], xs)
    _legend(parts, series)
    return svg.document(W, H, parts, ", ".join(name for _, name in series))


def cdf(series: list[tuple[str, list[list[float]]]]) -> Markup:
    """Cumulative distributions of waits, one line per series of [seconds, share] points (a
    what-if's current and proposed): the share of leases that waited at most each wait."""
    longest = max((p[0] for _, points in series for p in points), default=0)
    right, tick = duration_axis(longest)
    parts: list[str] = []
    _frame(parts, 1, lambda v: f"{v * 100:.0f}%")
    span_x = W - 8 - LEFT
    for i in range(5):
        parts.append(svg.text(LEFT + span_x * i / 4, H - BOTTOM + 14, tick(right * i / 4), class_="axis",
                              text_anchor="middle"))
    for j, (_name, points) in enumerate(series):
        xy = [(LEFT + span_x * s / right, H - BOTTOM - (H - BOTTOM - TOP) * share) for s, share in points]
        if xy:
            steps = [xy[0]] + [q for a, b in zip(xy, xy[1:]) for q in ((b[0], a[1]), b)]
            parts.append(svg.polyline(steps, fill="none", stroke=PALETTE[j % len(PALETTE)], stroke_width="2"))
    _legend(parts, [(name, name) for name, _ in series])
    return svg.document(W, H, parts, "wait CDF: " + ", ".join(name for name, _ in series))
