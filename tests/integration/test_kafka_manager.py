"""SharedStreamManager + KafkaSharedStreamProducer on the real broker, end to end (no database).

Unlike ``test_kafka_shared_stream`` (which plays the manager's part itself), these
tests run real watchers through :meth:`SharedStreamManager.run_watcher`: the
stream, windows, the unit-of-work hand-off, holds, targeted redelivery, lanes and
``advance``. ``DictSink`` is the unit of work: an idempotent "asset_event" table
in a dict keyed by (watcher, topic id, partition, offset, index), confirmed at once.

Nothing sleeps and hopes: every wait polls a condition under a deadline, and a
"commit has not moved" check forces a synchronous commit first, so the broker's
answer is the state the producer had decided on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_kafka_shared_stream import committed, produce, until

from sharedstream import MessageBatch
from sharedstream.core.batch import BatchWindow
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.core.window import Window
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.connections import resolve_connection
from sharedstream.kafka.producer import KafkaSharedStreamProducer
from sharedstream.kafka.progress import decode_progress
from sharedstream.kafka.rejections import InMemoryRejectionRecorder
from sharedstream.kafka.runtime import configure_kafka_runtime, kafka_runtime
from sharedstream.ops.dlq.replay import ORIGINAL, Replayer, ReplayRules
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

EventKey = tuple[str, str, int, int, int]
_COORDINATOR_MOVING = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})
# Fast, bounded retries: a held message comes back within a fraction of a second.
SETTINGS = ManagerSettings(retry_backoff_initial=0.05, retry_backoff_max=0.2, max_attempts=1000)


class DictSink:
    """The unit of work without a database: events by idempotency key, then confirm."""

    def __init__(self) -> None:
        self.events: dict[EventKey, Any] = {}
        self.writes: Counter[EventKey] = Counter()

    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            # A batch call's window holds several messages' events, in runs (``parts``).
            parts = (window.parts if isinstance(window, BatchWindow)
                     else [(window.payload, len(window.events))])
            events = iter(window.events)
            for payload, count in parts:
                origin = payload.origin  # a replay is keyed by its original coordinates
                for index in range(count):
                    key = (window.watcher, origin.topic_id, origin.partition, origin.offset,
                           index)
                    self.writes[key] += 1
                    self.events[key] = next(events).payload
            window.confirm()

    def offsets(self, watcher: str) -> list[tuple[int, int]]:
        """(partition, offset) of every message ``watcher`` has an event for, sorted."""
        return sorted((k[2], k[3]) for k in self.events if k[0] == watcher)


class DeliveryGate:
    """Wraps the dead-letter producer and withholds its delivery reports until opened.

    Records are really produced; only the producer's knowledge that they arrived
    waits, which is exactly what a commit past a rejected message must wait for.
    """

    def __init__(self) -> None:
        self.open = False
        self.withheld: list[Callable[[], None]] = []

    def factory(self, config: dict[str, Any]) -> Any:
        return GatedProducer(self, Producer(config))


class GatedProducer:
    """A real producer whose delivery reports pass through a :class:`DeliveryGate`.

    A plain class, not one made per call: a class is a reference cycle, and a producer
    captured by one would be left to the garbage collector (see tests/gc_guard.py).
    """

    def __init__(self, gate: DeliveryGate, inner: Any) -> None:
        self._gate, self._inner = gate, inner

    def produce(self, topic: str, value: Any, key: Any, *, on_delivery: Any, **kw: Any) -> None:
        gate = self._gate

        def report(err: KafkaError | None, msg: Any) -> None:
            if gate.open:
                on_delivery(err, msg)
            else:
                gate.withheld.append(lambda: on_delivery(err, msg))

        self._inner.produce(topic, value, key, on_delivery=report, **kw)

    def poll(self, timeout: float) -> int:
        if self._gate.open:
            while self._gate.withheld:
                self._gate.withheld.pop(0)()
        return int(self._inner.poll(timeout))

    def flush(self, timeout: float) -> int:
        return int(self._inner.flush(timeout))


class Scripted(KafkaSharedStreamTrigger):
    """The default trigger plus a per-watcher ``script``: message -> "event" | "reject" | raise.

    ``seen`` lists every offset handed to the filter (redeliveries included).
    """

    dlq_gate: ClassVar[DeliveryGate | None] = None

    def __init__(self, script: Callable[[KafkaMessage], str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script or (lambda _m: "event")
        self.seen: list[tuple[int, int]] = []

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> KafkaSharedStreamProducer:
        if cls.dlq_gate is None:
            return super().create_shared_stream_producer(kwargs)
        runtime = kafka_runtime()
        return KafkaSharedStreamProducer(
            topics=kwargs["topics"], recorder=runtime.recorder,
            config=resolve_connection(kwargs["kafka_config_id"], runtime.connections),
            connection_id=kwargs["kafka_config_id"], dlq_topic=kwargs["dlq_topic"],
            dlq_producer_factory=cls.dlq_gate.factory)

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            self.seen.append((message.partition, message.offset))
            if self.script(message) == "reject":
                reject_shared_stream_event(f"rejected {message.value!r}")
                continue
            yield TriggerEvent(message.value.decode() if message.value else None)


class ScriptedBatch(Scripted):
    """:class:`Scripted` as a batch filter: the same script per message, one call per
    batch; a raising script fails the call, which the runner splits down to it."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        self.seen.extend((m.partition, m.offset) for m in batch)
        for message in batch:
            if self.script(message) == "reject":
                batch.reject(message, f"rejected {message.value!r}")
            else:
                batch.emit(message, TriggerEvent(message.value.decode() if message.value
                                                 else None))


