"""A slow watcher is lag, never a failure (issue 42, "one flow control"), on the real
broker and real PostgreSQL.

A per-message watcher that takes a few milliseconds per message shares one consumer with
a batch watcher that keeps up easily. The slow watcher's queue fills: that must pause
fetching (the flow waits for it, within the queue bound) and show as its lag, never as a
failure, a hold or a redelivery of its messages. A new user once saw 3,993 redeliveries
and a "failed" count on such a watcher, and alerts that fired for nothing.

So that the slow watcher is certainly busy when messages reach it (a watcher waiting for
messages takes a large batch at its next step: not lag), it stops on its first message
until the group has paused for its lag: half the messages are produced first, the rest
once it holds its first message, and the gate opens once the group counted its lag.
Nothing waits for messages to flow while the gate is shut: the group rightly stops
handing out messages while the slow watcher lags (an earlier version waited for the
batch watcher to see the whole first half, and hung whenever that half arrived in more
than one fetch, since the second fetch already found the slow watcher lagging).

Checked by identity: when the commits reach the end of every partition, both watchers
already have exactly one event per message in the database (commits follow the
persistence of every watcher); the group counted no failure and no redelivery, and the
slow watcher is counted as lagging. (The batch watcher may be too, on a loaded machine: a
fetch that reaches it while it is busy with the previous one finds it lagging, and that
is right.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from kafka_triggerer import QUICK_RETRIES, running_group
from sqlalchemy import select
from test_kafka_shared_stream import produce, until

from sharedstream import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.statestore import StateStore
from sharedstream.statestore.models import asset_event
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

MESSAGES = 600
PARTITIONS = 3
QUEUE = 32  # small, so the slow watcher's queue fills many times over


class SlowEach(KafkaSharedStreamTrigger):
    """One event per message, a couple of milliseconds each: far slower than its sibling.
    It waits for ``gate`` on its first message."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            self.holding.set()
            await self.gate.wait()
            await asyncio.sleep(0.002)
            yield TriggerEvent({"partition": message.partition, "offset": message.offset})


class GatedBatch(KafkaSharedStreamTrigger):
    """A batch watcher that stops on its first batch until ``gate`` opens."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.holding = asyncio.Event()

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        self.holding.set()
        await self.gate.wait()
        for msg in batch:
            batch.emit(msg, TriggerEvent({"partition": msg.partition, "offset": msg.offset}))


class FastBatch(KafkaSharedStreamTrigger):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen = 0

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        self.seen += len(batch)
        for msg in batch:
            batch.emit(msg, TriggerEvent({"partition": msg.partition, "offset": msg.offset}))


async def test_a_slow_watcher_beside_a_batch_sibling_lags_and_is_never_failed(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    topic = create_topic("lag", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, MESSAGES // 2, partitions=PARTITIONS)
    store = postgres_store
    ends = [len(range(p, MESSAGES, PARTITIONS)) for p in range(PARTITIONS)]
    slow = SlowEach(topics=[topic], kafka_config_id="k")
    fast = FastBatch(topics=[topic], kafka_config_id="k")
    triggers: dict[str, KafkaSharedStreamTrigger] = {"slow": slow, "batch": fast}
    async with running_group(
            kafka_bootstrap, store, f"lag-{uuid.uuid4().hex[:8]}", triggers,
            settings=replace(QUICK_RETRIES, subscriber_queue_size=QUEUE)) as running:
        await until(slow.holding.is_set)  # slow: busy on its first message
        # The same messages again (ids MESSAGES // 2 on, same partitions), while slow is busy:
        # a fetch handed to it now finds it busy with its queue full, and pauses the group.
        produce(kafka_bootstrap, topic, MESSAGES // 2, partitions=PARTITIONS)
        await until(lambda: running.manager.status()[0].counters.lagged["slow"] > 0)
        slow.gate.set()
        await running.until_committed(topic, ends, within=120)
        # Committed to the end: every watcher's events of every message are persisted.
        e = asset_event.c
        with store.engine.connect() as conn:
            events = [tuple(row) for row in conn.execute(select(e.watcher, e.partition,
                                                                e.offset))]
        [status] = running.manager.status()

    every = sorted((p, o) for p in range(PARTITIONS) for o in range(ends[p]))
    for watcher in ("slow", "batch"):
        assert sorted((p, o) for w, p, o in events if w == watcher) == every, watcher
    counters = status.counters
    assert counters.redelivered == 0, "a lagging watcher's messages were redelivered"
    assert dict(counters.failed) == {}, "a lagging watcher was counted as failed"
    for watcher in ("slow", "batch"):
        assert counters.outcomes(watcher) == {"acked": MESSAGES, "failed": 0, "rejected": 0}
    assert counters.lagged["slow"] > 0, "the slow watcher's lag paused nothing"


async def test_a_busy_watcher_alone_on_one_partition_pauses_the_group_never_the_partition(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    """Messages handed out and not resolved yet are the group's ``max_in_flight``, a pause
    that keeps librdkafka's prefetch; they never stop their partition at its own bound,
    which discards what was read past it and reads it again after a seek (with one
    partition carrying the whole flow, both bounds were reached by the same batch: a
    watcher that merely took its time made the consumer read its records twice, and one
    busy watcher ran at a third of its speed). Observable: every record is read from the
    broker exactly once, although the group paused for what was in flight."""
    messages, bound = 3_000, 100
    topic = create_topic("busy", partitions=1)
    produce(kafka_bootstrap, topic, messages, partitions=1)
    gated = GatedBatch(topics=[topic], kafka_config_id="k")
    async with running_group(
            kafka_bootstrap, postgres_store, f"busy-{uuid.uuid4().hex[:8]}", {"busy": gated},
            settings=replace(QUICK_RETRIES, max_in_flight=bound)) as running:
        await until(gated.holding.is_set)
        await until(lambda: running.manager.status()[0].paused_because == "in_flight")
        gated.gate.set()
        await running.until_committed(topic, [messages], within=120)
        [status] = running.manager.status()
    assert status.counters.outcomes("busy") == {"acked": messages, "failed": 0, "rejected": 0}
    consumed = status.producer.counters().messages_consumed
    assert consumed == messages, f"{consumed} records read for {messages} messages"
