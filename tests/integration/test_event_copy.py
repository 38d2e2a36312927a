"""A large batch's events by ``COPY`` on PostgreSQL (uow/eventcopy.py, issue 28).

``COPY`` cannot skip an event already stored, so a batch that meets one (a redelivery)
must run again with the conflict-skipping insert: every window confirmed, none
rejected, no failed attempt, only the new events counted; the writer goes back to
``COPY`` after a batch that met no stored event. The statements the writer
sends say which form ran: the copy path's sequence ``UPDATE`` stands alone, the one
statement starts with ``WITH seq AS``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, select
from uow_windows import WindowDriver, coordinates

from sharedstream.core.window import Window
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.uow.eventcopy import COPY_MIN_ROWS
from sharedstream.uow.sink import DatabaseWorkSink

TOPIC = "orders"


def windows(w: WindowDriver, offsets: range) -> list[Window]:
    made = []
    for offset in offsets:
        w.open((TOPIC, 0, offset))
        w.emit({"n": offset})
        made.append(w.close(submit=False))
    return made


def forms_sent(store: StateStore) -> list[str]:
    """Which form each batch of events the writer sends from now on takes: "copy" or
    "statement" (the copy path's sequence UPDATE stands alone)."""
    sent: list[str] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "event_sequence" in statement:
            sent.append("copy" if statement.startswith("UPDATE") else "statement")

    return sent


async def test_copy_meets_stored_events_and_runs_again_skipping_them(
        postgres_store: StateStore) -> None:
    store = postgres_store
    sent = forms_sent(store)
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")},
                            ProcessSettings(uow_batch_size=1000), coordinates=coordinates)
    w = WindowDriver("w", sink)
    size = 2 * COPY_MIN_ROWS
    half = size // 2
    # New; half of it stored already; new (still skipping: the last batch met some); new.
    for start in (0, half, size + half, 2 * size + half):
        sink.submit(windows(w, range(start, start + size)))
        assert await sink.drain(30)
    await sink.aclose()

    assert sent == ["copy", "copy", "statement", "statement", "copy"]
    assert sink.figures.failures == 0 and sink.figures.permanent_failures == 0 and w.rejected == {}
    assert len(w.confirmed) == 4 * size
    assert sink.figures.events_written == 3 * size + half  # the stored ones not counted
    with store.engine.connect() as conn:
        stored = conn.execute(select(asset_event.c.offset, asset_event.c.id)
                              .order_by(asset_event.c.id)).all()
    # Each event once; ids in commit order, and within a batch in window order.
    assert [offset for offset, _ in stored] == list(range(3 * size + half))
