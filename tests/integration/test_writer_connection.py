"""The unit-of-work writer's held connection (issue 28): stale after idle, not an outage.

The writer keeps one connection between batches instead of checking one out (and
pinging it) per batch. When the server drops it while the writer is idle (a restart,
an idle timeout), the next batch must still commit at once: the work runs again on a
fresh connection, as the pool's pre-ping would have arranged, with no failed attempt,
no backoff, and readiness never flipping. PostgreSQL only: there the sink's idle
connection can be told apart by its last statement (MariaDB's processlist shows none).

The test kills only connections its own store's engine handed out: the session's
database is shared by every test process on the machine, and any of them may hold an
idle sink connection whose last statement is the same insert (a second engineer's run
made this test kill two, and drop that other process's connection).
"""

from __future__ import annotations

from sqlalchemy import event, func, select, text
from test_unit_of_work import TOPIC, until
from uow_windows import WindowDriver, coordinates

from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.uow.sink import DatabaseWorkSink


async def test_a_held_connection_dropped_while_idle_costs_no_failed_attempt(
        postgres_store: StateStore) -> None:
    store = postgres_store
    asset_id = store.register_asset("orders")
    mine: list[int] = []  # server pids of the connections this store hands out
    event.listen(store.engine, "checkout",
                 lambda dbapi, _record, _proxy: mine.append(dbapi.info.backend_pid))
    sink = DatabaseWorkSink(store, {"w": asset_id}, coordinates=coordinates)
    w = WindowDriver("w", sink)
    w.open((TOPIC, 0, 0))
    w.emit({"n": 0})
    w.close()
    await until(lambda: len(w.confirmed) == 1, what="the first window confirmed")
    with store.engine.connect() as observer:
        # The sink's connection, idle after its one-statement batch.
        killed = observer.execute(text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid = ANY(:mine) AND pid <> pg_backend_pid() "
            "AND state = 'idle' AND query LIKE 'WITH seq AS%'"), {"mine": mine}).scalars().all()
        observer.commit()
    assert killed == [True]
    w.open((TOPIC, 0, 1))
    w.emit({"n": 1})
    w.close()
    await until(lambda: len(w.confirmed) == 2, what="the window after the drop confirmed")
    assert sink.figures.failures == 0 and sink.figures.healthy
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(asset_event)).scalar_one() == 2
    await sink.aclose()
