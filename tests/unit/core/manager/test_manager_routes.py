"""Routed fan-out (issue 42): a message goes only to the watchers whose match takes it,
plus those without a match; what nobody wants settles at once.

The group runs on the in-memory adapter with ``KafkaMessage`` values (keys and JSON
values to route on). Outcomes are read from the group's ledger, counters, the adapter's
dead letters and commit targets, as the Kafka adapter and the database would see them;
holds, redelivery, rejection, absent watchers and replays are checked for routed
watchers, in both filter APIs.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from manager_fakes import FakeTrigger, Harness, settle

from sharedstream import KafkaMessage, MessageBatch
from sharedstream.core import inline
from sharedstream.core.ledger import State
from sharedstream.core.routing import MatchError
from sharedstream.core.shares import Share
from sharedstream.core.stream import SharedStream
from sharedstream.testing.memorystream import LocalRecord
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event

pytestmark = pytest.mark.unit

Seen = dict[str, list[str]]


def message(offset: int, key: str | None, value: Any = None, lane: str = "p") -> KafkaMessage:
    body = None if value is None else json.dumps(value).encode()
    return KafkaMessage(lane, 0, offset, 0, None if key is None else key.encode(), body)


def feed(h: Harness, *keys: str | None, start: int = 0, lane: str = "p",
         values: list[Any] | None = None) -> None:
    """One consumed batch: message ``start + i`` keyed ``keys[i]``."""
    h.producer.feed_items([
        (message(start + i, key, None if values is None else values[i], lane),
         LocalRecord(lane, start + i)) for i, key in enumerate(keys)])


def name_of(msg: KafkaMessage) -> str:
    return f"{msg.topic}:{msg.offset}"


class Routed(FakeTrigger):
    """A per-message watcher with a match: notes what it is handed; ``act`` decides."""

    def __init__(self, match: Any, seen: Seen, name: str,
                 act: Callable[[KafkaMessage], Awaitable[Any]] | None = None) -> None:
        super().__init__("k")
        self.match = match
        self.seen_by = seen.setdefault(name, [])
        self.act = act

    async def filter_shared_stream(self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for msg in stream:
            self.seen_by.append(name_of(msg))
            result = None if self.act is None else await self.act(msg)
            if result is not None:
                yield TriggerEvent(result)


class RoutedBatch(FakeTrigger):
    """A batch watcher with a match: notes each call's messages; ``act`` per batch."""

    def __init__(self, match: Any, seen: Seen, name: str,
                 act: Callable[[MessageBatch], Awaitable[None]] | None = None) -> None:
        super().__init__("k")
        self.match = match
        self.seen_by = seen.setdefault(name, [])
        self.calls: list[list[str]] = []
        self.act = act

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        self.calls.append([name_of(m) for m in batch])
        self.seen_by.extend(self.calls[-1])
        if self.act is not None:
            await self.act(batch)


def run(h: Harness, name: str, trigger: FakeTrigger) -> FakeTrigger:
    h.triggers[name] = trigger
    h.tasks[name] = asyncio.get_running_loop().create_task(h.manager.run_watcher(name, trigger))
    return trigger


def keyed(i: int) -> dict[str, Any]:
    return {"key": [str(i)]}


async def test_each_watcher_is_handed_only_what_its_match_takes() -> None:
    seen: Seen = {}
    h = Harness(["w0", "w1", "all"])
    run(h, "w0", Routed(keyed(0), seen, "w0"))
    run(h, "w1", Routed({"$or": [keyed(1), {"value": {"vip": [True]}}]}, seen, "w1"))
    run(h, "all", Routed(None, seen, "all"))
    await settle()
    feed(h, "0", "1", "2", "0", "2", values=[{}, {}, {"vip": True}, {}, {}])
    await settle()
    assert seen == {"w0": ["p:0", "p:3"], "w1": ["p:1", "p:2"],
                    "all": ["p:0", "p:1", "p:2", "p:3", "p:4"]}
    assert h.outcome(("p", 2)).acked == {"w1", "all"}
    assert h.outcome(("p", 4)).acked == {"all"}
    assert h.publish() == {"p": 5}
    counters = h.group.counters
    assert counters.outcomes("w0")["acked"] == 2 and counters.outcomes("w1")["acked"] == 2
    assert counters.outcomes("all")["acked"] == 5 and counters.unrouted == 0
    await h.stop()


