"""Batch watchers (``filter_shared_batch``, issue 27): one call and one ack per batch,
events bound to their message, state staged per batch, a raising batch split, the ack
timeout per call, rejections, the sink's refusals, and partitions lost mid-batch.

Outcomes are read from the group's ledger, the adapter's dead letters and commit
targets, and the windows the sink was handed: what the Kafka adapter and the database
would see."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from manager_fakes import FakeTrigger, Harness, settle

from sharedstream import MessageBatch
from sharedstream.core.batch import BatchWindow
from sharedstream.core.ledger import State
from sharedstream.core.window import current_window
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event

pytestmark = pytest.mark.unit

BatchHandler = Callable[[MessageBatch], Awaitable[None]]


async def keep_nothing(batch: MessageBatch) -> None:
    return None


class BatchTrigger(FakeTrigger):
    """A batch watcher: records each call's messages, then runs ``batch_handler``."""

    def __init__(self, batch_handler: BatchHandler = keep_nothing) -> None:
        super().__init__("k")
        self.batch_handler = batch_handler
        self.calls: list[list[str]] = []

    async def filter_shared_batch(self, batch: MessageBatch) -> None:
        self.calls.append(list(batch))
        await self.batch_handler(batch)


def start_batch(h: Harness, name: str, handler: BatchHandler = keep_nothing) -> BatchTrigger:
    trigger = BatchTrigger(handler)
    h.triggers[name] = trigger
    h.tasks[name] = asyncio.get_running_loop().create_task(h.manager.run_watcher(name, trigger))
    return trigger


def lane(n: int) -> list[tuple[str, int]]:
    return [("p", i) for i in range(n)]


async def test_one_call_per_batch_and_the_batch_acked_without_the_sink() -> None:
    h = Harness(["a", "b"])
    a = start_batch(h, "a")
    h.start("b")  # a per-message sibling on the same group
    await settle()
    h.producer.feed(*lane(50))
    await settle()
    assert a.calls == [[f"p:{i}" for i in range(50)]]  # one await for the whole batch
    assert h.sink.batches == []
    assert all(h.outcome(p).acked == {"a", "b"} for p in lane(50))
    assert h.publish() == {"p": 50}
    await h.stop()


async def test_events_are_bound_to_their_messages_and_acked_after_the_commit() -> None:
    async def every_tenth(batch: MessageBatch) -> None:
        for msg in batch:
            if int(msg.split(":")[1]) % 10 == 0:
                batch.emit(msg, TriggerEvent(f"{msg}#0"))
                batch.emit(msg, TriggerEvent(f"{msg}#1"))

    h = Harness(["a"])
    start_batch(h, "a", every_tenth)
    await settle()
    h.producer.feed(*lane(25))
    await settle()
    [window] = h.sink.windows
    assert isinstance(window, BatchWindow)
    # per message: its record (coordinates of the event key) and how many events
    assert [(p.coordinates, n) for p, n in window.parts] == [
        (("p", 0), 2), (("p", 10), 2), (("p", 20), 2)]
    assert [e.payload for e in window.events] == [
        "p:0#0", "p:0#1", "p:10#0", "p:10#1", "p:20#0", "p:20#1"]
    # the messages that kept nothing are acked already; those with events wait
    assert h.entry(("p", 1)).state is State.TERMINAL  # type: ignore[union-attr]
    assert h.entry(("p", 10)).state is State.PENDING  # type: ignore[union-attr]
    assert h.publish() == {"p": 0}
    window.confirm()
    await settle()
    assert h.publish() == {"p": 25}
    await h.stop()


