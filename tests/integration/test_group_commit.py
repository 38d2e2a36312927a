"""Group commit of the unit-of-work sink, on the real databases (issue 28).

An idle writer takes a window into a transaction at once (no batch delay); windows
that arrive while a transaction is in flight form the next one. Both are observed
through the sink's queue and batch count, never through timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from test_unit_of_work import TOPIC, until
from uow_windows import WindowDriver, coordinates

from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event, event_sequence
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.uow.sink import DatabaseWorkSink


@pytest.fixture
def store(db_url: str) -> Iterator[StateStore]:
    store = StateStore.from_url(db_url)
    store.upgrade()
    yield store
    store.close()


async def loop_turns(n: int = 5) -> None:
    """Let every task the loop has ready run ``n`` times (no time passes by design)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_an_idle_writer_takes_a_window_into_a_transaction_at_once(
        store: StateStore) -> None:
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")}, ProcessSettings(),
                            coordinates=coordinates)
    w = WindowDriver("w", sink)
    w.handle((TOPIC, 0, 0), {"n": 0})
    await loop_turns()
    # Taken off the queue by the flusher's first turn: no timer held it back.
    assert sink.queued == 0
    await until(lambda: w.confirmed == [(TOPIC, 0, 0)])
    await sink.aclose()


async def test_windows_arriving_during_a_commit_form_the_next_batch(
        server_store: StateStore) -> None:
    store = server_store
    sink = DatabaseWorkSink(store, {"w": store.register_asset("orders")}, ProcessSettings(),
                            coordinates=coordinates)
    w = WindowDriver("w", sink)
    with store.engine.connect() as blocker:
        # The sequence row locked: the first batch's transaction waits at its event insert.
        blocker.execute(select(event_sequence.c.last_id).with_for_update())
        w.handle((TOPIC, 0, 0), {"n": 0})
        await until(lambda: sink.queued == 0, what="the first window taken")
        for offset in range(1, 10):
            w.handle((TOPIC, 0, offset), {"n": offset})
            await loop_turns()
        assert sink.queued == 9 and w.confirmed == []
        blocker.rollback()
    await until(lambda: len(w.confirmed) == 10)
    assert sink.figures.batches == 2  # the nine that waited committed together
    with store.engine.connect() as conn:
        ids = dict(conn.execute(select(asset_event.c.offset, asset_event.c.id)).all())
    assert sorted(ids, key=ids.__getitem__) == list(range(10))  # ids in commit order
    await sink.aclose()
