"""Failure log lines name a message by where it was read, never by its value.

A value can hold anything a producer sent: personal data, tokens. The lines a rejection, a
raising batch or a failed unit of work writes go to log stores that are kept and shared
widely, so they must carry the message's coordinates (enough to find it with
``sharedstream dlq`` or the console) and none of its bytes. On the real broker and
PostgreSQL, because the record a watcher receives from the Kafka adapter is also its
ledger payload, and that object's repr is the whole message.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kafka_triggerer import running_group

from kafka_writes import ordered_producer
from sharedstream import MessageBatch
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.statestore import StateStore
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


async def test_rejection_and_raise_lines_carry_coordinates_not_the_value(
    kafka_bootstrap: str, create_topic: Callable[..., str], postgres_store: StateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sharedstream")
    topic = create_topic("logvalues", partitions=1)
    producer = ordered_producer(kafka_bootstrap)
    for i in range(MESSAGES):
        producer.produce(topic, f'{{"order": {i}, "card": "{SECRET}"}}'.encode(), partition=0)
    assert producer.flush(30) == 0
    group_id = f"logvalues-{uuid.uuid4().hex[:8]}"
    triggers: dict[str, KafkaSharedStreamTrigger] = {
        "raises": RaisesOnTheSecond(topics=[topic], kafka_config_id="k"),
        "big": KeepsTooMuch(topics=[topic], kafka_config_id="k")}
    async with running_group(
            kafka_bootstrap, postgres_store, group_id, triggers, {"raises": "raising"},
            settings=ManagerSettings(retry_backoff_initial=0.01, retry_backoff_max=0.02,
                                     max_attempts=2),
            max_event_bytes=1024) as running:
        await running.until_committed(topic, [MESSAGES], within=60)

    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    raised = [line for line in lines if "filter_shared_batch raised" in line]
    rejected = [line for line in lines if "rejecting" in line]
    assert raised and rejected, lines
    assert any(f"{topic}[0]@2" in line for line in raised), raised
    assert any(f"{topic}[0]@4" in line for line in rejected), rejected
    leaked = [line for line in caplog.text.splitlines() if SECRET in line]
    assert not leaked, leaked
