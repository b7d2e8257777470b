"""The report's plots as inline SVG text, drawn here with the standard library only: a line chart (curves over time
or along a graph, a dashed threshold, marked points), horizontal bars (one figure per path) and latency ranges
(min to max, the p50-p90 box, p99 and mean marks, each repeat's p50 as a dot). Every label is escaped: names come
from records."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

BLUE, ORANGE, RED, GREEN, GREY, INK = "#1f6fb4", "#e07b10", "#c62828", "#2e7d32", "#d0d0d0", "#222"
PALETTE = (BLUE, ORANGE, GREEN, "#7b1fa2", "#00838f", "#6d4c41")
PATH_COLOURS = {"npu": BLUE, "cpu": ORANGE}


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    colour: str = BLUE
    marked: Sequence[bool] = ()  # points drawn red (bad probes)


@dataclass(frozen=True)
class Range:
    """One row of a latency range plot, in one unit; None where a figure was not measured."""

    label: str
    low: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    high: float | None
    mean: float | None = None
    dots: Sequence[float] = field(default_factory=tuple)
    colour: str = BLUE


def colour(name: str, index: int = 0) -> str:
    return PATH_COLOURS.get(name.lower(), PALETTE[index % len(PALETTE)])


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering lo..hi."""
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)) or hi <= lo:
        return [lo, hi] if hi > lo else [lo]
    raw = (hi - lo) / count
    power = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 0.0  # a subnormal span: raw may round to 0
    if power == 0 or lo + power == lo:  # steps a float cannot tell apart (figures near 2**53 and above, or 1e-323)
        return [lo, hi]
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    if not math.isfinite(first):  # rounding -1.8e308 down to a step is past the float range
        first = lo
    out = [round(first + i * step, 12) for i in range(3 * count)]  # by index: a sum could stall past 2**53
    out = [v for v in out if v <= hi + step * 1e-9 and math.isfinite(v)] or [lo]  # past 1.8e308 a tick is Infinity
    if out[-1] < hi:
        out.append(min(round(out[-1] + step, 12), sys.float_info.max))
    return out


def label(value: float) -> str:
    """A tick or value label: few digits, no trailing zeros."""
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{value:.1e}"
    return f"{value:.3g}" if magnitude < 100 else f"{value:.0f}"


def _share(value: float, lo: float, hi: float) -> float:
    """Where value lies from lo (0) to hi (1), halved first so that no difference overflows (records are data:
    1e308 is a valid JSON number); the middle (0.5) on an axis of no width (a span that rounds to 0), and never
    further off than the axis' length either side."""
    span = hi / 2 - lo / 2
    if span > 0:
        share = (value / 2 - lo / 2) / span
    else:
        span = hi - lo  # subnormal ends: halving them may have lost the difference
        share = (value - lo) / span if span > 0 else 0.5
    return max(-1.0, min(share, 2.0))  # a figure far off the axis (-1 on an axis of 0 to 1e-323) stays a number


