"""A real PostgreSQL outage under the unit of work.

The server is a dedicated throwaway one (``stoppable_postgres``, not the session's),
so stopping it affects no other test: nothing is confirmed while it is down, readiness says so, and
everything is confirmed exactly once after it returns.
"""

from __future__ import annotations

from localservices import PostgresServer
from sqlalchemy import func, select
from test_unit_of_work import TOPIC, until
from uow_windows import WindowDriver, coordinates

from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.uow.sink import DatabaseWorkSink


async def test_database_outage_holds_everything_then_confirms_each_window_once(
        stoppable_postgres: PostgresServer) -> None:
    server = stoppable_postgres
    store = StateStore.from_url(server.create_database(), async_workers=2)
    store.upgrade()
    asset_id = store.register_asset("orders")
    sink = DatabaseWorkSink(store, {"w": asset_id}, ProcessSettings(uow_max_delay=0.01),
                            coordinates=coordinates, retry_initial=0.05, retry_cap=0.5)
    state = WatcherStateAccess(store, "w", "orders", asset_id)
    w = WindowDriver("w", sink)

    async def handle(offset: int) -> None:
        w.open((TOPIC, 0, offset))
        await state.aset("last", offset)
        w.emit(offset)
        w.close()

    for offset in range(50):
        await handle(offset)
    await until(lambda: len(w.confirmed) == 50)

    server.process.stop()  # fast shutdown: every connection is cut
    for offset in range(50, 100):
        await handle(offset)
    await until(lambda: sink.figures.failures >= 3, what="failed attempts while the server is down")
    assert not sink.figures.healthy and sink.figures.last_error
    assert len(w.confirmed) == 50 and w.failed == []
    # Reads of keys staged by pending windows keep answering during the outage.
    w.open((TOPIC, 0, 100))
    assert await state.aget("last") == 99
    w.close()

    server.start()
    await until(lambda: len(w.confirmed) == 100, within=60)
    assert sink.figures.healthy and sink.figures.last_error is None
    assert sorted(p[2] for p in w.confirmed) == list(range(100))  # each exactly once
    with store.engine.connect() as conn:
        count = conn.execute(select(func.count()).select_from(asset_event)).scalar_one()
        offsets = set(conn.execute(select(asset_event.c.offset)).scalars())
    assert count == 100 and offsets == set(range(100))
    assert store.asset(AssetScope(name="orders")).get("last") == 99
    await sink.aclose()
    store.close()
