"""A per-message watcher's acks go to the group together (issue 27): the messages its filter
moved past with nothing bound are acked in one ``ack_many`` when the stream next waits,
yields, or ends, and never later than that.

Unit tests of the logic on the in-memory adapter and a manual clock.
"""

from __future__ import annotations

import asyncio

from tests.unit.core.test_lifecycles import make_group, turns

from sharedstream.core.group import Group
from sharedstream.core.ledger import State
from sharedstream.core.stream import HANDOUT_RUN, SharedStream
from sharedstream.core.streamconfig import ABSENT, ManualClock
from sharedstream.testing.memorystream import MemoryStream


async def polling(cohort: tuple[str, ...], **settings: object
                  ) -> tuple[Group, MemoryStream, dict[str, SharedStream]]:
    group, producer, _ = make_group(ManualClock(), cohort=cohort, **settings)
    return group, producer, {name: group.add(name) for name in cohort}


async def test_acks_settle_together_when_the_stream_waits_for_more() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(3)))
    await turns()
    a = streams["a"]
    assert [await anext(a) for _ in range(3)] == ["t:0", "t:1", "t:2"]
    assert group.in_flight == 3  # 0 and 1 moved past, acked at the next wait
    waiting = asyncio.ensure_future(anext(a))
    await turns()
    assert group.in_flight == 0 and group.counters.clean == 3
    waiting.cancel()
    await group.stop()


async def test_acks_settle_at_the_handout_yield_so_at_most_a_run_waits() -> None:
    group, producer, streams = await polling(("a",), max_in_flight=4 * HANDOUT_RUN,
                                             subscriber_queue_size=4 * HANDOUT_RUN)
    producer.feed(*(("t", o) for o in range(2 * HANDOUT_RUN)))
    await turns()
    a = streams["a"]
    for _ in range(HANDOUT_RUN + 1):
        await anext(a)
    assert group.counters.clean == HANDOUT_RUN  # flushed before the yield
    await group.stop()


async def test_leaving_acks_what_was_moved_past_and_fails_the_rest() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    a = streams["a"]
    await anext(a)
    await anext(a)
    group.remove("a", fail_pending=True)
    ledger = group.ledger.partitions[("t", 0)]
    assert [ledger.entries[o].failed for o in range(4)] == [None] + [{"a": ABSENT}] * 3
    b = streams["b"]
    group.ack_many(await b.take(10), "b")
    assert [ledger.entries[o].state for o in range(4)] == [State.TERMINAL] + [State.HELD] * 3
    await group.stop()


async def test_a_paused_group_resumes_once_the_moved_past_are_acked() -> None:
    group, producer, streams = await polling(("a",), max_in_flight=2)
    producer.feed(("t", 0), ("t", 1))
    await turns()
    assert producer.paused
    a = streams["a"]
    await anext(a)
    await anext(a)  # the queue empties: 0 is acked before the resume check
    a.moved_past()
    assert group.in_flight == 0 and not producer.paused
    await group.stop()
