"""Manager overhead: microseconds of Python per message (and per watcher) without a broker.

The in-memory adapter hands pre-built batches (as the Kafka adapter would after
``consume()``), honouring pauses; watchers run the full path through ``run_watcher``:
ledger admission, fan-out, stream, filter, event binding, window hand-off to a sink
that confirms at once, settlement in the ledger and commit targets. Nothing is
persisted. Each shape runs through both watcher APIs: ``filter_shared_stream`` (an
async generator, one step per message) and ``filter_shared_batch`` (one call and one
acknowledgement per batch, issue 27). Run:

    python bench/manager_overhead.py [--messages N] [--json out.json]
    python bench/manager_overhead.py --routed 10000 --messages 300000   # routed watchers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from typing import Any

from sharedstream.core.batch import MessageBatch
from sharedstream.core.contract import PartitionsStarted, Records
from sharedstream.core.ledger import Ledger
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.core.window import Window
from sharedstream.testing.memorystream import LocalRecord, MemoryStream
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent

BATCH = 500
PARTITIONS = 8


def build_batches(total: int) -> list[list[tuple[KafkaMessage, LocalRecord]]]:
    """``total`` messages in batches of ``BATCH``, round robin over ``PARTITIONS``."""
    return [[(KafkaMessage("t", i % PARTITIONS, i, 0, None, b"x"),
              LocalRecord(str(i % PARTITIONS), i // PARTITIONS))
             for i in range(start, min(start + BATCH, total))]
            for start in range(0, total, BATCH)]


class BenchStream(MemoryStream):
    """Feeds ``total`` messages in batches while not paused, one batch per loop turn."""

    def __init__(self, total: int,
                 batches: list[list[tuple[KafkaMessage, LocalRecord]]] | None = None) -> None:
        super().__init__()
        self._resumed = asyncio.Event()
        self._resumed.set()
        # Built before the clock starts (``run_once``): message construction is the
        # adapter's cost, not the manager's.
        self._batches = batches if batches is not None else build_batches(total)
        self._feeder: asyncio.Task[None] | None = None

    async def _feed(self) -> None:
        self._items.put_nowait(PartitionsStarted(0, tuple(
            (str(p), 0, None, frozenset()) for p in range(PARTITIONS))))
        for batch in self._batches:
            await self._resumed.wait()
            self._items.put_nowait(Records(batch))  # no log kept: nothing is rewound here
            await asyncio.sleep(0)

    def open_stream(self, ledger: Ledger) -> AsyncIterator[Any]:
        self._feeder = asyncio.get_running_loop().create_task(self._feed())
        return super().open_stream(ledger)

    def pause(self) -> None:
        super().pause()
        self._resumed.clear()

    def resume(self) -> None:
        super().resume()
        self._resumed.set()

    def size(self, raw: Any) -> int:
        return len(raw.value or b"")


class BenchTrigger(BaseEventTrigger):
    producers: list[BenchStream] = []
    total = 0
    batches: list[list[tuple[KafkaMessage, LocalRecord]]] | None = None

    def __init__(self, events: bool) -> None:
        self.events = events

    def shared_stream_key(self) -> Hashable:
        return "bench"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "bench.BenchTrigger", {}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> BenchStream:
        producer = BenchStream(cls.total, cls.batches)
        cls.producers.append(producer)
        return producer

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            if self.events:
                yield TriggerEvent(message.offset)


class BatchBenchTrigger(BenchTrigger):
    """The same work through ``filter_shared_batch``."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        if self.events:
            for message in batch:
                batch.emit(message, TriggerEvent(message.offset))


class ConfirmingSink:
    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            window.confirm()


async def run_once(watchers: int, messages: int, events: bool, batch: bool = False) -> float:
    BenchTrigger.total = messages
    BenchTrigger.producers.clear()
    BenchTrigger.batches = build_batches(messages)  # before the clock starts
    kind = BatchBenchTrigger if batch else BenchTrigger
    try:
        return await timed_run(watchers, messages, lambda: kind(events))
    finally:
        BenchTrigger.batches = None


