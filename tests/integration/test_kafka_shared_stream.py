"""KafkaSharedStreamProducer against the real broker: commits, DLQ, holds, restarts, rebalances.

The manager is not involved here: ``kafka_members.drive`` plays its part (fan-out
outcome per message, advance per lane), so each test pins one producer behaviour.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_members import ack_all, conn

from kafka_probe import committed_partitions
from kafka_writes import ordered_producer, session_producer
from ledger_driver import ACK, Driver, Outcome
from sharedstream.core.backpressure import PauseReason
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.connections import ConnectionConfigError, resolve_connection
from sharedstream.kafka.payload import KafkaPayload
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.progress import decode_progress
from sharedstream.kafka.rejections import InMemoryRejectionRecorder

MEMBER = Path(__file__).with_name("kafka_members.py")
Identity = tuple[str, int, int]


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1,
            producer: Producer | None = None) -> None:
    """``count`` messages ``m<i>`` round-robin over ``partitions``. Through the session's
    producer to the broker (called in rounds: no producer id to wait for each time); pass
    ``producer`` for a broker of a test's own, which stops before the session ends."""
    p = producer or session_producer(bootstrap)
    for i in range(count):
        p.produce(topic, f"m{i}".encode(), partition=i % partitions, headers=[("trace", b"t")])
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[TopicPartition]:
    return committed_partitions(bootstrap, group, topic, partitions)


async def until(check: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.05)


async def until_committed(bootstrap: str, group: str, topic: str, offset: int) -> TopicPartition:
    found: list[TopicPartition] = []

    def check() -> bool:
        found[:] = committed(bootstrap, group, topic)
        return found[0].offset == offset

    await until(check)
    return found[0]


def spawn_member(bootstrap: str, group: str, topic: str, fail_offset: int) -> subprocess.Popen[str]:
    """A member in its own process (see ``kafka_members``), so it can be SIGKILLed."""
    return subprocess.Popen(
        [sys.executable, str(MEMBER), bootstrap, group, topic, str(fail_offset)],
        stdout=subprocess.PIPE,
        text=True,
    )


