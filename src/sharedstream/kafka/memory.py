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
* **close() revokes** the assignment (``on_revoke``) before the member leaves.
* **pause() purges the prefetch.** Records fetched but not yet returned are dropped and
  fetched again from the position after ``resume()``; ``seek()`` does the same.
* **produce() can refuse.** ``BufferError`` when the local queue is full, delivery
  reports only from ``poll()``/``flush()``, ``UNKNOWN_TOPIC_OR_PART`` for a missing
  topic, ``MSG_SIZE_TOO_LARGE`` over the broker's message size.
* **Topics have ids.** :meth:`MemoryBroker.recreate_topic` gives a topic a new id and
  an empty log; :meth:`MemoryBroker.topic_ids` is a topic-id resolver.

Thread-safe: the test thread produces while the consumer thread consumes. Callbacks run
on the thread that calls ``consume()``/``poll()``/``close()``, never under the lock.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)

Key = tuple[str, int]
DEFAULT_TIMESTAMP = 1_700_000_000_000
MAX_METADATA_BYTES = 4096
MAX_MESSAGE_BYTES = 1_048_588
PREFETCH = 64


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A consumed record, with the accessor methods of ``confluent_kafka.Message``."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes | None
    _key: bytes | None = None
    _headers: tuple[tuple[str, bytes | None], ...] | None = None
    _timestamp: int = DEFAULT_TIMESTAMP
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
        return None if self._headers is None else list(self._headers)

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)

    def error(self) -> KafkaError | None:
        return self._error


@dataclass
class _Topic:
    id: str
    logs: list[list[MemoryRecord]]


@dataclass
class _Group:
    members: list[MemoryConsumer] = field(default_factory=list)
    owner: dict[Key, MemoryConsumer] = field(default_factory=dict)
    committed: dict[Key, tuple[int, str]] = field(default_factory=dict)


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

    def _fetch(self, key: Key, start: int, limit: int) -> list[MemoryRecord]:
        with self._lock:
            topic = self._topics.get(key[0])
            return [] if topic is None else topic.logs[key[1]][start:start + limit]

    def _end(self, key: Key) -> int:
        with self._lock:
            return len(self._topic(key[0]).logs[key[1]])

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

    def expire(self, member: MemoryConsumer) -> None:
        """``member``'s session times out: it loses its partitions (``on_lost`` in its next
        ``consume()``), which go to the other members, and it rejoins."""
        with self._lock:
            group = self._groups[member.group_id]
            for key in [k for k, m in group.owner.items() if m is member]:
                del group.owner[key]
            member._lost = True
            self._data.notify_all()

    def _join(self, member: MemoryConsumer) -> None:
        with self._lock:
            self._groups.setdefault(member.group_id, _Group()).members.append(member)
            self._data.notify_all()

    def _leave(self, member: MemoryConsumer) -> None:
        with self._lock:
            group = self._groups[member.group_id]
            group.members.remove(member)
            for key in [k for k, m in group.owner.items() if m is member]:
                del group.owner[key]
            self._data.notify_all()

    def _target(self, member: MemoryConsumer) -> set[Key]:
        """What the assignor gives ``member`` now: partitions round-robin over members."""
        group = self._groups[member.group_id]
        subscribed = sorted({t for m in group.members for t in m._subscription})
        keys = [(t, p) for t in subscribed if t in self._topics
                for p in range(len(self._topics[t].logs))]
        members = [m for m in group.members if not m._closed]
        if member not in members:
            return set()
        return {k for k, m in zip(keys, itertools.cycle(members)) if m is member
                and k[0] in member._subscription}

    def _commit(self, member: MemoryConsumer,
                offsets: Sequence[TopicPartition]) -> list[TopicPartition]:
        with self._lock:
            self.commit_requests.append([(t.topic, t.partition, t.offset) for t in offsets])
            if self._commit_failures:
                error = self._commit_failures.popleft()
                return [_with_error(tp, error) for tp in offsets]
            group = self._groups[member.group_id]
            out = []
            for tp in offsets:
                key = (tp.topic, tp.partition)
                metadata = tp.metadata or ""
                if group.owner.get(key) is not member:
                    out.append(_with_error(tp, KafkaError(KafkaError.ILLEGAL_GENERATION)))
                elif len(metadata.encode()) > self.max_metadata_bytes:
                    out.append(_with_error(tp, KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE)))
                else:
                    group.committed[key] = (tp.offset, metadata)
                    out.append(TopicPartition(tp.topic, tp.partition, tp.offset,
                                              metadata=metadata))
            return out

    # -- clients ----------------------------------------------------------------------------

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        consumer = MemoryConsumer(self, config)
        with self._lock:
            self.consumers.append(consumer)
        return consumer

    def producer(self, config: dict[str, Any]) -> MemoryProducer:
        return MemoryProducer(self, config)


