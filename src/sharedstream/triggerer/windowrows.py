"""The ``asset_event`` rows of one window, per-message or a batch call's.

A per-message window's events all belong to its message. A batch window
(:class:`~sharedstream.core.batch.BatchWindow`) holds the events of several messages of
one ``filter_shared_batch`` call, so that they commit in one transaction with the call's
staged state; its ``parts`` say which message each run of events belongs to, and each
message's events are keyed by that message's coordinates and their index within it,
exactly as the per-message path keys them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sharedstream.core.batch import BatchWindow
from sharedstream.core.window import Window
from sharedstream.triggerer.eventrows import CoordinatesOf, event_rows


def window_event_rows(asset_id: int, window: Window, coordinates: CoordinatesOf,
                      texts: list[str], created_at: datetime) -> list[dict[str, Any]]:
    """One row per encoded payload of ``window`` (``texts`` in ``window.events`` order)."""
    if not isinstance(window, BatchWindow):
        return event_rows(asset_id, window.watcher, coordinates(window.payload), texts,
                          created_at)
    rows: list[dict[str, Any]] = []
    start = 0
    for payload, count in window.parts:
        rows += event_rows(asset_id, window.watcher, coordinates(payload),
                           texts[start:start + count], created_at)
        start += count
    return rows
