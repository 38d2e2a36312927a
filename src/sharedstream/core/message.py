"""A record as a watcher sees it, and where a record sits: the project's two value types.

``KafkaMessage`` is the public value a filter iterates. ``Coordinates`` is the one
declaration of a message's coordinates: what events, state writes, rejections,
dead-letter headers and replays are keyed by. Every room uses these two; none
declares its own topic/partition/offset record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class ReadPosition(NamedTuple):
    """Where a copy of a message was read: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


class KafkaMessage(NamedTuple):
    """One Kafka record as a watcher sees it.

    ``key`` and ``value`` are the raw bytes (None for a null key or a tombstone);
    ``timestamp`` is milliseconds since the epoch as the broker reported it (-1 if
    unknown); ``headers`` keep their order and may repeat a name.

    ``topic``/``partition``/``offset``/``timestamp`` are the message's *original*
    coordinates, also for a dead letter replayed by ``sharedstream dlq replay``: what
    its events are keyed by. ``replay_count`` says how many times it was replayed (0
    for a first read, and for a crash redelivery of one, which is the same copy read
    again); :attr:`read_at` says where this copy was read (a replay topic, say).
    ``replayed_at`` holds that place for a replay only, None otherwise: read
    :attr:`read_at`, which is the message's own coordinates for a first read.
    ``delivery`` is the hand-out round in this process: 1 for the first, 2 and up for a
    redelivery after a watcher failed on it (raised, timed out, or its queue was full),
    which reaches only the watchers that have not handled it, after later messages of
    its partition.
    :attr:`catching_up` sums up both kinds of late copy for a watermark check.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    replay_count: int = 0
    replayed_at: ReadPosition | None = None
    delivery: int = 1

    @property
    def is_replay(self) -> bool:
        """True for a dead letter replayed to this watcher: not handled before, whatever
        a watermark says (its rejection was the watcher's last word on it)."""
        return self.replay_count > 0

    @property
    def is_retry(self) -> bool:
        """True for a redelivery in this process after a watcher failed on the message."""
        return self.delivery > 1

    @property
    def catching_up(self) -> bool:
        """True when this watcher has not handled the message although later ones of its
        partition may have moved its watermark: a DLQ replay, or a retry after a failure.

        A crash redelivery is not catching up: it is the same copy read again from the
        committed offset, and whatever a watermark says about it was committed with its
        events (guarantee 3), so a watermark check may skip it.
        """
        return self.replay_count > 0 or self.delivery > 1

    @property
    def read_at(self) -> ReadPosition:
        """Where this copy was read: the replay's place for a replay, else the message's
        own coordinates (built on demand: a first read carries no second position)."""
        at = self.replayed_at
        return ReadPosition(self.topic, self.partition, self.offset) if at is None else at


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a message was first read: its topic (name and id), partition and offset.

    ``topic_id`` tells a recreated topic from the old one of the same name, so the
    same offset of two incarnations never collides. ``timestamp`` is the broker's
    timestamp in milliseconds, -1 where it is unknown or not kept (``asset_event``
    rows do not keep it). A replayed dead letter keeps its original coordinates.
    """

    topic: str
    topic_id: str
    partition: int
    offset: int
    timestamp: int = -1

    @property
    def identity(self) -> str:
        """``topic_id:partition:offset``: the key of a message across every table and header."""
        return format_identity(self.topic_id, self.partition, self.offset)


def format_identity(topic_id: str, partition: int, offset: int) -> str:
    return f"{topic_id}:{partition}:{offset}"
