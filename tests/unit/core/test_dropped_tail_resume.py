"""A paused group resumes once what it dropped from a watcher's queue is gone.

The group pauses at ``max_in_flight`` with a partition's messages still queued for its
watcher; the partition then ends (revoked, lost, recreated), so those entries are
dropped while still counted in the queue, and the resume check at ``_forget`` sees a
full queue. The watcher then skips them and waits for more: that wait must check the
resume mark, or nothing ever resumes the group (no message is in flight to settle) and
the consumer stays paused for good with no error. Same for a batch watcher's ``take``.
And a filter that raises or times out must not hold back the acks of what it moved past
until it iterates again (its restart waits a backoff, maybe long).

Unit tests of the logic on the in-memory adapter and a manual clock.
"""

from __future__ import annotations

import asyncio

from tests.unit.core.test_lifecycles import make_group, turns

from sharedstream.core.group import Group
from sharedstream.core.groupstate import Flow
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import ManualClock
from sharedstream.testing.memorystream import MemoryStream


async def paused_with_a_queued_tail_dropped() -> tuple[Group, MemoryStream, SharedStream]:
    group, producer, _ = make_group(ManualClock(), cohort=("a",), max_in_flight=4,
                                    subscriber_queue_size=4)
    a = group.add("a")
    producer.feed(("q", 0))
    producer.feed(*(("p", o) for o in range(4)))
    await turns()
    assert producer.paused and group.in_flight == 5
    producer.end("p")  # p's four queued entries are dropped
    await turns()
    assert group.in_flight == 1 and producer.paused
    return group, producer, a


async def test_a_per_message_watcher_skipping_dropped_entries_resumes_the_group() -> None:
    group, producer, a = await paused_with_a_queued_tail_dropped()
    assert await anext(a) == "q:0"
    waiting = asyncio.ensure_future(anext(a))
    await turns()
    assert group.in_flight == 0
    assert group.flow_control.flow is Flow.FLOWING and not producer.paused
    producer.feed(("q", 1))
    await turns()
    assert waiting.done() and waiting.result() == "q:1"
    await group.stop()


async def test_a_batch_watcher_skipping_dropped_entries_resumes_the_group() -> None:
    group, producer, a = await paused_with_a_queued_tail_dropped()
    taken = await a.take(1)
    assert [e.raw for e in taken] == ["q:0"]
    group.ack_many(taken, "a")
    waiting = asyncio.ensure_future(a.take(10))
    await turns()
    assert group.flow_control.flow is Flow.FLOWING and not producer.paused
    producer.feed(("q", 1))
    await turns()
    assert waiting.done() and [e.raw for e in waiting.result()] == ["q:1"]
    await group.stop()


async def test_a_filter_that_raises_acks_what_it_moved_past_at_once() -> None:
    group, producer, _ = make_group(ManualClock(), cohort=("a",))
    a = group.add("a")
    producer.feed(*(("t", o) for o in range(3)))
    await turns()
    assert [await anext(a) for _ in range(3)] == ["t:0", "t:1", "t:2"]
    a.fail_open(ValueError("bad"))  # raised on t:2, before iterating again
    assert group.counters.clean == 2 and group.in_flight == 1  # t:2 held, the rest settled
    await group.stop()
