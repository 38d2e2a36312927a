"""A database outage while watchers read their state never dead-letters (issue 14, item 3).

Real Kafka broker, a dedicated real PostgreSQL (``stoppable_postgres``) and the manager
in-process. The watcher keeps a per-entity watermark keyed by the message key, so every
message's ``aget`` misses the one-second read cache and really reaches the database.

PostgreSQL is stopped, messages are produced, and the outage lasts far longer than
``max_attempts x ack_timeout`` after the watcher is seen blocked in its state read.
Waiting on the database is infrastructure: it must count no attempt, so nothing may
reach the dead-letter topic (or ``rejected_message``), and once the database is back
every message must become exactly its one event, with its watermark.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kafka_triggerer import QUICK_RETRIES, running_group
from localservices import PostgresServer
from sqlalchemy import func, select

from kafka_probe import committed_partitions
from kafka_writes import ordered_producer
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.dlq_headers import REJECTIONS
from sharedstream.statestore import AssetScope, StateStore
from sharedstream.statestore.models import asset_event, rejected_message
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

ACK_TIMEOUT = 1.0
MAX_ATTEMPTS = 2
DURING_OUTAGE = 4  # messages produced while the database is down
OUTAGE = 10.0  # seconds the database stays down once the watcher is seen blocked on it


class EntityWatermarks(KafkaSharedStreamTrigger):
    """One event per message newer than its entity's watermark (the message key)."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            assert message.key is not None
            entity = message.key.decode()
            key = f"watermark/{entity}"
            if message.offset <= await self.asset_state_store.aget(key, default=-1):
                continue
            await self.asset_state_store.aadvance(key, message.offset)
            yield TriggerEvent({"entity": entity, "offset": message.offset})


def produce_keyed(bootstrap: str, topic: str, entities: list[str]) -> None:
    producer = ordered_producer(bootstrap)
    for entity in entities:
        producer.produce(topic, f"update of {entity}".encode(), key=entity.encode(), partition=0)
    assert producer.flush(30) == 0


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    return int(committed_partitions(bootstrap, group, topic)[0].offset)


def dead_letter_reasons(bootstrap: str, topic: str) -> list[dict[str, str]]:
    """The rejections header of every record of the one-partition DLQ ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dlq-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        found: list[dict[str, str]] = []
        if high <= 0:
            return found
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(found) < high:
            assert time.monotonic() < deadline, f"read {len(found)} of {high} dead letters"
            record = consumer.poll(0.5)
            if record is None or record.error() is not None:
                continue
            headers = dict(record.headers() or [])
            found.append(json.loads(headers.get(REJECTIONS) or b"{}"))
        return found
    finally:
        consumer.close()


async def until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


async def test_database_outage_during_state_reads_dead_letters_nothing(
        stoppable_postgres: PostgresServer, kafka_bootstrap: str,
        create_topic: Callable[..., str]) -> None:
    server = stoppable_postgres
    store = StateStore.from_url(server.create_database(), async_workers=2)
    store.upgrade()
    topic = create_topic("entities")
    dlq = create_topic("entities-dlq")
    group_id = f"outage-{uuid.uuid4().hex[:8]}"
    trigger = EntityWatermarks(topics=[topic], kafka_config_id="k", dlq_topic=dlq)
    entities = [f"entity-{n}" for n in range(1 + DURING_OUTAGE)]

    def count_events() -> int:
        with store.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(asset_event)).scalar_one())

    async def events_written(n: int) -> bool:
        return await asyncio.to_thread(count_events) == n

    async def committed_to(offset: int) -> bool:
        return await asyncio.to_thread(
            committed_offset, kafka_bootstrap, f"{group_id}.{topic}", topic) == offset

    async with running_group(
            kafka_bootstrap, store, group_id, {"w": trigger}, {"w": "entities"},
            process=ProcessSettings(uow_max_delay=0.01), retry_initial=0.05, retry_cap=0.5,
            settings=replace(QUICK_RETRIES, ack_timeout=ACK_TIMEOUT,
                             max_attempts=MAX_ATTEMPTS)) as running:
        manager, state = running.manager, running.states["w"]
        # The watcher is live and reads the database: the first message gets its event.
        produce_keyed(kafka_bootstrap, topic, entities[:1])
        await until(lambda: events_written(1), 60, "the first message's event")

        await asyncio.to_thread(server.process.stop)  # fast shutdown: connections are cut
        produce_keyed(kafka_bootstrap, topic, entities[1:])

        async def blocked_on_read() -> bool:
            return state.read_failure is not None

        await until(blocked_on_read, 30, "the watcher blocked in a failing state read")
        await asyncio.sleep(OUTAGE)  # the fault's length, far beyond max_attempts x ack_timeout
        await asyncio.to_thread(server.start)

        # Every message resolves (acked, or on the old code dead-lettered and committed past).
        await until(lambda: committed_to(len(entities)), 60, "everything committed")
        await running.sink.drain(30)
        outcomes = manager.status()[0].counters.outcomes("w")

    dead_letters = dead_letter_reasons(kafka_bootstrap, dlq)
    with store.engine.connect() as conn:
        rejected_rows = [tuple(r) for r in conn.execute(
            select(rejected_message.c.offset, rejected_message.c.reason))]
        events = sorted(tuple(r) for r in conn.execute(
            select(asset_event.c.offset, asset_event.c.event_index)))
    watermarks = store.asset(AssetScope(name="entities"))
    marks = {e: watermarks.get(f"watermark/{e}") for e in entities}
    store.close()

    assert dead_letters == [], f"{len(dead_letters)} dead-lettered: {dead_letters}"
    assert rejected_rows == []
    assert outcomes == {"acked": len(entities), "failed": 0, "rejected": 0}  # never timed out
    assert events == [(offset, 0) for offset in range(len(entities))]  # each exactly once
    assert marks == {e: offset for offset, e in enumerate(entities)}
