"""The in-memory Kafka (``kafka.memory.MemoryBroker``) and the real broker, side by side.

Every unit test of the Kafka adapter runs on the in-memory broker, so what it gets
wrong, they get wrong silently. Each scenario here runs twice, once per backend
(``side``), and asserts what a client of either sees: records as produced, the
assignment and its callbacks, pause and resume, seek, commits read back and where the
next member starts, a second member taking partitions over, and the errors the adapter
handles (an unknown topic, a record or commit metadata over the limit, a seek on a
partition not assigned). A change that makes the two answer differently fails here.

One difference is kept on purpose and not tested here: a member's commit for a
partition another member owns. The real broker checks only the group generation and
accepts it; the in-memory one refuses it (``ILLEGAL_GENERATION``), so a test in which
the adapter commits a partition it no longer owns fails on the fake instead of passing
silently. Being stricter than the broker can only make a unit test fail, never pass.

Waiting is for a condition (``consume_until``), with a deadline: the real broker
answers in its own time (a group join takes a few hundred milliseconds), the
in-memory one at once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from sharedstream.kafka.memory import MemoryBroker

pytestmark = pytest.mark.integration

DEADLINE = 60.0


@dataclass
class Side:
    """One backend: topics, and clients made from one configuration for both."""

    name: str
    bootstrap: str
    make_topic: Callable[[int], str]
    make_consumer: Callable[[dict[str, Any]], Any]
    make_producer: Callable[[dict[str, Any]], Any]
    clients: list[Any] = field(default_factory=list)

    def consumer(self, group: str, **extra: Any) -> Any:
        client = self.make_consumer({
            "bootstrap.servers": self.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky", **extra})
        self.clients.append(client)
        return client

    def producer(self, **extra: Any) -> Any:
        return self.make_producer({"bootstrap.servers": self.bootstrap, **extra})


@pytest.fixture(params=["memory", "real"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "memory":
        broker = MemoryBroker()
        found = Side("memory", "memory:9092",
                     lambda n: (name := f"t-{uuid.uuid4().hex[:8]}",
                                broker.create_topic(name, n))[0],
                     broker.consumer, broker.producer)
    else:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        create_topic = request.getfixturevalue("create_topic")
        found = Side("real", bootstrap, lambda n: create_topic("parity", partitions=n),
                     Consumer, Producer)
    yield found
    for client in found.clients:
        client.close()


def group() -> str:
    return f"parity-{uuid.uuid4().hex[:8]}"


def consume_until(consumer: Any, done: Callable[[list[Any]], bool],
                  seen: list[Any] | None = None) -> list[Any]:
    """Consume (adding to ``seen``) until ``done(seen)``; fails after DEADLINE."""
    seen = [] if seen is None else seen
    deadline = time.monotonic() + DEADLINE
    while not done(seen):
        assert time.monotonic() < deadline, f"not done after {DEADLINE}s: {seen}"
        seen += consumer.consume(100, 0.2)
    return seen


def fields(record: Any) -> tuple[Any, ...]:
    return (record.partition(), record.offset(), record.key(), record.value(),
            record.headers(), record.timestamp())


def produce(side: Side, topic: str, partition: int, *values: bytes) -> None:
    producer = side.producer()
    reports: list[Any] = []
    for value in values:
        producer.produce(topic, value, b"k", partition=partition, headers=[("h", b"v")],
                         timestamp=1_700_000_000_123, on_delivery=lambda e, _m: reports.append(e))
    assert producer.flush(DEADLINE) == 0
    assert reports == [None] * len(values)


def keys(partitions: list[TopicPartition]) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in partitions}


def test_records_come_back_as_produced_and_the_assignment_is_told(side: Side) -> None:
    topic = side.make_topic(2)
    produce(side, topic, 0, b"a", b"b")
    produce(side, topic, 1, b"c")
    consumer = side.consumer(group())
    assigned: list[TopicPartition] = []
    consumer.subscribe([topic], on_assign=lambda _c, ps: assigned.extend(ps))
    seen = consume_until(consumer, lambda s: len(s) >= 3)
    assert sorted(fields(r) for r in seen) == [
        (0, 0, b"k", b"a", [("h", b"v")], (1, 1_700_000_000_123)),
        (0, 1, b"k", b"b", [("h", b"v")], (1, 1_700_000_000_123)),
        (1, 0, b"k", b"c", [("h", b"v")], (1, 1_700_000_000_123))]
    assert keys(assigned) == keys(consumer.assignment()) == {(topic, 0), (topic, 1)}


def test_a_paused_partition_returns_nothing_until_resumed(side: Side) -> None:
    topic = side.make_topic(2)
    produce(side, topic, 0, b"a")
    produce(side, topic, 1, b"b")
    consumer = side.consumer(group())
    consumer.subscribe([topic])
    consume_until(consumer, lambda s: len(s) >= 2)
    consumer.pause([TopicPartition(topic, 0)])
    produce(side, topic, 0, b"c")
    produce(side, topic, 1, b"d")
    seen = consume_until(consumer, lambda s: any(r.partition() == 1 for r in s))
    assert [(r.partition(), r.value()) for r in seen] == [(1, b"d")]
    consumer.resume([TopicPartition(topic, 0)])
    seen = consume_until(consumer, lambda s: len(s) >= 1)
    assert [(r.partition(), r.offset(), r.value()) for r in seen] == [(0, 1, b"c")]


def test_a_partition_paused_when_unassigned_is_still_paused_when_assigned_again(
        side: Side) -> None:
    """librdkafka keeps a partition's pause across an unassignment (a lost session, a
    revocation): the adapter must resume a started partition itself (kafka/rebalance.py),
    and its unit tests see the same only if the in-memory consumer keeps it too."""
    topic = side.make_topic(2)
    produce(side, topic, 0, b"a")
    consumer = side.consumer(group())
    both = [TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)]
    consumer.incremental_assign(both)
    consume_until(consumer, lambda s: len(s) >= 1)
    consumer.pause([TopicPartition(topic, 0)])
    consumer.incremental_unassign([TopicPartition(topic, 0)])
    produce(side, topic, 0, b"b")
    produce(side, topic, 1, b"c")
    consumer.incremental_assign([TopicPartition(topic, 0, 1)])
    seen = consume_until(consumer, lambda s: any(r.partition() == 1 for r in s))
    assert [(r.partition(), r.value()) for r in seen] == [(1, b"c")]
    consumer.resume([TopicPartition(topic, 0)])
    seen = consume_until(consumer, lambda s: len(s) >= 1)
    assert [(r.partition(), r.offset(), r.value()) for r in seen] == [(0, 1, b"b")]


def test_seek_moves_the_next_record_and_needs_an_assigned_partition(side: Side) -> None:
    topic = side.make_topic(1)
    produce(side, topic, 0, b"a", b"b", b"c")
    consumer = side.consumer(group())
    consumer.subscribe([topic])
    consume_until(consumer, lambda s: len(s) >= 3)
    consumer.seek(TopicPartition(topic, 0, 1))
    seen = consume_until(consumer, lambda s: len(s) >= 2)
    assert [r.offset() for r in seen] == [1, 2]
    with pytest.raises(KafkaException) as raised:
        consumer.seek(TopicPartition(topic, 5, 0))
    assert raised.value.args[0].code() == KafkaError._STATE


def test_commits_are_read_back_and_start_the_next_member(side: Side) -> None:
    topic = side.make_topic(2)
    produce(side, topic, 0, b"a", b"b", b"c")
    name = group()
    consumer = side.consumer(name)
    consumer.subscribe([topic])
    consume_until(consumer, lambda s: len(s) >= 3)
    done = consumer.commit(offsets=[TopicPartition(topic, 0, 2, metadata="m")],
                           asynchronous=False)
    assert [(tp.partition, tp.offset, tp.error) for tp in done] == [(0, 2, None)]
    read = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
    assert [(tp.offset, tp.metadata) for tp in read] == [(2, "m"), (OFFSET_INVALID, None)]
    with pytest.raises(KafkaException) as raised:
        consumer.commit(offsets=[TopicPartition(topic, 0, 3, metadata="m" * 5000)],
                        asynchronous=False)
    assert raised.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
    consumer.close()
    after = side.consumer(name)
    after.subscribe([topic])
    seen = consume_until(after, lambda s: len(s) >= 1)
    assert [(r.partition(), r.offset()) for r in seen] == [(0, 2)]


def test_a_second_member_takes_a_partition_over_and_close_gives_it_back(side: Side) -> None:
    topic = side.make_topic(2)
    name = group()
    told: dict[str, list[tuple[str, int]]] = {"first+": [], "first-": [], "second+": [],
                                              "second-": []}

    def member(label: str) -> Any:
        consumer = side.consumer(name)
        consumer.subscribe(
            [topic],
            on_assign=lambda _c, ps: told[f"{label}+"].extend(sorted(keys(ps))),
            on_revoke=lambda _c, ps: told[f"{label}-"].extend(sorted(keys(ps))))
        return consumer

    first = member("first")
    consume_until(first, lambda _s: len(first.assignment()) == 2)
    second = member("second")
    deadline = time.monotonic() + DEADLINE
    while len(second.assignment()) != 1 or len(first.assignment()) != 1:
        assert time.monotonic() < deadline, told
        first.consume(100, 0.1)
        second.consume(100, 0.1)
    moved = told["second+"]
    assert len(moved) == 1 and told["first-"] == moved
    assert keys(first.assignment()) | keys(second.assignment()) == {(topic, 0), (topic, 1)}
    second.close()
    assert told["second-"] == moved
    consume_until(first, lambda _s: len(first.assignment()) == 2)
    assert told["first+"][-1:] == moved


def test_a_missing_topic_is_a_delivery_error(side: Side) -> None:
    producer = side.producer(**{"topic.metadata.propagation.max.ms": 1000,
                                "message.timeout.ms": 30000})
    reports: list[Any] = []
    producer.produce(f"missing-{uuid.uuid4().hex[:8]}", b"x",
                     on_delivery=lambda e, _m: reports.append(e))
    assert producer.flush(DEADLINE) == 0
    assert [e.code() for e in reports] == [KafkaError.UNKNOWN_TOPIC_OR_PART]


def test_a_record_over_the_size_limit_is_refused_by_produce(side: Side) -> None:
    topic = side.make_topic(1)
    producer = side.producer()
    refused = None
    try:  # not pytest.raises: its traceback would keep the producer in a reference cycle
        producer.produce(topic, b"x" * 1_200_000)
    except KafkaException as exc:
        refused = exc.args[0].code()
    assert refused == KafkaError.MSG_SIZE_TOO_LARGE
    assert producer.flush(DEADLINE) == 0