def _widened(lo: float, hi: float) -> tuple[float, float]:
    """lo..hi with room either side when it has no width a float can tell: one value, however large (1e300 - 1 is
    1e300), or figures a float cannot tell apart (2**53 + 1 is 2**53)."""
    if hi > lo and lo + (hi - lo) / 8 > lo:
        return lo, hi
    pad = max(1.0, abs(lo) / 100, abs(hi) / 100)
    return max(lo - pad, -sys.float_info.max), min(hi + pad, sys.float_info.max)


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">'
            f"<title>{escape(title)}</title>{''.join(body)}</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{INK}"{extra}>'
            f"{escape(text)}</text>")


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               threshold: float | None = None, width: int = 640, height: int = 260) -> str:
    """Each series' points joined by a line (sorted by x), marked points red, `threshold` a dashed red line."""
    left, right, top, bottom = 60, width - 16, 28, height - 40
    points = [p for s in series for p in s.points if math.isfinite(p[0]) and math.isfinite(p[1])]
    ys = [y for _, y in points] + ([threshold] if threshold is not None else [])
    xs = [x for x, _ in points]
    lo_y, hi_y = _widened(*((min(ys), max(ys)) if ys else (0.0, 1.0)))
    y_ticks = ticks(lo_y, hi_y)
    lo_y, hi_y = min(y_ticks[0], lo_y), max(y_ticks[-1], hi_y)
    lo_x, hi_x = _widened(*((min(xs), max(xs)) if xs else (0.0, 1.0)))
    x_ticks = [t for t in ticks(lo_x, hi_x) if lo_x <= t <= hi_x] or [lo_x]

    def px(x: float) -> float:
        return left + _share(x, lo_x, hi_x) * (right - left)

    def py(y: float) -> float:
        return bottom - _share(y, lo_y, hi_y) * (bottom - top)

    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for t in y_ticks:
        body.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{right}" y2="{py(t):.1f}" stroke="{GREY}"/>')
        body.append(_text(left - 6, py(t) + 4, label(t), "end"))
    for t in x_ticks:
        body.append(f'<line x1="{px(t):.1f}" y1="{bottom}" x2="{px(t):.1f}" y2="{bottom + 4}" stroke="{INK}"/>')
        body.append(_text(px(t), bottom + 16, label(t), "middle"))
    body.append(f'<polyline points="{left},{top} {left},{bottom} {right},{bottom}" fill="none" stroke="{INK}"/>')
    body.append(_text((left + right) / 2, height - 6, x_label, "middle"))
    body.append(_text(12, (top + bottom) / 2, y_label, "middle",
                      f' transform="rotate(-90 12 {(top + bottom) / 2:.1f})"'))
    if threshold is not None:
        body.append(f'<line x1="{left}" y1="{py(threshold):.1f}" x2="{right}" y2="{py(threshold):.1f}" '
                    f'stroke="{RED}" stroke-dasharray="6 4"/>')
        body.append(_text(right, py(threshold) - 4, f"threshold {label(threshold)}", "end"))
    legend_x = left
    for s in series:
        pts = sorted((x, y, bool(s.marked[i]) if i < len(s.marked) else False)
                     for i, (x, y) in enumerate(s.points) if math.isfinite(x) and math.isfinite(y))
        if len(pts) > 1:
            line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in pts)
            body.append(f'<polyline points="{line}" fill="none" stroke="{s.colour}" stroke-width="2"/>')
        for x, y, bad in pts:
            body.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{RED if bad else s.colour}"/>')
        if len(series) > 1 or s.name:
            body.append(f'<rect x="{legend_x}" y="8" width="10" height="10" fill="{s.colour}"/>')
            body.append(_text(legend_x + 14, 17, s.name))
            legend_x += 24 + 7 * len(s.name)
    return _svg(width, height, title, body)


