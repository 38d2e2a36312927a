"""The ``asset_event`` rows of one window, per-message or a batch call's.

A per-message window's events all belong to its message. A batch window
(:class:`~sharedstream.core.batch.BatchWindow`) holds the events of several messages of
one ``filter_shared_batch`` call, so that they commit in one transaction with the call's
staged state; its ``parts`` say which message each run of events belongs to, and each
message's events are keyed by that message's coordinates and their index within it,
exactly as the per-message path keys them.

Rows are plain tuples of :data:`~sharedstream.statestore.events.EVENT_COLUMNS`, built in
one comprehension per message: a dict per event (and the copies the insert made of it)
was most of the writer's own time per event (issue 28).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sharedstream.core.batch import BatchWindow
from sharedstream.core.window import Window
from sharedstream.uow.eventrows import CoordinatesOf


def window_event_rows(asset_id: int, window: Window, coordinates: CoordinatesOf,
                      texts: list[str], created_at: datetime) -> list[tuple[Any, ...]]:
    """One row per encoded payload of ``window`` (``texts`` in ``window.events`` order)."""
    watcher = window.watcher
    if not isinstance(window, BatchWindow):
        topic, topic_id, partition, offset = coordinates(window.payload)
        return [(asset_id, watcher, text, topic, topic_id, partition, offset, index,
                 created_at) for index, text in enumerate(texts)]
    rows: list[tuple[Any, ...]] = []
    start = 0
    for payload, count in window.parts:
        topic, topic_id, partition, offset = coordinates(payload)
        if count == 1:
            rows.append((asset_id, watcher, texts[start], topic, topic_id, partition, offset,
                         0, created_at))
        else:
            rows += [(asset_id, watcher, text, topic, topic_id, partition, offset, index,
                      created_at) for index, text in enumerate(texts[start:start + count])]
        start += count
    return rows
