"""``follow``: every event of an asset, in commit order, resumed from a stored cursor.

Writers insert events of two assets concurrently, committing late at random; a
follower of one asset reads half, stops (its process restarting), and a new follower
resumes from the cursor it stored. Together they must see each of the asset's events
exactly once, in id order. On PostgreSQL the follower polls only every 300 s: it can
finish within the test's minute only if the commits' notifications wake it.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

from sharedstream.delivery.follow import follow
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow

PER_ASSET = 150


def write(store: StateStore, asset_ids: dict[str, int], seed: int) -> None:
    rng = random.Random(seed)
    for batch in range(PER_ASSET // 5):
        rows: list[dict[str, Any]] = [
            {"asset_id": asset_ids[name], "watcher": f"w_{name}", "payload": "{}",
             "topic": "t", "topic_id": "tid", "partition": seed, "offset": batch * 5 + i,
             "event_index": 0, "created_at": utcnow()}
            for name in asset_ids for i in range(5)]
        with store.engine.begin() as connection:
            insert_events(connection, rows)
            time.sleep(rng.uniform(0, 0.01))


async def test_a_follower_resumed_from_its_cursor_sees_every_event_once_in_order(
        db_url: str) -> None:
    store = StateStore.from_url(db_url)
    store.upgrade()
    asset_ids = {name: store.register_asset(name) for name in ("a", "b")}
    poll = 300.0 if store.engine.dialect.name == "postgresql" else 0.05
    writers = [threading.Thread(target=write, args=(store, asset_ids, n)) for n in range(2)]
    for thread in writers:
        thread.start()
    seen: list[int] = []
    cursor = 0
    async with asyncio.timeout(60):
        async for event in follow("a", since=cursor, engine=store.engine, poll_interval=poll,
                                  batch_size=7):
            assert event.asset == "a"
            seen.append(event.id)
            cursor = event.id  # stored after handling, as a user would
            if len(seen) == PER_ASSET:  # half of "a" (two writers): the follower restarts
                break
        async for event in follow("a", since=cursor, engine=store.engine, poll_interval=poll,
                                  batch_size=7):
            seen.append(event.id)
            if len(seen) == 2 * PER_ASSET:
                break
    for thread in writers:
        thread.join()
    assert seen == sorted(seen) and len(set(seen)) == len(seen) == 2 * PER_ASSET
    store.close()
