"""Reading dead-letter topics: decoded records with their context, never committing.

This is the public reader behind ``sharedstream dlq inspect|replay`` and the
base for users' own DLQ consumers (re-exported as :mod:`sharedstream.ops.dlq`).

Why manual assignment and a bounded range: a reader must never move anybody's
committed offsets (inspecting a DLQ is not consuming it) and must terminate. The
reader assigns every partition itself (no group join, no rebalance, no commit),
snapshots each partition's end offset when it starts, and stops once every
partition reached that end. Records written while it reads belong to the next
read, which keeps ``dlq replay`` from chasing the records its own replays
produce.

Records written by another tool (no ``sharedstream.*`` headers, or malformed
ones) are still yielded, with ``foreign`` set and ``problem`` saying why: a
reader that skipped them would hide exactly the records an operator needs to see.

Failure windows: none of its own (it writes nothing). A partition whose records
are deleted by retention while the reader runs ends early; records compacted
away are simply absent. A broker that stops answering mid-read raises
:class:`DeadLetterError` after ``timeout`` seconds without a record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from sharedstream.core.message import Coordinates, KafkaMessage
from sharedstream.kafka.dlq_headers import (
    ALL_HEADERS,
    CONSUMER_GROUP,
    IDENTITY,
    ORIGINAL_OFFSET,
    ORIGINAL_PARTITION,
    ORIGINAL_TIMESTAMP,
    ORIGINAL_TOPIC,
    ORIGINAL_TOPIC_ID,
    PREFIX,
    REJECTIONS,
    REPLAY_COUNT,
    user_headers,
)

Header = tuple[str, bytes | None]

# Never committed to (the reader commits nothing); named so broker-side audits can tell
# who fetched.
DEFAULT_READER_GROUP = "sharedstream-dlq-reader"


class DeadLetterError(Exception):
    """A DLQ topic cannot be read: missing topic, unreachable broker, refused credentials.

    The message is one line and never contains the connection config (it may hold
    secrets)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of a dead-letter topic, decoded.

    ``message`` is the DLQ record as read: its topic, partition and offset are its
    place in the DLQ topic, its timestamp the one the triggerer set (the original
    message's), its headers every header, ``sharedstream.*`` included. ``origin`` is
    where the rejected message first came from (None for a foreign record). The
    record's fields are also readable here directly (``dead.value``).
    """

    message: KafkaMessage
    origin: Coordinates | None = None
    consumer_group: str | None = None
    rejections: Mapping[str, str] = field(default_factory=dict)
    replay_count: int = 0
    identity: str | None = None
    problem: str | None = None

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def partition(self) -> int:
        return self.message.partition

    @property
    def offset(self) -> int:
        return self.message.offset

    @property
    def timestamp(self) -> int:
        return self.message.timestamp

    @property
    def key(self) -> bytes | None:
        return self.message.key

    @property
    def value(self) -> bytes | None:
        return self.message.value

    @property
    def headers(self) -> tuple[Header, ...]:
        return self.message.headers

    @property
    def foreign(self) -> bool:
        """True when the record lacks (valid) sharedstream DLQ headers."""
        return self.origin is None

    @property
    def watchers(self) -> tuple[str, ...]:
        """The watchers that rejected the message, sorted."""
        return tuple(sorted(self.rejections))

    @property
    def user_headers(self) -> list[Header]:
        """The message's own headers, without the ``sharedstream.*`` ones."""
        return user_headers(self.headers)

    @property
    def dedupe_key(self) -> str:
        """The identity for a sharedstream record (copies of one rejection share it); the
        DLQ coordinates for a foreign one (nothing says two foreign records are copies)."""
        if self.identity is not None:
            return self.identity
        return f"dlq:{self.topic}:{self.partition}:{self.offset}"


def decode_dead_letter(topic: str, partition: int, offset: int, timestamp: int,
                       key: bytes | None, value: bytes | None,
                       headers: tuple[Header, ...] | list[Header] | None) -> DeadLetter:
    """Decode one DLQ record; anything without complete, well-formed headers is foreign.

    The last occurrence of a header wins (as in ``parse_replay``): a record that went
    through several tools keeps the newest context.
    """
    all_headers = tuple(headers or ())
    found: dict[str, str] = {}
    for name, raw in all_headers:
        if name.startswith(PREFIX) and raw is not None:
            found[name] = raw.decode("utf-8", "replace")
    plain = DeadLetter(KafkaMessage(topic, partition, offset, timestamp, key, value, all_headers))
    missing = [name for name in ALL_HEADERS if name not in found]
    if len(missing) == len(ALL_HEADERS):
        return _foreign(plain, "no sharedstream headers")
    if missing:
        return _foreign(plain, f"missing header(s): {', '.join(missing)}")
    try:
        origin = Coordinates(found[ORIGINAL_TOPIC], found[ORIGINAL_TOPIC_ID],
                        int(found[ORIGINAL_PARTITION]), int(found[ORIGINAL_OFFSET]),
                        int(found[ORIGINAL_TIMESTAMP]))
        replay_count = int(found[REPLAY_COUNT])
    except ValueError as exc:
        return _foreign(plain, f"malformed header: {exc}")
    try:
        rejections = json.loads(found[REJECTIONS])
    except ValueError:
        return _foreign(plain, f"malformed header: {REJECTIONS} is not JSON")
    if not isinstance(rejections, dict) or not rejections or replay_count < 0:
        return _foreign(plain, f"malformed header: {REJECTIONS} or {REPLAY_COUNT}")
    return DeadLetter(
        plain.message, origin=origin,
        consumer_group=found[CONSUMER_GROUP],
        rejections={str(k): str(v) for k, v in sorted(rejections.items())},
        replay_count=replay_count, identity=found[IDENTITY])


def decode_record(record: Any) -> DeadLetter:
    """Decode a ``confluent_kafka.Message`` read from a DLQ topic (already checked for errors)."""
    return decode_dead_letter(record.topic(), record.partition(), record.offset(),
                              record.timestamp()[1], record.key(), record.value(),
                              record.headers())


def _foreign(plain: DeadLetter, problem: str) -> DeadLetter:
    return DeadLetter(plain.message, problem=problem)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """The offsets ``[start, end)`` of one DLQ partition a reader covers."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


class DeadLetterReader:
    """Iterate the records of one DLQ topic, decoded, without committing anything.

    ``connection`` is a librdkafka config (e.g. from ``resolve_connection``).
    Each partition is read from its log start, or from ``start_offsets[partition]``
    (a resume position, e.g. a replay group's committed offset), or from the first
    record stamped at or after ``since`` (``offsets_for_times``), whichever is
    furthest, up to the end offset observed when the reader opened. Use it as a
    context manager (or call :meth:`close`)::

        with DeadLetterReader(resolve_connection("kafka_default", {}), "orders.dlq") as r:
            for record in r:
                print(record.origin, record.rejections)

    Every broker request is bounded by ``timeout`` seconds; failures raise
    :class:`DeadLetterError` with a one-line reason.
    """

    def __init__(self, connection: Mapping[str, Any], topic: str, *,
                 since: datetime | None = None, start_offsets: Mapping[int, int] | None = None,
                 timeout: float = 10.0, group_id: str = DEFAULT_READER_GROUP) -> None:
        self.topic = topic
        self.timeout = timeout
        self._errors: list[KafkaError] = []
        config = dict(connection)
        config.update({
            "group.id": group_id, "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True,
            # Failed connection attempts come back through error_cb and the failing
            # request's one-line error, not as librdkafka log lines on stderr.
            "log_level": 0, "error_cb": self._errors.append,
        })
        self._consumer = Consumer(config)
        self.log_starts: dict[int, int] = {}  # partition -> its first offset, at opening
        try:
            self.ranges = self._plan(since, start_offsets or {})
        except BaseException:
            self._consumer.close()
            raise

    def _plan(self, since: datetime | None, start_offsets: Mapping[int, int]
              ) -> list[PartitionRange]:
        partitions = self._partitions()
        marks = {p: self._call(self._consumer.get_watermark_offsets,
                               TopicPartition(self.topic, p), timeout=self.timeout)
                 for p in partitions}
        self.log_starts = {p: marks[p][0] for p in partitions}
        starts = {p: max(marks[p][0], start_offsets.get(p, 0)) for p in partitions}
        if since is not None and partitions:
            stamp = int(since.timestamp() * 1000)
            found = self._call(self._consumer.offsets_for_times,
                               [TopicPartition(self.topic, p, stamp) for p in partitions],
                               timeout=self.timeout)
            for tp in found:
                # -1: no record stamped at or after `since` yet; start at the end.
                at = marks[tp.partition][1] if tp.offset < 0 else tp.offset
                starts[tp.partition] = max(starts[tp.partition], at)
        return [PartitionRange(p, min(starts[p], marks[p][1]), marks[p][1]) for p in partitions]

    def _partitions(self) -> list[int]:
        metadata = self._call(self._consumer.list_topics, self.topic, timeout=self.timeout)
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None:
            code = found.error.code() if found is not None and found.error else None
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise DeadLetterError(f"kafka: not authorized to read topic {self.topic!r}")
            raise DeadLetterError(f"topic {self.topic!r} not found")
        return sorted(found.partitions)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            raise DeadLetterError(f"kafka: {self._reason(exc)}") from None
        except RuntimeError as exc:  # a closed consumer
            raise DeadLetterError(f"kafka: {exc}") from None

    def _reason(self, exc: KafkaException) -> str:
        error = exc.args[0] if exc.args else None
        text = error.str() if isinstance(error, KafkaError) else str(exc)
        if self._errors:
            text += f" (last error: {self._errors[-1].str()})"
        return text

    @property
    def total(self) -> int:
        """How many offsets the reader covers (an upper bound on the records it yields)."""
        return sum(r.size for r in self.ranges)

    def batches(self, max_records: int = 500) -> Iterator[list[DeadLetter]]:
        """The records in batches of at most ``max_records`` (one ``consume()`` each).

        Within a partition, records come in offset order; partitions interleave.
        """
        pending = {r.partition: r.end for r in self.ranges if r.size}
        if not pending:
            return
        self._consumer.assign([TopicPartition(self.topic, r.partition, r.start)
                               for r in self.ranges if r.size])
        quiet_since = time.monotonic()
        while pending:
            records = self._call(self._consumer.consume, max_records,
                                 min(self.timeout, 0.5))
            batch: list[DeadLetter] = []
            for record in records:
                partition = record.partition()
                end = pending.get(partition)
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.pop(partition, None)
                    elif error.fatal() or error.code() in _REFUSED:
                        raise DeadLetterError(f"kafka: {error.str()}")
                    continue
                offset = record.offset()
                if end is None or offset >= end:
                    continue
                if offset >= end - 1:
                    del pending[partition]
                batch.append(decode_record(record))
            if records:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > self.timeout:
                last = f" (last error: {self._errors[-1].str()})" if self._errors else ""
                raise DeadLetterError(
                    f"kafka: no records from {self.topic!r} within {self.timeout:g}s, "
                    f"{len(pending)} partition(s) unfinished{last}")
            if batch:
                yield batch

    def __iter__(self) -> Iterator[DeadLetter]:
        for batch in self.batches():
            yield from batch

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> DeadLetterReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_REFUSED = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
})


def read_dead_letters(connection: Mapping[str, Any], topic: str, *,
                      since: datetime | None = None, timeout: float = 10.0
                      ) -> Iterator[DeadLetter]:
    """Every record of ``topic`` up to its end at call time, decoded (closes the reader)."""
    with DeadLetterReader(connection, topic, since=since, timeout=timeout) as reader:
        yield from reader
