"""Turning a consumed record into what watchers see and what the ledger tracks.

A first read (no replay headers: nearly every record) is one object per record: its
:class:`FirstRead` message is its own payload. What the payload adds to the message is
the same for every record of one partition in one assignment generation (the generation,
the topic id, the ledger's key), so it lives on a class made per partition and
generation (:func:`first_read_class`), not on each record. A replayed dead letter is read
somewhere else than its message's coordinates say, so it keeps a separate
:class:`ReplayPayload`.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Protocol

from sharedstream.core.ledger import Key, LedgerRecord
from sharedstream.core.message import CoordinateFields, Coordinates, KafkaMessage, ReadPosition
from sharedstream.kafka.dlq_headers import parse_replay

# A first read's message is built from all its fields in order (``_Fields``: the
# defaults are 0 replays, not replayed, delivery 1) by ``tuple.__new__``, without the
# NamedTuple's generated ``__new__`` and its Python frame (tests/unit/kafka/
# test_payload_build.py holds the two ways equal).
new_message = tuple.__new__


class KafkaPayload(LedgerRecord, Protocol):
    """The broker side of one handed-out message: what the ledger (a
    :class:`LedgerRecord`), dead letters and stored events read of it.

    ``topic``/``partition``/``offset`` are where the record was actually read
    (they key its partition ledger and commits); ``origin`` is what events are keyed by (the
    same coordinates, or the original ones for a replayed dead letter), and
    ``origin_fields`` the same as a plain tuple, without building a Coordinates.
    ``generation`` is the assignment generation the record was read in: an
    outcome arriving after that partition was revoked is discarded.
    ``identity`` is where the record was read, never its origin: two copies of one
    replayed dead letter are two records, each resolved on its own (their events share
    the origin's key, so the second copy's insert is a no-op).
    """

    @property
    def timestamp(self) -> int: ...
    @property
    def topic_id(self) -> str: ...
    @property
    def replay_count(self) -> int: ...
    @property
    def message(self) -> KafkaMessage: ...
    @property
    def origin(self) -> Coordinates: ...
    @property
    def origin_fields(self) -> CoordinateFields: ...
    @property
    def identity(self) -> tuple[str, int, int]: ...


class FirstRead(KafkaMessage):
    """A first read's message, serving as its own payload (:class:`KafkaPayload`).

    Never instantiated itself: each partition and generation has its subclass
    (:func:`first_read_class`) holding ``generation``, ``topic_id`` and
    ``partition_key``, so a record costs one tuple and nothing more. To a watcher it is
    a :class:`KafkaMessage` (its subclasses are named so): same fields, equality,
    hash, repr and decode cache; a pickle or copy is a plain ``KafkaMessage``.
    """

    generation: int
    topic_id: str
    partition_key: Key
    targets: frozenset[str] | None = None  # addressed to every watcher

    @property
    def message(self) -> KafkaMessage:
        return self

    @property
    def origin(self) -> Coordinates:
        return Coordinates(self.topic, self.topic_id, self.partition, self.offset,
                           self.timestamp)

    @property
    def origin_fields(self) -> CoordinateFields:
        return (self.topic, self.topic_id, self.partition, self.offset)

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.topic_id, self.partition, self.offset)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # By its fields, as a KafkaMessage: the per-partition class is not importable
        # and what it adds means nothing outside this consumer.
        return (KafkaMessage._make, (tuple(self),))


def first_read_class(key: Key, generation: int, topic_id: str) -> type[FirstRead]:
    """The class of the first reads of partition ``key`` in ``generation``.

    Made once per partition per assignment (the consumer thread keeps the current one
    per partition), 10-20 µs; a revoked generation's class lives as long as its last
    message does.
    """
    made = type("KafkaMessage", (FirstRead,), {
        "__module__": KafkaMessage.__module__, "__qualname__": KafkaMessage.__qualname__,
        "generation": generation, "topic_id": topic_id, "partition_key": key})
    return made


class ReplayPayload:
    """The payload of a replayed dead letter (:class:`KafkaPayload`), kept apart from its
    message: that carries the original coordinates, this where the copy was read.

    A plain slots class with ``partition_key`` computed up front and ``origin`` given
    (the replay's original coordinates) or built on first ask. Treat it as immutable.
    """

    __slots__ = ("generation", "message", "offset", "origin", "partition",
                 "partition_key", "replay_count", "targets", "timestamp", "topic", "topic_id")
    def __init__(self, topic: str, partition: int, offset: int, generation: int,
                 message: KafkaMessage, topic_id: str, timestamp: int, origin: Coordinates,
                 targets: frozenset[str], replay_count: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.generation = generation
        self.message = message
        self.topic_id = topic_id
        self.timestamp = timestamp
        self.origin = origin
        self.targets: frozenset[str] | None = targets
        self.replay_count = replay_count
        self.partition_key: Key = (topic, partition)

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.topic_id, self.partition, self.offset)

    @property
    def origin_fields(self) -> CoordinateFields:
        return self.origin.fields

    def __repr__(self) -> str:
        return (f"ReplayPayload({self.topic}[{self.partition}]@{self.offset}, "
                f"gen={self.generation})")


def build_payload(record: Any, topic: str, partition: int, offset: int, topic_id: str,
                  generation: int, watched: Container[str] = (),
                  read_as: type[FirstRead] | None = None) -> KafkaPayload:
    """Wrap a ``confluent_kafka.Message`` (already checked for ``error()``).

    ``topic``, ``partition`` and ``offset`` are the record's own, already read by
    the caller (each accessor is a C call, and this runs once per record); ``read_as``
    is the partition's :func:`first_read_class`, made here when not given. The
    consumer thread builds a first read without headers itself, inline; this is the
    rest, and the one place that says how.

    A replayed dead letter carries its original coordinates and its replay count in
    the message, with where it was read (``replayed_at``); it is addressed to the
    watchers that rejected it. ``watched`` is given for a record of a replay topic: one
    replay topic may serve several groups (one dead-letter topic for several topic
    sets), so a replay of a topic this group does not watch is addressed to nobody
    here (resolved at once, committed past) rather than rejected as "not in cohort".
    """
    timestamp: int = record.timestamp()[1]
    raw_headers = record.headers()
    headers = tuple(raw_headers) if raw_headers else ()
    replay = parse_replay(headers) if headers else None
    if replay is None:
        if read_as is None:
            read_as = first_read_class((topic, partition), generation, topic_id)
        read: FirstRead = new_message(read_as, (topic, partition, offset, timestamp,
                                                record.key(), record.value(), headers, 0,
                                                None, 1))
        return read
    o = replay.origin
    message = KafkaMessage(
        o.topic, o.partition, o.offset, o.timestamp, record.key(), record.value(), headers,
        replay.replay_count, ReadPosition(topic, partition, offset),
    )
    targets = frozenset(replay.rejections)
    if watched and o.topic not in watched:
        targets = frozenset()
    return ReplayPayload(topic, partition, offset, generation, message, topic_id, timestamp,
                         o, targets, replay.replay_count)
