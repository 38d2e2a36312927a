"""A unit-of-work transaction holds at most ``MAX_BATCH_EVENTS`` events past its first
window (issue 28).

``uow_batch_size`` counts windows, and a batch watcher's window holds up to 512 events:
without a cap, windows queued behind a slow transaction became one transaction of
hundreds of thousands of rows, and everything submitted meanwhile waited for it. The
windows each transaction confirmed are seen from ``on_commit``, which the sink calls
once per committed transaction, after confirming its windows.
"""

from __future__ import annotations

from sqlalchemy import func, select
from test_unit_of_work import store  # noqa: F401 (the fixture)
from uow_windows import WindowDriver, coordinates

from sharedstream.core.window import Window
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.uow.sink import MAX_BATCH_EVENTS, DatabaseWorkSink


def window(w: WindowDriver, offset: int, events: int) -> Window:
    w.open(("orders", 0, offset))
    w.emit(*({"i": i} for i in range(events)))
    return w.close(submit=False)


async def test_queued_windows_commit_in_transactions_of_at_most_the_cap(
        store: StateStore) -> None:  # noqa: F811
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")},
                            coordinates=coordinates)
    w = WindowDriver("w", sink)
    per_transaction: list[int] = []
    sink.on_commit.append(lambda: per_transaction.append(
        len(w.confirmed) - sum(per_transaction)))
    quarter = MAX_BATCH_EVENTS // 4
    big = MAX_BATCH_EVENTS + 1  # over the cap on its own: still one transaction
    sizes = [quarter] * 10 + [big, 1, quarter]
    sink.submit([window(w, offset, n) for offset, n in enumerate(sizes)])
    assert await sink.drain(60)
    await sink.aclose()

    assert sink.figures.failures == 0 and w.rejected == {}
    assert w.confirmed == [("orders", 0, offset) for offset in range(len(sizes))]
    # As many windows per transaction as fit under the cap, in order; a window over the
    # cap alone; the small one after it with the next.
    assert per_transaction == [4, 4, 2, 1, 2]
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(asset_event)).scalar() == sum(sizes)
