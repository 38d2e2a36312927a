"""The async twins run on the store's threads: the event loop keeps running meanwhile."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sharedstream.statestore import AssetScope, StateStore, TaskScope


async def test_async_calls_do_not_block_the_loop(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    await orders.aset("wm", 1)
    release = threading.Event()
    real_get = store.backend.asset_get

    def slow_get(*args: Any) -> Any:
        # Holds the database call until the loop has ticked; if the call ran on the loop
        # thread the ticker could never run and this would time out.
        if not release.wait(timeout=30):
            raise AssertionError("the event loop did not tick while a DB call was running")
        return real_get(*args)

    store.backend.asset_get = slow_get  # type: ignore[method-assign]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while ticks < 5:
            ticks += 1
            await asyncio.sleep(0)
        release.set()

    value, _ = await asyncio.gather(orders.aget("wm"), ticker())
    assert (value, ticks) == (1, 5)


async def test_async_twins(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    assert await orders.aadvance("wm", 3) is True
    assert await orders.aadvance("wm", 2) is False
    assert await orders.adelete("wm") is True
    await orders.aset("x", 1)
    await orders.aclear()
    assert await orders.aget("x") is None
    job = store.task(TaskScope("d", "r", "t"))
    await job.aset("k", {"a": 1})
    assert await job.aget("k") == {"a": 1}
    assert await job.adelete("k") is True
    await job.aset("k", 1)
    await job.aclear(all_map_indices=True)
    assert await job.aget("k") is None
    uow = store.unit_of_work()
    assert await orders.bound(uow).aadvance("wm", 9) is True
    await uow.acommit()
    assert await orders.aget("wm") == 9


async def test_many_concurrent_writes(store: StateStore) -> None:
    orders = store.asset(AssetScope(name="orders"))
    results = await asyncio.gather(*(orders.aadvance("wm", i) for i in range(40)))
    assert await orders.aget("wm") == 39
    assert any(results)
