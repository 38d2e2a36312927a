"""Migration 0006 (issue 28): asset_event loses its foreign key to asset, and gets it back.

On SQLite, PostgreSQL and MariaDB: at head an event may name an asset that is gone (the
key's per-row check is what 0006 removes); downgrade deletes such events, then the key
refuses them again; upgrading once more removes it again.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event, undelivered_event


def _event(asset_id: int, offset: int) -> dict[str, object]:
    return {"id": offset, "asset_id": asset_id, "watcher": "w", "payload": "{}", "topic": "t",
            "topic_id": "tid", "partition": 0, "offset": offset, "event_index": 0,
            "created_at": datetime(2030, 1, 1, tzinfo=UTC)}


def _offsets(store: StateStore) -> list[int]:
    with store.engine.connect() as connection:
        return list(connection.execute(
            sa.select(asset_event.c.offset).order_by(asset_event.c.offset)).scalars())


def test_0006_drops_and_restores_the_event_asset_key(db_url: str) -> None:
    store = StateStore.from_url(db_url)
    try:
        store.upgrade()
        kept = store.register_asset("kept")
        with store.engine.begin() as connection:
            connection.execute(asset_event.insert(), [_event(kept, 1), _event(kept + 999, 2)])
        store.downgrade("0005")
        assert _offsets(store) == [1]  # the event of no asset is gone, the other kept
        with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as connection:
            connection.execute(asset_event.insert(), [_event(kept + 999, 3)])
        store.upgrade()
        with store.engine.begin() as connection:
            connection.execute(asset_event.insert(), [_event(kept + 999, 3)])
        assert _offsets(store) == [1, 3]
    finally:
        store.downgrade()
        store.close()


def _undelivered(store: StateStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(
            sa.select(sa.func.count()).select_from(undelivered_event)).scalar_one())


def test_0006_keeps_undelivered_events(db_url: str) -> None:
    """SQLite rebuilds asset_event to drop the key, and dropping the old table deletes its
    rows first, cascading to undelivered_event (foreign keys are on): none may go."""
    store = StateStore.from_url(db_url)
    try:
        store.upgrade("0005")
        kept = store.register_asset("kept")
        with store.engine.begin() as connection:
            connection.execute(asset_event.insert(), [_event(kept, 1)])
            connection.execute(undelivered_event.insert(), [{
                "destination": "d", "event_id": 1, "reason": "refused", "attempts": 1,
                "created_at": datetime(2030, 1, 1, tzinfo=UTC)}])
        store.upgrade()
        assert (_offsets(store), _undelivered(store)) == ([1], 1)
        store.downgrade("0005")
        assert (_offsets(store), _undelivered(store)) == ([1], 1)
    finally:
        store.downgrade()
        store.close()
