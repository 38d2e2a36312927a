"""The console's reads of dead-letter topics (``--dlq-topic``).

A topic is read at most every five seconds (``DLQ_TTL_S``), newest ``dlq_max_records``
records at most, by assigning its partitions (nothing committed); the page and the API
filter and search what was read. Its counts (the histograms, the watchers' rejected
counts) cover the whole topic: a :class:`~sharedstream.web.dlqtally.TopicTally` per
topic, refreshed at most as often, reads only the records added since.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sharedstream.kafka.connections import ConnectionConfigError, resolve_connection
from sharedstream.ops.dlq.commands import group_rows, histograms, row_json
from sharedstream.ops.dlq.reader import DeadLetter, DeadLetterError, DeadLetterReader
from sharedstream.web.caches import TtlCache
from sharedstream.web.dbreads import NotFound
from sharedstream.web.dlqtally import TopicCounts, TopicTally, counts_json
from sharedstream.web.settings import ConsoleSettings

DLQ_TTL_S = 5.0


class DeadLetterReads:
    """The console's reads of dead-letter topics (``Sources.dlq``)."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._dlq_cache = TtlCache(DLQ_TTL_S, max_keys=32)
        self._tallies: dict[str, TopicTally] = {}

    def _connection(self) -> Mapping[str, Any]:
        return resolve_connection(self.settings.connection, self.settings.connections)

    def dead_letter_counts_sync(self, topic: str) -> TopicCounts:
        """The counts of the whole of ``topic``, at most ``DLQ_TTL_S`` old."""
        tally = self._tallies.setdefault(topic, TopicTally(topic))

        def open_reader(starts: Mapping[int, int]) -> DeadLetterReader:
            return DeadLetterReader(self._connection(), topic, start_offsets=starts,
                                    timeout=self.settings.kafka_timeout)

        return self._dlq_cache.get(("counts", topic), lambda: tally.refresh(open_reader))

    def dead_letter_watchers_sync(self) -> tuple[Counter[str], list[str]]:
        """Distinct dead letters per watcher over every dead-letter topic of the console,
        and why a topic could not be read (its last counts stand meanwhile)."""
        found: Counter[str] = Counter()
        errors = []
        for topic in self.settings.dlq_topics:
            counts = self.dead_letter_counts_sync(topic)
            found.update(counts.watchers)
            if counts.error is not None:
                errors.append(f"{topic}: {counts.error}")
        return found, errors

    def _read_dead_letters(self, topic: str, since: datetime | None
                           ) -> tuple[list[DeadLetter], bool]:
        """The newest ``dlq_max_records`` records of ``topic`` (or those since ``since``),
        and whether older ones were left out."""
        connection = self._connection()
        cap = self.settings.dlq_max_records
        timeout = self.settings.kafka_timeout
        with DeadLetterReader(connection, topic, since=since, timeout=timeout) as reader:
            ranges = reader.ranges
            if reader.total <= cap:
                return list(reader), False
        share = max(cap // max(len(ranges), 1), 1)
        starts = {r.partition: max(r.start, r.end - share) for r in ranges}
        with DeadLetterReader(connection, topic, since=since, start_offsets=starts,
                              timeout=timeout) as reader:
            return list(reader), True

    def dead_letters_sync(self, *, topic: str, since: datetime | None, watcher: str | None,
                          reason: str | None, limit: int, offset: int,
                          text: str | None = None) -> dict[str, Any]:
        """A page of the topic's records (copies of one rejection as one row), newest
        first, with the histograms of all it read; ``text`` searches reasons, keys and
        values (case-insensitive; bytes that are not UTF-8 never match)."""
        if topic not in self.settings.dlq_topics:
            raise NotFound(f"{topic!r} is not one of the console's dead-letter topics "
                           "(--dlq-topic)")
        bucket = None if since is None else since.replace(microsecond=0)

        def read() -> tuple[list[DeadLetter], bool, str | None]:
            try:
                records, truncated = self._read_dead_letters(topic, bucket)
                return records, truncated, None
            except (DeadLetterError, ConnectionConfigError) as exc:
                return [], False, str(exc)

        records, truncated, error = self._dlq_cache.get((topic, bucket), read)
        rows = group_rows(records)
        if since is None:  # the whole topic's, not only what the page read
            counts = self.dead_letter_counts_sync(topic)
            stats = counts_json(counts)
            error = error or counts.error
        else:
            reasons, watchers = histograms(rows)
            pairs: Counter[tuple[str, str]] = Counter(
                (w, why) for row in rows if not row.first.foreign
                for w, why in row.first.rejections.items())
            stats = {"reasons": dict(reasons.most_common()),
                     "watchers": dict(watchers.most_common()),
                     "by_watcher_reason": [{"watcher": w, "reason": why, "count": n}
                                           for (w, why), n in pairs.most_common()],
                     "records": len(records), "distinct": len(rows), "whole_topic": False}
        selected = [row for row in rows if _dead_letter_matches(row.first, watcher, reason, text)]
        selected.reverse()  # newest first
        page = selected[offset:offset + limit]
        return {"topic": topic, "read": len(records), "distinct": len(rows),
                "foreign": sum(1 for r in rows if r.first.foreign), "truncated": truncated,
                "error": error, "stats": stats,
                "items": [row_json(r) for r in page], "total": len(selected), "limit": limit,
                "offset": offset}


def _utf8(data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _dead_letter_matches(record: DeadLetter, watcher: str | None, reason: str | None,
                         text: str | None = None) -> bool:
    if watcher is not None and watcher not in record.rejections:
        return False
    reasons: Iterable[str] = record.rejections.values() if not record.foreign \
        else [record.problem or "<foreign>"]
    if reason is not None and not any(reason in why for why in reasons):
        return False
    if text is not None:
        wanted = text.casefold()
        haystack = [*reasons, _utf8(record.message.key), _utf8(record.message.value)]
        return any(wanted in part.casefold() for part in haystack)
    return True