class _RefusedPartition(TopicPartition):
    """A commit result carrying its error (``TopicPartition.error`` is read-only in Python,
    set only by librdkafka)."""

    def __init__(self, tp: TopicPartition, error: KafkaError) -> None:
        super().__init__(tp.topic, tp.partition, tp.offset, metadata=tp.metadata)
        self._error = error

    @property
    def error(self) -> KafkaError:  # type: ignore[override]
        return self._error


def _with_error(tp: TopicPartition, error: KafkaError) -> TopicPartition:
    return _RefusedPartition(tp, error)


class MemoryConsumer:
    """A ``confluent_kafka.Consumer`` of one :class:`MemoryBroker` (see the module doc)."""

    def __init__(self, broker: MemoryBroker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.config = config
        self.group_id = str(config["group.id"])
        self._reset = str(config.get("auto.offset.reset", "latest")).lower()
        self._subscription: frozenset[str] = frozenset()
        self._callbacks: dict[str, Callable[..., Any]] = {}
        self._owned: set[Key] = set()
        self._assigned: dict[Key, int] = {}  # partition -> position (next offset returned)
        self._fetched: dict[Key, deque[MemoryRecord]] = {}
        self.paused: set[Key] = set()
        self._commit_results: deque[tuple[KafkaError | None, list[TopicPartition]]] = deque()
        self._lost = False
        self._closed = False
        self.injected_errors: list[KafkaError] = []
        self.consume_calls = 0
        self.pause_calls = 0
        self.close_calls = 0

    # -- group membership -------------------------------------------------------------------

    def subscribe(self, topics: list[str], **callbacks: Callable[..., Any]) -> None:
        self._subscription = frozenset(topics)
        self._callbacks = callbacks
        self.broker._join(self)

    def _rebalance(self) -> None:
        """Serve a pending loss, revocation or assignment (on the consuming thread)."""
        broker = self.broker
        if self._lost:
            self._lost = False
            lost = sorted(self._owned)
            self._drop(lost)
            broker.moved += len(lost)
            if lost:
                self._callback("on_lost", lost)
        with broker._lock:
            target = broker._target(self)
            revoke = sorted(self._owned - target)
        if revoke:
            self._callback("on_revoke", revoke)
            self._drop(revoke)
            broker.moved += len(revoke)
            with broker._lock:
                group = broker._groups[self.group_id]
                for key in revoke:
                    if group.owner.get(key) is self:
                        del group.owner[key]
        with broker._lock:
            group = broker._groups[self.group_id]
            target = broker._target(self)
            assign = sorted(k for k in target - self._owned if k not in group.owner)
            for key in assign:
                group.owner[key] = self
            self._owned.update(assign)
        if assign:
            self._callback("on_assign", assign)

    def _callback(self, name: str, keys: Sequence[Key]) -> None:
        partitions = [TopicPartition(t, p) for t, p in keys]
        callback = self._callbacks.get(name)
        if callback is not None:
            callback(self, partitions)
        elif name == "on_assign":
            self.incremental_assign(partitions)

    def _drop(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self._owned.discard(key)
            self._assigned.pop(key, None)
            self._fetched.pop(key, None)
            self.paused.discard(key)

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        committed = self.broker.committed(self.group_id)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if tp.offset >= 0:
                start = tp.offset
            elif tp.offset == OFFSET_INVALID and key in committed:
                start = committed[key][0]
            else:
                start = self._logical(key, tp.offset)
            self._assigned[key] = start
            self._fetched[key] = deque()

    assign = incremental_assign

    def incremental_unassign(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._assigned.pop(key, None)
            self._fetched.pop(key, None)

    def _logical(self, key: Key, offset: int) -> int:
        end = self.broker._end(key)
        if offset == OFFSET_END or (offset == OFFSET_INVALID and self._reset == "latest"):
            return end
        if offset in (OFFSET_BEGINNING, OFFSET_INVALID):
            return 0
        raise ValueError(f"unsupported logical offset {offset}")

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._assigned]

    def committed(self, partitions: Sequence[TopicPartition],
                  timeout: float | None = None) -> list[TopicPartition]:
        found = self.broker.committed(self.group_id)
        out = []
        for tp in partitions:
            offset, metadata = found.get((tp.topic, tp.partition), (OFFSET_INVALID, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata=metadata))
        return out

    # -- fetching ---------------------------------------------------------------------------

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[MemoryRecord]:
        self._require_open()
        self.consume_calls += 1
        self._serve()
        out = self._take(num_messages)
        if not out and timeout > 0:
            with self.broker._lock:
                self.broker._data.wait(timeout)
            self._serve()
            out = self._take(num_messages)
        return out

    def _serve(self) -> None:
        """Errors, commit results and rebalances, as librdkafka serves them in a poll."""
        while self.injected_errors:
            self.config["error_cb"](self.injected_errors.pop(0))
        on_commit = self.config.get("on_commit")
        while self._commit_results:
            error, partitions = self._commit_results.popleft()
            if on_commit is not None:
                on_commit(error, partitions)
        self._rebalance()

    def _take(self, limit: int) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        for key, position in list(self._assigned.items()):
            if key in self.paused:
                continue
            queue = self._fetched[key]
            if not queue:
                queue.extend(self.broker._fetch(key, position, PREFETCH))
            while queue and len(out) < limit:
                record = queue.popleft()
                out.append(record)
                self._assigned[key] = record.offset() + 1
            if len(out) >= limit:
                break
        return out

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop fetching these; what was prefetched for them is dropped (fetched again)."""
        self.pause_calls += 1
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.paused.add(key)
            if key in self._fetched:
                self._fetched[key].clear()

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            self.paused.discard((tp.topic, tp.partition))

    def seek(self, partition: TopicPartition) -> None:
        key = (partition.topic, partition.partition)
        if key not in self._assigned:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        offset = partition.offset
        self._assigned[key] = offset if offset >= 0 else self._logical(key, offset)
        self._fetched[key].clear()

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition,
                               self._assigned.get((tp.topic, tp.partition), OFFSET_INVALID))
                for tp in partitions]

    # -- commits ----------------------------------------------------------------------------

    def commit(self, message: Any = None, offsets: Sequence[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        self._require_open()
        result = self.broker._commit(self, list(offsets or []))
        errors = [tp.error for tp in result if tp.error is not None]
        if asynchronous:
            self._commit_results.append((errors[0] if errors else None, result))
            return None
        if errors:
            raise KafkaException(errors[0])
        return result

    # -- the rest ---------------------------------------------------------------------------

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self._require_open()
        return None

    def close(self) -> None:
        """Revoke the assignment (``on_revoke``), then leave the group."""
        self.close_calls += 1
        if self._closed:
            return
        if self._owned:
            revoke = sorted(self._owned)
            self._callback("on_revoke", revoke)
            self._drop(revoke)
        self._closed = True
        self.broker._leave(self)

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")


class MemoryProducer:
    """A ``confluent_kafka.Producer`` of one :class:`MemoryBroker`: delivery reports are
    served by ``poll()``/``flush()``; ``queue.buffering.max.messages`` bounds the queue."""

    def __init__(self, broker: MemoryBroker, config: dict[str, Any]) -> None:
        self.broker = broker
        self.config = config
        self._limit = int(config.get("queue.buffering.max.messages", 100_000))
        self._lock = threading.Lock()
        self._pending: list[tuple[dict[str, Any], Callable[[Any, Any], None] | None]] = []
        self.attempts = 0

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                **kwargs: Any) -> None:
        with self._lock:
            if len(self._pending) >= self._limit:
                raise BufferError("Local: Queue full")
            report = kwargs.pop("on_delivery", None)
            self._pending.append(({"topic": topic, "value": value, "key": key, **kwargs}, report))

    def poll(self, timeout: float = 0) -> int:
        return self._deliver()

    def flush(self, timeout: float = -1) -> int:
        self._deliver()
        with self._lock:
            return len(self._pending)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def _deliver(self) -> int:
        broker = self.broker
        if broker.hold_deliveries:
            return 0
        with self._lock:
            pending, self._pending = self._pending, []
        for record, report in pending:
            error = self._outcome(record)
            if error is None:
                broker.produce(record["topic"], record["value"], record["key"],
                               record.get("headers"), record.get("partition"),
                               record.get("timestamp", DEFAULT_TIMESTAMP))
                with broker._lock:
                    broker.delivered.append(record)
            if report is not None:
                report(error, None)
        return len(pending)

    def _outcome(self, record: dict[str, Any]) -> KafkaError | None:
        broker = self.broker
        attempt, self.attempts = self.attempts, self.attempts + 1
        with broker._lock:
            if record["topic"] not in broker._topics:
                return KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
        if len(record["value"] or b"") > broker.max_message_bytes:
            return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        return broker.delivery_outcome(attempt)
