"""Driving an adapter through its contract as a group does, with the real partition ledger.

For the Kafka adapter's own tests (in-memory broker and real broker): the ledger admits
what the adapter reads; the test says how each entry settles (acked by everyone, held,
rejected); commit targets are published at once (a group does so every commit interval).
Fan-out, windows and watchers are the group's and are tested with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sharedstream.core.contract import PartitionRewound, PartitionsEnded, PartitionsStarted, Records
from sharedstream.core.ledger import Entry, Ledger, State
from sharedstream.kafka.producer import KafkaSharedStreamProducer


@dataclass(frozen=True)
class Outcome:
    """How a message settles: held for ``retry_after`` seconds when ``failed``, dead-lettered
    when ``rejected``, else terminal. ``persisted`` when some watcher's event was stored."""

    failed: bool = False
    rejected: dict[str, str] = field(default_factory=dict)
    retry_after: float = 0.0
    persisted: bool = True


ACK = Outcome()


class Driver:
    """Drives the adapter through its contract as a group does, with the real ledger:
    admits what it reads, settles entries as a test says, publishes commit targets at
    once (the group does so every commit interval)."""

    def __init__(self, producer: KafkaSharedStreamProducer, max_in_flight: int | None = None,
                 max_bytes: int | None = None) -> None:
        self.producer = producer
        self.ledger = Ledger("test", producer.request_fetch, producer.record_skipped)
        if max_in_flight is not None:
            self.ledger.set_bounds(max_in_flight, max_bytes)
        self.stream = producer.open_stream(self.ledger)

    async def take(self, n: int) -> list[Entry]:
        """The next ``n`` admitted entries, across batches."""
        out: list[Entry] = []
        while len(out) < n:
            item = await asyncio.wait_for(anext(self.stream), 5)
            assert not isinstance(item, PartitionsEnded), item
            out.extend(self._apply(item))
        return out

    async def next_change(self) -> PartitionsEnded:
        """Read on until the adapter ends some partitions."""
        while True:
            item = await asyncio.wait_for(anext(self.stream), 5)
            if isinstance(item, PartitionsEnded):
                self._apply(item)
                return item
            self._apply(item)

    def _apply(self, item: object) -> list[Entry]:
        if isinstance(item, Records):
            return [entry for run in self.ledger.admit(item.items, self.producer.size)
                    for entry in run.ledger.itemise(run)]
        if isinstance(item, PartitionsStarted):
            self.ledger.start(item.generation, item.starts)
        elif isinstance(item, PartitionsEnded):
            self.ledger.end(item.keys)
        elif isinstance(item, PartitionRewound):
            self.ledger.rewound(item.key, item.generation)
        return []

    def ack(self, *entries: Entry) -> None:
        for entry in entries:
            if entry.state is State.PENDING or entry.state is State.HELD:
                self.ledger.finish(entry)
        self.publish()

    def hold(self, *entries: Entry) -> None:
        for entry in entries:
            if entry.state is State.PENDING:
                self.ledger.hold(entry)
        self.publish()

    def reject(self, entry: Entry, rejections: dict[str, str]) -> None:
        entry.ledger.deliver(entry)

        def durable() -> None:
            if self.ledger.delivered(entry):
                self.publish()

        self.producer.dead_letter(entry.payload, rejections, durable)

    def publish(self) -> None:
        self.producer.publish(self.ledger.publish())

    async def ack_forever(self) -> None:
        """What a group of watchers that accept everything does (cancel to stop)."""
        while True:
            self.ack(*self._apply(await anext(self.stream)))


    async def run(self, decide: Callable[[Any], Outcome],
                  persisted: Callable[[Any], None],
                  handed: list[Any] | None = None,
                  after_batch: Callable[[], Awaitable[None]] | None = None) -> None:
        """Settle every record by ``decide(payload)``, for as long as the adapter reads;
        a held record is handed to ``decide`` again after its ``retry_after``."""
        loop = asyncio.get_running_loop()

        def settle(entry: Entry) -> None:
            payload = entry.payload
            if handed is not None:
                handed.append(payload)
            outcome = decide(payload)
            if outcome.persisted:
                persisted(payload.identity)
            if outcome.failed:
                self.ledger.hold(entry)
                loop.call_later(outcome.retry_after, redeliver, entry)
            elif outcome.rejected:
                self.reject(entry, outcome.rejected)
            else:
                self.ledger.finish(entry)

        def redeliver(entry: Entry) -> None:
            if self.ledger.release(entry):
                settle(entry)
                self.publish()

        while True:
            for entry in self._apply(await anext(self.stream)):
                settle(entry)
            self.publish()
            if after_batch is not None:
                await after_batch()