async def test_what_nobody_wants_settles_at_once_and_is_committed() -> None:
    seen: Seen = {}
    gate = asyncio.Event()

    async def wait(msg: KafkaMessage) -> None:
        await gate.wait()

    h = Harness(["w0", "w1"])
    run(h, "w0", Routed(keyed(0), seen, "w0", wait))
    run(h, "w1", Routed(keyed(1), seen, "w1"))
    await settle()
    feed(h, "7", "8", "0", "9")
    await settle()
    assert seen == {"w0": ["p:2"], "w1": []}
    assert [h.entry(("p", i)).state for i in range(4)] == [  # type: ignore[union-attr]
        State.TERMINAL, State.TERMINAL, State.PENDING, State.TERMINAL]
    assert h.publish() == {"p": 2}  # up to the one w0 still handles
    assert h.group.counters.unrouted == 3 and h.group.in_flight == 1
    gate.set()
    await settle()
    assert h.publish() == {"p": 4}
    await h.stop()


async def test_batch_watchers_get_one_share_each_and_a_slice_nobody_wants_settles() -> None:
    seen: Seen = {}
    h = Harness(["w0", "w1", "w2"])
    triggers = [run(h, f"w{i}", RoutedBatch(keyed(i), seen, f"w{i}")) for i in range(3)]
    await settle()
    feed(h, *[str(i % 4) for i in range(12)])
    await settle()
    assert [t.calls for t in triggers] == [  # type: ignore[attr-defined]
        [["p:0", "p:4", "p:8"]], [["p:1", "p:5", "p:9"]], [["p:2", "p:6", "p:10"]]]
    assert h.publish() == {"p": 12}
    assert h.group.counters.unrouted == 3
    assert {w: h.group.counters.outcomes(w)["acked"] for w in ("w0", "w1", "w2")} == {
        "w0": 3, "w1": 3, "w2": 3}
    feed(h, "5", "6", start=12)  # wanted by nobody: no call, settled, committed
    await settle()
    assert sum(len(t.calls) for t in triggers) == 3  # type: ignore[attr-defined]
    assert h.publish() == {"p": 14} and h.group.in_flight == 0
    await h.stop()


async def test_a_routed_batch_watcher_holds_only_its_own_message_and_gets_it_again() -> None:
    seen: Seen = {}
    raised: list[str] = []

    async def fail_first(batch: MessageBatch) -> None:
        """p:3 raises in every batch, and alone once: the split finds it."""
        for msg in batch:
            if msg.offset == 3 and (len(batch) > 1 or not raised):
                if len(batch) == 1:
                    raised.append(name_of(msg))
                raise RuntimeError("flaky")

    h = Harness(["w0", "w1"], retry_backoff_initial=1.0)
    w0 = run(h, "w0", RoutedBatch(keyed(0), seen, "w0", fail_first))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1"))
    await settle()
    feed(h, "0", "1", "0", "0", "1")
    await settle()
    held = h.outcome(("p", 3))
    assert held.state is State.HELD and held.failed == {"w0"} and held.acked == frozenset()
    assert h.entry(("p", 3)).targets == {"w0"}  # type: ignore[union-attr]
    assert h.publish() == {"p": 3}
    h.clock.advance(1.0)  # the backoff: handed again, to w0 alone, catching up
    await settle()
    assert w0.calls[-1] == ["p:3"]  # type: ignore[attr-defined]
    assert seen["w1"] == ["p:1", "p:4"]
    assert h.publish() == {"p": 5}
    await h.stop()


async def test_a_routed_rejection_dead_letters_naming_only_its_watcher() -> None:
    seen: Seen = {}

    async def reject(msg: KafkaMessage) -> None:
        reject_shared_stream_event("no")

    h = Harness(["w0", "w1", "all"])
    run(h, "w0", Routed(keyed(0), seen, "w0", reject))
    run(h, "w1", Routed(keyed(1), seen, "w1"))
    run(h, "all", Routed(None, seen, "all"))
    await settle()
    feed(h, "1", "0")
    await settle()
    assert [r for _, r in h.producer.dead_letters] == [{"w0": "no"}]
    assert h.outcome(("p", 1)).acked == {"all"}
    assert h.publish() == {"p": 2}
    await h.stop()