class Member:
    """One in-process producer driven by ``drive`` in a task."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str],
        decide: Any = ack_all,
        persisted: Callable[[Identity], None] | None = None,
        **kw: Any,
    ) -> None:
        self.producer = KafkaSharedStreamProducer(
            topics=topics, config=conn(bootstrap, group), recorder=InMemoryRejectionRecorder(), **kw
        )
        self.handed: list[KafkaPayload] = []
        self.events: set[Identity] = set()
        self.driver = Driver(self.producer)
        self.task = asyncio.create_task(
            self.driver.run(decide, persisted or self.events.add, self.handed)
        )

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.producer.aclose()


def fail_offsets(*offsets: int, retry_after: float = 3600) -> Callable[[KafkaPayload], Any]:
    """Offsets failed by w2 on their first delivery only, acked by both afterwards."""
    seen: set[int] = set()

    def decide(p: KafkaPayload) -> Outcome:
        if p.offset in offsets and p.offset not in seen:
            seen.add(p.offset)
            return Outcome(failed=True, retry_after=retry_after)
        return ACK

    return decide


async def test_rejected_goes_to_dlq_with_every_header_then_is_committed_past(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic, dlq = create_topic("orders"), create_topic("orders-dlq")
    produce(kafka_bootstrap, topic, 3)
    group = f"it-{uuid.uuid4().hex[:6]}"

    def decide(p: KafkaPayload) -> Outcome:
        if p.offset == 1:
            return Outcome(rejected={"w2": "bad amount"})  # w1 persisted its event
        return ACK

    member = Member(kafka_bootstrap, group, [topic], decide, dlq_topic=dlq)
    tp = await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, 3)
    assert tp.metadata in ("", None)
    reader = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
        }
    )
    reader.assign([TopicPartition(dlq, 0, 0)])
    records: list[Any] = []
    deadline = time.monotonic() + 30
    while not records and time.monotonic() < deadline:
        records = [m for m in reader.consume(10, 1.0) if m.error() is None]
    reader.close()
    await member.close()
    [record] = records
    headers: dict[str, Any] = dict(record.headers() or [])
    topic_id = member.handed[0].origin.topic_id
    assert len(topic_id) > 10 and record.value() == b"m1"
    assert record.timestamp()[1] == member.handed[1].message.timestamp
    assert headers["trace"] == b"t"
    assert headers[h.ORIGINAL_TOPIC] == topic.encode()
    assert headers[h.ORIGINAL_TOPIC_ID] == topic_id.encode()
    assert headers[h.ORIGINAL_PARTITION] == b"0" and headers[h.ORIGINAL_OFFSET] == b"1"
    assert headers[h.ORIGINAL_TIMESTAMP] == str(member.handed[1].message.timestamp).encode()
    assert headers[h.CONSUMER_GROUP] == f"{group}.{topic}".encode()
    assert json.loads(headers[h.REJECTIONS]) == {"w2": "bad amount"}
    assert headers[h.IDENTITY] == f"{topic_id}:0:1".encode()
    assert headers[h.REPLAY_COUNT] == b"0"


async def test_failed_is_redelivered_without_restart_and_committed_after_its_ack(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 4)
    group = f"it-{uuid.uuid4().hex[:6]}"
    member = Member(kafka_bootstrap, group, [topic], fail_offsets(1, retry_after=2.0))
    tp = await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, 1)
    assert decode_progress(1, tp.metadata) == {2, 3}  # accepted by the real broker
    await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, 4)
    assert [p.offset for p in member.handed] == [0, 1, 2, 3, 1]
    await member.close()


async def test_earliest_held_offset_wins(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 5)
    group = f"it-{uuid.uuid4().hex[:6]}"
    member = Member(kafka_bootstrap, group, [topic], fail_offsets(1, 3, retry_after=3600))
    await until(lambda: len(member.handed) == 5)
    entries = member.driver.ledger.partitions[(topic, 0)].entries
    # Release the later hold first: the commit must stay at the earlier one.
    member.driver.ack(entries[3])
    await member.producer.commit()
    tp = committed(kafka_bootstrap, f"{group}.{topic}", topic)[0]
    assert tp.offset == 1 and decode_progress(1, tp.metadata) == {2, 3, 4}
    member.driver.ack(entries[1])
    await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, 5)
    await member.close()


def test_auto_commit_connection_is_refused(kafka_bootstrap: str) -> None:
    with pytest.raises(ConnectionConfigError, match="'live'"):
        resolve_connection(
            "live", {"live": {"bootstrap.servers": kafka_bootstrap, "enable.auto.commit": "true"}}
        )


async def test_two_topic_sets_on_one_connection_do_not_split_partitions(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    a, b = create_topic("a", partitions=3), create_topic("b")
    produce(kafka_bootstrap, a, 9, partitions=3)
    group = f"it-{uuid.uuid4().hex[:6]}"
    only_a = Member(kafka_bootstrap, group, [a])
    both = Member(kafka_bootstrap, group, [b, a])
    assert only_a.producer.consumer_group != both.producer.consumer_group
    await until(lambda: len(only_a.events) == 9 and len(both.events) == 9)
    await only_a.close()
    await both.close()


async def test_restart_after_kill_hands_out_only_the_held_offset(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 6)
    group = f"it-{uuid.uuid4().hex[:6]}"
    child = spawn_member(kafka_bootstrap, group, topic, 2)
    try:
        persisted = 0
        assert child.stdout is not None
        while persisted < 5:
            line = child.stdout.readline()
            assert line, "member exited early"
            persisted += not line.startswith("COMMITTED")
        while not child.stdout.readline().startswith("COMMITTED"):
            pass
    finally:
        child.kill()  # SIGKILL: no revoke, no final commit, no leave-group
        child.wait()
    tp = committed(kafka_bootstrap, f"{group}.{topic}", topic)[0]
    assert tp.offset == 2 and decode_progress(2, tp.metadata) == {3, 4, 5}
    member = Member(kafka_bootstrap, group, [topic])
    await until(lambda: len(member.handed) == 1)
    produce(kafka_bootstrap, topic, 1)
    await until(lambda: len(member.handed) == 2)
    assert [p.offset for p in member.handed] == [2, 6]
    await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, 7)
    await member.close()


@pytest.mark.parametrize("leave", ["graceful", "killed"])
async def test_rebalance_with_traffic_hands_out_again_only_what_was_unfinished(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    leave: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guarantee 7 across rebalances, counted in hand-outs (not collected into a set).

    Every record settles as it is handed out here, so at a revocation everything handed
    out is finished: a graceful rebalance hands nothing out twice. A killed member
    commits after every batch; what it finished after its last commit is all that may
    be handed out again."""
    caplog.set_level(logging.WARNING, logger="sharedstream")
    topic = create_topic("orders", partitions=6)
    group = f"it-{uuid.uuid4().hex[:6]}"
    handouts: Counter[Identity] = Counter()  # every hand-out to a member, by identity
    uncommitted: set[Identity] = set()  # what the killed member finished after its last commit
    total = 0

    async def traffic(rounds: int) -> None:
        nonlocal total
        for _ in range(rounds):
            await asyncio.to_thread(produce, kafka_bootstrap, topic, 60, 6)
            total += 60
            await asyncio.sleep(0.1)

    def handed(identity: Identity) -> None:
        handouts[identity] += 1

    first = Member(kafka_bootstrap, group, [topic], persisted=handed)
    await traffic(5)
    child: subprocess.Popen[str] | None = None
    second: Member | None = None
    if leave == "graceful":
        second = Member(kafka_bootstrap, group, [topic], persisted=handed)
        await until(lambda: second.producer.health().assigned_partitions > 0)
        await traffic(10)
        await second.close()
    else:
        child = spawn_member(kafka_bootstrap, group, topic, -1)
        assert child.stdout is not None
        stdout = child.stdout

        def read_child() -> None:
            for line in stdout:
                if line.startswith("COMMITTED"):
                    uncommitted.clear()
                else:
                    identity = tuple(json.loads(line))
                    handed(identity)
                    uncommitted.add(identity)

        reader = asyncio.create_task(asyncio.to_thread(read_child))
        await until(lambda: first.producer.health().assigned_partitions < 6)
        await traffic(10)
        child.kill()
        await reader
    await traffic(5)
    await until(lambda: first.producer.health().assigned_partitions == 6)
    await until(lambda: len(handouts) == total)
    await until(
        lambda: (
            sum(tp.offset for tp in committed(kafka_bootstrap, f"{group}.{topic}", topic, 6))
            == total
        )
    )
    await first.close()
    by_partition: dict[int, set[int]] = {}
    for _tid, partition, offset in handouts:
        by_partition.setdefault(partition, set()).add(offset)
    assert sum(len(v) for v in by_partition.values()) == total
    assert all(v == set(range(len(v))) for v in by_partition.values())
    again = {identity for identity, n in handouts.items() if n > 1}
    assert max(handouts.values()) <= 2
    if leave == "graceful":
        assert again == set()
    else:
        assert again <= uncommitted
    assert commit_warnings(caplog) == []
    members = [first] if second is None else [first, second]
    assert [m.producer.counters().revoke_commit_failures for m in members] == [0] * len(members)


