"""``insert_events`` on every backend (issue 28): ids in row order, duplicates skipped.

PostgreSQL allocates the ids and inserts the rows in one statement (a sequence
``UPDATE`` in a CTE, the rows numbered ``WITH ORDINALITY``); these pin what every
dialect must give its callers: the ids handed back in ``row["id"]`` are the stored ids,
consecutive in the rows' order, and the count is of the rows that were new.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from sharedstream.statestore.events import insert_events
from sharedstream.statestore.models import asset_event
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow


def rows(asset_id: int, offsets: range) -> list[dict[str, Any]]:
    now = utcnow()
    return [{"asset_id": asset_id, "watcher": "w", "payload": f'{{"n": {o}}}', "topic": "t",
             "topic_id": "tid", "partition": 0, "offset": o, "event_index": 0,
             "created_at": now} for o in offsets]


def stored(store: StateStore) -> dict[int, tuple[int, str]]:
    e = asset_event.c
    with store.engine.connect() as connection:
        return {r.id: (r.offset, r.payload)
                for r in connection.execute(select(e.id, e.offset, e.payload))}


def test_ids_follow_the_rows_and_only_new_rows_count(db_url: str) -> None:
    store = StateStore.from_url(db_url)
    store.upgrade()
    asset_id = store.register_asset("orders")
    first = rows(asset_id, range(0, 50))
    with store.engine.begin() as connection:
        assert insert_events(connection, first) == 50
    assert [r["id"] for r in first] == list(range(1, 51))
    assert stored(store) == {r["id"]: (r["offset"], r["payload"]) for r in first}

    # A redelivery: the same rows (their "id" from the first insert still in them) and
    # new ones after them; only the new ones are written, each under its handed-out id.
    again = [dict(r) for r in first[40:]] + rows(asset_id, range(50, 60))
    with store.engine.begin() as connection:
        assert insert_events(connection, again) == 10
    new = again[10:]
    assert [r["id"] for r in new] == list(range(61, 71))  # skipped rows leave unused ids
    after = stored(store)
    assert len(after) == 60
    assert all(after[r["id"]] == (r["offset"], r["payload"]) for r in new)
    store.close()
