"""Event payloads are ``jsonb`` on PostgreSQL (issue 43): users query them with its JSON
operators, whichever way the writer stored them.

The unit-of-work writer stores a small batch with its one conflict-skipping statement
(``json_populate_recordset``) and a large one by ``COPY`` (``eventcopy.py``); a row
written through SQLAlchemy (``insert(asset_event)``) takes a third path. Every one must
store a JSON document, not a JSON string holding its text, and the product reads each
back as the value the watcher emitted.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import event, insert, select, text
from test_event_copy import forms_sent
from uow_windows import WindowDriver, coordinates

from sharedstream.statestore import StateStore
from sharedstream.statestore.events import list_events
from sharedstream.statestore.models import asset_event
from sharedstream.statestore.types import utcnow
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.uow.eventcopy import COPY_MIN_ROWS
from sharedstream.uow.sink import DatabaseWorkSink


def payload(offset: int) -> dict[str, Any]:
    return {"n": offset, "status": "paid" if offset % 2 else "open",
            "lines": [{"sku": f"s{offset}", "qty": 1}], "note": "é ✓"}


async def test_both_writer_forms_store_documents_users_can_query(
        postgres_store: StateStore) -> None:
    store = postgres_store
    sent = forms_sent(store)
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")},
                            ProcessSettings(uow_batch_size=1000), coordinates=coordinates)
    w = WindowDriver("w", sink)
    for offsets in (range(0, 3), range(3, 3 + COPY_MIN_ROWS)):  # the statement, then COPY
        made = []
        for offset in offsets:
            w.open(("orders", 0, offset))
            w.emit(payload(offset))
            made.append(w.close(submit=False))
        sink.submit(made)
        assert await sink.drain(30)
    await sink.aclose()
    assert sent == ["statement", "copy"]
    total = 3 + COPY_MIN_ROWS
    with store.engine.connect() as connection:
        kinds = connection.execute(text(
            "SELECT jsonb_typeof(payload), count(*) FROM asset_event GROUP BY 1")).all()
        paid = connection.execute(text(
            "SELECT count(*) FROM asset_event WHERE payload @> '{\"status\": \"paid\"}'")
        ).scalar_one()
        skus = connection.execute(text(
            "SELECT payload->'lines'->0->>'sku' FROM asset_event ORDER BY id LIMIT 2")
        ).scalars().all()
    assert kinds == [("object", total)]
    assert paid == total // 2
    assert skus == ["s0", "s1"]
    read = {e.origin.offset: e.payload for e in list_events(store.engine)}
    assert read == {offset: payload(offset) for offset in range(total)}


def test_a_row_inserted_through_sqlalchemy_is_a_document(postgres_store: StateStore) -> None:
    store = postgres_store
    asset_id = store.register_asset("orders")
    with store.engine.begin() as connection:
        connection.execute(insert(asset_event), [{
            "id": 1, "asset_id": asset_id, "watcher": "w", "payload": json.dumps(["a", 1]),
            "topic": "t", "topic_id": "tid", "partition": 0, "offset": 0, "event_index": 0,
            "created_at": utcnow()}])
        kind = connection.execute(text("SELECT jsonb_typeof(payload) FROM asset_event")
                                  ).scalar_one()
        stored = connection.execute(select(asset_event.c.payload)).scalar_one()
    assert kind == "array"
    assert json.loads(stored) == ["a", 1]


def test_the_statements_are_what_the_writer_sends(postgres_store: StateStore) -> None:
    """The text the driver gets: a bound payload is cast to jsonb, a selected one to text
    (psycopg would otherwise decode jsonb itself, and a JSON string payload could not be
    told from JSON text)."""
    store = postgres_store
    seen: list[str] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    with store.engine.connect() as connection:
        connection.execute(select(asset_event.c.payload).limit(1)).all()
    assert "CAST(asset_event.payload AS TEXT)" in seen[-1]
