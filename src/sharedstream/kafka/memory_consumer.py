"""The in-memory Kafka's consumer: a ``confluent_kafka.Consumer`` of one broker.

It keeps its own assignment, positions, prefetch, pauses and commit results, and asks the broker
(through :class:`GroupBroker`, the broker's face towards its consumers) for what a
group coordinator and the logs decide: which partitions it owns, what is committed and
what the logs hold. Rebalances, commit results and injected errors are served on the
thread that calls ``consume()``/``close()``, never under the broker's lock, as
librdkafka serves them in a poll (see :mod:`sharedstream.kafka.memory`). As librdkafka
does, a partition paused when it is unassigned (revoked, lost) is still paused when it
is assigned again, until resumed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from sharedstream.kafka.memory_record import Key, MemoryRecord

PREFETCH = 64


class GroupBroker(Protocol):
    """What a consumer asks of its broker; each call takes the broker's lock itself."""

    def join(self, member: MemoryConsumer) -> None: ...

    def leave(self, member: MemoryConsumer) -> None: ...

    def revocations(self, member: MemoryConsumer, owned: set[Key]) -> list[Key]:
        """Of ``owned``, what the assignor no longer gives ``member``."""
        ...

    def release(self, member: MemoryConsumer, keys: Sequence[Key]) -> None:
        """``member`` gave up ``keys`` (revoked or lost): counted as moved."""
        ...

    def claim(self, member: MemoryConsumer, owned: set[Key]) -> list[Key]:
        """What the assignor gives ``member`` beyond ``owned`` that no one else owns, now
        owned by it."""
        ...

    def committed(self, group: str) -> dict[Key, tuple[int, str]]: ...

    def commit_offsets(self, member: MemoryConsumer,
                       offsets: Sequence[TopicPartition]) -> list[TopicPartition]: ...

    def fetch(self, key: Key, start: int, limit: int) -> list[MemoryRecord]: ...

    def end(self, key: Key) -> int: ...

    def wait_for_records(self, timeout: float) -> None:
        """Until a record is produced or the group changes, at most ``timeout``."""
        ...


class MemoryConsumer:
    """A ``confluent_kafka.Consumer`` of one broker (see the module doc).

    Bigger than 25 methods: it answers the calls the adapter and the parity tests make
    of a ``confluent_kafka.Consumer``, one method each; its own state (assignment,
    positions, prefetch, pauses) is what those calls share, so it does not split.
    """

    def __init__(self, broker: GroupBroker, config: dict[str, Any]) -> None:
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
        self._assigned_by_callback = False
        self.injected_errors: list[KafkaError] = []
        self.consume_calls = 0
        self.pause_calls = 0
        self.close_calls = 0

    # -- group membership -------------------------------------------------------------------

    def subscribe(self, topics: list[str], **callbacks: Callable[..., Any]) -> None:
        self._subscription = frozenset(topics)
        self._callbacks = callbacks
        self.broker.join(self)

    def unsubscribe(self) -> None:
        """Leave the group: the assignment is revoked (``on_revoke``), then the broker
        forgets the member (a static member's way out, see kafka/membership.py)."""
        self._require_open()
        if not self._subscription:
            return
        if self._owned:
            revoke = sorted(self._owned)
            self._callback("on_revoke", revoke)
            self._drop(revoke)
        self._subscription = frozenset()
        self.broker.leave(self)

    @property
    def subscription(self) -> frozenset[str]:
        return self._subscription

    @property
    def closed(self) -> bool:
        return self._closed

    def lose(self) -> None:
        """The broker took this member's partitions (a session timeout): ``on_lost`` is
        served in its next ``consume()``."""
        self._lost = True

    def _rebalance(self) -> None:
        """Serve a pending loss, revocation or assignment (on the consuming thread)."""
        broker = self.broker
        if self._lost:
            self._lost = False
            lost = sorted(self._owned)
            self._drop(lost)
            broker.release(self, lost)
            if lost:
                self._callback("on_lost", lost)
        revoke = broker.revocations(self, self._owned)
        if revoke:
            self._callback("on_revoke", revoke)
            self._drop(revoke)
            broker.release(self, revoke)
        assign = broker.claim(self, self._owned)
        self._owned.update(assign)
        if assign:
            self._callback("on_assign", assign)

    def _callback(self, name: str, keys: Sequence[Key]) -> None:
        """Run the rebalance callback ``name``. An assignment the callback did not apply
        itself is applied after it, as confluent-kafka does."""
        partitions = [TopicPartition(t, p) for t, p in keys]
        callback = self._callbacks.get(name)
        self._assigned_by_callback = False
        if callback is not None:
            callback(self, partitions)
        if name == "on_assign" and not self._assigned_by_callback:
            self.incremental_assign(partitions)

    def _drop(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self._owned.discard(key)
            self._assigned.pop(key, None)
            self._fetched.pop(key, None)

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._assigned_by_callback = True
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
        self._drop([(tp.topic, tp.partition) for tp in partitions])

    def _logical(self, key: Key, offset: int) -> int:
        end = self.broker.end(key)
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
            done = found.get((tp.topic, tp.partition))
            # Nothing committed: no metadata at all (None), as the broker answers.
            out.append(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) if done is None
                       else TopicPartition(tp.topic, tp.partition, done[0], metadata=done[1]))
        return out

    # -- fetching ---------------------------------------------------------------------------

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[MemoryRecord]:
        self._require_open()
        self.consume_calls += 1
        self._serve()
        out = self._take(num_messages)
        if not out and timeout > 0:
            self.broker.wait_for_records(timeout)
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
        if self._subscription:  # a manual assignment (assign() without subscribe()) has no group
            self._rebalance()

    def _take(self, limit: int) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        for key, position in list(self._assigned.items()):
            if key in self.paused:
                continue
            queue = self._fetched[key]
            if not queue:
                queue.extend(self.broker.fetch(key, position, PREFETCH))
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
            raise KafkaException(KafkaError(KafkaError._STATE))  # as librdkafka does
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
        result = self.broker.commit_offsets(self, list(offsets or []))
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
        if self._subscription:
            self.broker.leave(self)

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")
