"""Memory per message, by slope: the real manager and Kafka adapter on the in-memory broker.

The soak (tests/faults/test_soak.py) judges RSS of a real process, which moves by MiB
with arenas and collections, so it resolves only large leaks in the 30 s CI run. This
test resolves small ones in seconds: ``tracemalloc`` counts the bytes Python holds, and
the slope of that against messages handled (Theil-Sen, robust to one odd sample) says
how much each message leaves behind (contributing rule 9: memory by slope, not by
snapshot).

What is measured: everything allocated by the product while 25k messages go through
``KafkaSharedStreamProducer`` -> ``SharedStreamManager`` -> two watchers -> a sink that
confirms at once and keeps nothing, with commits, a rejection per 500 messages (to the
dead-letter topic) and an event per 100. Left out: what the in-memory broker and this
test keep on purpose (the log of every record produced, dead letters delivered).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import tracemalloc
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from memory_adapter import memory_producer
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.core.window import Window
from sharedstream.kafka.memory import MemoryBroker
from sharedstream.triggers.base import TriggerEvent
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger, reject_shared_stream_event

TOPIC, DLQ, GROUP_ID = "orders", "orders.dlq", "slope"
PARTITIONS = 3
# Messages between samples. Halved from 5,000 with the same verdicts: without a leak
# 0.7, 4.0 and -0.4 bytes per message in three runs (5,000: 4.7, 4.2, 1.4), with a
# planted 64-byte one per record 76.9 (the limit is 16).
CHUNK = 2_500
CHUNKS = 10  # the first 3 are warm-up (caches, bounded histories, arenas of the ledger)
WARM_UP = 3
# A per-message leak of one small object is ~50 bytes or more (a planted 64-byte one reads
# ~75); on main the figure stays within a few bytes of 0 (objects alive at the sample).
MAX_BYTES_PER_MESSAGE = 16.0
# Allocated by the in-memory broker (its log keeps every record) and by this test.
KEPT_ON_PURPOSE = ("*/sharedstream/kafka/memory.py", __file__, tracemalloc.__file__)


class DiscardingSink:
    """Confirms every window at once and keeps nothing of it."""

    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            window.confirm()


class Counting(KafkaSharedStreamTrigger):
    """Keeps 1 message in 100 as an event, rejects 1 in 500; counts what it handled."""

    broker: MemoryBroker
    handled = 0

    def __init__(self) -> None:
        super().__init__(topics=[TOPIC], kafka_config_id="memory", poll_timeout=0.01,
                         dlq_topic=DLQ)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> Any:
        return memory_producer(cls.broker, kwargs, GROUP_ID)

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            Counting.handled += 1
            if message.offset % 500 == 7:
                reject_shared_stream_event("one in 500")
            elif message.offset % 100 == 0:
                yield TriggerEvent(message.offset)


def theil_sen_slope(samples: list[tuple[int, int]]) -> float:
    """The median of the pairwise slopes: one sample taken while a batch happened to be
    alive (a few hundred KiB) does not tilt it, as it tilts a least-squares fit."""
    return statistics.median((b[1] - a[1]) / (b[0] - a[0])
                             for i, a in enumerate(samples) for b in samples[i + 1:])


def held_bytes() -> int:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, pattern) for pattern in KEPT_ON_PURPOSE])
    return sum(stat.size for stat in snapshot.statistics("filename"))


def committed_to_end(broker: MemoryBroker) -> bool:
    committed = broker.committed(f"{GROUP_ID}.{TOPIC}")
    return all(committed.get((TOPIC, p), (-1, ""))[0] == len(broker.records(TOPIC, p))
               for p in range(PARTITIONS))


async def until_committed(broker: MemoryBroker, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not committed_to_end(broker):
        assert loop.time() < deadline, "the commits did not reach the end of the log"
        await asyncio.sleep(0.01)


async def test_a_handled_message_leaves_no_memory_behind() -> None:
    broker = Counting.broker = MemoryBroker({TOPIC: PARTITIONS, DLQ: 1})
    Counting.handled = 0
    manager = SharedStreamManager(DiscardingSink(), ManagerSettings(max_in_flight=2_000))
    triggers = {"keeper": Counting(), "audit": Counting()}
    manager.declare_cohort(triggers["keeper"].shared_stream_key(), triggers)
    tasks = [asyncio.create_task(manager.run_watcher(w, t)) for w, t in triggers.items()]
    value = b'{"status": "paid", "amount": 12}'
    samples: list[tuple[int, int]] = []
    tracemalloc.start()
    try:
        for chunk in range(CHUNKS):
            for n in range(CHUNK):
                broker.produce(TOPIC, value, partition=n % PARTITIONS)
            await until_committed(broker)
            gc.collect()
            if chunk >= WARM_UP:
                samples.append(((chunk + 1) * CHUNK, held_bytes()))
    finally:
        tracemalloc.stop()
        await manager.stop_all()
        await asyncio.gather(*tasks)
    # Every message went through both watchers: the figure is per message handled.
    assert Counting.handled >= 2 * CHUNKS * CHUNK
    rejected = sum(len(range(7, len(broker.records(TOPIC, p)), 500)) for p in range(PARTITIONS))
    assert len([r for r in broker.delivered if r["topic"] == DLQ]) == rejected
    slope = theil_sen_slope(samples)
    assert slope <= MAX_BYTES_PER_MESSAGE, (
        f"{slope:.1f} bytes per message stay behind (held: {samples})")
