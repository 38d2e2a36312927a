"""Property test of the core: the manager and the Kafka producer on the in-memory Kafka.

Hypothesis draws a scenario: partitions, messages, one to three watchers each with a
script per message (raise a few times, then make an event, filter the message out, or
reject it), a fault (a second triggerer joining and leaving, or a session expiry), a
small or large in-flight bound, and a replay of some dead letters (some twice). The
scenario runs through real ``SharedStreamManager``s and ``KafkaSharedStreamProducer``s
on a ``MemoryBroker``; then it is checked against a model computed from the script
alone, not from what the code did:

* every message's outcome per watcher is its script's: its event (exactly one, keyed by
  the original coordinates), nothing, or a dead-letter record naming exactly the
  watchers that rejected it; a replayed dead letter becomes an event of those watchers;
* every partition's committed offset reaches the end of the log;
* a watcher is handed a message again only after it failed it, as a replay, or after a
  fault moved the partition when the commit its next owner started from did not cover
  the message (neither below the committed offset nor remembered in its metadata):
  guarantees 5 and 7, whatever the fault. The consumers note, in one order on their
  thread, what each assignment started from and every record they return; each
  assignment after a message was first read that did not cover it allows one more
  hand-out of it per watcher, nothing else.

Some watchers are batch watchers (``filter_shared_batch``, issue 27) following the same
script: a message that is to raise makes its whole batch raise, and counts an attempt
only when it raises alone, after the framework split its batch down to it; so the model
of hand-outs is the per-message one (a hand-out is a call that settled the message, or
that raised on it alone). In the first few runs whose fault is a session expiry, the
first batch call waits for the partitions to move before it returns, so a rebalance
lands mid-batch. In some runs one or two watchers, all batch watchers, take pieces of two
(``subscriber_queue_size``) of scripts that mostly filter out: a counted slice is then
taken in several batches, and a later piece that needs entries itemises it after every
owing watcher acked a prefix cleanly (counted as "split slice itemised").

In some runs the watchers declare a ``match`` (issue 42): keys ``n % 4`` and the value
``n`` itself (JSON) say which messages each wants, and a watcher is handed only those;
its script applies to them alone, and a message no watcher wants must settle without a
hand-out. The model of what a match takes is written here from the scenario, not from
the index.

Each run counts what it exercised (acks, failures, rejections, holds and redeliveries,
windows, partitions moved, replays, bound pauses, batch splits, partial batch failures,
rejections inside a batch, rebalances mid-batch, split slices itemised, messages routed
to nobody and to several watchers with a match, batch calls made inline in the
fan-out's step and such calls that waited and ended in their runner's task) through
``hypothesis.event``; the test
fails when a kind never happened over all examples, so the property cannot pass by
exercising nothing (run alone, it runs the property's examples first).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from memory_adapter import memory_producer
from sharedstream.core import inline
from sharedstream.core.batch import BatchWindow, MessageBatch
from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.message import KafkaMessage
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.core.window import Window
from sharedstream.kafka import dlq_headers as h
from sharedstream.kafka.memory import MemoryBroker, MemoryConsumer
from sharedstream.kafka.progress import decode_progress
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event
from sharedstream.triggers.kafka import KafkaSharedStreamTrigger

pytestmark = pytest.mark.unit

TOPIC, DLQ, GROUP_ID = "t", "t.dlq", "app"
GROUP = f"{GROUP_ID}.{TOPIC}"
WATCHERS = ("a", "b", "c")
FINALS = ("event", "event", "event", "skip", "reject")
Coordinates = tuple[int, int]  # (partition, offset) of the original message
KINDS = ("ack", "failure", "rejection", "redelivery", "window", "moved", "replay",
         "bound pause", "batch split", "partial batch failure", "batch rejection",
         "rebalance mid-batch", "split slice itemised", "routed to nobody",
         "routed to several", "inline batch call", "inline call resumed in its task")
KEYS = 4  # message n is keyed str(n % KEYS); its value is n (JSON)
# A watcher's match, as data the scenario draws: ("keys", frozenset of key numbers),
# ("below", n: values under n) or ("either", keys, n): either of the two.
Route = tuple[Any, ...]
SEEN: Counter[str] = Counter()
# Examples whose first batch call is held until an expiry moves its partitions (each
# costs about a second, the broker's time to notice).
MID_BATCH_HOLDS = 3
# How many examples of the property ran in this process (the kinds test needs some).
EXAMPLES: list[int] = [0]
# One run's reads and assignments of the watched topic, in the consumers' order:
# ("read", partition, offset) or ("assign", partition, committed offset or None,
# offsets remembered in its metadata).
Step = tuple[Any, ...]


class RecordingConsumer(MemoryConsumer):
    """Notes where each assignment starts (the commit and metadata it reads) and every
    record it returns."""

    timeline: list[Step]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        records = super().consume(num_messages, timeout)
        self.timeline.extend(("read", r.partition(), r.offset()) for r in records
                             if r.topic() == TOPIC)
        return records

    def incremental_assign(self, partitions: Sequence[Any]) -> None:
        committed = self.broker.committed(self.group_id)
        for tp in partitions:
            offset, metadata = committed.get((tp.topic, tp.partition), (-1, ""))
            if tp.topic == TOPIC:
                self.timeline.append(("assign", tp.partition, None if offset < 0 else offset,
                                      decode_progress(offset, metadata) if offset >= 0
                                      else frozenset()))
        super().incremental_assign(partitions)

    assign = incremental_assign


class RecordingBroker(MemoryBroker):
    """A :class:`MemoryBroker` whose consumers note their assignments in ``timeline``."""

    def __init__(self, topics: Mapping[str, int]) -> None:
        super().__init__(topics)
        self.timeline: list[Step] = []

    def consumer(self, config: dict[str, Any]) -> MemoryConsumer:
        consumer = RecordingConsumer(self, config)
        consumer.timeline = self.timeline
        with self._lock:
            self.consumers.append(consumer)
        return consumer


@dataclass(frozen=True)
class Scenario:
    partitions: int
    messages: int
    watchers: tuple[str, ...]
    # script[watcher][n]: (raises before the final action, final action) for message n
    script: Mapping[str, tuple[tuple[int, str], ...]]
    fault: str  # "none" | "join" | "expire"
    max_in_flight: int
    replay: bool
    replay_twice: bool
    # Held messages wait longer for their retry: a partition may then move with finished
    # offsets above a held one, which only the commit metadata remembers (counted as
    # "remembered at a move"; timing decides, so it is not a required kind). Drawn only
    # with a fault: without a move they add time, and every required kind occurs with
    # quick retries as well (the kinds test checks).
    slow_retries: bool
    batch_watchers: frozenset[str] = frozenset()  # these use filter_shared_batch
    queue_size: int = 1024  # subscriber_queue_size: 2 splits slices into pieces
    routes: Mapping[str, Route | None] = field(default_factory=dict)  # None: everything
    # Records per consume(): a few reads a partition in steps, so what is admitted later
    # meets the bound that what was admitted before reached.
    read_batch: int = 1000
    # The first watcher's first handling of message 0 waits until a partition is paused
    # for its bound (what its siblings resolve above it is kept meanwhile).
    hold_first: bool = False

    def wants(self, watcher: str, n: int) -> bool:
        """Whether ``watcher``'s match takes message ``n`` (the model, not the index)."""
        route = self.routes.get(watcher)
        if route is None:
            return True
        if route[0] == "keys":
            return n % KEYS in route[1]
        if route[0] == "below":
            return n < route[1]
        return n % KEYS in route[1] or n < route[2]