def commit_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every warning about a commit: failed, refused at revoke, or not confirmed."""
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "commit" in r.getMessage()]


async def test_member_closing_while_it_rejoins_commits_what_it_handled(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Guarantee 7 when a member closes in the second round of a cooperative rebalance.

    A member joins; the member that owned everything revokes half and rejoins, and closes
    while it waits for the new generation. The broker answers the commits it sent
    meanwhile only when that generation forms, refusing them (ILLEGAL_GENERATION) after
    the partitions went. Issue 25.20: the final and revoke commits skipped those targets
    as "already sent", the refusals were logged at INFO, and the staying member was
    handed again everything the leaving one had handled since its last accepted commit
    (this test saw 90 such hand-outs). This is what the graceful rebalance test hit when
    it ran first on a new broker, where the members' join order is reversed."""
    caplog.set_level(logging.INFO, logger="sharedstream")
    topic = create_topic("orders", partitions=6)
    group = f"it-{uuid.uuid4().hex[:6]}"
    handouts: Counter[Identity] = Counter()
    total = 0

    async def traffic(rounds: int) -> None:
        nonlocal total
        for _ in range(rounds):
            await asyncio.to_thread(produce, kafka_bootstrap, topic, 60, 6)
            total += 60
            await asyncio.sleep(0.05)

    def handed(identity: Identity) -> None:
        handouts[identity] += 1

    leaving = Member(kafka_bootstrap, group, [topic], persisted=handed)
    await until(lambda: leaving.producer.health().assigned_partitions == 6)
    await traffic(3)
    staying = Member(kafka_bootstrap, group, [topic], persisted=handed)
    await until(lambda: leaving.producer.health().assigned_partitions < 6)
    await traffic(3)  # handled by the leaving member while it rejoins
    await leaving.close()
    await traffic(2)
    await until(lambda: staying.producer.health().assigned_partitions == 6)
    await until(lambda: len(handouts) == total)
    await until(
        lambda: (
            sum(tp.offset for tp in committed(kafka_bootstrap, f"{group}.{topic}", topic, 6))
            == total
        )
    )
    await staying.close()
    assert sorted(identity for identity, n in handouts.items() if n > 1) == []
    assert commit_warnings(caplog) == []
    assert [leaving.producer.counters().revoke_commit_failures,
            staying.producer.counters().revoke_commit_failures] == [0, 0]


