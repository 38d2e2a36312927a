"""A counted slice taken in several batches, then itemised: what was acked settles.

A batch watcher takes a slice in pieces (its queue or ``BATCH_LIMIT`` is shorter than the
slice); a clean piece only moves the watcher's ``progress``. When a later piece needs
entries (an event, a rejection, staged state, a raise and its split, an ack timeout, an
acknowledgement out of order, a watcher leaving with what it owed failed), the slice is
itemised, and the entries every owing watcher already resolved must settle then: left
pending with nobody owing them, they would hold the commit target and ``in_flight``
forever. A lookup of an offset (``held retry``) must not leave such entries either.

On the group itself (the paths a filter cannot reach in one call; the batch runner's are in
tests/unit/core/manager/test_split_slice_batches.py); in-memory adapter, manual clock.
"""

from __future__ import annotations

import pytest
from tests.unit.core.test_counted_slices import ack, piece, polling, the_slice
from tests.unit.core.test_lifecycles import turns

from sharedstream.core.ledger import State

pytestmark = pytest.mark.unit


async def test_a_failure_after_a_prefix_settles_the_prefix() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    ack(group, await piece(streams["a"], limit=2), "a")
    entries = (await piece(streams["a"], limit=2)).entries(group.itemise)
    assert [e.state for e in run.chunk or ()] == [State.TERMINAL] * 2 + [State.PENDING] * 2
    assert group.in_flight == 2 and group.counters.clean == 2
    group.fail(entries[1], "a", "boom", counts=True)
    group.ack_many(entries[:1], "a")
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (3, ())
    await group.stop()


async def test_an_ack_out_of_order_after_a_prefix_settles_everything() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(6)))
    await turns()
    run = the_slice(group)
    ack(group, await piece(streams["a"], limit=2), "a")
    middle = await piece(streams["a"], limit=2)
    ack(group, await piece(streams["a"], limit=2), "a")  # before the middle: itemises
    ack(group, middle, "a")
    assert [e.state for e in run.chunk or ()] == [State.TERMINAL] * 6
    assert group.in_flight == 0 and group.counters.clean == 6
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (6, ())
    await group.stop()


async def test_a_watcher_leaving_after_a_prefix_fails_only_what_it_owed() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    ack(group, await piece(streams["b"]), "b")  # b resolved all of it
    ack(group, await piece(streams["a"], limit=2), "a")
    group.remove("a", fail_pending=True)  # a leaves owing 2 and 3
    assert [e.state for e in run.chunk or ()] == [State.TERMINAL] * 2 + [State.HELD] * 2
    assert group.in_flight == 2
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (2, ())
    await group.stop()


async def test_a_held_retry_lookup_in_a_counted_slice_leaves_it_counted() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    ack(group, await piece(streams["a"], limit=2), "a")
    # Not held: an operator's mistake changes nothing.
    assert not group.resolution.retry_now("t", 0, 1)
    assert not group.resolution.retry_now("t", 0, 3)
    ack(group, await piece(streams["a"], limit=2), "a")
    assert run.state is State.TERMINAL and group.in_flight == 0
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (4, ())
    await group.stop()


async def test_asking_whether_a_dead_letter_is_still_owed_leaves_the_slice_counted() -> None:
    # The dead-letter outbox asks ``delivering`` of a record it holds; a record of a counted
    # slice is never delivering, and the question must not itemise the slice behind the
    # group's back (its acked prefix would then be owed by nobody and never settle).
    group, producer, streams = await polling(("a",))
    records = producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    ack(group, await piece(streams["a"], limit=2), "a")
    assert not group.ledger.delivering(records[1])
    assert not group.ledger.delivering(records[3])
    ack(group, await piece(streams["a"], limit=2), "a")
    assert run.state is State.TERMINAL and group.in_flight == 0
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (4, ())
    await group.stop()