def match_of(route: Route | None) -> dict[str, Any] | None:
    """The match a route is written as."""
    if route is None:
        return None
    keys = {"key": [str(k) for k in sorted(route[1])]} if route[0] != "below" else None
    below = {"value": [{"numeric": ["<", route[-1]]}]} if route[0] != "keys" else None
    if keys and below:
        return {"$or": [keys, below]}
    return keys or below


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    partitions = draw(st.integers(1, 3))
    messages = draw(st.integers(4, 40))
    # Pieces: one or two batch watchers taking two at a time, mostly filtering out (clean
    # pieces); alone, a watcher's clean prefix is all the slice owes before it is itemised.
    pieces = draw(st.integers(0, 3)) == 0
    watchers = WATCHERS[:draw(st.integers(1, 2) if pieces else st.integers(2, 3))]
    action = st.tuples(st.sampled_from((0, 0, 0, 1, 2)), st.sampled_from(FINALS))
    if pieces:
        action = st.sampled_from([(0, "skip")] * 6 + [(1, "skip"), (0, "event"),
                                                      (0, "reject")])
    script = {w: tuple(draw(st.lists(action, min_size=messages, max_size=messages)))
              for w in watchers}
    fault = draw(st.sampled_from(("none", "join", "expire")))
    max_in_flight, replay, replay_twice = (draw(st.sampled_from((3, 8, 10_000))),
                                           draw(st.booleans()), draw(st.booleans()))
    slow_retries = fault != "none" and draw(st.booleans())
    batch = frozenset(w for w in watchers if pieces or draw(st.booleans()))
    routes: dict[str, Route | None] = {}
    if draw(st.integers(0, 2)):  # routed: some watchers (maybe all) declare a match
        keys = st.frozensets(st.integers(0, KEYS - 1), min_size=1, max_size=KEYS - 1)
        below = st.integers(1, messages)
        route = st.one_of(st.none(), st.tuples(st.just("keys"), keys),
                          st.tuples(st.just("below"), below),
                          st.tuples(st.just("either"), keys, below))
        routes = {w: draw(route) for w in watchers}
    return Scenario(partitions, messages, watchers, script, fault, max_in_flight, replay,
                    replay_twice, slow_retries, batch, 2 if pieces else 1024, routes)


