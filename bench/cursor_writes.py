"""Asset cursor writes per second: one after another, and from 8 coroutines at once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sharedstream.statestore import AssetScope, StateStore, Writer


async def run(url: str, writes: int) -> dict[str, Any]:
    """Asset cursor advances per second: one after another (sync ``advance``), and from 8
    coroutines on 8 cursors at once (``aadvance``, on the store's threads)."""
    store = StateStore.from_url(url)
    store.upgrade()
    state = store.asset(AssetScope(name="cursors"), writer=Writer.api("bench"))
    started = time.perf_counter()
    for i in range(writes):
        state.advance("sync", i)
    sync_rate = writes / (time.perf_counter() - started)

    async def cursor(n: int) -> None:
        for i in range(writes // 8):
            await state.aadvance(f"async/{n}", i)

    started = time.perf_counter()
    await asyncio.gather(*(cursor(n) for n in range(8)))
    async_rate = 8 * (writes // 8) / (time.perf_counter() - started)
    store.close()
    return {"sync_writes_per_s": round(sync_rate), "async_writes_per_s": round(async_rate)}