async def test_a_missing_routed_watcher_holds_only_what_is_routed_to_it() -> None:
    seen: Seen = {}
    h = Harness(["w0", "w1"], cohort_grace_period=1.0)
    h.manager.declare_cohort("k", ["w0", "w1"], {"w0": keyed(0), "w1": keyed(1)})
    run(h, "w1", Routed(keyed(1), seen, "w1"))
    await settle()
    h.clock.advance(1.0)  # polls without w0
    await settle()
    feed(h, "1", "0", "2", "1")
    await settle()
    assert seen == {"w1": ["p:0", "p:3"]}
    missing = h.outcome(("p", 1))
    assert missing.state is State.HELD and missing.failed == {"w0"}
    assert h.entry(("p", 2)).state is State.TERMINAL  # type: ignore[union-attr]
    assert h.publish() == {"p": 1}
    run(h, "w0", Routed(keyed(0), seen, "w0"))
    await settle()
    h.clock.advance(60.0)
    await settle()
    assert seen["w0"] == ["p:1"]
    assert h.publish() == {"p": 4}
    await h.stop()


async def test_a_replay_goes_to_the_watchers_it_names_whatever_their_match() -> None:
    seen: Seen = {}
    h = Harness(["w0", "w1"])
    run(h, "w0", Routed(keyed(0), seen, "w0"))
    run(h, "w1", Routed(keyed(1), seen, "w1"))
    await settle()
    replay = LocalRecord("p", 1, targets=frozenset({"w1"}))
    h.producer.feed_items([(message(0, "0"), LocalRecord("p", 0)), (message(1, "0"), replay),
                           (message(2, "1"), LocalRecord("p", 2))])
    await settle()
    assert seen == {"w0": ["p:0"], "w1": ["p:1", "p:2"]}
    assert h.publish() == {"p": 3}
    await h.stop()


async def test_a_share_acked_in_part_then_itemised_owes_only_the_rest() -> None:
    """Pieces of two: w0 takes its share in two calls; the second emits, itemising the
    slice after w0 acked a prefix of its share and w1 all of its own."""
    seen: Seen = {}

    async def emit_last(batch: MessageBatch) -> None:
        for msg in batch:
            if msg.offset == 6:
                batch.emit(msg, TriggerEvent("six"))

    h = Harness(["w0", "w1"], subscriber_queue_size=2)
    h.sink.auto = True
    w0 = run(h, "w0", RoutedBatch({"key": ["0"]}, seen, "w0", emit_last))
    run(h, "w1", RoutedBatch({"key": ["1"]}, seen, "w1"))
    await settle()
    feed(h, "0", "1", "0", "1", "0", "9", "0")
    await settle()
    assert w0.calls == [["p:0", "p:2"], ["p:4", "p:6"]]  # type: ignore[attr-defined]
    assert [w.events[0].payload for w in h.sink.windows] == ["six"]
    assert h.publish() == {"p": 7}
    assert h.group.counters.outcomes("w0")["acked"] == 4
    assert h.group.counters.outcomes("w1")["acked"] == 2
    await h.stop()


async def test_queues_hold_shares_not_the_whole_slice() -> None:
    seen: Seen = {}
    gate = asyncio.Event()

    async def wait(batch: MessageBatch) -> None:
        await gate.wait()

    h = Harness(["w0", "w1"])
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", wait))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1", wait))
    await settle()
    feed(h, "0", "1", "1")
    await settle()
    feed(h, "0", "1", "1", "1", start=3)
    await settle()
    queued = {name: list(stream._queue) for name, stream in h.group.streams.items()}
    assert all(isinstance(chunk, Share) for chunks in queued.values() for chunk in chunks)
    assert [len(c) for c in queued["w1"]] == [3] and [len(c) for c in queued["w0"]] == [1]
    gate.set()
    await settle()
    assert h.publish() == {"p": 7}
    await h.stop()


async def test_an_invalid_match_is_refused_at_subscribe() -> None:
    seen: Seen = {}
    h = Harness(["w0"])
    with pytest.raises(MatchError, match="match of watcher 'w0': at key: key values are text"):
        h.manager.subscribe("w0", Routed({"key": [0]}, seen, "w0"))
    assert "k" not in h.manager._groups


