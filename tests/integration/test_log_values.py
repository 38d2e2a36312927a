"""Failure log lines name a message by where it was read, never by its value.

A value can hold anything a producer sent: personal data, tokens. The lines a rejection, a
raising batch or a failed unit of work writes go to log stores that are kept and shared
widely, so they must carry the message's coordinates (enough to find it with
``sharedstream dlq`` or the console) and none of its bytes. On the real broker and
PostgreSQL, because the record a watcher receives from the Kafka adapter is also its
ledger payload, and that object's repr is the whole message.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from db_schemas import postgres_schema_url
from test_kafka_shared_stream import committed

from sharedstream import MessageBatch
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.statestore import StateStore
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggerer.persistence import DatabaseWorkSink
from sharedstream.triggerer.rejections import DatabaseRejectionRecorder
from sharedstream.triggerer.state_access import WatcherStateAccess
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

SECRET = "card-4111111111111111"
MESSAGES = 6


class RaisesOnTheSecond(KafkaSharedStreamTrigger):
    """A batch watcher whose filter raises on offset 2 (split, retried, rejected)."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        msg: KafkaMessage
        for msg in batch:
            if msg.offset == 2:
                raise ValueError("cannot read this order")


class KeepsTooMuch(KafkaSharedStreamTrigger):
    """A per-message watcher whose event for offset 4 is over the sink's size limit."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            size = 4096 if message.offset == 4 else 1
            yield TriggerEvent({"pad": "x" * size})


@pytest.fixture
def pg_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


async def test_rejection_and_raise_lines_carry_coordinates_not_the_value(
    kafka_bootstrap: str, create_topic: Callable[..., str], pg_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sharedstream")
    topic = create_topic("logvalues", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(MESSAGES):
        producer.produce(topic, f'{{"order": {i}, "card": "{SECRET}"}}'.encode(), partition=0)
    assert producer.flush(30) == 0
    store = StateStore.from_url(pg_url)
    store.upgrade()
    assets = {"raises": store.register_asset("raising"), "big": store.register_asset("big")}
    before = kafka_runtime()
    group_id = f"logvalues-{uuid.uuid4().hex[:8]}"
    configure_kafka_runtime({"k": {"bootstrap.servers": kafka_bootstrap, "group.id": group_id}},
                            DatabaseRejectionRecorder(store))
    sink = DatabaseWorkSink(store, assets, ProcessSettings(), max_event_bytes=1024)
    manager = SharedStreamManager(sink, ManagerSettings(
        retry_backoff_initial=0.01, retry_backoff_max=0.02, max_attempts=2))
    triggers: dict[str, KafkaSharedStreamTrigger] = {
        "raises": RaisesOnTheSecond(topics=[topic], kafka_config_id="k"),
        "big": KeepsTooMuch(topics=[topic], kafka_config_id="k")}
    manager.declare_cohort(triggers["raises"].shared_stream_key(), triggers)
    for name, trigger in triggers.items():
        trigger.asset_state_store = WatcherStateAccess(store, name, name, assets[name])
    tasks = [asyncio.create_task(manager.run_watcher(n, t)) for n, t in triggers.items()]
    try:
        deadline = asyncio.get_running_loop().time() + 60
        offsets: list[int] = []
        while offsets != [MESSAGES]:
            assert asyncio.get_running_loop().time() < deadline, f"committed {offsets}"
            await asyncio.sleep(0.1)
            offsets[:] = [tp.offset for tp in await asyncio.to_thread(
                committed, kafka_bootstrap, f"{group_id}.{topic}", topic, 1)]
    finally:
        await sink.drain(30)
        await manager.stop_all()
        await asyncio.gather(*tasks, return_exceptions=True)
        await sink.aclose()
        configure_kafka_runtime(before.connections, before.recorder, before.environ)
        store.close()

    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    raised = [line for line in lines if "filter_shared_batch raised" in line]
    rejected = [line for line in lines if "rejecting" in line]
    assert raised and rejected, lines
    assert any(f"{topic}[0]@2" in line for line in raised), raised
    assert any(f"{topic}[0]@4" in line for line in rejected), rejected
    leaked = [line for line in caplog.text.splitlines() if SECRET in line]
    assert not leaked, leaked
