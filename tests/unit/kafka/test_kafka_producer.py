"""KafkaSharedStreamProducer against the in-memory Kafka: commits, holds, DLQ, generations."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from ledger_driver import Driver
from sharedstream.core.contract import PartitionsEnded
from sharedstream.core.message import Coordinates
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.connections import ConnectionConfigError
from sharedstream.kafka.consumer_thread import consume_batch
from sharedstream.kafka.memory import MemoryBroker
from sharedstream.kafka.producer import (
    KafkaSharedStreamProducer,
    StreamFailedError,
    StreamNotOpenError,
)
from sharedstream.kafka.progress import decode_progress
from sharedstream.kafka.rejections import InMemoryRejectionRecorder

pytestmark = pytest.mark.unit

T = "orders"
DLQ = "orders.dlq"
GROUP = "app.orders"
# For tests that close with a message still handed out and never finished: the close
# waits up to half the revoke timeout (10 s by default) for the watchers to finish it,
# which is not what they check; 0.4 s makes that wait 0.2 s.
UNFINISHED_AT_CLOSE = 0.4


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``check`` until true or fail at the deadline (no sleep-and-hope)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.005)


def broker(partitions: int = 1) -> MemoryBroker:
    return MemoryBroker({T: partitions, DLQ: 1})


def make(
    cluster: MemoryBroker,
    *,
    dlq: str | None = DLQ,
    recorder: InMemoryRejectionRecorder | None = None,
    commit_interval: float = 0.01,
    **kw: Any,
) -> KafkaSharedStreamProducer:
    return KafkaSharedStreamProducer(
        topics=[T],
        config={"bootstrap.servers": "memory:9092", "group.id": "app"},
        recorder=recorder if recorder is not None else InMemoryRejectionRecorder(),
        dlq_topic=dlq,
        commit_interval=commit_interval,
        poll_timeout=0.01,
        consumer_factory=cluster.consumer,
        dlq_producer_factory=cluster.producer,
        topic_id_resolver=cluster.topic_ids,
        **kw,
    )


def fill(cluster: MemoryBroker, n: int) -> None:
    for i in range(n):
        cluster.produce(T, f"m{i}".encode(), headers=[("trace", b"t1")])


def committed(cluster: MemoryBroker, partition: int = 0) -> int | None:
    found = cluster.committed(GROUP).get((T, partition))
    return None if found is None else found[0]


def remembered(cluster: MemoryBroker) -> set[int] | None:
    found = cluster.committed(GROUP).get((T, 0))
    return None if found is None else set(decode_progress(found[0], found[1]))


async def test_all_acked_commits_past_the_batch_in_one_request() -> None:
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster)
    d = Driver(producer)
    entries = await d.take(3)
    assert [e.payload.identity for e in entries] == [("id-orders", 0, i) for i in range(3)]
    assert producer.consumer_group == "app.orders"
    d.ack(*entries)
    await eventually(lambda: committed(cluster) == 3)
    assert cluster.committed(GROUP)[(T, 0)] == (3, "")
    assert len(cluster.commit_requests) == 1
    await producer.aclose()


async def test_caught_up_what_the_loop_published_is_committed_before_the_tick() -> None:
    """The consumer has read everything; what the loop publishes then is committed on the
    thread's next idle turn, not at the next ``commit_interval`` (an hour here)."""
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster, commit_interval=3600)
    d = Driver(producer)
    entries = await d.take(3)
    d.ack(*entries[:2])  # published at once by the driver, as a drained group does
    await eventually(lambda: committed(cluster) == 2)
    d.ack(entries[2])
    await eventually(lambda: committed(cluster) == 3)
    await producer.aclose()


