"""Batch watchers end to end (issue 27) on the real broker and real PostgreSQL:
KafkaSharedStreamProducer -> SharedStreamManager -> a ``filter_shared_batch`` watcher
keeping every 7th offset with a per-partition watermark staged per batch, beside a
per-message sibling on the same consumer -> DatabaseWorkSink -> commits.

One message is poison: the batch watcher raises on it every time, so its batches are
split, every other message of them still becomes its event, and the poison one ends, after
``max_attempts``, as a ``rejected_message`` row for the batch watcher alone. Checked by
identity in the database and on the broker: the batch watcher's events are exactly the
kept offsets (one row each, keyed by their own message), the watermarks are the last kept
offsets, every partition is committed to its end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from kafka_triggerer import QUICK_RETRIES, running_group
from sqlalchemy import select
from test_kafka_shared_stream import produce

from sharedstream import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

MESSAGES = 900
PARTITIONS = 3
POISON = (1, 70)  # (partition, offset): kept (70 % 7 == 0), and raises every time


class BatchKeeper(KafkaSharedStreamTrigger):
    """Keeps every 7th offset, advancing a per-partition watermark in the batch's state."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[list[tuple[int, int]]] = []
        self.read_own_writes = True

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        self.calls.append([(m.partition, m.offset) for m in batch])
        state = self.asset_state_store
        for msg in batch:
            if msg.offset % 7:
                continue
            if (msg.partition, msg.offset) == POISON:
                raise ValueError("poison order")
            key = f"last/{msg.partition}"
            await state.aadvance(key, msg.offset)
            # staged per batch: a later read in the same call sees it
            self.read_own_writes &= await state.aget(key) == msg.offset
            batch.emit(msg, TriggerEvent({"partition": msg.partition, "offset": msg.offset}))


class EveryMessage(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            yield TriggerEvent({"offset": message.offset})


async def test_a_batch_watcher_commits_its_events_and_state_and_isolates_the_poison(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore
) -> None:
    topic = create_topic("batch", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, MESSAGES, partitions=PARTITIONS)
    store = postgres_store
    group_id = f"batch-{uuid.uuid4().hex[:8]}"
    batch_watcher = BatchKeeper(topics=[topic], kafka_config_id="k")
    triggers: dict[str, KafkaSharedStreamTrigger] = {
        "batch": batch_watcher, "each": EveryMessage(topics=[topic], kafka_config_id="k")}
    ends = [len(range(p, MESSAGES, PARTITIONS)) for p in range(PARTITIONS)]
    async with running_group(
            kafka_bootstrap, store, group_id, triggers,
            {"batch": "kept_orders", "each": "all_orders"},
            process=ProcessSettings(uow_batch_size=200),
            settings=replace(QUICK_RETRIES, max_attempts=2)) as running:
        await running.until_committed(topic, ends, within=120)

    e, r = asset_event.c, rejected_message.c
    with store.engine.connect() as conn:
        events = [tuple(row) for row in conn.execute(
            select(e.watcher, e.partition, e.offset, e.event_index))]
        rejections = [tuple(row) for row in conn.execute(
            select(r.watcher, r.partition, r.offset, r.reason))]
    kept = {(p, o) for p in range(PARTITIONS) for o in range(0, ends[p], 7)} - {POISON}
    batch_events = [(p, o, i) for w, p, o, i in events if w == "batch"]
    assert sorted(batch_events) == sorted((p, o, 0) for p, o in kept)  # once each, own key
    assert sorted((p, o) for w, p, o, _ in events if w == "each") == sorted(
        (p, o) for p in range(PARTITIONS) for o in range(ends[p]))
    [(watcher, *where, reason)] = rejections
    assert (watcher, tuple(where)) == ("batch", POISON)
    assert reason.startswith("max attempts: ValueError: poison order")
    # the poison's batches were split, and it came alone on its last attempts
    assert any(len(c) > 1 and POISON in c for c in batch_watcher.calls)
    assert batch_watcher.calls.count([POISON]) >= 2
    # fewer calls than messages: batches, not one call per message
    assert len(batch_watcher.calls) < MESSAGES // 10
    watermarks = store.asset(AssetScope(name="kept_orders"))
    for p in range(PARTITIONS):
        assert watermarks.get(f"last/{p}") == max(o for q, o in kept if q == p)
    assert batch_watcher.read_own_writes