async def test_a_settled_routed_slice_leaves_nothing_for_the_collector() -> None:
    """A routed slice and its shares point at each other. Once it settles they are freed
    by reference counting with the messages their lists hold, as an unrouted slice is,
    not left to the collector: at 10,000 watchers collecting those cycles (a share and
    two lists per watcher per batch, and every message) was a fifth of the time."""
    seen: Seen = {}
    h = Harness(["w0", "w1"])
    for i in range(2):
        run(h, f"w{i}", RoutedBatch(keyed(i), seen, f"w{i}"))
    await settle()
    gc.collect()
    gc.disable()
    try:
        feed(h, *[str(i % 3) for i in range(30)])
        await settle()
        assert h.publish() == {"p": 30} and len(seen["w0"]) == len(seen["w1"]) == 10
        left = sum(isinstance(o, Share) for o in gc.get_objects())
    finally:
        gc.enable()
    assert left == 0
    await h.stop()


async def test_an_invalid_match_is_refused_when_its_group_is_running() -> None:
    """A watcher joining a group that exists already is checked as the first one was
    (its match is not the one the cohort declared for it), and the group is unchanged."""
    seen: Seen = {}
    h = Harness(["w0", "w1"])
    h.manager.subscribe("w0", Routed(keyed(0), seen, "w0"))
    group = h.manager._groups["k"]
    with pytest.raises(MatchError, match="match of watcher 'w1': at key: key values are text"):
        h.manager.subscribe("w1", Routed({"key": [1]}, seen, "w1"))
    assert list(group.streams) == ["w0"] and "w1" not in group.routes.matches


async def test_a_replay_wakes_a_routed_watcher_handed_nothing_else_in_its_batch() -> None:
    """The replay is the only thing its watcher gets in the batch, while it waits for a
    message: it must be woken for it (it was not, and the replay was never committed)."""
    seen: Seen = {}
    h = Harness(["w0", "w1"])
    run(h, "w0", Routed(keyed(0), seen, "w0"))
    run(h, "w1", Routed(keyed(1), seen, "w1"))
    await settle()
    h.producer.feed_items([(message(0, "1"), LocalRecord("p", 0)),
                           (message(1, None), LocalRecord("p", 1, targets=frozenset({"w0"})))])
    await settle()
    assert seen == {"w0": ["p:1"], "w1": ["p:0"]}
    assert h.publish() == {"p": 2}
    await h.stop()


async def test_the_routed_watchers_full_queues_pause_the_group_until_one_drains() -> None:
    """Paused at the in-flight bound alone, a group whose traffic is one partition reached
    that partition's own bound first (a seek back and a re-fetch each time): the queues
    of the watchers a batch was routed to pause it as the broadcast queues do."""
    seen: Seen = {}
    gate = asyncio.Event()

    async def wait(batch: MessageBatch) -> None:
        await gate.wait()

    h = Harness(["w0", "w1"], subscriber_queue_size=4, max_in_flight=1_000)
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", wait))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1"))
    await settle()
    feed(h, "1", "0", "0")
    await settle()
    assert not h.producer.paused  # w0 holds 2 (one batch in its filter, one queued)
    feed(h, *["0"] * 6, start=3)
    await settle()
    assert h.producer.paused and h.group.in_flight < 1_000
    gate.set()
    await settle()
    assert not h.producer.paused and h.publish() == {"p": 9}
    await h.stop()


async def test_a_batch_call_runs_in_the_step_that_routed_its_messages() -> None:
    """The routed watcher's runner is parked waiting: its call is made in the fan-out's
    step (the loop watch sees the watcher named there), its task is never woken."""
    seen: Seen = {}
    named: list[str | None] = []

    async def note(batch: MessageBatch) -> None:
        named.append(inline.running)

    h = Harness(["w0", "w1"])
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", note))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1", note))
    await settle()
    stream = h.group.streams["w0"]
    waiter = stream._waiter
    feed(h, "0", "1", "0")
    await asyncio.sleep(0)  # one loop turn: the pump's step alone
    assert seen == {"w0": ["p:0", "p:2"], "w1": ["p:1"]}
    assert sorted(n or "" for n in named) == ["w0", "w1"] and inline.running is None
    assert stream._waiter is waiter and not waiter.done()  # never woken
    await settle()
    assert h.publish() == {"p": 3}
    await h.stop()