async def test_staged_state_commits_with_the_batch_and_holds_every_message() -> None:
    async def stage(batch: MessageBatch) -> None:
        window = current_window()
        assert window is not None and window.is_open
        window.staged = {"last_seen": batch.messages[-1]}
        batch.emit(batch.messages[0], TriggerEvent("first"))

    h = Harness(["a"])
    start_batch(h, "a", stage)
    await settle()
    h.producer.feed(*lane(5))
    await settle()
    [window] = h.sink.windows
    assert window.staged == {"last_seen": "p:4"}
    assert [e.payload for e in window.events] == ["first"]
    assert h.resolved() == []  # the state may be why p:1..4 need no event: all wait
    h.sink.fail("a", "p:0", RuntimeError("database down"))
    await settle()
    assert all(h.outcome(p).failed == {"a"} for p in lane(5))  # held, retried
    assert h.group.counters.failed == {"a": 5}
    assert current_window() is None
    await h.stop()


async def test_a_raising_batch_is_split_down_to_the_message_that_raises() -> None:
    async def poison(batch: MessageBatch) -> None:
        window = current_window()
        assert window is not None
        window.staged = {"batch": list(batch)}
        for msg in batch:
            if msg == "p:5":
                raise ValueError("poison")
            batch.emit(msg, TriggerEvent(msg))

    h = Harness(["a"], retry_backoff_initial=1.0, max_attempts=2)
    a = start_batch(h, "a", poison)
    await settle()
    h.producer.feed(*lane(8))
    await settle()
    # 8 -> [0..3] ok, [4..7] raises -> [4,5] raises -> [4] ok, [5] raises alone; [6,7] ok
    assert [len(c) for c in a.calls] == [8, 4, 4, 2, 1, 1, 2]
    windows = h.sink.windows
    # every good message's event, in order; the raising calls' staging is gone
    assert [e.payload for w in windows for e in w.events] == [
        f"p:{i}" for i in (0, 1, 2, 3, 4, 6, 7)]
    assert [w.staged for w in windows] == [{"batch": ["p:0", "p:1", "p:2", "p:3"]},
                                           {"batch": ["p:4"]}, {"batch": ["p:6", "p:7"]}]
    for window in windows:
        window.confirm()
    await settle()
    assert h.outcome(("p", 5)).failed == {"a"}
    assert h.entry(("p", 5)).attempts == {"a": 1}  # type: ignore[union-attr]
    assert all(h.outcome(p).acked == {"a"} for p in lane(8) if p != ("p", 5))
    # redelivered alone after its backoff; raising again is its last attempt
    h.clock.advance(1.0)
    await settle()
    assert a.calls[-1] == ["p:5"]
    assert h.outcome(("p", 5)).rejected == {"a": "max attempts: ValueError: poison"}
    assert h.publish() == {"p": 8}
    await h.stop()


async def test_rejections_inside_a_batch_resolve_at_once_with_their_reason() -> None:
    async def reject_odd(batch: MessageBatch) -> None:
        for msg in batch:
            if int(msg.split(":")[1]) % 2:
                batch.emit(msg, TriggerEvent(msg))  # dropped by the rejection below
                batch.reject(msg, "odd")

    h = Harness(["a", "b"])
    start_batch(h, "a", reject_odd)
    h.start("b")
    await settle()
    h.producer.feed(*lane(4))
    await settle()
    assert h.sink.batches == []
    assert h.outcome(("p", 1)).rejected == {"a": "odd"}
    assert h.outcome(("p", 0)).acked == {"a", "b"}
    assert [(p.coordinates, r) for p, r in h.producer.dead_letters] == [
        (("p", 1), {"a": "odd"}), (("p", 3), {"a": "odd"})]
    await h.stop()


async def test_reject_shared_stream_event_in_a_batch_names_batch_reject() -> None:
    async def old_way(batch: MessageBatch) -> None:
        reject_shared_stream_event("nope")

    h = Harness(["a"], max_attempts=1)
    start_batch(h, "a", old_way)
    await settle()
    h.producer.feed(*lane(2))
    await settle()
    reason = h.outcome(("p", 0)).rejected["a"]
    assert "batch.reject(message, reason)" in reason
    await h.stop()


