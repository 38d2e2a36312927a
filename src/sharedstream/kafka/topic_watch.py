"""The topic-identity watch: notices a watched or dead-letter topic deleted and recreated.

A topic deleted and recreated under a running consumer (same name, a new id, offsets
from 0 again) keeps its partitions assigned: librdkafka notices the new id in its
metadata but goes on fetching at the old position, so every record below it would be
skipped in silence. Every ``interval`` (at once after an assignment, or when the loop
saw a record below a committed position) the watch asks for the topics' ids on a worker
thread, so an admin round trip never stalls ``consume()``; the consumer thread restarts
the partitions of a topic whose id changed.

For the dead-letter topic, an unchanged id vouches for the records acknowledged before
the check started (``DeadLetterSender.confirm``); a changed one has them sent again.

Failure window: records of the new topic at or above the old position read before the
check notices (at most ``interval``) are keyed by the old id; after the restart they are
read again under the new id. Runs on the consumer thread only.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Mapping
from typing import Any

from sharedstream.kafka.dead_letters import DeadLetterSender
from sharedstream.kafka.topic_ids import TopicIdResolver

# Per topic whose id changed: (old id, new id).
Changes = dict[str, tuple[str, str]]


class TopicWatch:
    def __init__(self, resolver: TopicIdResolver, config: Mapping[str, Any],
                 topics: tuple[str, ...], interval: float,
                 log: logging.LoggerAdapter[logging.Logger], name: str) -> None:
        self._resolver = resolver
        self._config = config
        self._topics = topics
        self._interval = interval
        self._log = log
        self._name = name
        self.ids: dict[str, str] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: concurrent.futures.Future[dict[str, str]] | None = None
        self._next = 0.0
        self._dlq_mark = 0

    def resolve(self, topics: tuple[str, ...]) -> dict[str, str]:
        """The topics' ids now (blocking: the loop calls it on a worker thread)."""
        return self._resolver(self._config, topics)

    def start(self, now: float) -> None:
        self._next = now + self._interval
        self._pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"sharedstream-ids:{self._name}")

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def check_now(self) -> None:
        self._next = 0.0

    def poll(self, now: float, dlq: DeadLetterSender | None
             ) -> tuple[Changes, tuple[str, str] | None]:
        """Once per turn: start a check when one is due, or take a finished one's answer.
        Returns the watched topics whose id changed, and the dead-letter topic's (old, new)
        id if it changed (its records acknowledged since the check's start go again)."""
        future = self._pending
        if future is None:
            if now >= self._next and self._pool is not None:
                self._next = now + self._interval
                topics = self._topics
                if dlq is not None:
                    self._dlq_mark = dlq.mark()
                    topics = (*topics, dlq.topic)
                self._pending = self._pool.submit(self._resolver, self._config, topics)
            return {}, None
        if not future.done():
            return {}, None
        self._pending = None
        try:
            ids = future.result()
        except Exception as exc:  # deleted and not back yet, or the broker is away
            self._log.debug("%s: topic ids not checked: %s", self._name, exc)
            return {}, None
        changed = {t: (self.ids[t], i) for t, i in ids.items()
                   if self.ids.get(t) not in (None, i)}
        self.ids.update(ids)
        dlq_change = None
        if dlq is not None and dlq.topic in changed:
            dlq_change = changed.pop(dlq.topic)
        elif dlq is not None:
            dlq.confirm(self._dlq_mark)
        return changed, dlq_change
