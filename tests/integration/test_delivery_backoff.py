"""The delivery backoff against a destination that fails now and then (issue 25.8).

A real webhook server answers 503 to one request in three; a real deliverer (the
product's webhook sender, its cursor and events in PostgreSQL) delivers to it. Every
retry delivers the event that failed and the next one, so no wait may grow: a round
that delivered anything resets the backoff. The waits are the deliverer's own backoff
decisions, read from its jitter source (each wait asks it for a delay between half the
nominal wait and all of it), never from the wall clock.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from db_schemas import postgres_schema_url

from sharedstream.delivery.deliverer import Deliverer
from sharedstream.delivery.settings import CommonOptions, DestinationSettings, WebhookDestination
from sharedstream.delivery.webhook import WebhookSender
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow
from webhook_server import WebhookServer

RETRY_INITIAL = 0.02


class WaitRecorder(random.Random):
    """Records the nominal wait of every backoff decision and answers the shortest."""

    def __init__(self) -> None:
        super().__init__(0)
        self.nominal: list[float] = []

    def uniform(self, a: float, b: float) -> float:
        self.nominal.append(b)
        return a


@pytest.fixture
def store(database_url: str) -> Iterator[StateStore]:
    for url in postgres_schema_url(database_url):
        store = StateStore.from_url(url)
        store.upgrade()
        yield store
        store.close()


def add_events(store: StateStore, count: int) -> list[int]:
    asset_id = store.register_asset("orders")
    rows: list[dict[str, Any]] = [
        {"asset_id": asset_id, "watcher": "w_orders", "payload": f'{{"n": {i}}}',
         "topic": "orders", "topic_id": "tid", "partition": 0, "offset": i,
         "event_index": 0, "created_at": utcnow()} for i in range(count)]
    with store.engine.begin() as connection:
        insert_events(connection, rows)
    return [row["id"] for row in rows]


async def test_a_retry_that_delivers_resets_the_wait(store: StateStore) -> None:
    count = 30
    ids = add_events(store, count)
    with WebhookServer(lambda _doc, n: 503 if n % 3 == 0 else 200) as server:
        options = WebhookDestination(url=server.url, secret="s")
        dest = DestinationSettings("hooks", CommonOptions(
            kind="webhook", start="earliest", retry_initial=RETRY_INITIAL, retry_max=1.0),
            options)
        waits = WaitRecorder()
        executor = ThreadPoolExecutor(1)
        stop = asyncio.Event()
        deliverer = Deliverer(dest, WebhookSender(options), store.engine, executor,
                              asyncio.Event(), rng=waits, owner="me")
        task = asyncio.create_task(deliverer.run(stop))
        try:
            async with asyncio.timeout(60):
                while len(server.acked()) < count:  # noqa: ASYNC110 (a server thread)
                    await asyncio.sleep(0.01)
        finally:
            stop.set()
            await task
            await deliverer.sender.aclose()
            executor.shutdown()
        received = list(server.received)
    # The fault landed: every third request failed (two events per three requests, the
    # last two events after the 14th failure), and each failed event was sent again.
    failed = [r for r in received if r.status == 503]
    assert len(failed) == (count - 1) // 2
    assert Counter(r.document["id"] for r in server.acked()) == Counter(ids)
    # One wait per failure, and every one the first step of the backoff.
    assert len(waits.nominal) == len(failed)
    assert waits.nominal == [RETRY_INITIAL] * len(failed)
