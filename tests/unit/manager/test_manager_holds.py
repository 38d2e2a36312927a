"""Holds, targeted redelivery, max attempts, lanes and advance batching."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from manager_fakes import Harness, one_event, settle

pytestmark = pytest.mark.unit


async def test_an_absent_watcher_later_receives_exactly_what_it_missed() -> None:
    h = Harness(["a", "b"], cohort_grace_period=1.0)
    h.start("a")
    await settle()
    h.clock.advance(1.0)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert [o.failed for _, o in h.producer.items()] == [{"b"}, {"b"}]
    h.start("b")
    await settle()
    # The producer reads the held floor again, then a new message.
    h.producer.feed(("p", 0), ("p", 1), ("p", 2))
    await settle()
    assert h.triggers["b"].seen == ["p:0", "p:1", "p:2"]
    assert h.triggers["a"].seen == ["p:0", "p:1", "p:2"]  # a got the held ones only once
    final = h.producer.items()[-3:]
    assert [(p, o.acked, o.is_clean) for p, o in final] == [
        (("p", 0), {"a", "b"}, True), (("p", 1), {"a", "b"}, True), (("p", 2), {"a", "b"}, True)]
    await h.stop()


async def test_a_watcher_that_leaves_holds_what_it_had_not_handled() -> None:
    gate = asyncio.Event()

    async def slow(message: str) -> list[Any]:
        await gate.wait()
        return []

    h = Harness(["a", "b"])
    h.start("a")
    h.start("b", slow)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    await h.manager.unsubscribe("b")
    await settle()
    outcomes = [o for _, o in h.producer.items()]
    assert [o.failed for o in outcomes] == [{"b"}, {"b"}]
    assert [o.acked for o in outcomes] == [{"a"}, {"a"}]
    gate.set()  # b's filter finishes its message; its late ack is ignored
    await settle()
    assert h.tasks["b"].done() and len(h.producer.items()) == 2
    await h.stop()


async def test_exceptions_fail_only_that_watcher_restart_with_backoff_then_reject() -> None:
    async def poison(message: str) -> list[Any]:
        if message == "p:0":
            raise ValueError("bad json")
        return []

    h = Harness(["a", "b"], max_attempts=3, retry_backoff_initial=1.0, retry_backoff_max=8.0)
    h.start("a", poison)
    h.start("b")
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    first = h.producer.outcome(("p", 0))
    assert first.failed == {"a"} and first.acked == {"b"} and first.retry_after == 1.0
    assert h.triggers["a"].starts == 1
    h.clock.advance(0.999)
    await settle()
    assert h.triggers["a"].starts == 1  # restart waits for its backoff
    h.clock.advance(0.001)
    await settle()
    assert h.triggers["a"].starts == 2
    assert h.triggers["a"].seen == ["p:0", "p:1"]  # the sibling message was not lost
    for _attempt in (2, 3):
        h.producer.feed(("p", 0))  # the held message, read again
        await settle()
        h.clock.advance(10.0)
        await settle()
    assert h.triggers["b"].seen == ["p:0", "p:1"]  # b acked it: never redelivered to b
    final = h.producer.outcome(("p", 0))
    assert final.rejected == {"a": "max attempts: ValueError: bad json"}
    assert final.acked == {"b"} and final.is_clean
    assert [o.retry_after for p, o in h.producer.items() if p == ("p", 0)] == [1.0, 2.0, 0.0]
    await h.stop()


async def test_a_reread_copy_of_a_message_in_flight_is_dropped() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0))
    h.producer.feed(("p", 0))
    await settle()
    assert h.triggers["a"].seen == ["p:0"]
    h.sink.confirm("a", "p:0")
    await settle()
    assert len(h.producer.items()) == 1
    await h.stop()


async def test_targeted_messages_go_only_to_the_named_watchers() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    h.producer.targets_of[("p", 0)] = frozenset({"b", "gone"})
    h.producer.feed(("p", 0))
    await settle()
    assert h.triggers["a"].seen == []
    assert h.triggers["b"].seen == ["p:0"]
    outcome = h.producer.outcome(("p", 0))
    assert outcome.acked == {"b"} and outcome.rejected == {"gone": "not in the cohort"}
    await h.stop()


async def test_out_of_order_resolution_advances_in_broadcast_order() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("p", 2), ("q", 0))
    await settle()
    h.sink.confirm("a", "p:2")
    h.sink.confirm("a", "p:1")
    await settle()
    assert h.producer.items() == []  # p:0 unresolved: the head blocks its lane
    h.sink.confirm("a", "p:0")
    await settle()
    assert [p for p, _ in h.producer.items("p")] == [("p", 0), ("p", 1), ("p", 2)]
    assert h.producer.batch_sizes("p") == [3]
    assert h.producer.items("q") == []  # q:0's window is still open
    await h.stop()


async def test_lanes_advance_independently_and_a_slow_advance_blocks_only_its_lane() -> None:
    h = Harness(["a"])
    h.start("a")
    await settle()
    h.producer.gates["p"] = asyncio.Event()
    h.producer.feed(("p", 0), ("q", 0))
    await settle()
    h.producer.feed(("p", 1), ("q", 1))
    await settle()
    assert [p for p, _ in h.producer.items()] == [("q", 0), ("q", 1)]
    h.producer.gates["p"].set()
    await settle()
    assert [p for p, _ in h.producer.items("p")] == [("p", 0), ("p", 1)]
    # one advance in flight per lane: p:1 waited for p:0's call, then went alone
    assert h.producer.batch_sizes("p") == [1, 1]
    await h.stop()


async def test_a_trickle_advances_one_message_at_a_time_and_a_burst_in_one_batch() -> None:
    h = Harness(["a"])
    h.start("a")
    await settle()
    for offset in range(3):
        h.producer.feed(("p", offset))
        await settle()
    h.producer.feed(*[("p", offset) for offset in range(3, 103)])
    await settle()
    assert h.producer.batch_sizes("p") == [1, 1, 1, 100]
    await h.stop()


async def test_forgotten_lanes_drop_their_messages() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0), ("q", 0))
    await settle()
    assert h.manager.in_flight("k") == 2
    h.producer.forget("p")
    await settle()
    assert h.manager.in_flight("k") == 1
    h.sink.confirm("a", "p:0")  # a late ack of a revoked lane is ignored
    await settle()
    assert h.producer.items("p") == []
    await h.stop()
