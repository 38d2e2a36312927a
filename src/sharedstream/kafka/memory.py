"""An in-memory Kafka: the clients ``KafkaSharedStreamProducer`` drives, without a broker.

Unit tests run the producer against this backend instead of hand-written fakes, so the
behaviours the producer must survive are librdkafka's own, in one place:

* **Consumer groups rebalance.** Members of one group share its partitions; a member
  joining or leaving moves partitions, revoked from the old owner (its ``on_revoke``,
  in its next ``consume()``) before they are assigned to the new one (cooperative).
  :meth:`MemoryBroker.expire` makes a member lose its partitions (``on_lost``) and
  rejoin, as a session timeout does.
* **Commits are checked.** A commit for a partition the member does not own is
  refused (``ILLEGAL_GENERATION``), metadata longer than the broker's limit is refused
  (``OFFSET_METADATA_TOO_LARGE``), and :meth:`MemoryBroker.fail_commits` injects errors.
  An asynchronous commit's result reaches ``on_commit`` from the next ``consume()``,
  never inline; a synchronous one raises ``KafkaException`` on failure.
  An ``on_assign`` callback that does not assign the partitions itself has them
  assigned after it returns, as confluent-kafka does.
* **close() revokes** the assignment (``on_revoke``) before the member leaves.
* **pause() purges the prefetch.** Records fetched but not yet returned are dropped and
  fetched again from the position after ``resume()``; ``seek()`` does the same, and
  refuses a partition not assigned (``_STATE``).
* **produce() can refuse.** ``BufferError`` when the local queue is full, and
  ``KafkaException`` (``MSG_SIZE_TOO_LARGE``) for a record over the client's
  ``message.max.bytes``, both at once; delivery reports only from ``poll()``/``flush()``,
  ``UNKNOWN_TOPIC_OR_PART`` for a missing topic, ``MSG_SIZE_TOO_LARGE`` over the
  broker's message size.
* **Topics have ids.** :meth:`MemoryBroker.recreate_topic` gives a topic a new id and
  an empty log; :meth:`MemoryBroker.topic_ids` is a topic-id resolver.

``tests/integration/test_memory_broker_parity.py`` runs the same scenarios here and on
the real broker: where the two would answer differently, it fails.

Thread-safe: the test thread produces while the consumer thread consumes. Callbacks run
on the thread that calls ``consume()``/``poll()``/``close()``, never under the lock.

In parts: this module is the broker (topics, logs, groups, commits) and the public
import path of the rest; :mod:`~sharedstream.kafka.memory_consumer` and
:mod:`~sharedstream.kafka.memory_producer` are its clients, which reach it only through
the small faces they declare (``GroupBroker``, ``DeliveryBroker``), and
:mod:`~sharedstream.kafka.memory_record` holds what all three hand around.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from sharedstream.kafka.memory_consumer import PREFETCH, MemoryConsumer
from sharedstream.kafka.memory_producer import MemoryProducer
from sharedstream.kafka.memory_record import DEFAULT_TIMESTAMP, Key, MemoryRecord, with_error

__all__ = ["DEFAULT_TIMESTAMP", "MAX_MESSAGE_BYTES", "MAX_METADATA_BYTES", "PREFETCH", "Key",
           "MemoryBroker", "MemoryConsumer", "MemoryProducer", "MemoryRecord"]

MAX_METADATA_BYTES = 4096
MAX_MESSAGE_BYTES = 1_048_588


@dataclass
class _Topic:
    id: str
    logs: list[list[MemoryRecord]]


@dataclass
class _Group:
    members: list[MemoryConsumer] = field(default_factory=list)
    owner: dict[Key, MemoryConsumer] = field(default_factory=dict)
    committed: dict[Key, tuple[int, str]] = field(default_factory=dict)
    # Members whose session expired and who are not back yet: assigned nothing.
    away: set[int] = field(default_factory=set)


class MemoryBroker:
    """Topics, consumer groups and committed offsets; clients from :meth:`consumer`
    and :meth:`producer` (pass them as the producer's client factories)."""

    def __init__(self, topics: Mapping[str, int] | None = None, *,
                 max_metadata_bytes: int = MAX_METADATA_BYTES,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._lock = threading.RLock()
        self._data = threading.Condition(self._lock)
        self._topics: dict[str, _Topic] = {}
        self._incarnations: dict[str, int] = {}
        self._groups: dict[str, _Group] = {}
        self.max_metadata_bytes = max_metadata_bytes
        self.max_message_bytes = max_message_bytes
        self.consumers: list[MemoryConsumer] = []
        # Partitions taken from a member (revoked or lost) since the broker started.
        self.moved = 0
        self.commit_requests: list[list[tuple[str, int, int]]] = []
        # Records producers delivered, as dicts of produce()'s arguments.
        self.delivered: list[dict[str, Any]] = []
        # Decides each delivery (the producer's attempt count): None = delivered.
        self.delivery_outcome: Callable[[int], KafkaError | None] = lambda _attempt: None
        # While True, delivery reports wait (records are neither delivered nor failed).
        self.hold_deliveries = False
        self._commit_failures: deque[KafkaError] = deque()
        for name, partitions in (topics or {}).items():
            self.create_topic(name, partitions)

    # -- topics ------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> str:
        with self._lock:
            if name in self._topics:
                raise KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS))
            # Readable and deterministic: id-<name>, then id-<name>-2 when recreated.
            self._incarnations[name] = n = self._incarnations.get(name, 0) + 1
            topic_id = f"id-{name}" if n == 1 else f"id-{name}-{n}"
            self._topics[name] = _Topic(topic_id, [[] for _ in range(partitions)])
            return topic_id

    def recreate_topic(self, name: str) -> str:
        """Delete ``name`` and create it again: a new id, empty logs, offsets from 0."""
        with self._lock:
            partitions = len(self._topics.pop(name).logs)
            for group in self._groups.values():
                for key in [k for k in group.committed if k[0] == name]:
                    del group.committed[key]
            return self.create_topic(name, partitions)

    def topic_ids(self, config: Mapping[str, Any], topics: Sequence[str]) -> dict[str, str]:
        """A topic-id resolver: ``{topic: id}``; raises for a missing topic, as the admin
        client's describe does."""
        with self._lock:
            missing = [t for t in topics if t not in self._topics]
            if missing:
                raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                f"unknown topics {missing}"))
            return {t: self._topics[t].id for t in topics}

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                headers: Sequence[tuple[str, bytes | None]] | None = None,
                partition: int | None = None, timestamp: int = DEFAULT_TIMESTAMP) -> int:
        """Append a record (partition by key's first byte, or 0); returns its offset."""
        with self._lock:
            logs = self._topic(topic).logs
            index = partition if partition is not None else (key[0] if key else 0) % len(logs)
            log = logs[index]
            log.append(MemoryRecord(topic, index, len(log), value, key,
                                    None if headers is None else tuple(headers), timestamp))
            self._data.notify_all()
            return len(log) - 1

    def records(self, topic: str, partition: int = 0) -> list[MemoryRecord]:
        with self._lock:
            return list(self._topic(topic).logs[partition])

    def _topic(self, name: str) -> _Topic:
        found = self._topics.get(name)
        if found is None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, name))
        return found

    # -- groups ---------------------------------------------------------------------------

    def committed(self, group: str) -> dict[Key, tuple[int, str]]:
        """``{(topic, partition): (offset, metadata)}`` committed by ``group``."""
        with self._lock:
            return dict(self._groups.get(group, _Group()).committed)

    def fail_commits(self, *errors: KafkaError) -> None:
        """The next commit requests fail with these errors, one each."""
        with self._lock:
            self._commit_failures.extend(errors)

    def expire(self, member: MemoryConsumer, *, rejoin: bool = True) -> None:
        """``member``'s session times out: it loses its partitions (``on_lost`` in its next
        ``consume()``), which go to the other members, and it rejoins; with ``rejoin``
        false it is assigned nothing until :meth:`rejoin` (a broker still down)."""
        with self._lock:
            group = self._groups[member.group_id]
            for key in [k for k, m in group.owner.items() if m is member]:
                del group.owner[key]
            if not rejoin:
                group.away.add(id(member))
            member.lose()
            self._data.notify_all()

    def rejoin(self, member: MemoryConsumer) -> None:
        """``member``, expired without rejoining, is assigned partitions again."""
        with self._lock:
            self._groups[member.group_id].away.discard(id(member))
            self._data.notify_all()

    # -- the consumers' face (GroupBroker) ----------------------------------------------

    def join(self, member: MemoryConsumer) -> None:
        with self._lock:
            self._groups.setdefault(member.group_id, _Group()).members.append(member)
            self._data.notify_all()

    def leave(self, member: MemoryConsumer) -> None:
        with self._lock:
            group = self._groups[member.group_id]
            group.members.remove(member)
            for key in [k for k, m in group.owner.items() if m is member]:
                del group.owner[key]
            self._data.notify_all()

    def revocations(self, member: MemoryConsumer, owned: set[Key]) -> list[Key]:
        with self._lock:
            return sorted(owned - self._target(member))

    def release(self, member: MemoryConsumer, keys: Sequence[Key]) -> None:
        with self._lock:
            self.moved += len(keys)
            owner = self._groups[member.group_id].owner
            for key in keys:
                if owner.get(key) is member:
                    del owner[key]

    def claim(self, member: MemoryConsumer, owned: set[Key]) -> list[Key]:
        with self._lock:
            owner = self._groups[member.group_id].owner
            assign = sorted(k for k in self._target(member) - owned if k not in owner)
            for key in assign:
                owner[key] = member
            return assign

    def _target(self, member: MemoryConsumer) -> set[Key]:
        """What the assignor gives ``member`` now: partitions round-robin over members."""
        group = self._groups[member.group_id]
        subscribed = sorted({t for m in group.members for t in m.subscription})
        keys = [(t, p) for t in subscribed if t in self._topics
                for p in range(len(self._topics[t].logs))]
        members = [m for m in group.members if not m.closed and id(m) not in group.away]
        if member not in members:
            return set()
        return {k for k, m in zip(keys, itertools.cycle(members)) if m is member
                and k[0] in member.subscription}

    def commit_offsets(self, member: MemoryConsumer,
                       offsets: Sequence[TopicPartition]) -> list[TopicPartition]:
        with self._lock:
            self.commit_requests.append([(t.topic, t.partition, t.offset) for t in offsets])
            if self._commit_failures:
                error = self._commit_failures.popleft()
                return [with_error(tp, error) for tp in offsets]
            group = self._groups[member.group_id]
            out = []
            for tp in offsets:
                key = (tp.topic, tp.partition)
                metadata = tp.metadata or ""
                if group.owner.get(key) is not member:
                    out.append(with_error(tp, KafkaError(KafkaError.ILLEGAL_GENERATION)))
                elif len(metadata.encode()) > self.max_metadata_bytes:
                    out.append(with_error(tp, KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE)))
                else:
                    group.committed[key] = (tp.offset, metadata)
                    out.append(TopicPartition(tp.topic, tp.partition, tp.offset,
                                              metadata=metadata))
            return out

    def fetch(self, key: Key, start: int, limit: int) -> list[MemoryRecord]:
        with self._lock:
            topic = self._topics.get(key[0])
            return [] if topic is None else topic.logs[key[1]][start:start + limit]

    def end(self, key: Key) -> int:
        with self._lock:
            return len(self._topic(key[0]).logs[key[1]])

    def wait_for_records(self, timeout: float) -> None:
        with self._lock:
            self._data.wait(timeout)

    # -- the producers' face (DeliveryBroker) ----------------------------------------------

    def deliver(self, record: dict[str, Any], attempt: int) -> KafkaError | None:
        with self._lock:
            if record["topic"] not in self._topics:
                return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        if len(record["value"] or b"") > self.max_message_bytes:
            return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        error = self.delivery_outcome(attempt)
        if error is None:
            self.produce(record["topic"], record["value"], record["key"],
                         record.get("headers"), record.get("partition"),
                         record.get("timestamp", DEFAULT_TIMESTAMP))
            with self._lock:
                self.delivered.append(record)
        return error

    # -- clients ----------------------------------------------------------------------------

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        consumer = MemoryConsumer(self, config)
        with self._lock:
            self.consumers.append(consumer)
        return consumer

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        return MemoryProducer(self, config)