async def test_rejected_is_committed_past_only_after_its_dead_letter_is_delivered() -> None:
    cluster = broker()
    cluster.hold_deliveries = True
    fill(cluster, 3)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(3)
    d.ack(e[0], e[2])
    d.reject(e[1], {"b": "bad json"})
    await eventually(lambda: committed(cluster) == 1)
    assert remembered(cluster) == {2}
    cluster.hold_deliveries = False
    await eventually(lambda: committed(cluster) == 3)
    [record] = cluster.delivered
    headers = dict(record["headers"])
    assert record["value"] == b"m1" and record["timestamp"] == 1_700_000_000_000
    assert headers["trace"] == b"t1"
    assert headers[h.ORIGINAL_TOPIC] == b"orders"
    assert headers[h.ORIGINAL_PARTITION] == b"0"
    assert headers[h.ORIGINAL_OFFSET] == b"1"
    assert headers[h.ORIGINAL_TOPIC_ID] == b"id-orders"
    assert headers[h.ORIGINAL_TIMESTAMP] == b"1700000000000"
    assert headers[h.CONSUMER_GROUP] == b"app.orders"
    assert json.loads(headers[h.REJECTIONS]) == {"b": "bad json"}
    assert headers[h.IDENTITY] == b"id-orders:0:1"
    assert headers[h.REPLAY_COUNT] == b"0"
    await producer.aclose()


async def test_a_held_floor_blocks_the_commit_and_lifts_once_it_resolves() -> None:
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(3)
    d.hold(e[1])
    d.ack(e[0], e[2])
    fill(cluster, 2)
    d.ack(*await d.take(2))
    await eventually(lambda: remembered(cluster) == {2, 3, 4})
    assert committed(cluster) == 1
    assert producer.health().held_messages == 1
    d.ack(e[1])  # handed out again and acked by everyone
    await eventually(lambda: committed(cluster) == 5)
    assert cluster.committed(GROUP)[(T, 0)] == (5, "")
    assert producer.health().held_messages == 0
    await producer.aclose()


async def test_earliest_held_offset_wins() -> None:
    cluster = broker()
    fill(cluster, 4)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(4)
    d.hold(e[1], e[2])
    d.ack(e[0], e[3])
    await eventually(lambda: committed(cluster) == 1)
    d.ack(e[2])  # the later hold clears first
    await eventually(lambda: remembered(cluster) == {2, 3})
    assert committed(cluster) == 1
    d.ack(e[1])
    await eventually(lambda: committed(cluster) == 4)
    await producer.aclose()


async def test_failed_dead_letter_delivery_holds_the_commit_and_is_retried() -> None:
    cluster = broker()
    failing = [True]
    cluster.delivery_outcome = lambda _attempt: (
        KafkaError(KafkaError._MSG_TIMED_OUT) if failing[0] else None
    )
    fill(cluster, 2)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(2)
    d.reject(e[0], {"a": "x", "b": "y"})
    d.ack(e[1])
    # Offset 1's outcome reached the broker (remembered above the commit) while delivery
    # of offset 0's dead letter failed twice: the commit stays at 0 meanwhile.
    await eventually(lambda: remembered(cluster) == {1}
                     and producer.counters().dead_letter_failures >= 2)
    assert committed(cluster) == 0 and cluster.delivered == []
    assert producer.health().last_error is not None
    failing[0] = False
    await eventually(lambda: committed(cluster) == 2)
    assert len(cluster.delivered) == 1
    await producer.aclose()


async def test_too_large_dead_letter_goes_to_the_recorder_then_commits() -> None:
    cluster = broker()
    cluster.delivery_outcome = lambda _a: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    fill(cluster, 1)
    recorder = InMemoryRejectionRecorder()
    producer = make(cluster, recorder=recorder)
    d = Driver(producer)
    [e] = await d.take(1)
    d.reject(e, {"a": "huge"})
    await eventually(lambda: committed(cluster) == 1)
    row = recorder.rows["id-orders:0:0"]
    assert row.rejections == {"a": "huge"} and "refused" in row.error
    assert row.consumer_group == "app.orders" and row.value == b"m0"
    await producer.aclose()


async def test_without_dead_letter_topic_rejections_go_to_the_recorder() -> None:
    cluster = broker()
    fill(cluster, 1)
    recorder = InMemoryRejectionRecorder()
    producer = make(cluster, dlq=None, recorder=recorder)
    d = Driver(producer)
    [e] = await d.take(1)
    d.reject(e, {"a": "no"})
    await eventually(lambda: committed(cluster) == 1)
    assert recorder.rows["id-orders:0:0"].error == "no dead-letter topic configured"
    await producer.aclose()


