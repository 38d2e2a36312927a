"""Turning a consumed record into what watchers see and what the ledger tracks."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from sharedstream.core.ledger import Key
from sharedstream.core.message import Coordinates, KafkaMessage, ReadPosition
from sharedstream.kafka.dlq_headers import parse_replay

# A first read's ``KafkaMessage`` is built from all its fields in order (``_Fields``: the
# defaults are 0 replays, not replayed, delivery 1) by ``tuple.__new__``, without the
# NamedTuple's generated ``__new__`` and its Python frame: a third of the time the
# message cost per consumed record (tests/unit/kafka/test_payload_build.py holds the
# two ways equal).
_new_message = tuple.__new__


class KafkaPayload:
    """The broker side of one handed-out message.

    ``topic``/``partition``/``offset`` are where the record was actually read
    (they key its partition ledger and commits); ``origin`` is what events are keyed by (the
    same coordinates, or the original ones for a replayed dead letter).
    ``generation`` is the assignment generation the record was read in: an
    outcome arriving after that partition was revoked is discarded.

    Built once per consumed record on the consumer thread, so it is a plain slots
    class with ``partition_key`` (the ledger's ``Key``) and ``identity`` computed up
    front (the manager asks for both per message) and ``origin`` built only when a
    dead letter or a stored event needs it. Treat it as immutable.
    """

    __slots__ = ("_origin", "generation", "identity", "message", "offset", "partition",
                 "partition_key", "replay_count", "targets", "timestamp", "topic", "topic_id")

    def __init__(self, topic: str, partition: int, offset: int, generation: int,
                 message: KafkaMessage, topic_id: str, timestamp: int,
                 replay: Coordinates | None = None, targets: frozenset[str] | None = None,
                 replay_count: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.generation = generation
        self.message = message
        self.topic_id = topic_id
        self.timestamp = timestamp
        self.targets = targets
        self.replay_count = replay_count
        self._origin = replay
        self.partition_key: Key = (topic, partition)
        # Where the record was read, never its origin: two copies of one replayed dead
        # letter are two records, each resolved on its own (their events share the
        # origin's key, so the second copy's insert is a no-op).
        self.identity: tuple[str, int, int] = (topic_id, partition, offset)

    @property
    def origin(self) -> Coordinates:
        origin = self._origin
        if origin is None:
            origin = self._origin = Coordinates(self.topic, self.topic_id, self.partition,
                                           self.offset, self.timestamp)
        return origin

    def __repr__(self) -> str:
        return f"KafkaPayload({self.topic}[{self.partition}]@{self.offset}, gen={self.generation})"


def build_payload(record: Any, topic: str, partition: int, offset: int, topic_id: str,
                  generation: int, watched: Container[str] = ()) -> KafkaPayload:
    """Wrap a ``confluent_kafka.Message`` (already checked for ``error()``).

    ``topic``, ``partition`` and ``offset`` are the record's own, already read by
    the caller (each accessor is a C call, and this runs once per record).

    A replayed dead letter carries its original coordinates and its replay count in
    the message, with where it was read (``replayed_at``); it is addressed to the
    watchers that rejected it. ``watched`` is given for a record of a replay topic: one
    replay topic may serve several groups (one dead-letter topic for several topic
    sets), so a replay of a topic this group does not watch is addressed to nobody
    here (resolved at once, committed past) rather than rejected as "not in cohort".
    """
    timestamp: int = record.timestamp()[1]
    raw_headers = record.headers()
    if not raw_headers:
        message = _new_message(KafkaMessage, (topic, partition, offset, timestamp, record.key(),
                                              record.value(), (), 0, None, 1))
        return KafkaPayload(topic, partition, offset, generation, message, topic_id, timestamp)
    headers = tuple(raw_headers)
    replay = parse_replay(headers)
    if replay is None:
        message = _new_message(KafkaMessage, (topic, partition, offset, timestamp, record.key(),
                                              record.value(), headers, 0, None, 1))
        return KafkaPayload(topic, partition, offset, generation, message, topic_id, timestamp)
    o = replay.origin
    message = KafkaMessage(
        o.topic, o.partition, o.offset, o.timestamp, record.key(), record.value(), headers,
        replay.replay_count, ReadPosition(topic, partition, offset),
    )
    targets = frozenset(replay.rejections)
    if watched and o.topic not in watched:
        targets = frozenset()
    return KafkaPayload(
        topic,
        partition,
        offset,
        generation,
        message,
        topic_id,
        timestamp,
        replay=o,
        targets=targets,
        replay_count=replay.replay_count,
    )