async def test_shares_of_one_batch_from_several_partitions_come_in_one_call() -> None:
    """A watcher routed a share of each of two partitions' slices gets them in one call
    (each partition in order), not one call per share; one routed a single share is
    called with it past its queue."""
    seen: Seen = {}
    h = Harness(["w0", "w1"])
    w0 = run(h, "w0", RoutedBatch(keyed(0), seen, "w0"))
    w1 = run(h, "w1", RoutedBatch(keyed(1), seen, "w1"))
    await settle()
    h.producer.feed_items([(message(i, key, lane=lane), LocalRecord(lane, i)) for i, (lane, key)
                           in enumerate([("p", "0"), ("q", "0"), ("p", "1"), ("p", "0"),
                                         ("q", "0")])])
    await settle()
    assert w0.calls == [["p:0", "p:3", "q:1", "q:4"]]  # type: ignore[attr-defined]
    assert w1.calls == [["p:2"]]  # type: ignore[attr-defined]
    assert h.group.streams["w0"].handed == 4 and h.group.streams["w1"].handed == 1
    assert h.publish() == {"p": 4, "q": 5}
    await h.stop()


async def test_a_share_bigger_than_a_batch_is_queued_and_taken_in_parts() -> None:
    seen: Seen = {}
    h = Harness(["w0"], subscriber_queue_size=3)
    w0 = run(h, "w0", RoutedBatch(keyed(0), seen, "w0"))
    await settle()
    feed(h, *["0"] * 7)
    await settle()
    assert [len(call) for call in w0.calls] == [3, 3, 1]  # type: ignore[attr-defined]
    assert seen["w0"] == [f"p:{i}" for i in range(7)] and h.publish() == {"p": 7}
    await h.stop()


async def test_an_inline_call_that_waits_ends_in_its_task_and_may_time_out() -> None:
    seen: Seen = {}
    gate = asyncio.Event()
    calls: list[int] = []

    async def wait_first(batch: MessageBatch) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            await gate.wait()  # suspends the inline call: the task resumes it

    h = Harness(["w0"], ack_timeout=30.0, retry_backoff_initial=1.0)
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", wait_first))
    await settle()
    feed(h, "0", "0")
    await settle()
    assert calls == [2] and h.resolved() == []
    h.clock.advance(30.0)  # the call's deadline: failed, the task restarted
    await settle()
    assert all(h.outcome(("p", i)).failed == {"w0"} for i in range(2))
    h.clock.advance(1.0)  # each held message comes again alone
    await settle()
    assert calls == [2, 1, 1] and h.publish() == {"p": 2}
    gate.set()
    await h.stop()


async def test_an_inline_call_that_emits_holds_the_commit_until_its_events_are_stored() -> None:
    """Both watchers' calls run in the fan-out's step on the same slice: w1 keeps
    nothing (its share resolves with one count, no object), w0 emits (its share is
    opened and waits for its unit of work). The commit stops before w0's message until
    the sink confirms it, then covers the slice; each watcher is counted its own."""
    seen: Seen = {}

    async def emit(batch: MessageBatch) -> None:
        for msg in batch:
            batch.emit(msg, TriggerEvent(name_of(msg)))

    h = Harness(["w0", "w1"])
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", emit))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1"))
    await settle()
    feed(h, "1", "0", "1")
    await settle()
    assert seen == {"w0": ["p:1"], "w1": ["p:0", "p:2"]}
    assert h.publish() == {"p": 1}  # p:1 waits for w0's events
    [window] = h.sink.windows
    assert window.watcher == "w0" and [e.payload for e in window.events] == ["p:1"]
    window.confirm()
    await settle()
    assert h.publish() == {"p": 3} and h.group.in_flight == 0
    assert {w: h.group.counters.outcomes(w)["acked"] for w in ("w0", "w1")} == {
        "w0": 1, "w1": 2}
    await h.stop()


async def test_a_share_queued_after_its_slice_was_itemised_keeps_its_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """w0's call, made in the fan-out's step, emits and so itemises the slice before w1,
    routed all of the same slice, is handed its share: w1's share is queued then, and is
    made an object only then. It still holds its messages, and w1 gets them all."""
    seen: Seen = {}
    queued: list[Share] = []

    async def emit(batch: MessageBatch) -> None:
        for msg in batch:
            batch.emit(msg, TriggerEvent(name_of(msg)))

    h = Harness(["w0", "w1"])
    h.sink.auto = True
    run(h, "w0", RoutedBatch(keyed(0), seen, "w0", emit))
    run(h, "w1", RoutedBatch(keyed(0), seen, "w1"))
    await settle()
    offer = SharedStream.offer

    def noted(stream: SharedStream, chunk: Any) -> None:
        if isinstance(chunk, Share):
            queued.append(chunk)
        offer(stream, chunk)

    monkeypatch.setattr(SharedStream, "offer", noted)
    feed(h, "0", "0", "0")
    await settle()
    assert [(share.watcher, share.messages) for share in queued] == [
        ("w1", [message(i, "0") for i in range(3)])]
    assert seen == {"w0": ["p:0", "p:1", "p:2"], "w1": ["p:0", "p:1", "p:2"]}
    assert h.publish() == {"p": 3}
    await h.stop()


