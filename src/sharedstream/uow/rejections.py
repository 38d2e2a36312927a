"""``DatabaseRejectionRecorder``: rejections the dead-letter topic cannot take, as rows.

The Kafka producer calls :meth:`DatabaseRejectionRecorder.record` when a group has no
dead-letter topic, or when the broker refuses a dead-letter record for good (too
large), and commits past the messages only after it returns. One ``rejected_message``
row per rejecting watcher, all of one call in one transaction, on the store's threads.

Failure window: a crash after the rows commit but before the Kafka commit records the
same rejections again after the restart; the insert skips rows whose (watcher, topic
id, partition, offset) exists, so each rejection stays one row. A database error
raises to the producer, which holds the messages and retries (nothing is committed).
Because that retry is for ever, the reason and the preview go through
:func:`~sharedstream.core.text.storable_text` first: a NUL, a lone surrogate or a 10 MB
reason, which some backend refuses for good, must not hold the partition (issue 25.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedstream.core.text import storable_text
from sharedstream.kafka.rejections import RejectedMessage
from sharedstream.statestore.models import rejected_message
from sharedstream.statestore.sql import insert_ignore_many
from sharedstream.statestore.store import StateStore

PREVIEW_BYTES = 256


def value_preview(value: bytes | None, limit: int = PREVIEW_BYTES) -> str | None:
    """The first ``limit`` bytes of a message value as storable text: undecodable bytes
    replaced by U+FFFD, a NUL written as ``\\u0000``."""
    if value is None:
        return None
    return storable_text(value[:limit].decode("utf-8", errors="replace"))


class DatabaseRejectionRecorder:
    """Writes rejections to ``rejected_message``; idempotent, off the event loop."""

    def __init__(self, store: StateStore, preview_bytes: int = PREVIEW_BYTES) -> None:
        self._store = store
        self._preview_bytes = preview_bytes
        self.rows_written = 0

    async def record(self, rejected: Sequence[RejectedMessage]) -> None:
        rows = self._rows(rejected)
        if rows:
            self.rows_written += await self._store.run_async(self._write, rows)

    def _rows(self, rejected: Sequence[RejectedMessage]) -> list[dict[str, Any]]:
        now = self._store.clock()
        rows = []
        for message in rejected:
            where = message.origin
            preview = value_preview(message.value, self._preview_bytes)
            for watcher, reason in sorted(message.rejections.items()):
                # Why the DLQ did not take it goes with the watcher's own reason.
                why = f"{reason} (not dead-lettered: {message.error})" if message.error \
                    else reason
                rows.append({
                    "watcher": watcher, "topic": where.topic, "topic_id": where.topic_id,
                    "partition": where.partition, "offset": where.offset,
                    "reason": storable_text(why), "value_preview": preview, "created_at": now,
                })
        return rows

    def _write(self, rows: list[dict[str, Any]]) -> int:
        with self._store.engine.begin() as connection:
            return insert_ignore_many(connection, rejected_message, rows)