@dataclass
class Run:
    """What one example's triggerers did: the 'database' and the hand-outs."""

    scenario: Scenario
    coordinates: dict[int, Coordinates]  # message n -> where it was produced
    events: dict[tuple[str, str, int, int, int], Any] = field(default_factory=dict)
    attempts: Counter[tuple[str, Coordinates]] = field(default_factory=Counter)
    handed: Counter[tuple[str, Coordinates, bool]] = field(default_factory=Counter)
    raised: int = 0
    windows: int = 0
    batch: Counter[str] = field(default_factory=Counter)  # batch kinds exercised
    in_batch: int = 0  # batch calls running now
    hold_batch: bool = False  # the next batch call waits for partitions to move
    managers: list[SharedStreamManager] = field(default_factory=list)

    def resolved_prefix(self, partition: int, offset: int) -> bool:
        """Whether ``offset`` is in a counted slice every watcher still owing it acked a
        prefix of (itemising it now must settle that prefix)."""
        return any(s.entries is None and s.progress and len(s.progress) == s.pending
                   and s.first() <= offset <= s.last()
                   for manager in self.managers for group in manager._groups.values()
                   for lane in group.ledger.partitions.values() if lane.partition == partition
                   for s in lane.slices)

    def submit(self, windows: Sequence[Window]) -> None:
        for window in windows:
            # A batch window holds several messages' events: (record, how many) each.
            parts = (window.parts if isinstance(window, BatchWindow)
                     else [(window.payload, len(window.events))])
            events = iter(window.events)
            for payload, count in parts:
                origin = payload.origin
                for index in range(count):
                    self.events[(window.watcher, origin.topic_id, origin.partition,
                                 origin.offset, index)] = next(events).payload
                    self.windows += 1
            window.confirm()


