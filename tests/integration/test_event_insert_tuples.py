"""``insert_event_rows`` (the writer's tuples) on every backend: batches larger than one
multi-row statement (SQLite writes ``TUPLES_PER_STATEMENT`` rows per statement and the
rest by ``executemany``), redelivered rows skipped across statement boundaries, ids in
row order, and only new rows counted (issue 28).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from sharedstream.statestore.events import EVENT_COLUMNS, insert_event_rows
from sharedstream.statestore.models import asset_event
from sharedstream.statestore.sql import TUPLES_PER_STATEMENT
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow


def rows(asset_id: int, offsets: range) -> list[tuple[Any, ...]]:
    now = utcnow()
    return [(asset_id, "w", f'{{"n": {o}}}', "t", "tid", 0, o, 0, now) for o in offsets]


def stored(store: StateStore) -> list[tuple[int, int, str]]:
    e = asset_event.c
    with store.engine.connect() as connection:
        return [(r.id, r.offset, r.payload)
                for r in connection.execute(select(e.id, e.offset, e.payload).order_by(e.id))]


def test_large_batches_and_redeliveries_across_statements(db_url: str) -> None:
    store = StateStore.from_url(db_url)
    store.upgrade()
    asset_id = store.register_asset("orders")
    size = 2 * TUPLES_PER_STATEMENT + 40  # two whole statements and a remainder
    with store.engine.begin() as connection:
        assert insert_event_rows(connection, EVENT_COLUMNS, rows(asset_id, range(size))) == size
    assert stored(store) == [(o + 1, o, f'{{"n": {o}}}') for o in range(size)]

    # A redelivery overlapping every statement of the first batch, then new rows: only
    # the new ones are written, under the ids after the skipped rows' unused ones.
    start = TUPLES_PER_STATEMENT // 2
    again = rows(asset_id, range(start, size + 30))
    with store.engine.begin() as connection:
        assert insert_event_rows(connection, EVENT_COLUMNS, again) == 30
    first_new = size + (size - start) + 1  # ids handed to the skipped rows stay unused
    assert stored(store)[size:] == [(first_new + i, size + i, f'{{"n": {size + i}}}')
                                    for i in range(30)]
    store.close()