async def test_the_ack_timeout_counts_per_batch_call() -> None:
    gate = asyncio.Event()

    async def hang(batch: MessageBatch) -> None:
        if len(batch) > 1:
            await gate.wait()

    h = Harness(["a", "b"], ack_timeout=30.0, retry_backoff_initial=1.0)
    a = start_batch(h, "a", hang)
    h.start("b")
    await settle()
    h.producer.feed(*lane(3))
    await settle()
    h.clock.advance(29.999)  # one deadline for the call, not one per message
    await settle()
    assert h.resolved() == []
    h.clock.advance(0.001)
    await settle()
    assert all(h.outcome(p).failed == {"a"} for p in lane(3))
    assert all(h.entry(p).attempts == {"a": 1} for p in lane(3))  # type: ignore[union-attr]
    h.clock.advance(1.0)  # restarted, and each held message comes alone
    await settle()
    assert a.calls[1:] == [["p:0"], ["p:1"], ["p:2"]]
    assert all(h.outcome(p).acked == {"a", "b"} for p in lane(3))
    gate.set()
    await h.stop()


async def test_a_batch_the_sink_refuses_is_retried_one_message_at_a_time() -> None:
    async def emit_all(batch: MessageBatch) -> None:
        for msg in batch:
            batch.emit(msg, TriggerEvent(msg))

    h = Harness(["a"], retry_backoff_initial=1.0)
    a = start_batch(h, "a", emit_all)
    await settle()
    h.producer.feed(*lane(3))
    await settle()
    [window] = h.sink.windows
    window.reject("event payload not JSON")  # as the database sink does for one bad payload
    await settle()
    assert h.producer.dead_letters == []  # nobody dead-lettered for a batch-mate
    assert all(h.outcome(p).failed == {"a"} for p in lane(3))
    h.clock.advance(1.0)
    await settle()
    assert a.calls[1:] == [["p:0"], ["p:1"], ["p:2"]]
    singles = h.sink.windows[1:]
    singles[1].reject("event payload not JSON")  # alone, it is that message's rejection
    singles[0].confirm()
    singles[2].confirm()
    await settle()
    assert h.outcome(("p", 1)).rejected == {"a": "event payload not JSON"}
    assert h.outcome(("p", 0)).acked == {"a"} and h.outcome(("p", 2)).acked == {"a"}
    await h.stop()


async def test_messages_of_a_partition_lost_mid_batch_are_dropped_uncommitted() -> None:
    gate = asyncio.Event()

    async def wait_then_emit(batch: MessageBatch) -> None:
        await gate.wait()
        batch.emit(batch.messages[0], TriggerEvent("late"))

    h = Harness(["a"])
    start_batch(h, "a", wait_then_emit)
    await settle()
    h.producer.feed(*lane(4))
    await settle()
    h.producer.end("p")  # revoked while the call runs
    await settle()
    assert h.group.in_flight == 0
    gate.set()
    await settle()
    for window in h.sink.windows:
        window.confirm()
    await settle()
    assert h.publish() == {}  # nothing committed past the dropped messages
    await h.stop()


async def test_a_watcher_leaving_mid_batch_holds_what_it_owed() -> None:
    gate = asyncio.Event()

    async def wait(batch: MessageBatch) -> None:
        await gate.wait()

    h = Harness(["a", "b"])
    start_batch(h, "a", wait)
    h.start("b")
    await settle()
    h.producer.feed(*lane(3))
    await settle()
    await h.manager.unsubscribe("a")
    await settle()
    assert all(h.outcome(p).failed == {"a"} for p in lane(3))
    assert all(h.outcome(p).acked == {"b"} for p in lane(3))
    gate.set()
    await h.stop()


def test_emit_and_reject_take_the_batch_s_own_messages() -> None:
    batch = MessageBatch(["x", "y"])
    with pytest.raises(ValueError, match="not a message of this batch"):
        batch.emit("z", TriggerEvent(1))
    with pytest.raises(TypeError, match="takes a TriggerEvent"):
        batch.emit(batch.messages[0], "not an event")  # type: ignore[arg-type]
    batch.reject(batch.messages[1], "no")
    batch.emit(batch.messages[1], TriggerEvent(2))  # rejected: binds nothing
    assert batch.emitted is None and batch.rejected == {1: "no"}