class Scripted(KafkaSharedStreamTrigger):
    """Follows the scenario's script for its watcher; replayed copies become events."""

    broker: ClassVar[MemoryBroker]
    run: ClassVar[Run]

    def __init__(self, watcher: str, match: dict[str, Any] | None = None) -> None:
        super().__init__(topics=[TOPIC], kafka_config_id="memory", poll_timeout=0.01,
                         dlq_topic=DLQ, match=match)
        self.watcher = watcher

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Mapping[str, Any]) -> Any:
        return memory_producer(cls.broker, kwargs, GROUP_ID, cls.run.scenario.read_batch)

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        run = self.run
        message: KafkaMessage
        async for message in stream:
            where = (message.partition, message.offset)
            replay = any(k == h.REPLAY_COUNT for k, _ in message.headers or ())
            run.handed[(self.watcher, where, replay)] += 1
            if replay:
                yield TriggerEvent(f"replayed {where}")
                continue
            raises, final = run.scenario.script[self.watcher][int(message.value or b"0")]
            run.attempts[(self.watcher, where)] += 1
            if (run.scenario.hold_first and where == (0, 0) and run.attempts[
                    (self.watcher, where)] == 1 and self.watcher == run.scenario.watchers[0]):
                await until(lambda: any(c.pause_calls for c in Scripted.broker.consumers),
                            "a partition paused for its bound")
            if run.attempts[(self.watcher, where)] <= raises:
                run.raised += 1
                raise RuntimeError(f"{self.watcher} fails {where}")
            if final == "reject":
                reject_shared_stream_event(f"{self.watcher} rejects")
            elif final == "event":
                yield TriggerEvent(f"{self.watcher} {where}")


class BatchScripted(Scripted):
    """The same script through ``filter_shared_batch`` (see the module docstring)."""

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        run = self.run
        run.in_batch += 1
        first: KafkaMessage = batch.messages[0]
        prefix = run.resolved_prefix(first.partition, first.offset)
        started_inline = inline.running == self.watcher  # called in the fan-out's step
        run.batch["inline batch call"] += started_inline
        try:
            moved = Scripted.broker.moved
            if first.offset % 3 == 0:  # some calls wait: an inline one ends in its task
                await asyncio.sleep(0)
                run.batch["inline call resumed in its task"] += started_inline
            try:
                await self._follow(batch)
            except Exception:
                run.batch["split slice itemised"] += prefix  # split: the slice gets entries
                raise
            if prefix and (batch.emitted or batch.rejected):  # so do events and rejections
                run.batch["split slice itemised"] += 1
            if run.hold_batch:  # this call stays in flight until a partition moves
                run.hold_batch = False
                with contextlib.suppress(AssertionError):  # no move: counted as none
                    await until(lambda: Scripted.broker.moved != moved, "a move", 5.0)
            if Scripted.broker.moved != moved:
                run.batch["rebalance mid-batch"] += 1
        finally:
            run.in_batch -= 1

    async def _follow(self, batch: MessageBatch) -> None:
        run, alone = self.run, len(batch) == 1
        handed = []
        message: KafkaMessage
        for message in batch:
            where = (message.partition, message.offset)
            if any(k == h.REPLAY_COUNT for k, _ in message.headers or ()):
                handed.append((where, True))
                batch.emit(message, TriggerEvent(f"replayed {where}"))
                continue
            raises, final = run.scenario.script[self.watcher][int(message.value or b"0")]
            key = (self.watcher, where)
            if alone:
                run.attempts[key] += 1
                if run.attempts[key] <= raises:
                    run.raised += 1
                    run.handed[(self.watcher, where, False)] += 1
                    raise RuntimeError(f"{self.watcher} fails {where}")
            elif run.attempts[key] < raises:
                run.batch["batch split"] += 1
                if any(run.attempts[(self.watcher, (m.partition, m.offset))] >= run.scenario
                       .script[self.watcher][int(m.value or b"0")][0] for m in batch
                       if m.value != b"replay"):
                    run.batch["partial batch failure"] += 1
                raise RuntimeError(f"{self.watcher} fails {where} in a batch")
            handed.append((where, False))
            if final == "reject":
                batch.reject(message, f"{self.watcher} rejects")
                if not alone:
                    run.batch["batch rejection"] += 1
            elif final == "event":
                batch.emit(message, TriggerEvent(f"{self.watcher} {where}"))
        for where, replay in handed:  # the call settles them: these are hand-outs
            run.handed[(self.watcher, where, replay)] += 1


