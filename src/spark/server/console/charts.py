"""Charts as inline SVG, drawn on the server: line charts over time and a request's waterfall.

No chart library and no script: the SVG is part of the page. Every text is
escaped; colours come from classes in spark.css (light and dark), and each
series also has its own dash pattern and a legend, so a chart reads without
colour. The page's content security policy forbids inline styles, so the
drawing uses SVG attributes only.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

from spark.trace import Step

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28  # room for the axes' labels
SERIES_CLASSES = 6  # .series-0 … .series-5 in spark.css
DASHES = ("", "6 3", "2 3", "10 3 2 3", "1 2", "12 4")

Point = tuple[float, float]  # (Unix time, value)


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^n at or above `value` (a round top for the y axis)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value))


def _number(value: float) -> str:
    """A short label for an axis: 0.25, 7.5, 750, 1.5k, 20k, 150M."""
    for power, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= power:
            scaled = value / power
            return f"{scaled:.0f}{suffix}" if scaled >= 10 else f"{scaled:.1f}{suffix}"
    return f"{value:g}" if value == int(value) else f"{value:.2g}" if value < 1 else f"{value:.1f}"


def _clock(at: float, with_day: bool) -> str:
    moment = datetime.datetime.fromtimestamp(at)
    return moment.strftime("%a %H:%M" if with_day else "%H:%M")


def line_chart(
    title: str,
    series: dict[str, list[Point]],
    start: float,
    end: float,
    unit: str,
    gap: float,
    styles: Mapping[str, int] | None = None,
) -> Markup:
    """Lines of `series` (name -> points, oldest first) from `start` to `end`; a line breaks where two
    points are more than `gap` seconds apart (no data there, which is not zero). `styles` gives each
    name its colour and dash (by default, its place in `series`), so that a page of charts can give a
    name the same look in each."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = _nice_ceiling(max((v for points in series.values() for _, v in points), default=0.0))
    span = max(end - start, 1.0)

    def x(at: float) -> float:
        return LEFT + (at - start) / span * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - value / top * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{_id(title)}">',
        f'<title id="{_id(title)}">{escape(title)} ({escape(unit)})</title>',
    ]
    for i in range(5):  # grid lines and y labels at 0, ¼, ½, ¾ and the top
        value = top * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" y2="{y(value):.1f}"/>')
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{_number(value)}</text>'
        )
    with_day = span > 6 * 3600
    for i in range(5):
        at = start + span * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="axis" x="{x(at):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">{_clock(at, with_day)}</text>'
        )
    for name, points in series.items():
        cls, dash_attr = _style(_place(name, series, styles))
        for run in _runs(points, gap):
            if len(run) == 1:
                (at, value) = run[0]
                parts.append(f'<circle class="{cls}" cx="{x(at):.1f}" cy="{y(value):.1f}" r="2.5"/>')
            else:
                coords = " ".join(f"{x(at):.1f},{y(value):.1f}" for at, value in run)
                parts.append(f'<polyline class="{cls}" fill="none" points="{coords}"{dash_attr}/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def legend(names: Sequence[str], styles: Mapping[str, int] | None = None) -> Markup:
    """The key of a chart's series: each name with its line's colour and dash pattern."""
    items = []
    for name in names:
        cls, dash_attr = _style(_place(name, names, styles))
        swatch = (
            '<svg class="swatch" viewBox="0 0 24 8" aria-hidden="true">'
            f'<line class="{cls}" x1="0" y1="4" x2="24" y2="4"{dash_attr}/></svg>'
        )
        items.append(f"<li>{swatch}{escape(name)}</li>")
    return Markup(f'<ul class="legend">{"".join(items)}</ul>')


def _place(name: str, names: Sequence[str] | Mapping[str, object], styles: Mapping[str, int] | None) -> int:
    return styles[name] if styles is not None else list(names).index(name)


def _style(n: int) -> tuple[str, str]:
    """The classes and dash attribute of style `n`."""
    dash = DASHES[n % len(DASHES)]
    return f"series series-{n % SERIES_CLASSES}", f' stroke-dasharray="{dash}"' if dash else ""


def _runs(points: list[Point], gap: float) -> list[list[Point]]:
    """`points` cut where two neighbours are more than `gap` apart."""
    runs: list[list[Point]] = []
    for point in points:
        if runs and point[0] - runs[-1][-1][0] <= gap:
            runs[-1].append(point)
        else:
            runs.append([point])
    return runs


def _id(title: str) -> str:
    return "chart-" + "".join(c if c.isalnum() else "-" for c in title.lower())


BAR_SPAN = 1000  # the waterfall's bars are drawn in a 1000-wide box stretched to their column


def waterfall(timeline: Sequence[Step]) -> list[Markup]:
    """A request's timeline as a waterfall: for each step a bar from the step before to this one, on one
    scale from `received` to the last step (an SVG per step, for the timeline table's rows)."""
    total = max((s.at_ms for s in timeline), default=0.0) or 1.0
    bars = []
    previous = 0.0
    for step in timeline:
        x0 = previous / total * BAR_SPAN
        width = max((step.at_ms - previous) / total * BAR_SPAN, 3.0)  # an instant step is still visible
        kind = "bad" if step.name == "failed" else "step"
        bars.append(
            Markup(
                f'<svg class="bar" viewBox="0 0 {BAR_SPAN} 10" preserveAspectRatio="none" role="img" '
                f'aria-label="{escape(step.name)}: {_duration(previous)} to {_duration(step.at_ms)}">'
                f'<rect class="{kind}" x="{min(x0, BAR_SPAN - width):.1f}" y="0" width="{width:.1f}" '
                'height="10"/></svg>'
            )
        )
        previous = step.at_ms
    return bars


def _duration(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.1f} ms"
