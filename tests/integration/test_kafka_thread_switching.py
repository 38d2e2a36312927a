"""The Kafka adapter under heavy thread switching, on the real broker (issue 26).

Everything that crosses between the event loop and the consumer thread goes through
the hand-off object (kafka/handoff.py). With ``sys.setswitchinterval(1e-6)`` the
interpreter switches threads about every bytecode, so a field read on one thread while
the other writes it would show here: two members share a four-partition topic (a
rebalance when the second joins and again when it leaves), partitions pause at their
``max_in_flight`` bound behind held messages, the group pauses and resumes, the loop
lags behind the thread (one batch queued), and every 37th message is dead-lettered.
After every event each member's ledger is checked against its invariants, and every
published target against what is still open; at the end everything is committed, every
offset was handed out, and every rejected offset is in the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka_members import conn

from kafka_writes import ordered_producer
from ledger_driver import ACK, Driver, Outcome
from sharedstream.core.backpressure import PauseReason
from sharedstream.core.ledger import Entry, Key, State
from sharedstream.kafka.consumer import KafkaSharedConsumer
from sharedstream.kafka.handoff import ConsumerState
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.kafka.progress import decode_progress
from sharedstream.kafka.rejections import InMemoryRejectionRecorder

pytestmark = pytest.mark.integration

PARTITIONS, MESSAGES, BOUND, BATCH = 4, 2000, 40, 50
OPEN = (State.PENDING, State.HELD, State.DELIVERING)


@pytest.fixture
def switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


class CheckedDriver(Driver):
    """A driver that checks the ledger's invariants after every event it applies."""

    def __init__(self, producer: KafkaSharedConsumer) -> None:
        super().__init__(producer, max_in_flight=BOUND)
        self.violations: list[str] = []
        self.handed: set[tuple[str, int, int]] = set()
        self._last: dict[tuple[Key, int], int] = {}

    def _apply(self, item: object) -> list[Entry]:
        entries = super()._apply(item)
        for entry in entries:
            ledger = entry.ledger
            where = (ledger.key, ledger.generation)
            if entry.offset <= self._last.get(where, -1):  # handed twice in one generation
                self.violations.append(f"{where}: {entry.offset} after {self._last[where]}")
            self._last[where] = entry.offset
            self.handed.add((*ledger.key, entry.offset))
        self.check()
        return entries

    def check(self) -> None:
        for key, ledger in self.ledger.partitions.items():
            first_open = next((o for o, e in ledger.entries.items() if e.state in OPEN), None)
            if ledger.base is not None and first_open is not None and ledger.base > first_open:
                self.violations.append(f"{key}: floor {ledger.base} above open {first_open}")
            held = sum(e.state is State.HELD for e in ledger.entries.values())
            if held != ledger.held_count:
                self.violations.append(f"{key}: {held} held, counted {ledger.held_count}")
            # The bound counts what no watcher handles (resolved or held); admission stops
            # once it is reached, so at most one batch admitted below it resolves past it.
            kept = sum(e.state is not State.PENDING for e in ledger.entries.values())
            if kept != ledger.kept:
                self.violations.append(f"{key}: {kept} kept, counted {ledger.kept}")
            if kept > BOUND + BATCH:
                self.violations.append(f"{key}: {kept} kept above the floor")

    def publish(self) -> None:
        targets = self.ledger.publish()
        for key, (_, offset, above) in targets.items():
            ledger = self.ledger.partitions[key]
            first_open = next((o for o, e in ledger.entries.items() if e.state in OPEN), None)
            if first_open is not None and offset > first_open:
                self.violations.append(f"{key}: target {offset} past open {first_open}")
            if any(ledger.entries[o].state in OPEN for o in above if o in ledger.entries):
                self.violations.append(f"{key}: an open offset carried as terminal")
        self.producer.publish(targets)


