"""MkDocs hook: the ``/metrics`` reference, generated from the triggerer's metric catalog.

``sharedstream.triggerer.metrics.CATALOG`` declares every metric the triggerer
exports, once, with its kind, labels and help (a unit test and an end-to-end scrape
hold the code to it). ``references.py`` fills a page's ``<!-- metrics-reference -->``
block with a table of that catalog, so the manual lists exactly what a scrape shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT / "src") not in sys.path:
    sys.path.append(str(_ROOT / "src"))

# What a Prometheus scrape shows for each kind (prometheus_client's text format).
_EXPOSED = {"gauge": ("",), "counter": ("_total",), "summary": ("_count", "_sum")}


def render_metrics() -> str:
    from sharedstream.triggerer.metrics import CATALOG

    lines = ["| metric | kind | labels | meaning |", "|---|---|---|---|"]
    for spec in CATALOG:
        names = ", ".join(f"`{spec.full_name}{suffix}`" for suffix in _EXPOSED[spec.kind])
        labels = ", ".join(f"`{label}`" for label in spec.labels) or "none"
        meaning = spec.help.replace("|", "\\|")
        lines.append(f"| {names} | {spec.kind} | {labels} | {meaning} |")
    return "\n".join(lines)
