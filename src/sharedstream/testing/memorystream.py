"""A stand-in for the core's adapter contract (``SharedStreamProducer``), for engine
tests and benchmarks: not a Kafka.

It reads what its caller feeds, in order, and records what the group asks of it
(commit targets, fetch requests, dead letters, pauses) so a test can look. It models
no broker and no client: one partition per topic, no consumer group, no commits of
its own. A test of how Kafka behaves (rebalances, commits, pause, errors) runs the
Kafka adapter on ``kafka.memory.MemoryBroker``, the one in-memory Kafka, which
``tests/integration/test_memory_broker_parity.py`` holds to the real broker's answers.
It lived in ``core/`` until issue 44: the core keeps the path of a message, not its
test doubles.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from sharedstream.core.contract import (
    PartitionRewound,
    PartitionsEnded,
    PartitionsStarted,
    Records,
    SharedStreamProducer,
    StreamEvent,
)
from sharedstream.core.ledger import Key, Ledger, Target

_END = object()


class LocalRecord:
    """Where a fed message was "read": ``topic`` (partition 0) and ``offset``."""

    __slots__ = ("generation", "offset", "partition", "partition_key", "targets", "topic")

    def __init__(self, topic: str, offset: int, generation: int = 0,
                 targets: frozenset[str] | None = None) -> None:
        self.topic = topic
        self.partition = 0
        self.offset = offset
        self.generation = generation
        self.targets = targets
        self.partition_key: Key = (topic, 0)

    @property
    def coordinates(self) -> tuple[str, int]:
        return (self.topic, self.offset)

    def __repr__(self) -> str:
        return f"{self.topic}:{self.offset}"


class MemoryStream(SharedStreamProducer[LocalRecord]):
    """Yields what is fed; records targets, fetch requests, dead letters and pauses.

    A topic's partition starts (generation 0, or one more than its last) the first time
    something of it is fed after it started or ended. What was fed is kept as the
    topic's log: a rewind (a bound lifted) yields it again from the offset asked for,
    as a broker would after a seek. Dead letters are durable on the next loop turn
    unless ``hold_dead_letters`` is set (then :meth:`deliver` them).
    """

    def __init__(self, commit_interval: float = 0.1) -> None:
        self.commit_interval = commit_interval
        self._items: asyncio.Queue[Any] = asyncio.Queue()
        self._generations: dict[str, int] = {}
        self._open: set[str] = set()
        self._log: dict[str, list[tuple[Any, LocalRecord]]] = {}
        self.ledger: Ledger | None = None
        self.opened = False
        self.published: dict[Key, Target] = {}
        self.fetch_requests: list[tuple[Key, int, int | None]] = []
        self.dead_letters: list[tuple[LocalRecord, dict[str, str]]] = []
        self.hold_dead_letters = False
        self._undelivered: list[Callable[[], None]] = []
        # topic -> offset -> watchers: holds an earlier owner left (core/holds.py), told
        # with the topic's next start as the Kafka adapter tells them on assignment.
        self.remembered_holds: dict[str, dict[int, frozenset[str]]] = {}
        self.paused = False
        self.pause_calls = 0
        self.resume_calls = 0
        self.aclose_calls = 0

    # -- driving ---------------------------------------------------------------------

    def feed(self, *coordinates: tuple[str, int],
             targets: frozenset[str] | None = None) -> list[LocalRecord]:
        """Messages read at ``(topic, offset)``; filters receive ``"topic:offset"``."""
        records = [LocalRecord(t, o, self._generation_for(t), targets) for t, o in coordinates]
        self.feed_items([(repr(r), r) for r in records])
        return records

    def feed_items(self, items: Sequence[tuple[Any, LocalRecord]]) -> None:
        """Messages with the raw value filters receive, as one batch."""
        for item in items:
            self._generation_for(item[1].topic)
            self._log.setdefault(item[1].topic, []).append(item)
        self._items.put_nowait(Records(items))

    def end(self, *topics: str) -> None:
        """The adapter lost these partitions (revoked, lost)."""
        self._open.difference_update(topics)
        self._items.put_nowait(PartitionsEnded(frozenset((t, 0) for t in topics)))

    def finish(self) -> None:
        """``open_stream`` returns (an error: a stream lasts the group's life)."""
        self._items.put_nowait(_END)

    def explode(self, exc: Exception) -> None:
        self._items.put_nowait(exc)

    def deliver(self) -> None:
        """Make the held dead letters durable."""
        undelivered, self._undelivered = self._undelivered, []
        for done in undelivered:
            done()

    def _generation_for(self, topic: str) -> int:
        if topic not in self._open:
            self._open.add(topic)
            generation = self._generations[topic] = self._generations.get(topic, -1) + 1
            held = self.remembered_holds.pop(topic, None)
            self._items.put_nowait(PartitionsStarted(
                generation, ((topic, 0, None, frozenset()),), {(topic, 0): held} if held else {}))
        return self._generations[topic]

    # -- contract ----------------------------------------------------------------------

    async def open_stream(self, ledger: Ledger) -> AsyncIterator[StreamEvent[LocalRecord]]:
        self.opened = True
        self.ledger = ledger
        while True:
            item = await self._items.get()
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def publish(self, targets: Mapping[Key, Target]) -> None:
        self.published.update(targets)

    def request_fetch(self, key: Key, generation: int, seek_to: int | None) -> None:
        self.fetch_requests.append((key, generation, seek_to))
        if seek_to is not None:
            self._items.put_nowait(PartitionRewound(key, generation))
            self._items.put_nowait(Records(
                [item for item in self._log.get(key[0], ()) if item[1].offset >= seek_to]))

    def dead_letter(self, payload: LocalRecord, rejections: dict[str, str],
                    done: Callable[[], None]) -> None:
        self.dead_letters.append((payload, dict(rejections)))
        if self.hold_dead_letters:
            self._undelivered.append(done)
        else:
            asyncio.get_running_loop().call_soon(done)

    def size(self, raw: Any) -> int:
        return len(raw) if isinstance(raw, (str, bytes)) else 0

    def pause(self) -> None:
        self.paused = True
        self.pause_calls += 1

    def resume(self) -> None:
        self.paused = False
        self.resume_calls += 1

    async def aclose(self) -> None:
        self.aclose_calls += 1
        if self.ledger is not None:
            self.publish(self.ledger.publish())

