"""KafkaSharedStreamProducer against a fake consumer: commits, holds, DLQ, generations."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from producer_fakes import FakeCluster, FakeConsumer, FakeRecord, eventually, topic_ids

from sharedstream.producer import AdvanceItem, AdvanceOutcome, ForgetLanes
from sharedstream.producer import dlq_headers as h
from sharedstream.producer.connections import ConnectionConfigError
from sharedstream.producer.kafka import (
    KafkaSharedStreamProducer,
    StreamFailedError,
    StreamNotOpenError,
)
from sharedstream.producer.progress import decode_progress
from sharedstream.producer.rejections import InMemoryRejectionRecorder

T = "orders"
ALL = frozenset({"a", "b"})
OK = AdvanceOutcome(acked=ALL)


def failed(retry_after: float = 0.05) -> AdvanceOutcome:
    return AdvanceOutcome(acked=frozenset({"a"}), failed=frozenset({"b"}), retry_after=retry_after)


def make(
    cluster: FakeCluster,
    *,
    dlq: str | None = "orders.dlq",
    recorder: InMemoryRejectionRecorder | None = None,
    **kw: Any,
) -> KafkaSharedStreamProducer:
    return KafkaSharedStreamProducer(
        topics=[T],
        config={"bootstrap.servers": "fake:9092", "group.id": "app"},
        recorder=recorder if recorder is not None else InMemoryRejectionRecorder(),
        dlq_topic=dlq,
        commit_interval=0.01,
        poll_timeout=0.01,
        consumer_factory=cluster.consumer,
        dlq_producer_factory=cluster.dlq_producer,
        topic_id_resolver=topic_ids,
        **kw,
    )


def fill(cluster: FakeCluster, n: int) -> None:
    for i in range(n):
        cluster.produce(T, f"m{i}".encode(), headers=[("trace", b"t1")])


async def take(stream: AsyncIterator[Any], n: int) -> list[Any]:
    """The next ``n`` payloads, across batches."""
    out: list[Any] = []
    while len(out) < n:
        item = await asyncio.wait_for(anext(stream), 5)
        assert not isinstance(item, ForgetLanes)
        out.extend(payload for _raw, payload in item)
    return out


def items(payloads: list[Any], *outcomes: AdvanceOutcome) -> list[AdvanceItem[Any]]:
    return [AdvanceItem(p, o) for p, o in zip(payloads, outcomes, strict=True)]


def committed(cluster: FakeCluster) -> int | None:
    return cluster.committed_offset(T)


def remembered(cluster: FakeCluster) -> set[int] | None:
    found = cluster.committed.get((T, 0))
    return None if found is None else set(decode_progress(found[0], found[1]))


async def test_all_acked_commits_past_the_batch_in_one_request() -> None:
    cluster = FakeCluster()
    fill(cluster, 3)
    producer = make(cluster)
    stream = producer.open_stream()
    payloads = await take(stream, 3)
    assert [p.identity for p in payloads] == [("id-orders", 0, i) for i in range(3)]
    assert producer.consumer_group == "app.orders"
    await producer.advance(items(payloads, OK, OK, OK))
    await eventually(lambda: committed(cluster) == 3)
    assert cluster.committed[(T, 0)] == (3, "")
    assert len(cluster.commit_requests) == 1
    await producer.aclose()


async def test_rejected_is_committed_past_only_after_its_dead_letter_is_delivered() -> None:
    cluster = FakeCluster(hold_deliveries=True)
    fill(cluster, 3)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 3)
    rejected = AdvanceOutcome(acked=frozenset({"a"}), rejected={"b": "bad json"})
    await producer.advance(items(p, OK, rejected, OK))
    await eventually(lambda: committed(cluster) == 1)
    assert remembered(cluster) == {2}
    cluster.hold_deliveries = False
    await eventually(lambda: committed(cluster) == 3)
    [record] = cluster.dead_letters
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


async def test_failed_head_stops_the_commit_and_is_redelivered_from_memory() -> None:
    cluster = FakeCluster()
    fill(cluster, 3)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 3)
    await producer.advance(items(p, OK, failed(), OK))
    await eventually(lambda: committed(cluster) == 1)
    assert remembered(cluster) == {2}
    [again] = await take(stream, 1)
    assert again is p[1]
    assert producer.health().held_messages == 0  # in flight again, not held
    await producer.aclose()


async def test_floor_blocks_later_batches_and_lifts_after_the_re_ack() -> None:
    cluster = FakeCluster()
    fill(cluster, 3)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 3)
    await producer.advance(items(p, OK, failed(retry_after=30), OK))
    fill(cluster, 2)
    later = await take(stream, 2)
    await producer.advance(items(later, OK, OK))
    await eventually(lambda: remembered(cluster) == {2, 3, 4})
    assert committed(cluster) == 1
    assert producer.health().held_messages == 1
    # The manager re-acks the held message (the retry scheduler is not needed for that).
    await producer.advance(items([p[1]], AdvanceOutcome(acked=ALL)))
    await eventually(lambda: committed(cluster) == 5)
    assert cluster.committed[(T, 0)] == (5, "")
    await producer.aclose()


async def test_earliest_held_offset_wins_across_batches() -> None:
    cluster = FakeCluster()
    fill(cluster, 4)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 4)
    await producer.advance(items(p[:2], OK, failed(30)))
    await producer.advance(items(p[2:], failed(30), OK))
    await eventually(lambda: committed(cluster) == 1)
    await producer.advance(items([p[2]], OK))  # the later hold clears first
    await eventually(lambda: remembered(cluster) == {2, 3})
    assert committed(cluster) == 1
    await producer.advance(items([p[1]], OK))
    await eventually(lambda: committed(cluster) == 4)
    await producer.aclose()


async def test_rejection_and_failure_in_one_round_make_one_dead_letter_later() -> None:
    cluster = FakeCluster()
    fill(cluster, 1)
    producer = make(cluster)
    stream = producer.open_stream()
    [p] = await take(stream, 1)
    first = AdvanceOutcome(failed=frozenset({"a"}), rejected={"b": "nope"}, retry_after=0.01)
    await producer.advance([AdvanceItem(p, first)])
    assert await take(stream, 1) == [p]
    await producer.advance(
        [AdvanceItem(p, AdvanceOutcome(acked=frozenset({"a"}), rejected={"b": "nope"}))]
    )
    await eventually(lambda: committed(cluster) == 1)
    [record] = cluster.dead_letters
    assert json.loads(dict(record["headers"])[h.REJECTIONS]) == {"b": "nope"}
    await producer.aclose()


async def test_failed_dead_letter_delivery_holds_and_is_retried() -> None:
    cluster = FakeCluster()
    cluster.dlq_outcome = lambda attempt: (
        KafkaError(KafkaError._MSG_TIMED_OUT) if attempt == 0 else None
    )
    fill(cluster, 2)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 2)
    await producer.advance(items(p, AdvanceOutcome(rejected={"a": "x", "b": "y"}), OK))
    await eventually(lambda: producer.health().last_error is not None)
    await eventually(lambda: committed(cluster) == 2)
    assert len(cluster.dead_letters) == 1
    await producer.aclose()


async def test_too_large_dead_letter_goes_to_the_recorder_then_commits() -> None:
    cluster = FakeCluster()
    cluster.dlq_outcome = lambda _a: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
    fill(cluster, 1)
    recorder = InMemoryRejectionRecorder()
    producer = make(cluster, recorder=recorder)
    stream = producer.open_stream()
    p = await take(stream, 1)
    await producer.advance(items(p, AdvanceOutcome(rejected={"a": "huge"})))
    await eventually(lambda: committed(cluster) == 1)
    row = recorder.rows["id-orders:0:0"]
    assert row.rejections == {"a": "huge"} and "refused" in row.error
    assert row.consumer_group == "app.orders" and row.value == b"m0"
    await producer.aclose()


async def test_without_dead_letter_topic_rejections_go_to_the_recorder() -> None:
    cluster = FakeCluster()
    fill(cluster, 1)
    recorder = InMemoryRejectionRecorder()
    producer = make(cluster, dlq=None, recorder=recorder)
    stream = producer.open_stream()
    p = await take(stream, 1)
    await producer.advance(items(p, AdvanceOutcome(rejected={"a": "no"})))
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

    cluster = FakeCluster()
    fill(cluster, 1)
    recorder = Flaky()
    producer = make(cluster, dlq=None, recorder=recorder)
    stream = producer.open_stream()
    p = await take(stream, 1)
    await producer.advance(items(p, AdvanceOutcome(rejected={"a": "no"})))
    await eventually(lambda: committed(cluster) == 1)
    assert recorder.calls == 2
    await producer.aclose()


async def test_restart_hands_out_only_what_was_not_terminal() -> None:
    cluster = FakeCluster()
    fill(cluster, 6)
    first = make(cluster)
    stream = first.open_stream()
    p = await take(stream, 6)
    await first.advance(items(p, OK, OK, failed(30), OK, OK, OK))
    await eventually(lambda: remembered(cluster) == {3, 4, 5})
    await first.aclose()
    second = make(cluster)
    stream2 = second.open_stream()
    [again] = await take(stream2, 1)
    assert again.offset == 2
    fill(cluster, 1)
    [new] = await take(stream2, 1)
    assert new.offset == 6
    await second.advance(items([again, new], OK, OK))
    await eventually(lambda: committed(cluster) == 7)
    await second.aclose()


async def test_revocation_commits_the_prefix_and_late_acks_are_discarded() -> None:
    cluster = FakeCluster()
    fill(cluster, 3)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 3)
    await producer.advance(items(p[:1], OK))
    # Runs on the consumer thread, like a real rebalance callback.
    await producer._call(lambda c: c.revoke())
    forget = await asyncio.wait_for(anext(stream), 5)
    assert forget == ForgetLanes(frozenset({(T, 0)}))
    assert committed(cluster) == 1
    await producer.advance(items(p[1:], OK, OK))  # late: old generation
    await producer.commit()
    assert committed(cluster) == 1
    await producer.aclose()


async def test_lost_partitions_commit_nothing() -> None:
    cluster = FakeCluster()
    fill(cluster, 2)
    producer = make(cluster)
    stream = producer.open_stream()
    p = await take(stream, 2)
    await producer.advance(items(p, OK, OK))
    await producer._call(lambda c: c.revoke(lost=True))
    requests_before = len(cluster.commit_requests)
    assert isinstance(await asyncio.wait_for(anext(stream), 5), ForgetLanes)
    await producer.aclose()
    # Whatever reached the broker before the loss is all there is; nothing after it.
    assert len(cluster.commit_requests) == requests_before


async def test_replayed_dead_letter_targets_its_rejecters_with_original_coordinates() -> None:
    cluster = FakeCluster()
    origin = h.Origin("orders", "id-old", 3, 41, 1_600_000_000_000)
    dlq = h.build_dlq_headers(
        original_headers=[("trace", b"t")],
        origin=origin,
        consumer_group="app.orders",
        rejections={"b": "bad"},
        replay_count=0,
    )
    cluster.produce(T, b"v", headers=h.replay_headers(dlq))
    producer = make(cluster)
    stream = producer.open_stream()
    [p] = await take(stream, 1)
    assert producer.targets(p) == frozenset({"b"})
    # Tracked where it was read; only its events and dead letter carry the origin.
    assert producer.message_identity(p) == ("id-orders", 0, 0)
    assert (p.origin.topic_id, p.origin.partition, p.origin.offset) == ("id-old", 3, 41)
    assert (p.message.topic, p.message.partition, p.message.offset) == ("orders", 3, 41)
    assert producer.get_advance_lane(p) == (T, 0) and p.replay_count == 1
    await producer.advance(items([p], AdvanceOutcome(rejected={"b": "still bad"})))
    await eventually(lambda: committed(cluster) == 1)
    headers = dict(cluster.dead_letters[0]["headers"])
    assert headers[h.IDENTITY] == b"id-old:3:41" and headers[h.REPLAY_COUNT] == b"1"
    await producer.aclose()


async def test_commit_without_a_consumer_raises() -> None:
    cluster = FakeCluster()
    producer = make(cluster)
    with pytest.raises(StreamNotOpenError):
        await producer.commit()
    stream = producer.open_stream()
    fill(cluster, 1)
    await take(stream, 1)
    await producer.commit()
    await producer.aclose()
    with pytest.raises(StreamNotOpenError):
        await producer.commit()


class RebalancingConsumer(FakeConsumer):
    """Refuses every commit with ILLEGAL_GENERATION until it is served while fully paused,
    as a group in a rebalance does until this member rejoins with the new generation."""

    rebalancing = True

    def consume(self, num_messages: int, timeout: float) -> list[FakeRecord]:
        if self.positions and set(self.positions) <= self.paused:
            self.rebalancing = False
        return super().consume(num_messages, timeout)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> list[TopicPartition]:
        if self.rebalancing:
            raise KafkaException(KafkaError(KafkaError.ILLEGAL_GENERATION))
        return super().commit(offsets, asynchronous)


async def test_final_commit_refused_by_a_rebalance_is_retried_with_the_new_generation() -> None:
    cluster = FakeCluster()
    fill(cluster, 3)
    producer = make(cluster)
    producer._consumer_factory = lambda config: RebalancingConsumer(cluster, config)
    stream = producer.open_stream()
    await producer.advance(items(await take(stream, 3), OK, OK, OK))
    await producer.aclose()
    assert committed(cluster) == 3


async def test_aclose_closes_the_consumer_once() -> None:
    cluster = FakeCluster()
    fill(cluster, 1)
    producer = make(cluster)
    stream = producer.open_stream()
    await take(stream, 1)
    await producer.aclose()
    await producer.aclose()
    assert cluster.consumers[0].close_calls == 1
    await make(cluster).aclose()  # never opened: nothing to close, no error


async def test_a_short_pause_stops_consuming_without_pausing_the_partitions() -> None:
    """Pausing partitions drops librdkafka's prefetch; a short hold must not pay for that."""
    cluster = FakeCluster()
    fill(cluster, 1)
    producer = make(cluster, pause_after=3600)
    stream = producer.open_stream()
    await take(stream, 1)
    producer.pause()
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
    assert len(await take(stream, 1)) == 1
    assert consumer.pause_calls == 0
    await producer.aclose()


