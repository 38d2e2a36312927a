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
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from localservices import KafkaBroker
from test_kafka_manager import (
    SETTINGS,
    DictSink,
    Scripted,
    Triggerer,
    committed_at,
    committed_tps,
)
from test_kafka_shared_stream import produce, until

from kafka_writes import ordered_producer
from sharedstream.core.message import KafkaMessage
from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.progress import decode_progress
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime

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
    produce(bootstrap, topic, count, producer=ordered_producer(bootstrap))
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
    caplog.set_level(logging.WARNING, logger="sharedstream.kafka.consumer")
    triggerer = await Triggerer.start(sink, watchers, SETTINGS)
    try:
        producer = triggerer.producer
        assert isinstance(producer, KafkaSharedStreamProducer)
        group = f"{group_id}.{topic}"
        # Offsets resolve above the held 0 until their remembered runs no longer fit: the
        # broker refuses that commit (whole), the budget halves until one is taken.
        await until(lambda: producer.counters().commit_failures >= 1)
        assert "broker refused commit metadata" in caplog.text
        after_refusal = producer.counters().commits
        await until(lambda: producer.counters().commits > after_refusal)
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


class FrequentCommits(Scripted):
    """Commits every 5 ms, so some land while the group is between JoinGroup and SyncGroup."""

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> KafkaSharedStreamProducer:
        runtime = kafka_runtime()
        return KafkaSharedStreamProducer(
            topics=kwargs["topics"], recorder=runtime.recorder, commit_interval=0.005,
            config=resolve_connection(kwargs["kafka_config_id"], runtime.connections),
            connection_id=kwargs["kafka_config_id"])


def join_and_leave(bootstrap: str, group: str, topic: str) -> None:
    """A plain member joins ``group``, takes its share of partitions, and leaves."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False,
                       "partition.assignment.strategy": "cooperative-sticky"})
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "the joining member got no partition"
            member.poll(0.05)
    finally:
        member.close()


async def test_commits_refused_by_rebalances_lose_and_hand_out_twice_nothing(
        kafka_bootstrap: str, create_topic: Callable[..., str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The broker refuses a commit that arrives mid-rebalance (REBALANCE_IN_PROGRESS):
    the commits still reach the end, and no message is handed to a watcher twice
    (graceful rebalances commit what was finished before the partitions move).

    Which commit the broker refuses is up to timing, so whether the refused target is
    sent again is checked deterministically in the unit tests (MemoryBroker); here the
    refusal must land on the real broker (the log says so) and change nothing."""
    caplog.set_level(logging.INFO, logger="sharedstream.kafka.consumer")
    topic = create_topic("refused", partitions=4)
    before = kafka_runtime()
    conn, group_id = "c0", f"it-{uuid.uuid4().hex[:8]}"
    configure_kafka_runtime({conn: {"bootstrap.servers": kafka_bootstrap, "group.id": group_id}},
                            InMemoryRejectionRecorder())
    try:
        await refused_commit_sent_again(kafka_bootstrap, topic, conn, f"{group_id}.{topic}",
                                        caplog)
    finally:
        configure_kafka_runtime(before.connections, before.recorder, before.environ)


async def refused_commit_sent_again(kafka_bootstrap: str, topic: str, conn: str, group: str,
                                    caplog: pytest.LogCaptureFixture) -> None:
    sink = DictSink()
    watchers = {w: FrequentCommits(topics=[topic], kafka_config_id=conn) for w in ("w1", "w2")}
    triggerer = await Triggerer.start(sink, watchers)
    await until(lambda: triggerer.producer.health().assigned_partitions == 4)
    total = 0
    flowing = True

    async def traffic() -> None:
        nonlocal total
        while flowing:
            await asyncio.to_thread(produce, kafka_bootstrap, topic, 8, 4)
            total += 8

    producing = asyncio.create_task(traffic())
    try:
        for _ in range(40):  # each join and leave is two rebalances
            await asyncio.to_thread(join_and_leave, kafka_bootstrap, group, topic)
            if "commit deferred by a rebalance" in caplog.text:
                break
    finally:
        flowing = False
        await producing
    assert "commit deferred by a rebalance" in caplog.text, "no commit was refused"
    await until(lambda: triggerer.producer.health().assigned_partitions == 4)
    await until(lambda: all(len(t.seen) >= total for t in watchers.values()))
    deadline = time.monotonic() + 60
    while sum(await committed_at(kafka_bootstrap, group, topic, 4)) != total:
        assert time.monotonic() < deadline, "the commits did not reach the end"
        await asyncio.sleep(0.05)
    await triggerer.stop()
    for name, watcher in watchers.items():
        handed = Counter(watcher.seen)
        assert sum(handed.values()) == total and max(handed.values()) == 1, name
    assert max(sink.writes.values()) == 1
