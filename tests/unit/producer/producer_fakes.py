"""In-process fakes of the confluent-kafka clients the producer uses (unit tests only)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, TopicPartition


@dataclass
class FakeRecord:
    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _headers: list[tuple[str, bytes | None]] | None = None
    _timestamp: int = 1_700_000_000_000
    _error: KafkaError | None = None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def error(self) -> KafkaError | None:
        return self._error


@dataclass
class FakeCluster:
    """Partition logs, committed offsets and dead letters shared by fake clients."""

    partitions: int = 1
    logs: dict[tuple[str, int], list[FakeRecord]] = field(default_factory=dict)
    committed: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)
    commit_requests: list[list[tuple[str, int, int]]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    # Decides each dead-letter delivery: None = success, else the error to report.
    dlq_outcome: Callable[[int], KafkaError | None] = lambda _attempt: None
    hold_deliveries: bool = False
    consumers: list[FakeConsumer] = field(default_factory=list)

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> None:
        partition = (key[0] if key else 0) % self.partitions
        log = self.logs.setdefault((topic, partition), [])
        log.append(FakeRecord(topic, partition, len(log), value, key, headers))

    def committed_offset(self, topic: str, partition: int = 0) -> int | None:
        found = self.committed.get((topic, partition))
        return None if found is None else found[0]

    def consumer(self, config: dict[str, Any]) -> FakeConsumer:
        consumer = FakeConsumer(self, config)
        self.consumers.append(consumer)
        return consumer

    def dlq_producer(self, config: dict[str, Any]) -> FakeDlqProducer:
        return FakeDlqProducer(self, config)


class FakeConsumer:
    def __init__(self, cluster: FakeCluster, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.config = config
        self.positions: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self.pause_calls = 0
        self.close_calls = 0
        self.consume_calls = 0
        self.pending_assign: list[TopicPartition] = []
        self.callbacks: dict[str, Any] = {}
        self.injected_errors: list[KafkaError] = []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.callbacks = callbacks
        self.pending_assign = [
            TopicPartition(t, p) for t in topics for p in range(self.cluster.partitions)
        ]

    def consume(self, num_messages: int, timeout: float) -> list[FakeRecord]:
        self.consume_calls += 1
        while self.injected_errors:
            self.config["error_cb"](self.injected_errors.pop(0))
        if self.pending_assign:
            parts, self.pending_assign = self.pending_assign, []
            self.callbacks["on_assign"](self, parts)
        out: list[FakeRecord] = []
        for key, pos in self.positions.items():
            if key in self.paused:
                continue
            log = self.cluster.logs.get(key, [])
            take = log[pos : pos + num_messages - len(out)]
            out.extend(take)
            self.positions[key] = pos + len(take)
        if not out:
            time.sleep(timeout)
        return out

    def revoke(self, lost: bool = False) -> None:
        """Simulate a rebalance taking every partition away (call on the consumer thread)."""
        parts = [TopicPartition(t, p) for t, p in self.positions]
        self.callbacks["on_lost" if lost else "on_revoke"](self, parts)
        self.positions.clear()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            committed = self.cluster.committed_offset(tp.topic, tp.partition)
            start = tp.offset if tp.offset >= 0 else (committed or 0)
            self.positions[(tp.topic, tp.partition)] = start

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            offset, metadata = self.cluster.committed.get((tp.topic, tp.partition), (-1001, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata=metadata))
        return out

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        self.cluster.commit_requests.append([(t.topic, t.partition, t.offset) for t in offsets])
        for tp in offsets:
            self.cluster.committed[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        if asynchronous:
            self.config["on_commit"](None, offsets)
        return offsets

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.positions]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.pause_calls += 1
        self.paused.update((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused.difference_update((tp.topic, tp.partition) for tp in partitions)

    def list_topics(self, topic: str, timeout: float) -> None:
        return None

    def close(self) -> None:
        self.close_calls += 1


class FakeDlqProducer:
    """Delivery reports fire from poll()/flush(), as librdkafka's do."""

    def __init__(self, cluster: FakeCluster, config: dict[str, Any]) -> None:
        self.cluster = cluster
        self.config = config
        self.pending: list[tuple[dict[str, Any], Callable[[Any, Any], None]]] = []
        self.attempts = 0

    def produce(self, topic: str, value: Any, key: Any, **kwargs: Any) -> None:
        record = {"topic": topic, "value": value, "key": key, **kwargs}
        self.pending.append((record, kwargs["on_delivery"]))

    def _fire(self) -> None:
        if self.cluster.hold_deliveries:
            return
        pending, self.pending = self.pending, []
        for record, callback in pending:
            error = self.cluster.dlq_outcome(self.attempts)
            self.attempts += 1
            if error is None:
                self.cluster.dead_letters.append(record)
            callback(error, None)

    def poll(self, timeout: float) -> int:
        self._fire()
        return 0

    def flush(self, timeout: float) -> int:
        self._fire()
        return len(self.pending)


def topic_ids(config: Any, topics: Any) -> dict[str, str]:
    return {t: f"id-{t}" for t in topics}


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``check`` until true or fail at the deadline (no sleep-and-hope)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.005)