def start(run: Run, settings: ManagerSettings) -> tuple[SharedStreamManager, list[Any]]:
    manager = SharedStreamManager(run, settings)
    run.managers.append(manager)
    routes = run.scenario.routes
    triggers = {w: (BatchScripted if w in run.scenario.batch_watchers else Scripted)(
        w, match_of(routes.get(w))) for w in run.scenario.watchers}
    manager.declare_cohort(next(iter(triggers.values())).shared_stream_key(), triggers,
                           {w: t.match for w, t in triggers.items()})
    tasks = [asyncio.create_task(manager.run_watcher(w, t)) for w, t in triggers.items()]
    return manager, tasks


async def stop(manager: SharedStreamManager, tasks: list[Any]) -> None:
    await manager.stop_all()
    await asyncio.gather(*tasks)


async def until(check: Any, what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached: {what}")
        await asyncio.sleep(0.005)


def ends(broker: MemoryBroker, partitions: int) -> dict[tuple[str, int], int]:
    return {(TOPIC, p): len(broker.records(TOPIC, p)) for p in range(partitions)}


def all_committed(broker: MemoryBroker, partitions: int) -> bool:
    committed = broker.committed(GROUP)
    return all(committed.get(k, (-1, ""))[0] == end
               for k, end in ends(broker, partitions).items())


def dead_letters(broker: MemoryBroker) -> list[tuple[Coordinates, frozenset[str], Any]]:
    out = []
    for record in broker.delivered:
        if record["topic"] != DLQ:
            continue
        headers = dict(record["headers"])
        where = (int(headers[h.ORIGINAL_PARTITION]), int(headers[h.ORIGINAL_OFFSET]))
        out.append((where, frozenset(json.loads(headers[h.REJECTIONS])), record["headers"]))
    return out


async def play(scenario: Scenario) -> None:
    broker = RecordingBroker({TOPIC: scenario.partitions, DLQ: 1})
    Scripted.broker = broker
    coordinates = {n: (n % scenario.partitions, broker.produce(
        TOPIC, str(n).encode(), key=str(n % KEYS).encode(), partition=n % scenario.partitions))
        for n in range(scenario.messages)}
    run = Scripted.run = Run(scenario, coordinates)
    settings = ManagerSettings(max_in_flight=scenario.max_in_flight, max_attempts=1000,
                               retry_backoff_initial=0.05 if scenario.slow_retries
                               else 0.002, retry_backoff_max=0.1 if scenario.slow_retries
                               else 0.02,
                               cohort_grace_period=5.0,
                               subscriber_queue_size=scenario.queue_size)
    # Only a lost assignment (expiry) moves partitions under a call that waits: a revocation
    # waits for what its watchers were handed, so a held call would only delay it.
    # The broker notices an expiry about a second later: held in a few examples only.
    run.hold_batch = (scenario.fault == "expire" and bool(scenario.batch_watchers)
                      and SEEN["rebalance mid-batch"] < MID_BATCH_HOLDS)
    first = start(run, settings)
    if scenario.fault == "join":
        await until(lambda: run.handed or run.in_batch, "a first hand-out")
        second = start(run, settings)
        await until(lambda: broker.moved > 0 or all_committed(broker, scenario.partitions),
                    "a partition moving to the second triggerer")
        await stop(*second)
    elif scenario.fault == "expire":
        # With batch watchers, expire while the first batch call is held in flight.
        await until(lambda: run.in_batch if run.hold_batch else run.handed or run.in_batch,
                    "a first hand-out")
        broker.expire(broker.consumers[0])
    await until(lambda: all_committed(broker, scenario.partitions), "commits at the end")
    replays, replayed = 0, set[Coordinates]()
    if scenario.replay:
        chosen = {where: headers for where, _, headers in dead_letters(broker)}
        for where, headers in sorted(chosen.items())[::2]:
            copies = 2 if scenario.replay_twice else 1
            replayed.add(where)
            for _ in range(copies):
                broker.produce(TOPIC, b"replay", headers=h.replay_headers(headers),
                               partition=where[0])
                replays += 1
        await until(lambda: all_committed(broker, scenario.partitions), "replays committed")
    pauses = sum(c.pause_calls for c in broker.consumers)
    redelivered = sum(g.counters.redelivered for g in first[0]._groups.values())
    unrouted = sum(g.counters.unrouted for m in run.managers for g in m._groups.values())
    await stop(*first)
    check(scenario, run, broker, replayed)
    counts = {"ack": sum(1 for w in scenario.watchers for _, f in scenario.script[w]
                         if f != "reject"),
              "failure": run.raised, "rejection": len(dead_letters(broker)),
              "redelivery": redelivered, "window": run.windows, "moved": broker.moved,
              "replay": replays, "bound pause": pauses,
              "remembered at a move": sum(1 for step in broker.timeline
                                          if step[0] == "assign" and step[3]),
              "routed to nobody": unrouted,
              "routed to several": routed_to_several(scenario, run),
              **run.batch}
    EXAMPLES[0] += 1
    for kind, n in counts.items():
        if n:
            SEEN[kind] += 1
            event(f"exercised: {kind}")


def routed_to_several(scenario: Scenario, run: Run) -> int:
    """How many messages were handed to two or more watchers with a match."""
    routed = {w for w, route in scenario.routes.items() if route is not None}
    return sum(1 for where in run.coordinates.values()
               if len({w for (w, c, replay) in run.handed if c == where and not replay
                       and w in routed}) >= 2)


def check(scenario: Scenario, run: Run, broker: RecordingBroker,
          replayed: set[Coordinates]) -> None:
    """The outcome the script alone implies, against what the triggerers persisted."""
    [topic_id] = {k[1] for k in run.events} or {"id-t"}
    letters = dead_letters(broker)
    rejecters: dict[Coordinates, frozenset[str]] = {}
    for where, names, _ in letters:
        assert rejecters.setdefault(where, names) == names, f"dead letters of {where} differ"
    expected_events = set()
    for n, where in run.coordinates.items():
        rejected_by = frozenset(w for w in scenario.watchers
                                if scenario.script[w][n][1] == "reject" and scenario.wants(w, n))
        assert rejecters.get(where, frozenset()) == rejected_by, (n, where)
        for w in scenario.watchers:
            if not scenario.wants(w, n):  # its match does not take it: never handed
                assert not run.handed[(w, where, False)], (w, n, where)
                continue
            final = scenario.script[w][n][1]
            if final == "event" or (final == "reject" and where in replayed):
                expected_events.add((w, topic_id, *where, 0))
    assert set(run.events) == expected_events
    moves = uncovered_moves(broker.timeline)
    for (w, where, replay), n in run.handed.items():
        if replay:
            continue
        # Once, again after each failure (guarantee 5), and once more per move whose
        # starting commit did not cover the message (guarantee 7).
        raises = scenario.script[w][_index(run, where)][0]
        assert raises + 1 <= n <= raises + 1 + moves[where], (
            w, where, n, raises, scenario.fault)
        if scenario.fault == "none":
            assert n == raises + 1, (w, where, n)
    for where in replayed:  # each rejecter was handed the replay; nobody else was
        assert {w for (w, c, replay) in run.handed if replay and c == where} == rejecters[where]


def uncovered_moves(timeline: Sequence[Step]) -> Counter[Coordinates]:
    """Per message: the assignments of its partition after it was first read whose
    starting commit did not cover it, each allowing one more hand-out per watcher.

    Lenient by one for a message whose first read was discarded (read past a bound and
    read again later): the hand-out its next assignment allows may be its first."""
    first: dict[Coordinates, int] = {}
    assigned: dict[int, list[tuple[int, int | None, frozenset[int]]]] = {}
    for i, step in enumerate(timeline):
        if step[0] == "read":
            first.setdefault((step[1], step[2]), i)
        else:
            assigned.setdefault(step[1], []).append((i, step[2], step[3]))
    out: Counter[Coordinates] = Counter()
    for (partition, offset), since in first.items():
        out[(partition, offset)] = sum(
            1 for i, base, remembered in assigned.get(partition, ())
            if i > since and (base is None or offset >= base) and offset not in remembered)
    return out


def _index(run: Run, where: Coordinates) -> int:
    return next(n for n, c in run.coordinates.items() if c == where)


# Always run once: a batch watcher alone taking pieces of two, whose first piece says
# nothing and whose second emits, so a counted slice is itemised after a clean prefix in
# every run (drawn, that shape is too rare to be certain in 40 examples).
SPLIT_SLICE = Scenario(
    partitions=1, messages=6, watchers=("a",),
    script={"a": ((0, "skip"), (0, "skip"), (0, "event"), (0, "skip"), (0, "skip"),
                  (0, "skip"))},
    fault="none", max_in_flight=10_000, replay=False, replay_twice=False,
    slow_retries=False, batch_watchers=frozenset({"a"}), queue_size=2)


# Always run once: every watcher with a match, keys 1 and 3 wanted by nobody, key 0 by
# two watchers (a batch watcher and a per-message one), some rejections to replay.
ROUTED = Scenario(
    partitions=2, messages=12, watchers=("a", "b"),
    script={"a": tuple((0, "reject") if n % 5 == 0 else (0, "event") for n in range(12)),
            "b": tuple((1, "event") if n % 3 == 0 else (0, "skip") for n in range(12))},
    fault="none", max_in_flight=10_000, replay=True, replay_twice=True,
    slow_retries=False, batch_watchers=frozenset({"a"}),
    routes={"a": ("keys", frozenset({0, 2})), "b": ("either", frozenset({0}), 3)})


# Always run once: a partition's bound reached by what is kept above a message still
# handled (bound 3). Watcher a, routed message 0 alone, holds it until the partition is
# paused, while b resolves the rest past it. A group that publishes its targets as soon
# as it has nothing in flight rarely keeps that much otherwise, so drawn examples alone
# may never pause a partition. Read two records at a time: read in one batch, all 24
# were admitted before any resolved, and nothing was left to meet the bound. (This
# example once failed a message and raced its retry: under CI's load the retry came
# before three messages resolved, and no partition paused.)
BOUND = Scenario(
    partitions=1, messages=24, watchers=("a", "b"),
    script={"a": ((0, "event"),) * 24, "b": ((0, "skip"),) * 24},
    fault="none", max_in_flight=3, replay=False, replay_twice=False,
    slow_retries=False, routes={"a": ("below", 1)}, read_batch=2, hold_first=True)


# Always run once: a batch watcher whose first call is held in flight until an expiry
# moves its partitions. Drawn, that needs an expiry scenario whose held call does not
# raise first; on a loaded machine 40 examples sometimes had none (the kinds test failed
# in 3 of 6 runs of the unit suite beside a CI run).
EXPIRE_MID_BATCH = Scenario(
    partitions=2, messages=8, watchers=("a",),
    script={"a": ((0, "event"),) * 8},
    fault="expire", max_in_flight=10_000, replay=False, replay_twice=False,
    slow_retries=False, batch_watchers=frozenset({"a"}))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(SPLIT_SLICE)
@example(ROUTED)
@example(BOUND)
@example(EXPIRE_MID_BATCH)
def test_every_message_ends_as_its_script_says(scenario: Scenario) -> None:
    asyncio.run(play(scenario))


def test_the_property_exercised_every_kind_of_step() -> None:
    """Each kind happened in some example of the property: the examples that ran before
    (file order), or, when this test runs alone, the property's own run first."""
    if not EXAMPLES[0]:
        test_every_message_ends_as_its_script_says()
    missing = [kind for kind in KINDS if not SEEN[kind]]
    assert not missing, f"never exercised: {missing} (seen: {dict(SEEN)})"
