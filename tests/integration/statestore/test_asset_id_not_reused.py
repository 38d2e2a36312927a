"""An asset id is never handed out twice (issue 28, after migration 0006).

Events have no foreign key to ``asset`` since 0006: a triggerer still running for an
asset deleted under it stores its event batches (no read shows them: reads join
``asset``). Were the deleted asset's id given to the next asset created, those rows,
and every later write of the stale triggerer, would show under the new asset. SQLite
reuses the highest rowid of an INTEGER PRIMARY KEY unless the table is AUTOINCREMENT;
PostgreSQL's sequence and MariaDB's InnoDB counter (persisted since 10.2) never go back.
On SQLite, PostgreSQL and MariaDB, on the tables the migrations build.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sharedstream.statestore import AssetScope, StateStore, Writer
from sharedstream.statestore.events import insert_events, list_events
from sharedstream.statestore.uow import Step

WATCHER = Writer.watcher("w")


def _events(asset_id: int, *offsets: int) -> Step:
    """A unit-of-work step inserting events as the triggerer's writer does."""
    def step(connection: Connection) -> None:
        insert_events(connection, [{
            "asset_id": asset_id, "watcher": "w", "payload": "{}", "topic": "t",
            "topic_id": "tid", "partition": 0, "offset": offset, "event_index": 0,
            "created_at": datetime(2030, 1, 1, tzinfo=UTC)} for offset in offsets])
    return step


def _unit(store: StateStore, scope: AssetScope, offset: int, *, state: bool) -> None:
    uow = store.unit_of_work()
    if state:
        store.asset(scope, writer=WATCHER).bound(uow).advance("wm", offset)
    uow.add_step(_events(scope.asset_id or 0, offset))
    uow.commit()


def test_a_new_asset_never_shows_a_deleted_assets_events(store: StateStore) -> None:
    old = AssetScope(asset_id=store.register_asset("a"))
    for offset in (1, 2):  # the second unit runs on the remembered id (no asset check)
        _unit(store, old, offset, state=True)
    assert store.delete_asset("a") is True
    _unit(store, old, 3, state=False)  # the stale writer's events-only batch is stored
    new = store.register_asset("b")
    _unit(store, old, 4, state=False)  # and so is the next one, after b exists
    assert new != old.asset_id
    assert list_events(store.engine, asset_name="b") == []
    assert list_events(store.engine) == []
    # Its state writes fail "no asset" (held and retried), never land in b's state.
    with pytest.raises(LookupError, match=f"no asset id={old.asset_id}"):
        _unit(store, old, 5, state=True)
    assert store.asset(AssetScope(name="b")).items() == []


def _autoincrement(store: StateStore) -> bool:
    with store.engine.connect() as connection:
        sql = connection.execute(sa.text(
            "SELECT sql FROM sqlite_master WHERE name = 'asset'")).scalar_one()
    return "AUTOINCREMENT" in sql


def test_0006_keeps_assets_and_their_state(db_url: str) -> None:
    """SQLite rebuilds ``asset`` as AUTOINCREMENT in 0006 (and back on downgrade); with
    foreign keys on, dropping the old table would delete its state rows by the cascade:
    none may go, and ids already handed out are not handed out again."""
    store = StateStore.from_url(db_url)
    sqlite = store.engine.dialect.name == "sqlite"
    try:
        store.upgrade("0005")
        first = store.register_asset("first")
        store.asset(AssetScope(name="first")).set("k", 1)
        store.upgrade()
        assert store.asset(AssetScope(name="first")).get("k") == 1
        assert (not sqlite) or _autoincrement(store)
        last = store.register_asset("last")
        store.asset(AssetScope(name="last")).set("k", 2)
        store.downgrade("0005")
        assert [store.asset(AssetScope(name=n)).get("k") for n in ("first", "last")] == [1, 2]
        assert not (sqlite and _autoincrement(store))
        store.upgrade()
        assert [store.asset(AssetScope(name=n)).get("k") for n in ("first", "last")] == [1, 2]
        assert store.delete_asset("last") is True
        assert store.register_asset("next") > last > first
    finally:
        store.downgrade()
        store.close()
