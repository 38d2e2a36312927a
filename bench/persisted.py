"""The manager with the triggerer's persistence: the timed runs other parts build on.

One watcher set over a filled topic through the Kafka adapter and the triggerer's
``DatabaseWorkSink`` (``persisted``: events/s from the first submit to the last commit),
and end-to-end latency at a fixed offered rate (``latency``: produce timestamp to the
event's commit). Used by the full run (``bench/full_run.py``), the persistence figures
(``bench/persistence.py``) and the tracing cost (``bench/tracing_cost.py``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench import kafka_throughput as kt
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from sharedstream.core.batch import BatchWindow, MessageBatch
from sharedstream.core.holds import NOTHING, Taken
from sharedstream.core.message import KafkaMessage
from sharedstream.core.window import Window
from sharedstream.statestore import StateStore
from sharedstream.triggerer.config import ProcessSettings
from sharedstream.triggers.base import TriggerEvent
from sharedstream.uow.sink import DatabaseWorkSink
from sharedstream.uow.transaction import Queued


class KeepTrigger(kt.BenchTrigger):
    """Keeps every ``keep_every``-th message as one small event (the rest are filtered
    out and acked without a unit of work); records the produce timestamp in it."""

    keep_every = 1

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        keep = self.keep_every
        async for message in stream:
            if message.offset % keep == 0:
                yield TriggerEvent({"offset": message.offset, "ts": message.timestamp})


class KeepTenth(KeepTrigger):
    keep_every = 10


class KeepBatch(kt.BenchTrigger):
    """``KeepTrigger``'s events through the batch API: one ``filter_shared_batch`` call
    (one BatchWindow, one unit of work) per batch of up to 512 messages."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        emit = batch.emit
        for message in batch:
            emit(message, TriggerEvent({"offset": message.offset, "ts": message.timestamp}))



class Arrivals:
    """What a latency run's filter saw: for each message, the milliseconds from its produce
    timestamp to the filter holding it (the producer, the broker and the consumer's
    fetch: Kafka's share of the latency, before sharedstream's persistence starts)."""

    ms: list[float] = []

    @classmethod
    def record(cls, timestamp: int) -> None:
        cls.ms.append(time.time() * 1000 - timestamp)


class ArrivalKeep(KeepTrigger):
    """``KeepTrigger`` noting each message's arrival (latency runs only)."""

    async def filter_shared_stream(
        self, stream: AsyncIterator[KafkaMessage]
    ) -> AsyncIterator[TriggerEvent]:
        async for message in stream:
            Arrivals.record(message.timestamp)
            yield TriggerEvent({"offset": message.offset, "ts": message.timestamp})


class ArrivalKeepBatch(KeepBatch):
    """``KeepBatch`` noting each message's arrival (latency runs only)."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        for message in batch:
            Arrivals.record(message.timestamp)
            batch.emit(message, TriggerEvent({"offset": message.offset, "ts": message.timestamp}))


class TimedWorkSink(DatabaseWorkSink):
    """The triggerer's sink, noting its first submit (the start of a timed run) and, for
    every committed window, the time from the message's produce timestamp to the commit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.first = 0.0
        self.latencies_ms: list[float] = []
        self.transactions_ms: list[float] = []  # each _write, first attempt to commit
        self.committed = threading.Event()  # set by the writer thread

    def submit(self, windows: list[Window]) -> None:  # type: ignore[override]
        if not self.first:
            self.first = time.perf_counter()
        super().submit(windows)

    def _write(self, batch: list[Queued], taken: Taken = NOTHING) -> int:
        started = time.perf_counter()
        written = super()._write(batch, taken)  # returns after the commit
        self.transactions_ms.append((time.perf_counter() - started) * 1000)
        now_ms = time.time() * 1000
        for q in batch:
            window = q.window
            if isinstance(window, BatchWindow):
                self.latencies_ms += [now_ms - payload.timestamp for payload, _ in window.parts]
            else:
                self.latencies_ms.append(now_ms - window.payload.timestamp)
        self.committed.set()
        return written


def persisting_sink(url: str, watchers: int,
                    settings: ProcessSettings | None = None) -> tuple[StateStore, TimedWorkSink]:
    store = StateStore.from_url(url)
    store.upgrade()
    assets = {f"w{i}": store.register_asset(f"bench_w{i}") for i in range(watchers)}
    return store, TimedWorkSink(store, assets, settings or ProcessSettings())


async def persisted(bootstrap: str, topic: str, messages: int, url: str, watchers: int,
                    trigger: type[kt.BenchTrigger]) -> dict[str, Any]:
    store, sink = persisting_sink(url, watchers)
    try:
        rate = await kt.shared(bootstrap, topic, messages, watchers, sink=sink, trigger=trigger)
        await sink.aclose()
    finally:
        store.close()
    seconds = messages * watchers / rate
    figures = sink.figures
    return {"deliveries_per_s": round(rate), "events": figures.events_written,
            "events_per_s": round(figures.events_written / seconds), "batches": figures.batches}


def p99(ordered: list[float]) -> float:
    """The 99th percentile of ``ordered`` (sorted, not empty), rounded to 0.1."""
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1)


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave other guests while this one wanted them, summed
    over every CPU since boot (``steal`` in ``/proc/stat``): the part of a latency
    spike that is the host's, not ours."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


async def latency(bootstrap: str, url: str, rate: int, seconds: float,
                  settings: ProcessSettings | None = None,
                  trigger: type[kt.BenchTrigger] = ArrivalKeep) -> dict[str, Any]:
    """One watcher (``trigger``, one that notes ``Arrivals``) keeping everything,
    persisting to ``url``, fed at ``rate`` msg/s."""
    Arrivals.ms = []
    topic = f"bench-lat-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, kt.PARTITIONS, 1)])[topic].result(30)
    total = int(rate * seconds)
    store, sink = persisting_sink(url, 1, settings)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    producer.produce(topic, b"warm-up", partition=0)  # waits in the topic until assigned
    producer.flush(10)

    def offer() -> None:
        """Paced in 10 ms ticks, each on schedule from the start (no drift)."""
        started = time.perf_counter()
        ticks = int(seconds * 100)
        for tick in range(ticks):
            for _ in range(total * (tick + 1) // ticks - total * tick // ticks):
                producer.produce(topic, b"x" * kt.SIZE)
            producer.poll(0)
            time.sleep(max(0.0, started + (tick + 1) / 100 - time.perf_counter()))
        producer.flush(30)

    async def start_offering() -> None:
        # The warm-up committed: the group is assigned and the path is warm.
        await asyncio.to_thread(sink.committed.wait, 120)
        await asyncio.to_thread(offer)

    feeder = asyncio.create_task(start_offering())
    stolen = steal_seconds()
    try:
        await kt.shared(bootstrap, topic, total + 1, 1, sink=sink, trigger=trigger)
        await feeder
        await sink.aclose()
    finally:
        store.close()
    stolen = steal_seconds() - stolen
    samples = sorted(sink.latencies_ms[1:])
    transactions = sorted(sink.transactions_ms[1:])
    return {"offered_per_s": rate, "seconds": seconds, "messages": len(samples),
            "arrival_p99_ms": p99(sorted(Arrivals.ms[1:])), "steal_s": round(stolen, 2),
            "transactions": len(transactions),
            "slowest_transaction_ms": round(transactions[-1], 1),
            "p50_ms": round(samples[len(samples) // 2], 1),
            "p99_ms": p99(samples),
            "max_ms": round(samples[-1], 1), "samples_ms": samples}
