"""What the in-memory Kafka hands its clients: records and refused commit results.

Shared by the broker (:mod:`sharedstream.kafka.memory`), its consumer and its producer,
so none of them imports another for these.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition

Key = tuple[str, int]
DEFAULT_TIMESTAMP = 1_700_000_000_000


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


class _RefusedPartition(TopicPartition):
    """A commit result carrying its error (``TopicPartition.error`` is read-only in Python,
    set only by librdkafka)."""

    def __init__(self, tp: TopicPartition, error: KafkaError) -> None:
        super().__init__(tp.topic, tp.partition, tp.offset, metadata=tp.metadata)
        self._error = error

    @property
    def error(self) -> KafkaError:  # type: ignore[override]
        return self._error


def with_error(tp: TopicPartition, error: KafkaError) -> TopicPartition:
    """``tp`` as a commit result refused with ``error``."""
    return _RefusedPartition(tp, error)