async def test_a_loop_that_takes_nothing_holds_the_consumer_back_at_the_byte_bound(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    """A loop busy elsewhere stops taking what the consumer thread reads. The thread reads
    on only until the batches waiting for the loop hold ``max_in_flight_bytes``, not
    until they hold ``max_in_flight`` messages: 200 records of 64 KiB are 12.5 MiB, far
    below 10,000 messages and far above a 1 MiB bound. Nothing read is lost or handed
    out twice once the loop takes again."""
    topic, value, records, batch, bound = create_topic("large"), bytes(64 * 1024), 200, 4, 2**20
    p = ordered_producer(kafka_bootstrap, {"linger.ms": 5})
    for _ in range(records):
        p.produce(topic, value)
    assert p.flush(30) == 0
    group = f"it-{uuid.uuid4().hex[:6]}"
    producer = KafkaSharedStreamProducer(
        topics=[topic], config=conn(kafka_bootstrap, group), recorder=InMemoryRejectionRecorder(),
        batch_size=batch, pause_after=0.05)
    driver = Driver(producer, max_in_flight=10_000, max_bytes=bound)
    loop_free, handed = asyncio.Event(), []
    task = asyncio.create_task(driver.run(lambda _p: ACK, lambda _i: None, handed,
                                          after_batch=loop_free.wait))
    try:
        await until(lambda: producer.paused_partitions() == {(topic, 0): PauseReason.LOOP_BACKLOG},
                    within=20)
        # Held back at the bound, one batch past it at most (read before the check).
        assert bound <= producer._hand.inbox.backlog.bytes <= bound + batch * len(value)
        assert len(handed) < records
        loop_free.set()
        await until_committed(kafka_bootstrap, f"{group}.{topic}", topic, records)
        assert [payload.offset for payload in handed] == list(range(records))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await producer.aclose()