def bars(rows: Sequence[tuple[str, float | None, str]], *, title: str, unit: str, width: int = 640) -> str:
    """One horizontal bar per (label, value, colour), from 0; a value that was not measured is said so."""
    height = 24 + 28 * len(rows) + 24
    left, right = 120, width - 90
    known = [v for _, v, _ in rows if v is not None and math.isfinite(v)]
    hi = max(known, default=1.0) or 1.0
    axis = ticks(0.0, hi)
    hi = axis[-1] or 1.0
    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    base = 24 + 28 * len(rows)
    for t in axis:
        x = left + t / hi * (right - left)
        body.append(f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{base}" stroke="{GREY}"/>')
        body.append(_text(x, base + 14, label(t), "middle"))
    for i, (name, value, fill) in enumerate(rows):
        y = 20 + 28 * i
        body.append(_text(left - 8, y + 14, name, "end"))
        if value is None or not math.isfinite(value):
            body.append(_text(left + 4, y + 14, "not measured"))
            continue
        w = max(value / hi * (right - left), 1.0)
        body.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="20" fill="{fill}"/>')
        body.append(_text(left + w + 6, y + 14, f"{label(value)} {unit}"))
    return _svg(width, height, title, body)


def ranges(rows: Sequence[Range], *, title: str, unit: str, width: int = 640) -> str:
    """Latency distributions, one row each: a thin line min..max, a box p50..p90 with the p50 as a bar, a p99
    tick, the mean as a diamond and each repeat's p50 as a dot. A log axis when the figures span over 8x."""
    height = 30 + 40 * len(rows) + 30
    left, right = 120, width - 20
    values = [v for r in rows for v in (r.low, r.p50, r.p90, r.p99, r.high, r.mean, *r.dots)
              if v is not None and math.isfinite(v) and v > 0]
    lo, hi = (min(values), max(values)) if values else (0.1, 1.0)
    log = hi / lo > 8
    if log:  # 1-2-5 ticks from the one at or below the smallest figure to the one at or above the largest
        # powers of ten a float holds (1e-323 to 1e308): a subnormal figure (5e-324) has no 1-2-5 tick below it
        powers = range(max(math.floor(math.log10(lo)) - 1, -323), min(math.ceil(math.log10(hi)) + 1, 309))
        steps = [t for e in powers for m in (1, 2, 5) for t in (m * 10.0 ** e,) if 0 < t < math.inf]
        lo = max((t for t in steps if t <= lo * (1 + 1e-9)), default=lo)
        hi = min((t for t in steps if t >= hi * (1 - 1e-9)), default=hi)
        axis = [t for t in steps if lo <= t <= hi]

        def px(v: float) -> float:  # a figure at or below 0 (made up, or clock noise) sits at the axis' start
            return left + (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (right - left)
    else:
        axis = ticks(0.0, hi)
        lo, hi = 0.0, axis[-1] or 1.0

        def px(v: float) -> float:
            return left + _share(v, lo, hi) * (right - left)

    base = 20 + 40 * len(rows)
    body = [f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>']
    for t in axis:
        body.append(f'<line x1="{px(t):.1f}" y1="14" x2="{px(t):.1f}" y2="{base}" stroke="{GREY}"/>')
        body.append(_text(px(t), base + 14, label(t), "middle"))
    body.append(_text((left + right) / 2, base + 28, f"{unit}{' (log scale)' if log else ''}", "middle"))
    for i, r in enumerate(rows):
        y = 20 + 40 * i + 20  # the row's middle
        body.append(_text(left - 8, y + 4, r.label, "end"))
        if r.p50 is None:
            body.append(_text(left + 4, y + 4, "not measured"))
            continue
        if r.low is not None and r.high is not None:
            body.append(f'<line x1="{px(r.low):.1f}" y1="{y}" x2="{px(r.high):.1f}" y2="{y}" stroke="{r.colour}"/>')
        top = r.p90 if r.p90 is not None else r.p50
        body.append(f'<rect x="{px(r.p50):.1f}" y="{y - 9}" width="{max(px(top) - px(r.p50), 2):.1f}" height="18" '
                    f'fill="{r.colour}" fill-opacity="0.35" stroke="{r.colour}"/>')
        body.append(f'<line x1="{px(r.p50):.1f}" y1="{y - 11}" x2="{px(r.p50):.1f}" y2="{y + 11}" '
                    f'stroke="{r.colour}" stroke-width="3"/>')
        if r.p99 is not None:
            body.append(f'<line x1="{px(r.p99):.1f}" y1="{y - 7}" x2="{px(r.p99):.1f}" y2="{y + 7}" '
                        f'stroke="{r.colour}" stroke-width="2"/>')
        if r.mean is not None:
            x = px(r.mean)
            body.append(f'<polygon points="{x:.1f},{y - 5} {x + 5:.1f},{y} {x:.1f},{y + 5} {x - 5:.1f},{y}" '
                        f'fill="{INK}"/>')
        body.extend(f'<circle cx="{px(d):.1f}" cy="{y + 15}" r="2.5" fill="{r.colour}"/>'
                    for d in r.dots if d > 0 or not log)
    return _svg(width, height, title, body)