async def test_a_failing_recorder_holds_the_message() -> None:
    class Flaky(InMemoryRejectionRecorder):
        calls = 0

        async def record(self, rejected: Any) -> None:
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("database down")
            await super().record(rejected)

    cluster = broker()
    fill(cluster, 1)
    recorder = Flaky()
    producer = make(cluster, dlq=None, recorder=recorder)
    d = Driver(producer)
    [e] = await d.take(1)
    d.reject(e, {"a": "no"})
    await eventually(lambda: committed(cluster) == 1)
    assert recorder.calls == 2
    await producer.aclose()


async def test_restart_hands_out_only_what_was_not_terminal() -> None:
    cluster = broker()
    fill(cluster, 6)
    first = make(cluster)
    d = Driver(first)
    e = await d.take(6)
    d.hold(e[2])
    d.ack(*e[:2], *e[3:])
    await eventually(lambda: remembered(cluster) == {3, 4, 5})
    await first.aclose()
    second = make(cluster)
    d2 = Driver(second)
    [again] = await d2.take(1)
    assert again.offset == 2
    fill(cluster, 1)
    [new] = await d2.take(1)
    assert new.offset == 6
    d2.ack(again, new)
    await eventually(lambda: committed(cluster) == 7)
    await second.aclose()


async def test_revocation_waits_for_what_the_watchers_hold_then_commits_it() -> None:
    """The watchers finish what they were handed while the revocation waits (bounded),
    so the commit covers it and the next owner does not hand it out again."""
    cluster = broker(partitions=2)
    for i in range(3):
        cluster.produce(T, f"m{i}".encode(), partition=1)
    producer = make(cluster, commit_interval=3600)  # only the revocation commits
    d = Driver(producer)
    e = await d.take(3)
    cluster.consumer({"group.id": GROUP}).subscribe([T])
    # Answered after the rebalance began (the consumer thread serves it within ms).
    asyncio.get_running_loop().call_later(0.1, d.ack, *e)
    assert await d.next_change() == PartitionsEnded(frozenset({(T, 1)}))
    assert committed(cluster, 1) == 3
    await producer.aclose()


async def test_revocation_commits_what_resolved_and_late_acks_are_discarded() -> None:
    """What the watchers still hold when the revocation's wait ends (half of
    ``revoke_timeout``) is not committed, and its late acks change nothing."""
    cluster = broker(partitions=2)
    for i in range(3):
        cluster.produce(T, f"m{i}".encode(), partition=1)
    producer = make(cluster, commit_interval=3600, revoke_timeout=0.4)
    d = Driver(producer)
    e = await d.take(3)
    d.ledger.finish(e[0])  # resolved, not published yet: the revocation publishes it
    # A second member joins the group: partition 1 moves to it, revoked from this one
    # in its consumer thread's next consume(), as librdkafka serves a rebalance.
    cluster.consumer({"group.id": GROUP}).subscribe([T])
    assert await d.next_change() == PartitionsEnded(frozenset({(T, 1)}))
    assert committed(cluster, 1) == 1
    d.ack(*e[1:])  # late: old generation
    await producer.commit()
    assert committed(cluster, 1) == 1
    await producer.aclose()


async def test_lost_partitions_commit_nothing() -> None:
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster, revoke_timeout=UNFINISHED_AT_CLOSE)
    d = Driver(producer)
    e = await d.take(3)
    d.ack(e[0])
    await eventually(lambda: committed(cluster) == 1)
    cluster.expire(cluster.consumers[0])  # session timeout: lost, then it rejoins
    await d.next_change()
    d.ack(*e[1:])  # late: the old generation's outcomes
    again = await d.take(2)  # the rejoined member reads from the committed offset
    assert [a.offset for a in again] == [1, 2]
    await producer.aclose()
    assert committed(cluster) == 1