async def test_a_long_pause_pauses_the_assignment_but_keeps_polling() -> None:
    cluster = FakeCluster()
    fill(cluster, 1)
    producer = make(cluster, pause_after=0)
    stream = producer.open_stream()
    await take(stream, 1)
    producer.pause()
    consumer = cluster.consumers[0]
    await eventually(lambda: consumer.pause_calls == 1)
    polls = consumer.consume_calls
    await eventually(lambda: consumer.consume_calls > polls + 3)
    assert producer.health().paused
    producer.resume()
    await eventually(lambda: not consumer.paused)
    await producer.aclose()


async def test_transient_error_marks_unready_fatal_fails_the_stream() -> None:
    cluster = FakeCluster()
    fill(cluster, 1)
    producer = make(cluster)
    stream = producer.open_stream()
    await take(stream, 1)
    assert producer.ready
    consumer = cluster.consumers[0]
    consumer.injected_errors.append(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    await eventually(lambda: not producer.ready)
    consumer.injected_errors.append(KafkaError(KafkaError._FATAL, fatal=True))
    with pytest.raises(StreamFailedError):
        await asyncio.wait_for(anext(stream), 5)
    assert producer.health().failed is not None
    await producer.aclose()


def test_auto_commit_is_refused_before_any_consumer() -> None:
    cluster = FakeCluster()
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
    cluster = FakeCluster()
    producer = KafkaSharedStreamProducer(
        topics=[T], config={"bootstrap.servers": "fake:9092", "group.id": "app"},
        recorder=None, batch_size=3, poll_timeout=5.0, commit_interval=0.5,
        consumer_factory=cluster.consumer, topic_id_resolver=topic_ids)
    loaded = _Arrivals(["a", "b", "c", "d"], [])
    assert producer._consume_batch(loaded) == ["a", "b", "c"]
    assert loaded.calls == [(3, 0)]
    idle = _Arrivals([], ["x", "y", "z", "w"])
    assert producer._consume_batch(idle) == ["x", "y", "z"]
    assert idle.calls == [(3, 0), (1, 0.5), (2, 0)]
    quiet = _Arrivals([], [])
    assert producer._consume_batch(quiet) == []
    assert quiet.calls == [(3, 0), (1, 0.5)]
