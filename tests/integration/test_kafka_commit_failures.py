"""Commit failures on a real broker, driven by the broker itself.

A dedicated broker started with ``offset.metadata.max.bytes=64`` refuses the commit
whose metadata (the offsets remembered above a held one) is longer: the producer must
count the failure, halve its metadata budget until the broker takes it, and keep
committing, the floor never passing the held message.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from localservices import KafkaBroker
from test_kafka_manager import SETTINGS, DictSink, Scripted, Triggerer, committed_tps
from test_kafka_shared_stream import produce, until

from sharedstream.producer.kafka import KafkaSharedStreamProducer
from sharedstream.producer.progress import decode_progress
from sharedstream.producer.rejections import InMemoryRejectionRecorder
from sharedstream.producer.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.triggers.message import KafkaMessage

METADATA_LIMIT = 64


@pytest.fixture(scope="module")
def small_metadata_broker() -> Iterator[str]:
    broker = KafkaBroker(settings={"offset.metadata.max.bytes": str(METADATA_LIMIT)})
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def create_topic(bootstrap: str) -> str:
    name = f"metadata-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and all(
                p.leader >= 0 for p in meta.partitions.values()) and meta.partitions:
            return name
        assert time.monotonic() < deadline, f"{name} has no leader"
        time.sleep(0.05)


async def test_metadata_over_the_brokers_limit_halves_until_it_fits(
        small_metadata_broker: str, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap, count = small_metadata_broker, 400
    topic = create_topic(bootstrap)
    produce(bootstrap, topic, count)
    before = kafka_runtime()
    group_id = f"it-{uuid.uuid4().hex[:8]}"
    configure_kafka_runtime({"c0": {"bootstrap.servers": bootstrap, "group.id": group_id}},
                            InMemoryRejectionRecorder())
    release = asyncio.Event()

    def even_offsets_held(message: KafkaMessage) -> str:
        # Held messages between handled ones: every other offset, so the remembered
        # set is 200 runs, far more than 64 bytes of metadata.
        if message.offset % 2 == 0 and not release.is_set():
            raise RuntimeError(f"offset {message.offset} held")
        return "event"

    sink = DictSink()
    watchers = {"steady": Scripted(topics=[topic], kafka_config_id="c0"),
                "picky": Scripted(even_offsets_held, topics=[topic], kafka_config_id="c0")}
    caplog.set_level(logging.WARNING, logger="sharedstream.producer.kafka")
    triggerer = await Triggerer.start(sink, watchers, SETTINGS)
    try:
        producer = triggerer.producer
        assert isinstance(producer, KafkaSharedStreamProducer)
        group = f"{group_id}.{topic}"
        # Offsets resolve above the held 0 until their remembered runs no longer fit: the
        # broker refuses that commit (whole), the budget halves until one is taken.
        await until(lambda: producer.commit_failures >= 1)
        assert "broker refused commit metadata" in caplog.text
        after_refusal = producer.commits
        await until(lambda: producer.commits > after_refusal)
        [tp] = await committed_tps(bootstrap, group, topic)
        metadata = tp.metadata or ""
        # The floor stays on the held offset 0; the remembered odd offsets nearest it fit.
        assert tp.offset == 0 and 0 < len(metadata) <= METADATA_LIMIT, (tp.offset, metadata)
        remembered = sorted(decode_progress(tp.offset, metadata))
        assert remembered and remembered == list(range(1, 2 * len(remembered), 2))
        release.set()
        await until(lambda: len(sink.offsets("picky")) == count)
        deadline = time.monotonic() + 60
        while [tp.offset for tp in await committed_tps(bootstrap, group, topic)] != [count]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await triggerer.stop()
        configure_kafka_runtime(before.connections, before.recorder, before.environ)