async def test_replayed_dead_letter_targets_its_rejecters_with_original_coordinates() -> None:
    cluster = broker()
    origin = Coordinates("orders", "id-old", 3, 41, 1_600_000_000_000)
    dlq = h.build_dlq_headers(
        original_headers=[("trace", b"t")],
        origin=origin,
        consumer_group="app.orders",
        rejections={"b": "bad"},
        replay_count=0,
    )
    cluster.produce(T, b"v", headers=h.replay_headers(dlq))
    producer = make(cluster)
    d = Driver(producer)
    [e] = await d.take(1)
    p = e.payload
    assert p.targets == frozenset({"b"})
    # Tracked where it was read; only its events and dead letter carry the origin.
    assert p.identity == ("id-orders", 0, 0) and p.partition_key == (T, 0)
    assert (p.origin.topic_id, p.origin.partition, p.origin.offset) == ("id-old", 3, 41)
    assert (p.message.topic, p.message.partition, p.message.offset) == ("orders", 3, 41)
    assert p.replay_count == 1
    d.reject(e, {"b": "still bad"})
    await eventually(lambda: committed(cluster) == 1)
    headers = dict(cluster.delivered[0]["headers"])
    assert headers[h.IDENTITY] == b"id-old:3:41" and headers[h.REPLAY_COUNT] == b"1"
    await producer.aclose()


async def test_commit_without_a_consumer_raises() -> None:
    cluster = broker()
    producer = make(cluster, revoke_timeout=UNFINISHED_AT_CLOSE)
    with pytest.raises(StreamNotOpenError):
        await producer.commit()
    d = Driver(producer)
    fill(cluster, 1)
    await d.take(1)
    await producer.commit()
    await producer.aclose()
    with pytest.raises(StreamNotOpenError):
        await producer.commit()


async def test_final_commit_refused_by_a_rebalance_is_retried_with_the_new_generation() -> None:
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster, commit_interval=3600)  # the final commit is the only one
    d = Driver(producer)
    for entry in await d.take(3):
        d.ledger.finish(entry)  # resolved, published only by the close
    cluster.fail_commits(KafkaError(KafkaError.ILLEGAL_GENERATION))
    await producer.aclose()
    assert committed(cluster) == 3
    assert len(cluster.commit_requests) == 2  # refused once, then done


async def test_aclose_closes_the_consumer_once() -> None:
    cluster = broker()
    fill(cluster, 1)
    producer = make(cluster, revoke_timeout=UNFINISHED_AT_CLOSE)
    d = Driver(producer)
    await d.take(1)
    await producer.aclose()
    await producer.aclose()
    assert cluster.consumers[0].close_calls == 1
    await make(cluster).aclose()  # never opened: nothing to close, no error


async def paused_after_one(*, pause_after: float
                           ) -> tuple[MemoryBroker, KafkaSharedStreamProducer, Driver]:
    """A producer that handed out one message, then was asked to pause."""
    cluster = broker()
    fill(cluster, 1)
    producer = make(cluster, pause_after=pause_after, revoke_timeout=UNFINISHED_AT_CLOSE)
    d = Driver(producer)
    await d.take(1)
    producer.pause()
    return cluster, producer, d


async def test_a_short_pause_stops_consuming_without_pausing_the_partitions() -> None:
    """Pausing partitions drops librdkafka's prefetch; a short hold must not pay for that."""
    cluster, producer, d = await paused_after_one(pause_after=3600)
    consumer = cluster.consumers[0]
    await eventually(lambda: producer.health().paused)  # the thread saw the pause
    await producer.commit()  # runs at the top of a consumer-thread turn
    polls = consumer.consume_calls
    await producer.commit()  # one more whole turn later (one turn runs the commands
    # queued when it started)
    assert consumer.consume_calls == polls and consumer.pause_calls == 0
    assert producer.health().paused
    fill(cluster, 1)
    producer.resume()
    assert len(await d.take(1)) == 1
    assert consumer.pause_calls == 0
    await producer.aclose()


async def test_a_long_pause_pauses_the_assignment_but_keeps_polling() -> None:
    cluster, producer, _driver = await paused_after_one(pause_after=0)
    consumer = cluster.consumers[0]
    await eventually(lambda: consumer.pause_calls == 1)
    polls = consumer.consume_calls
    await eventually(lambda: consumer.consume_calls > polls + 3)
    assert producer.health().paused
    producer.resume()
    await eventually(lambda: not consumer.paused)
    await producer.aclose()