def member(bootstrap: str, group: str, topic: str, dlq: str) -> tuple[KafkaSharedConsumer,
                                                                     CheckedDriver,
                                                                     asyncio.Task[None]]:
    producer = KafkaSharedConsumer(
        topics=[topic], config=conn(bootstrap, group), recorder=InMemoryRejectionRecorder(),
        dlq_topic=dlq, batch_size=BATCH, commit_interval=0.02, max_backlog=BATCH,
        pause_after=0.02, revoke_timeout=5.0)
    driver = CheckedDriver(producer)
    held_once: set[tuple[str, int, int]] = set()

    def decide(p: KafkaPayload) -> Outcome:
        where = (p.topic, p.partition, p.offset)
        if p.offset % 37 == 5:
            return Outcome(rejected={"w": "bad"})
        if p.offset % 53 == 7 and where not in held_once:
            held_once.add(where)  # held once: its partition reaches its bound behind it
            return Outcome(failed=True, retry_after=0.3)
        return ACK

    task = asyncio.create_task(driver.run(decide, lambda identity: None))
    return producer, driver, task


def ends(bootstrap: str, topic: str) -> list[int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)]
    finally:
        probe.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[TopicPartition]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found: list[TopicPartition] = probe.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return found
    finally:
        probe.close()


def dead_lettered(bootstrap: str, dlq: str, at_least: int) -> set[bytes]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                       "auto.offset.reset": "earliest"})
    reader.subscribe([dlq])
    values: set[bytes] = set()
    try:
        for _ in range(60):
            values.update(m.value() or b"" for m in reader.consume(500, 0.5) if m.error() is None)
            if len(values) >= at_least:
                break
    finally:
        reader.close()
    return values


async def until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


async def test_pauses_rebalances_and_dead_letters_keep_the_ledger_invariants(
    kafka_bootstrap: str, create_topic: Callable[..., str], switching: None
) -> None:
    topic = create_topic("orders", partitions=PARTITIONS)
    dlq = create_topic("orders-dlq")
    source = ordered_producer(kafka_bootstrap)
    for i in range(MESSAGES):
        source.produce(topic, f"m{i}".encode(), partition=i % PARTITIONS)
    assert source.flush(30) == 0
    group = f"sw-{uuid.uuid4().hex[:6]}"
    first, first_driver, first_task = member(kafka_bootstrap, group, topic, dlq)
    await until(lambda: len(first_driver.handed) >= MESSAGES // 4, "first member reads")
    seen: set[PauseReason] = set()

    async def sample() -> None:  # why partitions were paused, as /status would say
        while True:
            for adapter in (first, second):
                seen.update(adapter.paused_partitions().values())
            await asyncio.sleep(0.005)

    first.pause()  # the group's pause, held past pause_after: the assignment pauses
    await until(lambda: PauseReason.GROUP in set(first.paused_partitions().values()),
                "the group's pause lands")
    first.resume()
    second, second_driver, second_task = member(kafka_bootstrap, group, topic, dlq)
    sampler = asyncio.create_task(sample())
    await until(lambda: second.health().assigned_partitions > 0, "the rebalance")
    await until(lambda: len(first_driver.handed | second_driver.handed) >= MESSAGES * 3 // 4,
                "both read")
    second_task.cancel()
    await asyncio.gather(second_task, return_exceptions=True)
    await second.aclose()  # leaves: its partitions move back to the first member
    await until(lambda: first.health().assigned_partitions == PARTITIONS, "the rebalance back")
    group_name = first.consumer_group
    end = ends(kafka_bootstrap, topic)

    def all_committed() -> bool:
        found = committed_offsets(kafka_bootstrap, group_name, topic)
        return [tp.offset for tp in found] == end and all(
            not decode_progress(tp.offset, tp.metadata) for tp in found)

    await until(all_committed, "everything committed", within=90)
    first_task.cancel()
    sampler.cancel()
    await asyncio.gather(first_task, sampler, return_exceptions=True)
    await first.aclose()

    assert first_driver.violations == [] and second_driver.violations == []
    assert PauseReason.PARTITION_BOUND in seen  # a held message stopped its partition
    handed = first_driver.handed | second_driver.handed
    assert handed == {(topic, i % PARTITIONS, i // PARTITIONS) for i in range(MESSAGES)}
    rejected = {f"m{i}".encode() for i in range(MESSAGES) if (i // PARTITIONS) % 37 == 5}
    assert rejected <= dead_lettered(kafka_bootstrap, dlq, len(rejected))
    assert first.counters().dead_letters + second.counters().dead_letters >= len(rejected)
    assert first.state is ConsumerState.CLOSED and second.state is ConsumerState.CLOSED
    assert first.health().failed is None and second.health().failed is None