async def timed_run(watchers: int, messages: int,
                    trigger: Callable[[], BaseEventTrigger]) -> float:
    """Seconds until ``watchers`` watchers, each a fresh ``trigger()`` on the group
    "bench", have settled ``messages`` messages (start-up and stop not counted)."""
    manager = SharedStreamManager(ConfirmingSink(), ManagerSettings(cohort_grace_period=0))
    names = [f"w{i}" for i in range(watchers)]
    manager.declare_cohort("bench", names)
    start = time.perf_counter()
    tasks = [asyncio.create_task(manager.run_watcher(n, trigger())) for n in names]
    await asyncio.sleep(0)
    counters = manager._groups["bench"].counters
    # Polled (0.5 ms): the group has no end-of-run event, and a hook on the hot path
    # would cost more than the poll.
    while counters.settled < messages:  # noqa: ASYNC110
        await asyncio.sleep(0.0005)
    elapsed = time.perf_counter() - start
    await manager.stop_all()
    await asyncio.gather(*tasks)
    return elapsed


class RoutedTrigger(BatchBenchTrigger):
    """A batch watcher wanting the messages keyed ``key`` (its ``match``), parsing each."""

    def __init__(self, key: str) -> None:
        super().__init__(False)
        self.match = {"key": [key]}

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            json.loads(message.value)


async def routed_run(watchers: int, messages: int) -> float:
    """CPU µs per message with ``watchers`` routed batch watchers, each wanting the
    messages of its own key (1/``watchers`` of them: about one message a call at
    10,000), timed after the first fifth settled (registration and warm-up left out)."""
    value = json.dumps({"id": 1, "status": "open", "amount": 0.25}).encode()
    BenchTrigger.total = messages
    BenchTrigger.producers.clear()
    BenchTrigger.batches = [
        [(KafkaMessage("t", i % PARTITIONS, i, 0, str(i % watchers).encode(), value),
          LocalRecord(str(i % PARTITIONS), i // PARTITIONS))
         for i in range(start, min(start + 1000, messages))]
        for start in range(0, messages, 1000)]
    manager = SharedStreamManager(ConfirmingSink(), ManagerSettings(cohort_grace_period=0))
    triggers = {f"w{i}": RoutedTrigger(str(i)) for i in range(watchers)}
    manager.declare_cohort("bench", list(triggers),
                           matches={name: t.match for name, t in triggers.items()})
    tasks = [asyncio.create_task(manager.run_watcher(name, t)) for name, t in triggers.items()]
    try:
        while "bench" not in manager._groups:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        counters = manager._groups["bench"].counters
        while counters.settled < messages // 5:  # noqa: ASYNC110
            await asyncio.sleep(0.0005)
        first, cpu = counters.settled, time.process_time()
        while counters.settled < messages:  # noqa: ASYNC110
            await asyncio.sleep(0.0005)
        return (time.process_time() - cpu) / (messages - first) * 1e6
    finally:
        BenchTrigger.batches = None
        await manager.stop_all()
        await asyncio.gather(*tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--routed", type=int, metavar="N",
                        help="only N routed batch watchers, one key each (CPU µs per message)")
    args = parser.parse_args()
    tune_gc()  # as `sharedstream run` does once start-up is over
    if args.routed:
        runs = sorted(asyncio.run(routed_run(args.routed, args.messages)) for _ in range(3))
        print(f"routed watchers={args.routed} {runs[1]:.2f} µs CPU per message (median of 3)")
        return
    results = []
    for watchers in (1, 10, 100):
        messages = max(2_000, args.messages // watchers)
        for api, events in (("stream", False), ("stream", True), ("batch", False),
                            ("batch", True)):
            best = min(asyncio.run(run_once(watchers, messages, events, api == "batch"))
                       for _ in range(3))
            per_msg = best / messages * 1e6
            row = {"watchers": watchers, "api": api, "events": events, "messages": messages,
                   "us_per_message": round(per_msg, 3),
                   "us_per_message_per_watcher": round(per_msg / watchers, 3),
                   "messages_per_second": round(messages / best)}
            results.append(row)
            print(f"watchers={watchers:>3} api={api:<6} events={events!s:<5} {per_msg:8.2f} us/msg "
                  f"{per_msg / watchers:6.2f} us/msg/watcher {messages / best:>10.0f} msg/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