async def test_an_inline_call_that_raises_is_split_in_its_task() -> None:
    seen: Seen = {}

    async def poison(batch: MessageBatch) -> None:
        for msg in batch:
            if msg.offset == 1:
                raise ValueError("poison")
            batch.emit(msg, TriggerEvent(name_of(msg)))

    h = Harness(["w0"], max_attempts=1)
    h.sink.auto = True
    w0 = run(h, "w0", RoutedBatch(keyed(0), seen, "w0", poison))
    await settle()
    feed(h, "0", "0", "0")
    await settle()
    assert w0.calls == [["p:0", "p:1", "p:2"], ["p:0"], ["p:1", "p:2"], ["p:1"],  # type: ignore[attr-defined]
                        ["p:2"]]
    assert [r for _, r in h.producer.dead_letters] == [{"w0": "max attempts: ValueError: poison"}]
    assert sorted(w.events[0].payload for w in h.sink.windows) == ["p:0", "p:2"]
    assert h.publish() == {"p": 3}
    await h.stop()


async def test_a_runner_is_ready_for_a_share_only_while_its_task_waits_with_nothing_queued(
        ) -> None:
    """The fan-out calls a routed share at once only for a runner in ``group.ready``: one
    whose task waits for messages with nothing queued. A call that waits takes it out
    (the next share is queued behind the call, in order), it is listed again once its
    task waits again, and a watcher whose task was cancelled or that left is not listed."""
    seen: Seen = {}
    gate = asyncio.Event()

    async def wait_on_p1(batch: MessageBatch) -> None:
        if any(msg.offset == 1 for msg in batch):
            await gate.wait()

    h = Harness(["w0", "w1"])
    w0 = run(h, "w0", RoutedBatch(keyed(0), seen, "w0", wait_on_p1))
    run(h, "w1", RoutedBatch(keyed(1), seen, "w1"))
    await settle()
    assert set(h.group.ready) == {"w0", "w1"}
    feed(h, "0", "0")  # p:0 and p:1: one call that waits
    await settle()
    assert w0.calls == [["p:0", "p:1"]] and "w0" not in h.group.ready  # type: ignore[attr-defined]
    feed(h, "0", "1", start=2)
    await settle()
    assert w0.calls == [["p:0", "p:1"]] and seen["w1"] == ["p:3"]  # type: ignore[attr-defined]
    assert h.group.streams["w0"].queued == 1 and set(h.group.ready) == {"w1"}
    gate.set()
    await settle()
    assert w0.calls == [["p:0", "p:1"], ["p:2"]]  # type: ignore[attr-defined]
    assert set(h.group.ready) == {"w0", "w1"} and h.publish() == {"p": 4}
    h.tasks["w1"].cancel()
    await settle()
    group = h.group
    assert set(group.ready) == {"w0"}
    await h.stop()
    assert not group.ready


async def test_each_routed_watcher_is_counted_what_it_acked_one_each_or_several() -> None:
    """A slice where each watcher was routed exactly one message counts one each (in one
    C call); one where a watcher was routed several counts each watcher its own."""
    seen: Seen = {}
    h = Harness(["w0", "w1", "w2"])
    for i in range(3):
        run(h, f"w{i}", RoutedBatch(keyed(i), seen, f"w{i}"))
    await settle()
    feed(h, "2", "0", "1", "9")
    await settle()
    acked = {w: h.group.counters.outcomes(w)["acked"] for w in ("w0", "w1", "w2")}
    assert acked == {"w0": 1, "w1": 1, "w2": 1} and h.publish() == {"p": 4}
    feed(h, "0", "1", "0", "0", start=4)
    await settle()
    acked = {w: h.group.counters.outcomes(w)["acked"] for w in ("w0", "w1", "w2")}
    assert acked == {"w0": 4, "w1": 2, "w2": 1} and h.publish() == {"p": 8}
    await h.stop()
