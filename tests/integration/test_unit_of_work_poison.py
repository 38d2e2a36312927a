"""Issue 14: a permanent persistence error stalled every group.

On the real broker and a real PostgreSQL: two watchers of one group share the unit-of-work
sink; for one message watcher ``a`` stages a state key PostgreSQL refuses (it contains a
NUL character). That message must become ``a``'s rejection with the database's error as the
reason, and nothing else: ``b`` still gets its event for it, every other message of both
watchers commits once, and the partition's committed offset reaches the end.

Before the fix the sink retried the whole batch forever: no event of the batch holding the
poison message (nor of any later batch) was ever committed, for either watcher.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kafka_triggerer import running_group
from sqlalchemy import select
from test_kafka_shared_stream import committed, produce

from sharedstream.core.message import KafkaMessage
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

MESSAGES = 300
POISON = 137  # an offset in the middle of a batch (batches of 40)
BAD_KEY = "entity\x00id"


class Recorder(KafkaSharedStreamTrigger):
    """One event per message, and the message's offset as state; ``poison`` makes it
    stage a key PostgreSQL refuses for that one offset."""

    poison: int | None = None

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            key = BAD_KEY if message.offset == self.poison else f"last/{message.partition}"
            await self.asset_state_store.aset(key, message.offset)
            yield TriggerEvent({"offset": message.offset})


async def _until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached within {within}s: {what}")
        await asyncio.sleep(0.1)


async def test_a_write_postgres_refuses_is_that_watchers_rejection_not_a_stall(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    topic = create_topic("uow-poison", partitions=1)
    produce(kafka_bootstrap, topic, MESSAGES)
    store = postgres_store
    group_id = f"uow-poison-{uuid.uuid4().hex[:8]}"
    triggers = {name: Recorder(topics=[topic], kafka_config_id="k") for name in ("a", "b")}
    triggers["a"].poison = POISON

    def events() -> list[tuple[str, int, int]]:
        e = asset_event.c
        with store.engine.connect() as conn:
            return [(r.watcher, r.offset, r.event_index)
                    for r in conn.execute(select(e.watcher, e.offset, e.event_index))]

    found: list[tuple[str, int, int]] = []
    offsets: list[int] = []

    async def all_events() -> bool:
        found[:] = await asyncio.to_thread(events)
        return len(found) >= 2 * MESSAGES - 1

    async def committed_to_end() -> bool:
        offsets[:] = [tp.offset for tp in await asyncio.to_thread(
            committed, kafka_bootstrap, f"{group_id}.{topic}", topic)]
        return offsets == [MESSAGES]

    async with running_group(kafka_bootstrap, store, group_id, triggers,
                             {name: f"{name}_orders" for name in triggers},
                             process=ProcessSettings(uow_batch_size=40),
                             retry_initial=0.05, retry_cap=0.5) as running:
        sink = running.sink
        try:
            await _until(all_events, 90, "every event but a's poisoned one")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {len(found)} of {2 * MESSAGES - 1} events; sink healthy="
                f"{sink.figures.healthy}, failures={sink.figures.failures}, "
                f"last_error={sink.figures.last_error!r}"
            ) from None
        await _until(committed_to_end, 60, f"committed offset {MESSAGES} (at {offsets})")
        await sink.drain(30)
        found[:] = await asyncio.to_thread(events)

    r = rejected_message.c
    with store.engine.connect() as conn:
        rejected = [(row.watcher, row.offset, row.reason) for row in conn.execute(
            select(r.watcher, r.offset, r.reason))]
    a_state = store.asset(AssetScope(name="a_orders"))
    b_state = store.asset(AssetScope(name="b_orders"))
    a_last, b_last = a_state.get("last/0"), b_state.get("last/0")

    # (d) nothing twice (the unique key would refuse a duplicate; events_written would not count it)
    assert len(found) == len(set(found)) == sink.figures.events_written
    # (a) + (c) every other message of both watchers, b's poisoned one included
    assert sorted(o for w, o, _ in found if w == "b") == list(range(MESSAGES))
    assert sorted(o for w, o, _ in found if w == "a") == [
        o for o in range(MESSAGES) if o != POISON]
    assert a_last == b_last == MESSAGES - 1
    # (b) a's rejection of that one message, with the database's refusal as the reason
    assert len(rejected) == 1, rejected
    watcher, offset, reason = rejected[0]
    assert (watcher, offset) == ("a", POISON)
    assert "NUL" in reason and "DataError" in reason, reason
    assert sink.figures.healthy and sink.figures.windows_rejected == 1
