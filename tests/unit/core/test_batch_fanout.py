"""Fan-out per batch and bulk settlement (issue 27): the group hands each watcher one chunk
per consumed batch, and a batch watcher's clean acknowledgement settles in one go.

Unit tests of the logic on the in-memory adapter and a manual clock: the order a watcher
sees around a targeted message, entries dropped while queued, what is left of a chunk
when a watcher leaves, bulk settlement next to failures and rejections, the resume mark,
the in-flight bound counted across chunks, and the ledger's trim of a terminal prefix.
"""

from __future__ import annotations

import asyncio

from tests.unit.core.test_lifecycles import make_group, state, turns

from sharedstream.core.group import Group
from sharedstream.core.groupstate import Flow
from sharedstream.core.ledger import Entry, PartitionLedger, State
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import ABSENT, ManualClock
from sharedstream.testing.memorystream import LocalRecord, MemoryStream


def offsets(entries: list[Entry]) -> list[int]:
    return [e.offset for e in entries]


def last_request(producer: MemoryStream) -> tuple[object, ...]:
    """The last pause (seek None) or seek-and-resume the ledger asked for."""
    return producer.fetch_requests[-1]


async def polling(cohort: tuple[str, ...], **settings: object
                  ) -> tuple[Group, MemoryStream, dict[str, SharedStream]]:
    group, producer, _ = make_group(ManualClock(), cohort=cohort, **settings)
    streams = {name: group.add(name) for name in cohort}
    return group, producer, streams


async def test_a_targeted_message_keeps_its_place_in_each_watchers_order() -> None:
    group, producer, streams = await polling(("a", "b"))
    [first] = producer.feed(("t", 0))
    gen = first.generation
    producer.feed_items([(f"t:{o}", LocalRecord("t", o, gen, targets))
                         for o, targets in ((1, None), (2, frozenset({"a"})), (3, None))])
    await turns()
    a, b = streams["a"], streams["b"]
    assert a.queued == 4 and b.queued == 3
    assert offsets(await a.take(10)) == [0, 1, 2, 3]
    assert [await anext(b) for _ in range(3)] == ["t:0", "t:1", "t:3"]
    assert b.queued == 0
    await group.stop()


async def test_take_skips_entries_of_a_partition_revoked_while_queued() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(("t", 0), ("u", 0), ("t", 1), ("u", 1))
    await turns()
    producer.end("t")
    await turns()
    assert offsets(await streams["a"].take(10)) == [0, 1]
    assert group.in_flight == 2  # only u's two: t's were dropped with its ledger
    await group.stop()


async def test_take_splits_a_chunk_at_its_limit_and_anext_walks_across_chunks() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(5)))
    producer.feed(("t", 5), ("t", 6))
    await turns()
    a = streams["a"]
    assert offsets(await a.take(3)) == [0, 1, 2]
    assert a.queued == 4
    assert [await anext(a) for _ in range(4)] == ["t:3", "t:4", "t:5", "t:6"]
    assert a.queued == 0
    await group.stop()


async def test_a_watcher_leaving_fails_only_what_is_left_of_its_chunk() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(6)))
    await turns()
    taken = await streams["a"].take(2)
    group.remove("a", fail_pending=True)
    ledger = group.ledger.partitions[("t", 0)]
    for offset in range(6):
        failed = ledger.entries[offset].failed
        assert (failed == {"a": ABSENT}) is (offset >= 2), offset
    group.ack_many(taken, "a")
    group.ack_many(await streams["b"].take(10), "b")
    assert [ledger.entries[o].state for o in range(6)] == [State.TERMINAL] * 2 + [State.HELD] * 4
    await group.stop()


async def test_bulk_settlement_next_to_a_failure_and_a_rejection() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    e = await streams["a"].take(10)
    group.fail(e[1], "a", "boom", counts=True)
    group.reject(e[2], "a", "bad")
    group.ack_many([e[0], e[3]], "a")
    group.ack_many(await streams["b"].take(10), "b")
    assert [x.state for x in e] == [State.TERMINAL, State.HELD, State.DELIVERING,
                                    State.TERMINAL]
    assert group.counters.clean == 2 and group.counters.settled == 3  # e[2] dead-lettering
    assert group.in_flight == 1  # the held one
    await turns()  # the dead letter is durable: e[2] terminal
    group.targets.publish()
    assert producer.published[("t", 0)] == (e[0].ledger.generation, 1, (2, 3))
    await group.stop()


async def test_a_clean_batch_ack_crosses_the_resume_mark_once() -> None:
    group, producer, streams = await polling(("a",), max_in_flight=4)
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    assert state(group)[1] is Flow.PAUSED
    group.ack_many(await streams["a"].take(10), "a")
    assert group.in_flight == 0 and group.counters.clean == 4
    assert state(group)[1] is Flow.FLOWING and producer.resume_calls == 1
    await group.stop()


async def test_the_partition_bound_counts_what_resolved_above_an_open_floor() -> None:
    """Messages not resolved are the group's flight (it pauses and resumes, the partition
    reads on); messages resolved above a floor some watcher still owes are the
    partition's bound."""
    group, producer, streams = await polling(("a", "b"), max_in_flight=3)
    producer.feed(("t", 0), ("t", 1), ("t", 2), ("t", 3))
    await turns()
    assert state(group)[1] is Flow.PAUSED and not producer.fetch_requests  # in flight only
    group.ack_many(await streams["a"].take(10), "a")
    slow = await streams["b"].take(10)
    group.ack_many(slow[1:], "b")  # 1..3 resolved above 0, which b still owes: the bound
    assert state(group)[1] is Flow.FLOWING
    producer.feed(("t", 4), ("t", 5))
    await turns()
    ledger = group.ledger.partitions[("t", 0)]
    assert list(ledger.entries) == [0, 1, 2, 3, 4]  # 5 was read past the bound: not admitted
    assert last_request(producer) == (("t", 0), ledger.generation, None)  # paused
    group.ack_many(slow[:1], "b")  # the floor moves past 3
    assert last_request(producer) == (("t", 0), ledger.generation, 5)  # rewound at 5
    await turns()
    assert offsets(await streams["a"].take(10)) == [4, 5]
    await group.stop()


def test_trim_drops_the_terminal_prefix_up_to_the_floor() -> None:
    ledger = PartitionLedger("t", 0, 0, base=0)
    entries = [e for o in (0, 1, 2, 5, 6) if (e := ledger.admit(o)) is not None]
    assert len(entries) == 5  # 3 and 4: a compaction gap
    for i in (0, 1, 3):
        ledger.finish(entries[i])
    ledger.trim()
    assert ledger.base == 2 and list(ledger.entries) == [2, 5, 6] and ledger.terminal == 1
    assert ledger.commit_target() == (2, [5])
    ledger.finish(entries[2])
    ledger.trim()
    assert ledger.base == 6 and list(ledger.entries) == [6] and ledger.terminal == 0
    ledger.finish(entries[4])
    ledger.trim()  # all terminal: one past the last
    assert ledger.base == 7 and not ledger.entries and ledger.terminal == 0


def test_trim_moves_the_base_to_the_first_open_offset_past_a_gap() -> None:
    ledger = PartitionLedger("t", 0, 0, base=0)
    assert ledger.admit(4) is not None  # 0..3 compacted away
    ledger.trim()
    assert ledger.base == 4


async def test_no_queue_outlives_its_stream() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(("t", 0), ("t", 1))
    await turns()
    group.remove("a", fail_pending=False)
    assert streams["a"].queued == 0
    await asyncio.gather(group.stop())
