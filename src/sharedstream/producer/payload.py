"""Turning a consumed record into what watchers see and what comes back in ``advance``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharedstream.producer.dlq_headers import Origin, parse_replay
from sharedstream.triggers.message import KafkaMessage

Lane = tuple[str, int]


@dataclass(frozen=True, slots=True, eq=False)
class KafkaPayload:
    """The broker side of one handed-out message.

    ``topic``/``partition``/``offset`` are where the record was actually read
    (they drive lanes and commits); ``origin`` is what events are keyed by (the
    same coordinates, or the original ones for a replayed dead letter).
    ``generation`` is the assignment generation the record was read in: an
    outcome arriving after that partition was revoked is discarded.
    """

    topic: str
    partition: int
    offset: int
    generation: int
    message: KafkaMessage
    origin: Origin
    targets: frozenset[str] | None = None
    replay_count: int = 0

    @property
    def lane(self) -> Lane:
        return (self.topic, self.partition)

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.origin.topic_id, self.origin.partition, self.origin.offset)


def build_payload(record: Any, topic_id: str, generation: int) -> KafkaPayload:
    """Wrap a ``confluent_kafka.Message`` (already checked for ``error()``)."""
    topic: str = record.topic()
    partition: int = record.partition()
    offset: int = record.offset()
    timestamp: int = record.timestamp()[1]
    headers = tuple(record.headers() or ())
    replay = parse_replay(headers) if headers else None
    if replay is None:
        origin = Origin(topic, topic_id, partition, offset, timestamp)
        message = KafkaMessage(
            topic, partition, offset, timestamp, record.key(), record.value(), headers
        )
        return KafkaPayload(topic, partition, offset, generation, message, origin)
    o = replay.origin
    message = KafkaMessage(
        o.topic, o.partition, o.offset, o.timestamp, record.key(), record.value(), headers
    )
    return KafkaPayload(
        topic,
        partition,
        offset,
        generation,
        message,
        o,
        targets=frozenset(replay.rejections),
        replay_count=replay.replay_count,
    )