async def test_a_partition_lost_while_paused_fetches_once_assigned_again() -> None:
    """librdkafka keeps a partition's pause across a lost session (the in-memory
    consumer too): the group's resume came while this member owned nothing, so reached
    no partition, and the partition assigned back seconds later stayed paused, fetching
    nothing for good (the broker-restart stall, seen on the real broker stopped 8 s while
    a slow watcher held the group paused)."""
    cluster, producer, d = await paused_after_one(pause_after=0)
    member = cluster.consumers[0]
    await eventually(lambda: member.pause_calls == 1)  # the assignment is paused
    cluster.expire(member, rejoin=False)  # session timeout, the broker still down
    assert await d.next_change() == PartitionsEnded(frozenset({(T, 0)}))
    producer.resume()  # while this member owns nothing
    await eventually(lambda: not producer.health().paused)
    cluster.rejoin(member)  # the broker is back: the partition is assigned again
    fill(cluster, 1)
    again = await d.take(2)  # from offset 0: nothing was committed
    assert [a.offset for a in again] == [0, 1]
    await producer.aclose()


async def test_transient_error_marks_unready_fatal_fails_the_stream() -> None:
    cluster = broker()
    fill(cluster, 1)
    producer = make(cluster, revoke_timeout=UNFINISHED_AT_CLOSE)
    d = Driver(producer)
    await d.take(1)
    assert producer.health().ready
    consumer = cluster.consumers[0]
    consumer.injected_errors.append(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    await eventually(lambda: not producer.health().ready)
    consumer.injected_errors.append(KafkaError(KafkaError._FATAL, fatal=True))
    with pytest.raises(StreamFailedError):
        await asyncio.wait_for(anext(d.stream), 5)
    assert producer.health().failed is not None
    await producer.aclose()


def test_auto_commit_is_refused_before_any_consumer() -> None:
    cluster = broker()
    with pytest.raises(ConnectionConfigError, match="kafka_default"):
        KafkaSharedStreamProducer(
            topics=[T],
            config={"bootstrap.servers": "x", "enable.auto.commit": True},
            recorder=None,
            consumer_factory=cluster.consumer,
        )
    assert cluster.consumers == []


class _Arrivals:
    """A consumer whose fetch queue holds ``ready``; ``arriving`` lands during a wait."""

    def __init__(self, ready: list[str], arriving: list[str]) -> None:
        self.ready = ready
        self.arriving = arriving
        self.calls: list[tuple[int, float]] = []

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.calls.append((num_messages, timeout))
        if not self.ready and timeout > 0:
            self.ready, self.arriving = self.arriving, []
        out, self.ready = self.ready[:num_messages], self.ready[num_messages:]
        return out


def test_a_batch_takes_what_is_fetched_and_waits_only_for_the_first_record() -> None:
    """Under load one non-blocking call fills the batch; when idle the thread waits for one
    record (not for a whole batch or the timeout) and takes what came with it."""
    loaded = _Arrivals(["a", "b", "c", "d"], [])
    assert consume_batch(loaded, 3, 0.5) == ["a", "b", "c"]
    assert loaded.calls == [(3, 0)]
    idle = _Arrivals([], ["x", "y", "z", "w"])
    assert consume_batch(idle, 3, 0.5) == ["x", "y", "z"]
    assert idle.calls == [(3, 0), (1, 0.5), (2, 0)]
    quiet = _Arrivals([], [])
    assert consume_batch(quiet, 3, 0.5) == []
    assert quiet.calls == [(3, 0), (1, 0.5)]


async def test_a_refused_async_commit_is_counted_once_and_sent_again() -> None:
    """librdkafka reports an asynchronous commit from a later poll, with its error."""
    cluster = broker()
    fill(cluster, 2)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(2)
    cluster.fail_commits(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))
    d.ack(*e)
    await eventually(lambda: committed(cluster) == 2)
    assert producer.counters().commit_failures == 1 and len(cluster.commit_requests) == 2
    await producer.aclose()


