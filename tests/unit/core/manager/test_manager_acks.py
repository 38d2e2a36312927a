"""Acks, the unit-of-work seam, rejections and timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from manager_fakes import FakeTrigger, Harness, one_event, settle

from sharedstream.core.flowcontrol import Pause
from sharedstream.core.ledger import State
from sharedstream.core.stream import HANDOUT_RUN
from sharedstream.core.window import current_window
from sharedstream.triggers.base import TriggerEvent, reject_shared_stream_event

pytestmark = pytest.mark.unit


async def test_filtered_out_messages_resolve_without_the_sink() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert h.sink.batches == []
    assert [(p, h.outcome(p).acked, h.outcome(p).state) for p in h.resolved()] == [
        (("p", 0), {"a", "b"}, State.TERMINAL), (("p", 1), {"a", "b"}, State.TERMINAL)]
    await h.stop()


async def test_ack_needs_the_filter_to_move_past_and_the_unit_of_work_to_commit() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    # After yielding, the filter asked for the next message: it moved past p:0,
    # whose window went to the sink.
    [window] = h.sink.windows
    assert (window.watcher, window.raw, window.payload.coordinates) == ("a", "p:0", ("p", 0))
    assert [e.payload for e in window.events] == ["p:0"]
    assert h.resolved() == []  # not confirmed yet
    h.sink.confirm("a", "p:0")
    await settle()
    assert h.outcome(("p", 0)).acked == {"a"}
    assert h.publish() == {"p": 1}
    await h.stop()


async def test_a_multi_event_message_needs_every_watchers_unit_of_work() -> None:
    async def two_events(message: str) -> list[Any]:
        return [f"{message}#0", f"{message}#1"]

    h = Harness(["a", "b"])
    h.start("a", two_events)
    h.start("b", two_events)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    window = h.sink._find("a", "p:0")
    # events[i] is the event's index within the message (part of its idempotency key)
    assert [e.payload for e in window.events] == ["p:0#0", "p:0#1"]
    h.sink.confirm("a", "p:0")
    await settle()
    assert h.resolved() == []
    h.sink.confirm("b", "p:0")
    await settle()
    assert h.outcome(("p", 0)).acked == {"a", "b"}
    await h.stop()


async def test_staged_state_without_events_goes_through_the_sink() -> None:
    async def stage(message: str) -> list[Any]:
        window = current_window()
        assert window is not None and window.is_open
        window.staged = {"last_seen": message}
        return []

    h = Harness(["a"])
    h.start("a", stage)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert [w.staged for w in h.sink.windows] == [{"last_seen": "p:0"}, {"last_seen": "p:1"}]
    assert [w.events for w in h.sink.windows] == [[], []]
    assert current_window() is None  # outside a watcher: write through
    await h.stop()


async def test_reject_resolves_at_once_with_its_reason_and_skips_the_sink() -> None:
    hold = asyncio.Event()

    async def reject_then_wait(message: str) -> list[Any]:
        reject_shared_stream_event("missing amount")
        await hold.wait()
        return [message]  # reject-then-yield binds nothing

    h = Harness(["a", "b"])
    h.start("a", reject_then_wait)
    h.start("b")
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    outcome = h.outcome(("p", 0))  # the filter is still on p:0
    assert outcome.rejected == {"a": "missing amount"}
    assert outcome.acked == {"b"}
    assert outcome.state is State.TERMINAL  # dead-lettered
    hold.set()
    h.producer.feed(("p", 1))
    await settle()
    assert h.sink.batches == []
    await h.stop()


async def test_yield_then_reject_discards_the_events() -> None:
    class YieldThenReject(FakeTrigger):
        async def filter_shared_stream(
                self, stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
            async for message in stream:
                yield TriggerEvent(message)
                reject_shared_stream_event("changed my mind")

    h = Harness(["a"])
    h.tasks["a"] = asyncio.create_task(h.manager.run_watcher("a", YieldThenReject()))
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert h.sink.batches == []
    assert h.outcome(("p", 0)).rejected == {"a": "changed my mind"}
    await h.stop()


async def test_reject_outside_a_window_warns_and_does_nothing() -> None:
    with pytest.warns(RuntimeWarning, match="outside a message window"):
        reject_shared_stream_event("nope")


async def test_ack_timeout_fails_only_the_laggard_exactly_at_the_deadline() -> None:
    stuck = asyncio.Event()

    async def hang(message: str) -> list[Any]:
        await stuck.wait()
        return []

    h = Harness(["slow", "fast"], ack_timeout=30.0, retry_backoff_initial=1.0)
    h.start("slow", hang)
    h.start("fast")
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    h.clock.advance(29.999)
    await settle()
    assert h.resolved() == []  # just under: not failed
    h.clock.advance(0.001)
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.failed == {"slow"} and outcome.acked == {"fast"}
    # the stuck filter was cancelled and restarts after the backoff
    assert h.triggers["slow"].starts == 1
    h.clock.advance(1.0)
    await settle()
    assert h.triggers["slow"].starts == 2
    assert h.triggers["slow"].seen == ["p:0", "p:0"]  # the held message, handed out again
    stuck.set()
    await h.stop()


async def test_a_slow_watcher_is_never_failed_for_being_slow_only_paused() -> None:
    gate = asyncio.Event()

    async def slow(message: str) -> list[Any]:
        await gate.wait()
        return []

    h = Harness(["slow", "fast"], max_in_flight=4, ack_timeout=30.0)
    h.start("slow", slow)
    h.start("fast")
    await settle()
    h.producer.feed(*[("p", i) for i in range(3)])
    await settle()
    assert not h.producer.paused
    h.producer.feed(("p", 3), ("p", 4))
    await settle()
    assert h.producer.paused and h.producer.pause_calls == 1
    h.clock.advance(29.9)  # slow, within its ack timeout: paused, nobody failed
    await settle()
    assert h.resolved() == [] and h.group.counters.failed == {}
    assert h.triggers["slow"].starts == 1
    gate.set()
    await settle()
    assert not h.producer.paused and h.producer.resume_calls == 1
    # p:4 came after the partition's bound (4): read again once the floor moved.
    assert h.triggers["slow"].seen == h.triggers["fast"].seen == [f"p:{i}" for i in range(5)]
    assert h.publish() == {"p": 5}
    await h.stop()


async def test_a_full_subscriber_queue_pauses_fetching() -> None:
    gate = asyncio.Event()

    async def slow(message: str) -> list[Any]:
        await gate.wait()
        return []

    h = Harness(["a"], subscriber_queue_size=2, max_in_flight=100)
    h.start("a", slow)
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("p", 2))  # p:0 handed out, two queued
    await settle()
    # Handed while its filter waited: the watcher takes the batch at its next step.
    assert not h.producer.paused
    h.producer.feed(("p", 3))  # its filter is busy and its queue full: it lags
    await settle()
    assert h.producer.paused and h.group.flow_control.pause_reason is Pause.LAG
    assert h.group.flow_control.lagging == {"a": 3}
    gate.set()
    await settle()
    assert not h.producer.paused and h.group.flow_control.lagging == {}
    assert h.group.counters.lagged == {"a": 1}
    await h.stop()


async def test_a_lagging_watcher_pauses_its_siblings_and_is_never_failed() -> None:
    """A slow watcher is lag (issue 42): its full queue pauses fetching for the group, its
    sibling runs ahead by at most that queue, and none of its messages is failed, held or
    handed out again for it."""
    gate = asyncio.Event()

    async def slow(message: str) -> list[Any]:
        await gate.wait()
        return []

    h = Harness(["slow", "fast"], subscriber_queue_size=2, max_in_flight=100,
                max_attempts=1)
    h.start("slow", slow)
    h.start("fast")
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("p", 2))  # slow: p:0 open, p:1 and p:2 queued
    await settle()
    h.producer.feed(("p", 3), ("p", 4))  # slow's queue is full, fast's is empty
    await settle()
    assert h.producer.paused and h.group.flow_control.pause_reason is Pause.LAG
    assert h.group.flow_control.lagging == {"slow": 4}
    assert h.triggers["fast"].seen == ["p:0", "p:1", "p:2", "p:3", "p:4"]
    gate.set()
    await settle()
    assert not h.producer.paused
    assert all(h.outcome(("p", i)).is_clean for i in range(5))
    assert h.publish() == {"p": 5}
    counters = h.group.counters
    assert (counters.redelivered, dict(counters.failed)) == (0, {})
    assert counters.lagged == {"slow": 1}
    assert h.triggers["slow"].seen == ["p:0", "p:1", "p:2", "p:3", "p:4"]
    await h.stop()


async def test_watchers_of_equal_speed_near_the_bound_do_not_fail_each_other() -> None:
    """Under load every queue sits near the bound, a few messages apart; only a watcher a
    whole queue behind its fastest sibling is lagging."""
    gate = asyncio.Event()

    async def blocked(message: str) -> list[Any]:
        await gate.wait()
        return []

    async def blocked_after_the_first(message: str) -> list[Any]:
        if message != "p:0":
            await gate.wait()
        return []

    h = Harness(["a", "b"], subscriber_queue_size=4, max_in_flight=100)
    h.start("a", blocked)
    h.start("b", blocked_after_the_first)
    await settle()
    h.producer.feed(*[("p", i) for i in range(5)])  # a: 4 queued (full), b: 3 queued
    await settle()
    h.producer.feed(("p", 5))
    await settle()
    gate.set()
    await settle()
    outcomes = [h.outcome(("p", i)) for i in range(6)]
    assert all(o.is_clean and o.acked == {"a", "b"} for o in outcomes)
    await h.stop()


async def test_unit_of_work_failure_holds_without_using_an_attempt() -> None:
    h = Harness(["a"], max_attempts=1)
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    h.sink.fail("a", "p:0", ConnectionError("database down"))
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.failed == {"a"} and outcome.rejected == {}  # never dead-lettered
    h.clock.advance(1.0)  # handed out again after the backoff
    await settle()
    assert h.triggers["a"].seen.count("p:0") == 2
    await h.stop()


async def test_a_sink_rejecting_a_submitted_window_resolves_it_as_that_watchers_rejection() -> None:
    h = Harness(["a", "b"])
    h.start("a", one_event)
    h.start("b", one_event)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    window = h.sink._find("a", "p:0")
    assert window.is_submitted
    window.reject("event payload not JSON: boom")
    assert not window.is_submitted and window.rejected == "event payload not JSON: boom"
    window.confirm()  # ignored: already resolved
    h.sink.confirm("b", "p:0")
    await settle()
    outcome = h.outcome(("p", 0))
    assert outcome.acked == {"b"}
    assert outcome.rejected == {"a": "event payload not JSON: boom"}
    await h.stop()


async def test_a_busy_watcher_lets_the_loop_flush_its_units_of_work_as_it_goes() -> None:
    """A filter that always finds a message queued must still let the group flush its
    windows and other tasks run: otherwise every open unit of work of a long queue piles
    up in memory and the loop stalls until the queue is empty."""
    h = Harness(["a"], subscriber_queue_size=10_000, max_in_flight=10_000)
    h.sink.auto = True
    trigger = h.start("a", one_event)
    await settle()
    progress_seen: list[int] = []

    async def observer() -> None:
        while len(trigger.seen) < 1000:
            progress_seen.append(len(trigger.seen))
            await asyncio.sleep(0)

    h.producer.feed(*[("p", i) for i in range(1000)])
    watching = asyncio.get_running_loop().create_task(observer())
    await asyncio.wait_for(watching, 5)
    assert max(len(batch) for batch in h.sink.batches) <= HANDOUT_RUN
    assert any(0 < seen < 1000 for seen in progress_seen)
    await settle()
    assert len(h.resolved()) == 1000
    await h.stop()


async def test_a_rejected_message_is_committed_past_only_once_its_dead_letter_is_durable() -> None:
    async def reject_p0(message: str) -> list[Any]:
        if message == "p:0":
            reject_shared_stream_event("bad")
        return []

    h = Harness(["a", "b"])
    h.start("a", reject_p0)
    h.start("b")
    await settle()
    h.producer.hold_dead_letters = True
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert [(p.coordinates, r) for p, r in h.producer.dead_letters] == [(("p", 0), {"a": "bad"})]
    assert h.outcome(("p", 0)).state is State.DELIVERING
    assert h.publish() == {"p": 0}  # p:1 is done, p:0's dead letter is not durable yet
    h.producer.deliver()
    assert h.publish() == {"p": 2}
    await h.stop()
