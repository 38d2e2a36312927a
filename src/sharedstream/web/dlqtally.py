"""The counts of a whole dead-letter topic, kept up to date by reading only what is new.

The console's page of a dead-letter topic reads its newest ``dlq_max_records`` records;
its counts must not stop there (a watcher with 8,800 dead letters is not one with
5,000). A :class:`TopicTally` reads a topic once from its log start, then at each
refresh only the records after the ones it counted, so a polled console costs the
broker the new records only. It counts what the page's histograms count: distinct dead
letters (copies of one identity once, as ``group_rows`` does), per reason
(:func:`~sharedstream.ops.dlq.commands.count_dead_letter`), per watcher and per
(watcher, reason) pair.

A count covers what the topic holds: when a partition's log start moved past the first
offset counted (retention, ``delete-records``) or its end went back (the topic made
again), the tally counts the topic again from its log start. Memory: the identities
counted, about 100 bytes per distinct dead letter.

Failure windows: none that write (it commits nothing, as every DLQ reader). A read that
fails keeps the counts of the last one that worked and says why; the next refresh reads
from where the last good one ended.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedstream.kafka.connections import ConnectionConfigError
from sharedstream.ops.dlq.commands import count_dead_letter
from sharedstream.ops.dlq.reader import DeadLetter, DeadLetterError, DeadLetterReader


@dataclass(frozen=True, slots=True)
class TopicCounts:
    """What a tally says at one moment (a copy: the tally goes on counting)."""

    records: int = 0
    distinct: int = 0
    foreign: int = 0
    reasons: Mapping[str, int] = field(default_factory=dict)
    watchers: Mapping[str, int] = field(default_factory=dict)
    pairs: Mapping[tuple[str, str], int] = field(default_factory=dict)
    error: str | None = None


class TopicTally:
    """The counts of one dead-letter topic (see the module docstring); thread-safe."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._first: dict[int, int] = {}  # partition -> the first offset counted
        self._next: dict[int, int] = {}  # partition -> the offset after the last counted
        self._seen: set[str] = set()
        self._records = self._foreign = 0
        self._reasons: Counter[str] = Counter()
        self._watchers: Counter[str] = Counter()
        self._pairs: Counter[tuple[str, str]] = Counter()

    def refresh(self, open_reader: Callable[[Mapping[int, int]], DeadLetterReader]
                ) -> TopicCounts:
        """Count what was added since the last refresh (everything after a reset);
        ``open_reader(start_offsets)`` opens a reader of the topic from those offsets."""
        with self._lock:
            try:
                self._read(open_reader)
            except (DeadLetterError, ConnectionConfigError) as exc:
                return self._counts(str(exc))
            return self._counts(None)

    def _read(self, open_reader: Callable[[Mapping[int, int]], DeadLetterReader]) -> None:
        with open_reader(self._next) as reader:
            # Records counted are gone (the log start passed the first one), or the
            # partition went back (the topic was made again): count it all again.
            gone = any(reader.log_starts.get(p, first) > first
                       for p, first in self._first.items()) or any(
                r.end < self._next.get(r.partition, 0) for r in reader.ranges)
            if not gone:
                for record in reader:
                    self._add(record)
                return
        self._reset()
        with open_reader({}) as reader:
            for record in reader:
                self._add(record)

    def _add(self, record: DeadLetter) -> None:
        self._first.setdefault(record.partition, record.offset)
        self._next[record.partition] = record.offset + 1
        self._records += 1
        if record.identity is not None:
            if record.identity in self._seen:
                return  # a copy of a dead letter counted already
            self._seen.add(record.identity)
        else:
            self._foreign += 1
        count_dead_letter(record, self._reasons, self._watchers)
        if not record.foreign:
            self._pairs.update(record.rejections.items())

    def _counts(self, error: str | None) -> TopicCounts:
        return TopicCounts(self._records, len(self._seen) + self._foreign, self._foreign,
                           dict(self._reasons), dict(self._watchers), dict(self._pairs),
                           error)


def counts_json(counts: TopicCounts) -> dict[str, Any]:
    """The histograms of a tally as the API's dead-letter ``stats`` gives them."""
    return {"reasons": dict(Counter(counts.reasons).most_common()),
            "watchers": dict(Counter(counts.watchers).most_common()),
            "by_watcher_reason": [{"watcher": w, "reason": why, "count": n}
                                  for (w, why), n in Counter(counts.pairs).most_common()],
            "records": counts.records, "distinct": counts.distinct, "whole_topic": True}