async def test_metadata_over_the_brokers_limit_halves_the_budget_until_it_fits() -> None:
    """A held floor with scattered terminal offsets above it: the remembered progress is
    too long for the broker, which refuses it; the producer halves its budget and keeps
    what fits, and the commit itself is never lost."""
    cluster = MemoryBroker({T: 1, DLQ: 1}, max_metadata_bytes=64)
    fill(cluster, 80)
    producer = make(cluster)
    d = Driver(producer)
    e = await d.take(80)
    # Offset 0 held; every other offset above it terminal: many runs to remember.
    d.hold(*e[::2])
    d.ack(*e[1::2])
    await eventually(lambda: committed(cluster) == 0 and bool(remembered(cluster)))
    found = cluster.committed(GROUP)[(T, 0)]
    assert len(found[1].encode()) <= 64 and producer.counters().commit_failures >= 1
    assert remembered(cluster) <= {i for i in range(1, 80) if i % 2}
    await producer.aclose()


async def test_a_recreated_topic_restarts_its_lanes_at_the_first_offset() -> None:
    cluster = broker()
    fill(cluster, 3)
    producer = make(cluster, topic_id_check_interval=0.05)
    d = Driver(producer)
    d.ack(*await d.take(3))
    await eventually(lambda: committed(cluster) == 3)
    cluster.recreate_topic(T)  # the consumer goes on fetching at offset 3, as librdkafka does
    fill(cluster, 2)
    assert await d.next_change() == PartitionsEnded(frozenset({(T, 0)}))
    new = await d.take(2)
    assert [(q.offset, q.payload.topic_id) for q in new] == [
        (0, "id-orders-2"), (1, "id-orders-2")]
    d.ack(*new)
    await eventually(lambda: committed(cluster) == 2)
    assert producer.counters().topics_recreated == 1
    await producer.aclose()


async def test_one_held_message_pauses_its_partition_at_the_lane_bound() -> None:
    """The bound counts messages resolved above the held floor: once they reach it, the
    next read is the last admitted and the partition pauses until the floor moves."""
    cluster = broker()
    fill(cluster, 30)
    producer = make(cluster)
    d = Driver(producer, max_in_flight=20)
    e = await d.take(30)  # not resolved: no bound of the partition's, whatever their number
    assert not producer.floor_distances()[(T, 0)].at_bound
    d.hold(e[0])
    d.ack(*e[1:])  # 29 resolved above the held floor
    fill(cluster, 170)
    last = await d.take(1)
    assert len(last) == 1  # admitted; what was read past it waits
    await eventually(lambda: producer.floor_distances()[(T, 0)][::2] == (31, True))
    consumer = cluster.consumers[0]
    await eventually(lambda: (T, 0) in consumer.paused)
    calls = consumer.consume_calls
    await eventually(lambda: consumer.consume_calls > calls + 5)  # still polling, paused
    assert d.ledger.admitted == 31
    d.ack(e[0], *last)  # the hold lifts: the floor moves
    acking = asyncio.create_task(d.ack_forever())  # the rest flows through
    await eventually(lambda: committed(cluster) == 200)
    # Nothing read past the bound was lost: the consumer sought back to it on resume.
    await eventually(lambda: producer.floor_distances()[(T, 0)] == (0, 0, False))
    assert d.ledger.admitted == 200
    acking.cancel()
    await producer.aclose()


async def test_large_unresolved_messages_pause_their_partition_at_the_bytes_bound() -> None:
    cluster = broker()
    for i in range(200):
        cluster.produce(T, bytes(1000), key=b"\0" + bytes([i % 256]))
    producer = make(cluster)
    d = Driver(producer, max_in_flight=10_000, max_bytes=5_000)  # five messages' worth
    e = await d.take(5)
    assert len(e) == 5  # the message that reached the bytes bound is the last admitted
    await eventually(lambda: producer.floor_distances()[(T, 0)].at_bound)
    assert producer.floor_distances()[(T, 0)].open_bytes == 1002 * 5
    await eventually(lambda: (T, 0) in cluster.consumers[0].paused)
    d.ack(*e)  # resolved: bytes released, reading resumes
    acking = asyncio.create_task(d.ack_forever())
    await eventually(lambda: committed(cluster) == 200)
    await eventually(lambda: producer.floor_distances()[(T, 0)] == (0, 0, False))
    assert d.ledger.admitted == 200
    acking.cancel()
    await producer.aclose()
