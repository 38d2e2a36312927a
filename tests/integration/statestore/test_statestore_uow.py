"""Units of work: staged writes, read-your-writes, atomic commit with other rows, rollback."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection
from statestore_helpers import FakeClock

from sharedstream.statestore import AssetScope, StateStore, TaskScope, Writer
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.models import asset, asset_event, asset_state_store

ORDERS = AssetScope(name="orders")


def _event_step(clock: FakeClock, offset: int) -> object:
    def step(connection: Connection) -> None:
        asset_id = connection.execute(
            sa.select(asset.c.id).where(asset.c.name == "orders")
        ).scalar_one()
        insert_events(connection, [dict(
            asset_id=asset_id, watcher="w", payload='{"id": 1}', topic="orders",
            topic_id="tid", partition=0, offset=offset, event_index=0, created_at=clock.now)])

    return step


def _events(store: StateStore) -> int:
    with store.engine.connect() as connection:
        return int(
            connection.execute(sa.select(sa.func.count()).select_from(asset_event)).scalar_one()
        )


def test_staged_writes_commit_together(store: StateStore, clock: FakeClock) -> None:
    unbound = store.asset(ORDERS)
    unbound.set("seed", 1)
    uow = store.unit_of_work()
    state = store.asset(ORDERS, writer=Writer.watcher("w")).bound(uow)
    job = store.task(TaskScope("d", "r", "t")).bound(uow)

    assert state.advance("wm", 5) is True
    assert state.advance("wm", 4) is False  # checked against the staged 5
    state.set("note", "hello")
    assert state.delete("seed") is True
    job.set("k", [1])
    uow.add_step(_event_step(clock, offset=7))  # type: ignore[arg-type]

    # Read-your-writes inside the unit; nothing visible outside before commit.
    assert (state.get("wm"), state.get("note"), state.get("seed"), job.get("k")) == (
        5,
        "hello",
        None,
        [1],
    )
    assert (unbound.get("wm"), unbound.get("seed")) == (None, 1)
    assert store.task(TaskScope("d", "r", "t")).get("k") is None
    assert len(uow) == 4

    uow.commit()
    assert (unbound.get("wm"), unbound.get("note"), unbound.get("seed")) == (5, "hello", None)
    assert store.task(TaskScope("d", "r", "t")).get("k") == [1]
    assert _events(store) == 1
    assert len(uow) == 0
    with store.engine.connect() as connection:
        writer = connection.execute(
            sa.select(
                asset_state_store.c.writer_kind,
                asset_state_store.c.writer_id,
            ).where(asset_state_store.c.key == "wm")
        ).one()
    assert tuple(writer) == ("watcher", "w")


def test_failed_unit_leaves_nothing(store: StateStore, clock: FakeClock) -> None:
    store.asset(ORDERS).set("wm", 1)
    uow = store.unit_of_work()
    state = store.asset(ORDERS, writer=Writer.watcher("w")).bound(uow)
    state.advance("wm", 2)
    state.set("other", "x")
    store.task(TaskScope("d", "r", "t")).bound(uow).set("k", 1)
    uow.add_step(_event_step(clock, offset=1))  # type: ignore[arg-type]

    def boom(connection: Connection) -> None:
        raise RuntimeError("persistence failed")

    uow.add_step(boom)
    with pytest.raises(RuntimeError, match="persistence failed"):
        uow.commit()
    unbound = store.asset(ORDERS)
    assert (unbound.get("wm"), unbound.get("other")) == (1, None)
    assert store.task(TaskScope("d", "r", "t")).get("k") is None
    assert _events(store) == 0
    assert state.get("wm") == 1  # the buffer was discarded too


def test_apply_in_callers_transaction_then_rollback(store: StateStore) -> None:
    uow = store.unit_of_work()
    store.asset(ORDERS).bound(uow).set("k", 1)
    with store.engine.connect() as connection:
        transaction = connection.begin()
        uow.apply(connection)
        transaction.rollback()
    uow.discard()
    assert store.asset(ORDERS).get("k") is None

    store.asset(ORDERS).bound(uow).set("k", 2)
    with store.engine.begin() as connection:
        uow.apply(connection)
    uow.committed()
    assert store.asset(ORDERS).get("k") == 2


def test_staged_advance_overtaken_before_commit_keeps_larger(store: StateStore) -> None:
    store.asset(ORDERS).advance("wm", 1)
    uow = store.unit_of_work()
    assert store.asset(ORDERS).bound(uow).advance("wm", 5) is True
    assert store.asset(ORDERS).advance("wm", 10) is True  # another writer, committed first
    uow.commit()
    assert store.asset(ORDERS).get("wm") == 10


def test_clear_then_writes_in_one_unit(store: StateStore) -> None:
    store.asset(ORDERS).set("a", 1)
    store.asset(ORDERS).set("b", 2)
    for index in (0, 1):
        store.task(TaskScope("d", "r", "t", index)).set("k", index)
    with store.unit_of_work() as uow:
        state = store.asset(ORDERS).bound(uow)
        state.clear()
        assert state.get("a") is None
        assert state.advance("b", 1) is True  # after a clear, any value is forwards
        job = store.task(TaskScope("d", "r", "t", 0)).bound(uow)
        job.clear(all_map_indices=True)
        assert store.task(TaskScope("d", "r", "t", 1)).bound(uow).get("k") is None
        job.set("k", "new")
    assert (store.asset(ORDERS).get("a"), store.asset(ORDERS).get("b")) == (None, 1)
    assert store.task(TaskScope("d", "r", "t", 0)).get("k") == "new"
    assert store.task(TaskScope("d", "r", "t", 1)).get("k") is None


def test_context_manager_discards_on_exception(store: StateStore) -> None:
    with pytest.raises(KeyError), store.unit_of_work() as uow:
        store.asset(ORDERS).bound(uow).set("k", 1)
        raise KeyError("handler failed")
    assert store.asset(ORDERS).get("k") is None
