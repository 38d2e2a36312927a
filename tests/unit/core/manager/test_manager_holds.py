"""Holds, targeted redelivery, max attempts, commit targets and forgotten lanes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from manager_fakes import Harness, fails_once, one_event, settle

from sharedstream.core.ledger import State
from sharedstream.triggers.base import reject_shared_stream_event

pytestmark = pytest.mark.unit


async def test_an_absent_watcher_later_receives_exactly_what_it_missed() -> None:
    h = Harness(["a", "b"], cohort_grace_period=1.0)
    h.start("a")
    await settle()
    h.clock.advance(1.0)
    await settle()
    h.producer.feed(("p", 0), ("p", 1))
    await settle()
    assert [h.outcome(p).failed for p in h.resolved()] == [{"b"}, {"b"}]
    h.start("b")
    await settle()
    h.clock.advance(1.0)  # the held messages' first backoff
    await settle()
    h.producer.feed(("p", 2))
    await settle()
    assert h.triggers["b"].seen == ["p:0", "p:1", "p:2"]
    assert h.triggers["a"].seen == ["p:0", "p:1", "p:2"]  # a got the held ones only once
    assert [(h.outcome(p).acked, h.outcome(p).state) for p in h.resolved()] == [
        ({"a", "b"}, State.TERMINAL)] * 3
    assert h.publish() == {"p": 3}
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
    outcomes = [h.outcome(p) for p in h.resolved()]
    assert [o.failed for o in outcomes] == [{"b"}, {"b"}]
    assert [o.acked for o in outcomes] == [{"a"}, {"a"}]
    gate.set()  # b's filter finishes its message; its late ack is ignored
    await settle()
    assert h.tasks["b"].done()
    assert [h.outcome(p).state for p in h.resolved()] == [State.HELD, State.HELD]
    await h.stop()


async def test_exceptions_fail_only_that_watcher_hold_with_backoff_then_reject() -> None:
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
    first = h.outcome(("p", 0))
    assert first.failed == {"a"} and first.acked == {"b"}
    assert h.triggers["a"].starts == 1
    h.clock.advance(0.999)
    await settle()
    assert h.triggers["a"].starts == 1  # restart waits for its backoff
    assert h.triggers["a"].seen == ["p:0"]
    h.clock.advance(0.001)  # 1.0: the filter restarts and p:0 comes again (attempt 2)
    await settle()
    assert h.triggers["a"].starts == 2
    # The sibling message was not lost; the held one came after it.
    assert h.triggers["a"].seen == ["p:0", "p:1", "p:0"]
    assert h.outcome(("p", 0)).failed == {"a"}
    h.clock.advance(1.999)  # the second round's backoff is 2.0
    await settle()
    assert h.triggers["a"].seen.count("p:0") == 2
    h.clock.advance(0.001)  # attempt 3: max_attempts turns it into a rejection
    await settle()
    assert h.triggers["a"].seen.count("p:0") == 3
    assert h.triggers["b"].seen == ["p:0", "p:1"]  # b acked it: never redelivered to b
    final = h.outcome(("p", 0))
    assert final.rejected == {"a": "max attempts: ValueError: bad json"}
    assert final.acked == {"b"} and final.state is State.TERMINAL
    assert h.publish() == {"p": 2}
    h.clock.advance(10.0)  # the filter's restart after its third crash
    await settle()
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
    assert h.resolved() == [("p", 0)]
    await h.stop()


async def test_targeted_messages_go_only_to_the_named_watchers() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    h.producer.feed(("p", 0), targets=frozenset({"b", "gone"}))
    await settle()
    assert h.triggers["a"].seen == []
    assert h.triggers["b"].seen == ["p:0"]
    outcome = h.outcome(("p", 0))
    assert outcome.acked == {"b"} and outcome.rejected == {"gone": "not in the cohort"}
    await h.stop()


async def test_out_of_order_resolution_commits_only_the_resolved_prefix() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("p", 2), ("q", 0))
    await settle()
    h.sink.confirm("a", "p:2")
    h.sink.confirm("a", "p:1")
    await settle()
    h.publish()
    # p:0 is unresolved: the commit stays at it and remembers what is terminal above it.
    assert h.producer.published == {("p", 0): (0, 0, (1, 2))}
    h.sink.confirm("a", "p:0")
    await settle()
    h.publish()
    assert h.producer.published == {("p", 0): (0, 3, ())}  # q:0's window is still open
    await h.stop()


async def test_forgotten_lanes_drop_their_messages() -> None:
    h = Harness(["a"])
    h.start("a", one_event)
    await settle()
    h.producer.feed(("p", 0), ("q", 0))
    await settle()
    assert h.manager.in_flight("k") == 2
    h.producer.end("p")
    await settle()
    assert h.manager.in_flight("k") == 1
    h.sink.confirm("a", "p:0")  # a late ack of a revoked lane is ignored
    await settle()
    assert h.publish() == {}
    assert h.manager.in_flight("k") == 1
    await h.stop()


async def test_a_rejection_and_a_failure_in_one_round_make_one_dead_letter_later() -> None:
    async def rejects(message: str) -> list[Any]:
        reject_shared_stream_event("nope")
        return []

    h = Harness(["a", "b"], retry_backoff_initial=1.0)
    h.start("a", fails_once())
    h.start("b", rejects)
    await settle()
    h.producer.feed(("p", 0))
    await settle()
    assert h.outcome(("p", 0)).failed == {"a"}
    assert h.producer.dead_letters == []  # not before every watcher is done with it
    h.clock.advance(1.0)
    await settle()
    assert h.triggers["b"].seen == ["p:0"]  # b's rejection stands: not handed out again
    assert [(p.coordinates, r) for p, r in h.producer.dead_letters] == [
        (("p", 0), {"b": "nope"})]
    assert h.publish() == {"p": 1}
    await h.stop()


async def test_a_remembered_hold_goes_to_its_watcher_as_a_retry_and_as_read_to_the_others(
        ) -> None:
    """Guarantee 7 (issue 41): a message an earlier owner left held for ``b`` goes to
    ``a`` with its neighbours, and to ``b`` only after them, as a retry."""
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    h.producer.remembered_holds = {"p": {1: frozenset({"b", "gone"})}}
    h.producer.feed(("p", 0), ("p", 1), ("p", 2))
    await settle()
    assert h.triggers["a"].seen == ["p:0", "p:1", "p:2"]
    assert h.triggers["b"].seen == ["p:0", "p:2"]
    h.clock.advance(1.0)  # the hold's first backoff
    await settle()
    assert h.triggers["b"].seen == ["p:0", "p:2", "p:1"]
    assert h.outcome(("p", 1)).acked == {"a", "b"}
    assert h.publish() == {"p": 3}
    await h.stop()


async def test_a_remembered_hold_on_a_replay_reaches_only_the_watchers_it_names() -> None:
    h = Harness(["a", "b"])
    h.start("a")
    h.start("b")
    await settle()
    h.producer.remembered_holds = {"p": {0: frozenset({"a", "b"})}}
    h.producer.feed(("p", 0), targets=frozenset({"a"}))
    await settle()
    h.clock.advance(1.0)
    await settle()
    assert h.triggers["a"].seen == ["p:0"] and h.triggers["b"].seen == []
    assert h.publish() == {"p": 1}
    await h.stop()