class Triggerer:
    """One manager running ``watchers`` (name -> trigger) of one group."""

    def __init__(self, sink: DictSink, watchers: dict[str, Scripted],
                 settings: ManagerSettings = SETTINGS) -> None:
        self.manager = SharedStreamManager(sink, settings)
        self.watchers = watchers
        first = next(iter(watchers.values()))
        self.manager.declare_cohort(first.shared_stream_key(), watchers)
        self.tasks = [asyncio.create_task(self.manager.run_watcher(n, t))
                      for n, t in watchers.items()]

    @classmethod
    async def start(cls, sink: DictSink, watchers: dict[str, Scripted],
                    settings: ManagerSettings = SETTINGS) -> Triggerer:
        """Start it and wait until its watchers subscribed (the group and producer exist)."""
        triggerer = cls(sink, watchers, settings)
        await until(lambda: len(triggerer.manager.status()) == 1)
        return triggerer

    @property
    def producer(self) -> KafkaSharedStreamProducer:
        [status] = self.manager.status()
        assert isinstance(status.producer, KafkaSharedStreamProducer)
        return status.producer

    async def stop(self) -> None:
        await self.manager.stop_all()
        await asyncio.gather(*self.tasks)


@pytest.fixture
def connection(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Factory: a fresh connection id (its own group.id) in the Kafka runtime."""
    before = kafka_runtime()
    connections: dict[str, dict[str, Any]] = {}

    def make(**extra: Any) -> str:
        conn_id = f"c{len(connections)}"
        connections[conn_id] = {"bootstrap.servers": kafka_bootstrap,
                                "group.id": f"it-{uuid.uuid4().hex[:8]}", **extra}
        configure_kafka_runtime(connections, InMemoryRejectionRecorder())
        return conn_id

    yield make
    configure_kafka_runtime(before.connections, before.recorder, before.environ)
    Scripted.dlq_gate = None


def group_of(conn_id: str, topic: str) -> str:
    return f"{kafka_runtime().connections[conn_id]['group.id']}.{topic}"


async def committed_tps(bootstrap: str, group: str, topic: str,
                        partitions: int = 1) -> list[TopicPartition]:
    """Committed offsets; [] while the group coordinator is still loading (retriable)."""
    try:
        return await asyncio.to_thread(committed, bootstrap, group, topic, partitions)
    except KafkaException as exc:
        # A fresh broker answers NOT_COORDINATOR until the group's coordinator is elected.
        if exc.args[0].retriable() or exc.args[0].code() in _COORDINATOR_MOVING:
            return []
        raise


async def committed_at(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    return [tp.offset for tp in await committed_tps(bootstrap, group, topic, partitions)]


async def until_committed(bootstrap: str, group: str, topic: str, offsets: list[int]) -> None:
    found: list[int] = []

    async def poll() -> None:
        while True:
            found[:] = await committed_at(bootstrap, group, topic, len(offsets))
            if found == offsets:
                return
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(poll(), 60)
    except TimeoutError:
        raise AssertionError(f"committed {found}, expected {offsets}") from None


async def committed_once(triggerer: Triggerer, bootstrap: str, group: str, topic: str,
                         remembered: set[int]) -> TopicPartition:
    """Commit synchronously until the broker holds ``remembered`` above the commit; return it.

    An ack reaches the producer one ``advance`` after the sink confirmed it, so the
    first forced commit may predate it; the remembered set is what tells them apart.
    """
    found: list[TopicPartition] = []

    async def check() -> bool:
        await triggerer.producer.commit()
        found[:] = await committed_tps(bootstrap, group, topic)
        return bool(found) and decode_progress(found[0].offset, found[0].metadata) == remembered

    deadline = asyncio.get_running_loop().time() + 30
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"committed {found}"
        await asyncio.sleep(0.05)
    return found[0]


def fails_on(offsets: set[int], gates: dict[int, asyncio.Event]) -> Callable[[KafkaMessage], str]:
    """A script that raises on each of ``offsets`` until its gate is set."""
    def script(message: KafkaMessage) -> str:
        if message.offset in offsets and not gates[message.offset].is_set():
            raise RuntimeError(f"cannot handle offset {message.offset} yet")
        return "event"

    return script


async def test_commits_through_the_manager_after_every_watcher_persisted(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    topic = create_topic("orders", partitions=2)
    produce(kafka_bootstrap, topic, 20, partitions=2)
    conn = connection()
    sink = DictSink()
    triggerer = await Triggerer.start(
        sink, {w: Scripted(topics=[topic], kafka_config_id=conn) for w in ("w1", "w2")})
    await until_committed(kafka_bootstrap, group_of(conn, topic), topic, [10, 10])
    expected = sorted((i % 2, i // 2) for i in range(20))
    assert sink.offsets("w1") == sink.offsets("w2") == expected
    assert set(sink.writes.values()) == {1}
    [topic_id] = {key[1] for key in sink.events}
    assert sink.events[("w1", topic_id, 1, 0, 0)] == "m1"
    await triggerer.stop()


async def test_rejected_goes_to_the_dlq_with_every_header_and_is_committed_past_after_delivery(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    topic, dlq = create_topic("orders"), create_topic("orders-dlq")
    produce(kafka_bootstrap, topic, 3)
    conn = connection()
    gate = Scripted.dlq_gate = DeliveryGate()
    sink = DictSink()
    picky = Scripted(lambda m: "reject" if m.value == b"m1" else "event",
                     topics=[topic], kafka_config_id=conn, dlq_topic=dlq)
    plain = Scripted(topics=[topic], kafka_config_id=conn, dlq_topic=dlq)
    triggerer = await Triggerer.start(sink, {"all": plain, "picky": picky})
    group = group_of(conn, topic)
    await until(lambda: len(sink.offsets("all")) == 3 and len(sink.offsets("picky")) == 2)
    await until(lambda: len(gate.withheld) == 1)
    # The record is on the broker but its report is withheld: the commit stops at 1.
    tp = await committed_once(triggerer, kafka_bootstrap, group, topic, {2})
    assert tp.offset == 1
    gate.open = True
    await until_committed(kafka_bootstrap, group, topic, [3])
    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "reader",
                       "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(dlq, 0, 0)])
    records: list[Any] = []

    def read() -> bool:
        records.extend(m for m in reader.consume(10, 0.2) if m.error() is None)
        return bool(records)

    await until(read, within=30)
    reader.close()
    [topic_id] = {key[1] for key in sink.events}
    await triggerer.stop()
    [record] = records
    headers: dict[str, Any] = dict(record.headers() or [])
    assert record.value() == b"m1" and headers["trace"] == b"t"
    assert headers[h.ORIGINAL_TOPIC] == topic.encode()
    assert headers[h.ORIGINAL_TOPIC_ID] == topic_id.encode()
    assert headers[h.ORIGINAL_PARTITION] == b"0" and headers[h.ORIGINAL_OFFSET] == b"1"
    assert int(headers[h.ORIGINAL_TIMESTAMP]) == record.timestamp()[1] > 0
    assert headers[h.CONSUMER_GROUP] == group.encode()
    assert json.loads(headers[h.REJECTIONS]) == {"picky": "rejected b'm1'"}
    assert headers[h.IDENTITY] == f"{topic_id}:0:1".encode()
    assert headers[h.REPLAY_COUNT] == b"0"
    assert sink.offsets("picky") == [(0, 0), (0, 2)]


async def test_failed_is_redelivered_to_the_failing_watcher_only_and_committed_after_its_ack(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 4)
    conn = connection()
    gates = {1: asyncio.Event()}
    sink = DictSink()
    steady = Scripted(topics=[topic], kafka_config_id=conn)
    flaky = Scripted(fails_on({1}, gates), topics=[topic], kafka_config_id=conn)
    triggerer = await Triggerer.start(sink, {"steady": steady, "flaky": flaky})
    producer = triggerer.producer
    group = group_of(conn, topic)
    # flaky raised on 1 at least twice: it was redelivered (no restart of the consumer).
    await until(lambda: flaky.seen.count((0, 1)) >= 2 and len(sink.offsets("flaky")) == 3)
    tp = await committed_once(triggerer, kafka_bootstrap, group, topic, {2, 3})
    assert tp.offset == 1
    gates[1].set()
    await until_committed(kafka_bootstrap, group, topic, [4])
    assert triggerer.producer is producer
    assert steady.seen == [(0, 0), (0, 1), (0, 2), (0, 3)]  # the sibling saw it exactly once
    assert sink.offsets("flaky") == sink.offsets("steady") == [(0, o) for o in range(4)]
    assert set(sink.writes.values()) == {1}
    await triggerer.stop()


async def test_earliest_held_offset_wins(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 5)
    conn = connection()
    gates = {1: asyncio.Event(), 3: asyncio.Event()}
    sink = DictSink()
    flaky = Scripted(fails_on({1, 3}, gates), topics=[topic], kafka_config_id=conn)
    steady = Scripted(topics=[topic], kafka_config_id=conn)
    triggerer = await Triggerer.start(sink, {"steady": steady, "flaky": flaky})
    group = group_of(conn, topic)
    await until(lambda: len(sink.offsets("steady")) == 5 and len(sink.offsets("flaky")) == 3)
    gates[3].set()  # the later hold lifts first: the commit must stay at the earlier one
    await until(lambda: (0, 3) in sink.offsets("flaky"))
    tp = await committed_once(triggerer, kafka_bootstrap, group, topic, {2, 3, 4})
    assert tp.offset == 1
    gates[1].set()
    await until_committed(kafka_bootstrap, group, topic, [5])
    assert sink.offsets("flaky") == [(0, o) for o in range(5)]
    await triggerer.stop()


async def test_rebalance_under_the_consumer_protocol_hands_out_nothing_twice(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    connection: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KIP-848: a second triggerer joins, takes traffic, then leaves.

    Guarantee 7 counted in hand-outs: each rebalance starts once every message handed
    out is persisted, so a watcher is handed each message exactly once, by whichever
    triggerer owned its partition (not collected into a set)."""
    caplog.set_level(logging.INFO, logger="sharedstream")
    topic = create_topic("orders", partitions=6)
    conn = connection(**{"group.protocol": "consumer"})
    group = group_of(conn, topic)
    sink = DictSink()  # both triggerers persist into one "table", as two processes would
    total = 0

    async def traffic(rounds: int) -> None:
        nonlocal total
        for _ in range(rounds):
            await asyncio.to_thread(produce, kafka_bootstrap, topic, 60, 6)
            total += 60

    async def settled() -> None:
        """Every message produced so far is persisted for both watchers and committed."""
        await until(lambda: len(sink.events) == 2 * total)
        deadline = asyncio.get_running_loop().time() + 60
        while sum(await committed_at(kafka_bootstrap, group, topic, 6)) != total:
            assert asyncio.get_running_loop().time() < deadline, "commits did not reach the end"
            await asyncio.sleep(0.05)

    def watchers() -> dict[str, Scripted]:
        return {w: Scripted(topics=[topic], kafka_config_id=conn) for w in ("w1", "w2")}

    first = await Triggerer.start(sink, watchers())
    await until(lambda: first.producer.health().assigned_partitions == 6)
    await traffic(5)
    await settled()
    second = await Triggerer.start(sink, watchers())
    await until(lambda: second.producer.health().assigned_partitions > 0)
    await until(lambda: first.producer.health().assigned_partitions < 6)
    await traffic(10)
    await until(lambda: all(t.seen for t in second.watchers.values()))
    await settled()
    await second.stop()
    await traffic(5)
    await until(lambda: first.producer.health().assigned_partitions == 6)
    await settled()
    await first.stop()
    per_partition = {p: total // 6 for p in range(6)}
    expected = Counter((p, o) for p, n in per_partition.items() for o in range(n))
    for watcher in ("w1", "w2"):
        handed = Counter(first.watchers[watcher].seen) + Counter(second.watchers[watcher].seen)
        assert handed == expected, watcher
    assert max(sink.writes.values()) == 1
    assert "assigned" in caplog.text and "revoked" in caplog.text
    errors = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.WARNING and "commit" in r.getMessage()]
    assert errors == []


async def test_two_copies_of_a_replayed_dead_letter_resolve_and_the_commit_reaches_the_end(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    """A dead letter replayed twice (two --groups, a resumed replay, a DLQ duplicate) is two
    records on the topic: both resolve, the watcher's events stay one per original message,
    and the commit reaches the end of the partition while the triggerer runs.

    Both copies and the new traffic are on the topic before the triggerer starts again, so
    they arrive in one batch: the second copy is read while the first is still in flight.
    """
    topic, dlq = create_topic("orders"), create_topic("orders-dlq")
    produce(kafka_bootstrap, topic, 20)
    conn = connection()
    group = group_of(conn, topic)
    fixed = False  # picky rejects offsets 3 and 7 until it is "fixed", then takes replays

    def picky_script(m: KafkaMessage) -> str:
        return "reject" if m.offset in (3, 7) and not fixed else "event"

    def watchers() -> dict[str, Scripted]:
        return {"all": Scripted(topics=[topic], kafka_config_id=conn, dlq_topic=dlq),
                "picky": Scripted(picky_script, topics=[topic], kafka_config_id=conn,
                                  dlq_topic=dlq)}

    sink = DictSink()
    first = await Triggerer.start(sink, watchers())
    await until_committed(kafka_bootstrap, group, topic, [20])
    await first.stop()
    fixed = True
    settings = {"bootstrap.servers": kafka_bootstrap}
    for replay_group in ("replay-a", "replay-b"):
        rules = ReplayRules(parking_topic=f"{dlq}.parking", to=ORIGINAL)  # copies + traffic
        summary = await asyncio.to_thread(Replayer(settings, dlq, rules, group=replay_group).run)
        assert summary.as_dict()["replayed"] == 2, summary.as_dict()
    produce(kafka_bootstrap, topic, 10)  # 20..23 are the four copies, 24..33 new traffic
    second = await Triggerer.start(sink, watchers())
    await until(lambda: len(sink.offsets("picky")) == 30)
    await until_committed(kafka_bootstrap, group, topic, [34])
    await second.stop()
    assert sink.offsets("all") == [(0, o) for o in range(20)] + [(0, o) for o in range(24, 34)]
    assert sink.offsets("picky") == sink.offsets("all")
    # Each copy of a replay is handled (its second write is the idempotent no-op).
    assert {k[:4] for k, n in sink.writes.items() if n > 1} <= {
        ("picky", k[1], 0, o) for k in sink.events for o in (3, 7)}


def recreate_topic(admin: AdminClient, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again under the same name (a new topic id)."""
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    deadline = time.monotonic() + 60
    while True:
        future = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
            operation_timeout=30)[topic]
        try:
            future.result(30)
            break
        except KafkaException as exc:  # the deletion is still being carried out
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        assert time.monotonic() < deadline, f"{topic} could not be created again"
        time.sleep(0.2)
    while True:
        meta = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None and all(
                p.leader >= 0 for p in meta.partitions.values()) and meta.partitions:
            return
        assert time.monotonic() < deadline, f"{topic} has no leader after it was recreated"
        time.sleep(0.05)


async def test_a_watched_topic_deleted_and_recreated_continues_as_a_new_stream(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Callable[..., str],
    connection: Callable[..., str], caplog: pytest.LogCaptureFixture,
) -> None:
    """Offsets start from 0 again under a new topic id: every new record becomes an event,
    keyed by the new id, without a restart, and the recreation is logged."""
    caplog.set_level(logging.INFO, logger="sharedstream")
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, 50)
    conn = connection()
    group = group_of(conn, topic)
    sink = DictSink()
    triggerer = await Triggerer.start(
        sink, {w: Scripted(topics=[topic], kafka_config_id=conn) for w in ("w1", "w2")})
    await until_committed(kafka_bootstrap, group, topic, [50])
    [old_id] = {key[1] for key in sink.events}
    await asyncio.to_thread(recreate_topic, kafka_admin, topic)
    await asyncio.to_thread(produce, kafka_bootstrap, topic, 50)
    await until(lambda: len(sink.events) == 200, within=90)
    await until_committed(kafka_bootstrap, group, topic, [50])
    await triggerer.stop()
    by_id = Counter(key[1] for key in sink.events)
    assert by_id[old_id] == 100 and len(by_id) == 2
    assert sink.offsets("w1") == sink.offsets("w2") == sorted(2 * [(0, o) for o in range(50)])
    assert set(sink.writes.values()) == {1}
    assert "recreated" in caplog.text


class StatsRounds:
    """Counts the consumer's statistics reports (one per ``statistics.interval.ms``): each
    is a new mapping. The reports seen are kept, so a freed one's ``id`` cannot be reused
    by a later report and make two rounds look like one."""

    def __init__(self, producer: KafkaSharedStreamProducer) -> None:
        self._producer = producer
        self._reports: list[Mapping[Any, Any]] = []

    def seen(self, rounds: int) -> bool:
        report = self._producer.partition_stats()
        if not self._reports or report is not self._reports[-1]:
            self._reports.append(report)
        return len(self._reports) >= rounds


async def test_an_absent_watcher_lets_its_sibling_run_max_in_flight_ahead(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    """Guarantee 4: a declared watcher that is not there holds what it has not handled;
    its sibling is not held back before the in-flight bound, and runs past it by at most
    what was read before the pause landed: what the sibling handled is held for the
    absent one, and admission stops once ``bound`` messages are held above the floor;
    what was admitted below it (a hand-out: the loop backlog, ``bound`` messages, and a
    batch) and the backlog read before the pause (as much again) still reach the
    sibling. When the absent watcher arrives it gets everything it missed, and the
    partition commits."""
    bound, batch, total = 300, 1000, 6_000  # batch: what one consume() may return
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, total)
    conn = connection(**{"statistics.interval.ms": 100})
    sink = DictSink()
    watchers = {"present": Scripted(topics=[topic], kafka_config_id=conn),
                "absent": Scripted(topics=[topic], kafka_config_id=conn)}
    manager = SharedStreamManager(
        sink, replace(SETTINGS, max_in_flight=bound, cohort_grace_period=0.5))
    manager.declare_cohort(watchers["present"].shared_stream_key(), watchers)
    tasks = [asyncio.create_task(manager.run_watcher("present", watchers["present"]))]
    await until(lambda: len(sink.offsets("present")) >= bound)
    [status] = manager.status()
    producer = status.producer
    assert isinstance(producer, KafkaSharedStreamProducer)
    # The positive marker after the negative: the group holds back for what is in flight
    # (held for the absent watcher) while the consumer goes on polling (a dozen
    # statistics rounds, ~1.2 s, time to read it all).
    await until(lambda: manager.status()[0].paused_because == "in_flight")
    reports = StatsRounds(producer)
    await until(lambda: reports.seen(13))
    handled = sink.offsets("present")
    assert handled == [(0, o) for o in range(len(handled))]
    assert bound <= len(handled) <= 3 * bound + 2 * batch, len(handled)
    assert sink.offsets("absent") == []
    tasks.append(asyncio.create_task(manager.run_watcher("absent", watchers["absent"])))
    await until_committed(kafka_bootstrap, group_of(conn, topic), topic, [total])
    expected = [(0, o) for o in range(total)]
    assert sink.offsets("present") == sink.offsets("absent") == expected
    assert max(sink.writes.values()) == 1
    await manager.stop_all()
    await asyncio.gather(*tasks)


async def test_one_held_message_stops_its_partition_at_max_in_flight_above_the_floor(
    kafka_bootstrap: str, create_topic: Callable[..., str], connection: Callable[..., str]
) -> None:
    """A watcher failing the first message holds the floor; its sibling acks everything
    else. The partition pauses at ``max_in_flight`` messages above the floor, so what the
    process keeps for it stays flat however long the log grows; when the hold lifts,
    everything is handed out and committed.

    The partition's bound counts what no watcher handles (resolved or held) above the
    floor; admission stops once it is reached, and what was admitted below it (one
    hand-out: the loop backlog, ``bound`` messages, and a batch) may still resolve past
    it. The log is 20,000 messages, more than five times what may be read before the
    pause lands (``3 * bound + 2 * batch``). Each bound lifted in the drain costs a seek at the
    end of a prefetched log, which librdkafka serves after the fetch in flight, so the
    drain runs at about ``bound`` messages per cycle: 40 cycles here. A fetch at the log
    end waits ``fetch.wait.max.ms`` for data (500 ms by default, 0.5 to 1 s a cycle);
    50 ms here, which changes when fetches return, not what the bound lets through.
    ``flaky`` is a batch watcher: its raising batch is split down to the first message,
    which holds the floor, and the bound holds across its batches as across messages."""
    bound, batch = 500, 1000  # batch: what one consume() may return
    half = 10_000
    topic = create_topic("orders")
    produce(kafka_bootstrap, topic, half)
    conn = connection(**{"statistics.interval.ms": 100, "fetch.wait.max.ms": 50})
    gates = {0: asyncio.Event()}
    sink = DictSink()
    watchers = {"steady": Scripted(topics=[topic], kafka_config_id=conn),
                "flaky": ScriptedBatch(fails_on({0}, gates), topics=[topic],
                                       kafka_config_id=conn)}
    triggerer = await Triggerer.start(sink, watchers, replace(SETTINGS, max_in_flight=bound))
    producer = triggerer.producer
    await until(lambda: len(sink.offsets("steady")) >= bound // 2)
    await asyncio.to_thread(produce, kafka_bootstrap, topic, half)
    # A dozen statistics rounds of the consumer (~1.2 s) after the log grew: time to
    # read all of it, were it let (the code before the bound had read it all by then).
    reports = StatsRounds(producer)
    await until(lambda: reports.seen(13))
    # Read past the bound: at most what was fetched before the pause landed. The bound,
    # and what was admitted below it; the consumer thread reads on while its backlog
    # is under ``max_in_flight`` messages (one batch past it at most) and applies the
    # pause before its next read.
    consumed = producer.counters().messages_consumed
    assert consumed <= 3 * bound + 2 * batch, consumed
    # What the partition keeps is what it admitted: the resolved and held (under the
    # bound when the last whole run was admitted, one record past it at the stop) and
    # what the watchers were handling then, which only the group's soft bound limits
    # (its flight, plus a hand-out read before its pause landed): at most what was
    # consumed, so flat however long the log. (A tighter ``2 * bound + batch`` failed CI
    # at 2,001: a run admitted while the watchers still handled part of the hand-out
    # before it.)
    distance, _, at_bound = producer.floor_distances()[(topic, 0)]
    assert at_bound and bound <= distance <= consumed, (distance, consumed, at_bound)
    gates[0].set()
    await until_committed(kafka_bootstrap, group_of(conn, topic), topic, [2 * half])
    assert sink.offsets("steady") == sink.offsets("flaky") == [(0, o) for o in range(2 * half)]
    assert producer.floor_distances()[(topic, 0)] == (0, 0, False)
    await triggerer.stop()
