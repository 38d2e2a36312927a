"""Manager overhead: microseconds of Python per message (and per watcher) without a broker.

An in-memory producer hands pre-built batches (as a Kafka producer would after
``consume()``), watchers run the full path through ``run_watcher``: stream,
filter, event binding, window hand-off to a sink that confirms at once, lane
prefix batching and ``advance``. Nothing is persisted. Run:

    python bench/manager_overhead.py [--messages N] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Hashable, Mapping, Sequence
from typing import Any

from sharedstream.producer.contract import AdvanceItem, SharedStreamProducer, StreamItem
from sharedstream.triggerer.gctune import tune_gc
from sharedstream.triggerer.manager import SharedStreamManager
from sharedstream.triggerer.streamconfig import ManagerSettings
from sharedstream.triggerer.window import Window
from sharedstream.triggers.base import BaseEventTrigger, TriggerEvent
from sharedstream.triggers.message import KafkaMessage

BATCH = 500
PARTITIONS = 8


class MemoryProducer(SharedStreamProducer[tuple[int, int]]):
    """Yields ``total`` messages in batches, honouring pause; counts advanced messages."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.advanced = 0
        self.done = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()
        # Built up front: message construction is the producer's cost, not the manager's.
        self._batches = [
            [(KafkaMessage("t", i % PARTITIONS, i, 0, None, b"x"), (i % PARTITIONS, i))
             for i in range(start, min(start + BATCH, total))]
            for start in range(0, total, BATCH)]

    async def open_stream(self) -> AsyncIterator[StreamItem[tuple[int, int]]]:
        for batch in self._batches:
            await self._resumed.wait()
            yield batch
            await asyncio.sleep(0)
        await asyncio.Event().wait()  # a producer streams for the group's life

    async def advance(self, batch: Sequence[AdvanceItem[tuple[int, int]]]) -> None:
        self.advanced += len(batch)
        if self.advanced >= self.total:
            self.done.set()

    def get_advance_lane(self, payload: tuple[int, int]) -> Hashable:
        return payload[0]

    def message_identity(self, payload: tuple[int, int]) -> Hashable:
        return payload

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    async def aclose(self) -> None:
        return None


class BenchTrigger(BaseEventTrigger):
    producers: list[MemoryProducer] = []
    total = 0

    def __init__(self, events: bool) -> None:
        self.events = events

    def shared_stream_key(self) -> Hashable:
        return "bench"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return "bench.BenchTrigger", {}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> MemoryProducer:
        producer = MemoryProducer(cls.total)
        cls.producers.append(producer)
        return producer

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            if self.events:
                yield TriggerEvent(message.offset)


class ConfirmingSink:
    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            window.confirm()


async def run_once(watchers: int, messages: int, events: bool) -> float:
    BenchTrigger.total = messages
    manager = SharedStreamManager(ConfirmingSink(), ManagerSettings(cohort_grace_period=0))
    names = [f"w{i}" for i in range(watchers)]
    manager.declare_cohort("bench", names)
    BenchTrigger.producers.clear()
    start = time.perf_counter()
    tasks = [asyncio.create_task(manager.run_watcher(n, BenchTrigger(events))) for n in names]
    await asyncio.sleep(0)
    await BenchTrigger.producers[-1].done.wait()
    elapsed = time.perf_counter() - start
    await manager.stop_all()
    await asyncio.gather(*tasks)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    tune_gc()  # as `sharedstream run` does once start-up is over
    results = []
    for watchers in (1, 10, 100):
        messages = max(2_000, args.messages // watchers)
        for events in (False, True):
            best = min(asyncio.run(run_once(watchers, messages, events)) for _ in range(3))
            per_msg = best / messages * 1e6
            row = {"watchers": watchers, "events": events, "messages": messages,
                   "us_per_message": round(per_msg, 3),
                   "us_per_message_per_watcher": round(per_msg / watchers, 3),
                   "messages_per_second": round(messages / best)}
            results.append(row)
            print(f"watchers={watchers:>3} events={events!s:<5} {per_msg:8.2f} us/msg "
                  f"{per_msg / watchers:6.2f} us/msg/watcher {messages / best:>10.0f} msg/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
