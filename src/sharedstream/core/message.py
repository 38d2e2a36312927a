"""The message value a shared-stream filter receives."""

from __future__ import annotations

from typing import NamedTuple


class KafkaMessage(NamedTuple):
    """One Kafka record as a watcher sees it.

    ``key`` and ``value`` are the raw bytes (None for a null key or a tombstone);
    ``timestamp`` is milliseconds since the epoch as the broker reported it (-1 if
    unknown); ``headers`` keep their order and may repeat a name.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
