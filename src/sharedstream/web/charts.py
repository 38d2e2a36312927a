"""Inline SVG drawn on the server: the lag chart of a group, the events timeline of an asset.

Every text that reaches the markup (topic names, labels) goes through
:func:`html.escape`; numbers are formatted here. The SVG uses presentation attributes
only (no ``style``), so the console's Content-Security-Policy needs no inline styles.
Each line carries ``data-partition``, ``data-last`` (its newest value) and
``data-source`` (where that value came from) so scripts and tests can read the chart
without parsing coordinates. Lag is a count: the axis has whole-number ticks only.
Partitions often lag alike (all 0, say), so the lines are drawn widest first, each
narrower one on top, with its own dash: one that coincides with another still shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
           "#65a30d", "#475569", "#ea580c")
WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 26


DASHES = ("", "9 3", "3 3", "12 3 3 3", "1 4")


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    color: str
    last: int
    peak: int
    samples: int
    source: str | None = None  # "triggerer" or "kafka", of the newest sample
    dash: str = ""


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 0.5:
        return "now"
    if seconds >= 120:
        return f"-{seconds / 60:.0f}m"
    return f"-{seconds:.0f}s"


def _nice_top(peak: float) -> int:
    """A round upper bound at or above ``peak`` (1, 2, 5 times a power of ten)."""
    if peak <= 1:
        return 1
    scale = 1
    while True:
        for step in (1, 2, 5):
            if step * scale >= peak:
                return step * scale
        scale *= 10


def _ticks(top: int) -> list[int]:
    """Whole-number ticks from 0 to ``top`` (a :func:`_nice_top`), two to six of them."""
    count = next(n for n in (4, 5, 2, 1) if top % n == 0)
    return [top // count * i for i in range(count + 1)]


def lag_chart(series: Mapping[tuple[str, int], Sequence[tuple[float, int]]], now: float,
              window_s: float, sources: Mapping[tuple[str, int], str] | None = None
              ) -> tuple[str, list[Line]]:
    """The SVG of every partition's lag over the samples kept (up to ``window_s``), and
    the legend's lines (``sources``: where each partition's newest sample came from).
    The x axis spans the samples (at least a minute), newest right."""
    all_points = [p for samples in series.values() for p in samples]
    start = max(now - window_s, min((t for t, _ in all_points), default=now))
    span = max(now - start, 60.0)
    start = now - span
    top = _nice_top(max((lag for _, lag in all_points), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - start) / span * plot_w

    def y(lag: float) -> float:
        return TOP + plot_h - lag / top * plot_h

    parts = [f'<svg class="chart lag-chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="100%" role="img" aria-label="lag per partition" '
             f'data-samples="{len(all_points)}">']
    for value in _ticks(top):
        gy = y(value)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}" '
                     f'stroke="#e5e7eb"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="#6b7280">{value}</text>')
    for i in range(5):
        t = start + span * i / 4
        parts.append(f'<text x="{x(t):.1f}" y="{HEIGHT - 8}" text-anchor="middle" '
                     f'font-size="11" fill="#6b7280">{escape(_ago(now - t))}</text>')
    lines = []
    drawn = [(key, samples) for key, samples in sorted(series.items()) if samples]
    for index, ((topic, partition), samples) in enumerate(drawn):
        label = f"{topic}[{partition}]"
        stroke, dash = color(index), DASHES[index % len(DASHES)]
        width = 2.0 + 1.5 * min(len(drawn) - 1 - index, 4)  # the first drawn, the widest
        source = (sources or {}).get((topic, partition))
        points = " ".join(f"{x(t):.1f},{y(lag):.1f}" for t, lag in samples)
        last = samples[-1][1]
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(f'<polyline class="lag-line" data-partition="{escape(label)}" '
                     f'data-last="{last}" data-source="{escape(source or "")}" fill="none" '
                     f'stroke="{stroke}" stroke-width="{width:.1f}"{dashed} '
                     f'points="{points}"/>')
        lines.append(Line(label, stroke, last, max(lag for _, lag in samples), len(samples),
                          source, dash))
    if not lines:
        parts.append(f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" '
                     f'fill="#6b7280">no samples yet</text>')
    parts.append("</svg>")
    return "".join(parts), lines


def timeline(counts: Sequence[int], edges: Sequence[str]) -> str:
    """Bars of events per time bucket (oldest left); ``edges`` labels the buckets' bounds
    (one more than ``counts``): the first and the last are written under the axis."""
    top = _nice_top(max(counts, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, 120
    height = plot_h + TOP + BOTTOM
    n = max(len(counts), 1)
    bar = plot_w / n
    parts = [f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {height}" width="100%" '
             f'role="img" aria-label="events per interval" data-total="{sum(counts)}">']
    parts.append(f'<text x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end" font-size="11" '
                 f'fill="#6b7280">{top}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" '
                 f'y2="{TOP + plot_h}" stroke="#9ca3af"/>')
    for i, count in enumerate(counts):
        h = count / top * plot_h
        parts.append(f'<rect x="{LEFT + i * bar + 1:.1f}" y="{TOP + plot_h - h:.1f}" '
                     f'width="{max(bar - 2, 1):.1f}" height="{h:.1f}" fill="#2563eb">'
                     f'<title>{escape(edges[i])} to {escape(edges[i + 1])}: {count}'
                     f'</title></rect>')
    if edges:
        first, last = edges[0], edges[-1]
        parts.append(f'<text x="{LEFT}" y="{height - 8}" font-size="11" fill="#6b7280">'
                     f'{escape(first)}</text>')
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{height - 8}" text-anchor="end" '
                     f'font-size="11" fill="#6b7280">{escape(last)}</text>')
    parts.append("</svg>")
    return "".join(parts)
