"""The database connection killed in the middle of a bulk write (issue 28).

Another connection inserts, without committing, an event row with the same key as the
LAST event of a large batch: the sink's bulk write (``COPY`` on PostgreSQL, a multi-row
insert on MariaDB) writes every row before it, then waits on that key. Then the sink's
connection is killed from a third connection (PostgreSQL ``pg_terminate_backend``,
MariaDB ``KILL CONNECTION``). Nothing of the batch may be visible or confirmed; once
the blocker rolls back, the retried batch commits every event and state write exactly
once, with commit-ordered ids and no gap. SQLite has no way to kill another connection's
statement, so it is not covered here (the kill -9 fault tests cover its writer dying).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection
from test_unit_of_work import TOPIC, until
from uow_windows import WindowDriver, coordinates

from sharedstream.core.message import Coordinates
from sharedstream.core.window import Window
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, asset_state_store
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.uow.eventrows import event_rows
from sharedstream.uow.sink import DatabaseWorkSink

WINDOWS = 400


def blocked_by(observer: Connection, blocker: Connection) -> list[int]:
    """Server ids of the connections waiting for a lock ``blocker``'s transaction holds
    (read in a transaction of its own: PostgreSQL keeps one snapshot of its activity
    view per transaction)."""
    with observer.begin():
        return _blocked_by(observer, blocker)


def _blocked_by(observer: Connection, blocker: Connection) -> list[int]:
    if observer.dialect.name == "postgresql":
        mine = blocker.execute(text("SELECT pg_backend_pid()")).scalar_one()
        return list(observer.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE :mine = ANY(pg_blocking_pids(pid))"),
            {"mine": mine}).scalars())
    mine = blocker.execute(text("SELECT CONNECTION_ID()")).scalar_one()
    return list(observer.execute(text(
        "SELECT r.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w "
        "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
        "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
        "WHERE b.trx_mysql_thread_id = :mine"), {"mine": mine}).scalars())


async def waiting_on(observer: Connection, blocker: Connection, within: float = 15) -> list[int]:
    """:func:`blocked_by`, asked until it names a connection. Every 0.15 s: InnoDB
    refreshes its lock tables only when they were not read for 0.1 s."""
    deadline = time.monotonic() + within
    while not (found := blocked_by(observer, blocker)):
        assert time.monotonic() < deadline, "the batch's insert never waited on the key"
        await asyncio.sleep(0.15)
    return found


def kill(observer: Connection, server_id: int) -> None:
    if observer.dialect.name == "postgresql":
        assert observer.execute(text("SELECT pg_terminate_backend(:pid)"),
                                {"pid": server_id}).scalar_one()
    else:
        observer.execute(text(f"KILL CONNECTION {int(server_id)}"))


def committed(store: StateStore) -> tuple[int, Any]:
    with store.engine.connect() as conn:
        events = conn.execute(select(func.count()).select_from(asset_event)).scalar_one()
        states = conn.execute(select(func.count()).select_from(asset_state_store)).scalar_one()
    return events, states


@pytest.mark.parametrize("with_state", [True, False], ids=["events+state", "events only"])
async def test_a_connection_killed_mid_bulk_write_leaves_nothing_half_written(
        server_store: StateStore, with_state: bool) -> None:
    # Events only: on PostgreSQL the batch is one statement committing on its own.
    store = server_store
    asset_id = store.register_asset("orders")
    sink = DatabaseWorkSink(store, {"w": asset_id}, ProcessSettings(uow_batch_size=WINDOWS),
                            coordinates=coordinates, retry_initial=0.05, retry_cap=0.2)
    state = WatcherStateAccess(store, "w", "orders", asset_id)
    w = WindowDriver("w", sink)
    windows: list[Window] = []
    for offset in range(WINDOWS):
        w.open((TOPIC, 0, offset))
        if with_state:
            await state.aadvance("last_seen/0", offset)
        w.emit({"n": offset})
        windows.append(w.close(submit=False))
    where = Coordinates(*coordinates((TOPIC, 0, WINDOWS - 1)))
    last = event_rows(asset_id, "w", where, ["{}"], store.clock())[0]
    with store.engine.connect() as blocker, store.engine.connect() as observer:
        blocker.execute(asset_event.insert().values(id=10**9, **last))  # not committed
        sink.submit(windows)  # one batch: the flusher takes all of them together
        victims = await waiting_on(observer, blocker)
        assert len(victims) == 1, victims
        (victim,) = victims
        with observer.begin():
            kill(observer, victim)
        await until(lambda: sink.figures.failures >= 1, what="the killed attempt reported")
        assert w.confirmed == [] and not sink.figures.healthy
        assert committed(store) == (0, 0)  # nothing of the batch, nothing half-written
        blocker.rollback()
    await until(lambda: len(w.confirmed) == WINDOWS, within=60)
    assert sink.figures.healthy and sink.figures.batches == 1
    assert sorted(p[2] for p in w.confirmed) == list(range(WINDOWS))  # each exactly once
    with store.engine.connect() as conn:
        ids = dict(conn.execute(select(asset_event.c.offset, asset_event.c.id)).all())
    # The killed transaction's ids were rolled back with it: no gap, in window order.
    assert [ids[o] for o in range(WINDOWS)] == list(range(1, WINDOWS + 1))
    expected = WINDOWS - 1 if with_state else None
    assert store.asset(AssetScope(name="orders")).get("last_seen/0") == expected
    await sink.aclose()
