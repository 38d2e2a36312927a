"""Counted slices (issue 27): a batch of batch watchers' messages has no entry per message.

Unit tests of the logic on the in-memory adapter and a manual clock: a clean acknowledgement
of a whole slice is one count per watcher and settles it at once; prefixes of a slice
(batches of at most the limit) count in order; anything that needs a per-message record
(a failure, an acknowledgement out of order, a per-message watcher, a lookup) itemises the
slice with exactly what each watcher still owes; a partition that ends drops it.
"""

from __future__ import annotations

from tests.unit.core.test_lifecycles import make_group, turns

from sharedstream.core.batchtake import Pieces
from sharedstream.core.group import Group
from sharedstream.core.ledger import Slice, State
from sharedstream.core.stream import SharedStream
from sharedstream.core.streamconfig import ManualClock
from sharedstream.testing.memorystream import MemoryStream


async def polling(cohort: tuple[str, ...], batch: tuple[str, ...] | None = None,
                  **settings: object) -> tuple[Group, MemoryStream, dict[str, SharedStream]]:
    """A polling group whose ``batch`` watchers (all by default) take batches."""
    group, producer, _ = make_group(ManualClock(), cohort=cohort, **settings)
    streams = {}
    for name in cohort:
        streams[name] = group.add(name)
        streams[name].batch = batch is None or name in batch
    return group, producer, streams


async def piece(stream: SharedStream, limit: int = 100) -> Pieces:
    part = await stream.take_part(limit)
    assert isinstance(part, Pieces), part
    return part


def ack(group: Group, pieces: Pieces, watcher: str) -> None:
    """What a batch runner does with a call that said nothing."""
    for run, start, stop in pieces.parts:
        group.ack_range(run, start, stop, watcher)


def the_slice(group: Group) -> Slice:
    [run] = group.ledger.partitions[("t", 0)].slices
    return run


async def test_a_clean_ack_of_a_whole_slice_is_one_count_and_settles_it() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    assert run.entries is None and run.pending == 2 and group.in_flight == 4
    a, b = await piece(streams["a"]), await piece(streams["b"])
    assert a.messages == ["t:0", "t:1", "t:2", "t:3"] and a.messages is run.raws
    ack(group, a, "a")
    assert run.pending == 1 and run.state is State.PENDING
    ack(group, b, "b")
    assert run.state is State.TERMINAL and run.entries is None  # never itemised
    assert group.in_flight == 0 and group.counters.clean == 4
    partition = group.ledger.partitions[("t", 0)]
    assert run.raws == [] and not partition.slices  # trimmed at once, not at the next tick
    assert partition.base == 4 and partition.count == 0
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (4, ())
    await group.stop()


async def test_prefixes_of_a_slice_count_in_order() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(5)))
    await turns()
    run = the_slice(group)
    first = await piece(streams["a"], limit=2)
    assert first.parts == [(run, 0, 2)] and first.messages == ["t:0", "t:1"]
    ack(group, first, "a")
    assert run.progress == {"a": 2} and run.pending == 1
    rest = await piece(streams["a"], limit=10)
    assert rest.parts == [(run, 2, 5)]
    ack(group, rest, "a")
    assert run.state is State.TERMINAL and run.entries is None and group.in_flight == 0
    await group.stop()


async def test_a_failure_itemises_the_slice_with_what_each_watcher_still_owes() -> None:
    group, producer, streams = await polling(("a", "b"))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    await piece(streams["a"], limit=2)
    group.ack_range(run, 0, 2, "a")  # a resolved 0 and 1
    b = await piece(streams["b"])
    entries = b.entries(group.itemise)
    assert [e.pending for e in entries] == [1, 1, 2, 2] and run.entries is not None
    group.fail(entries[3], "b", "boom", counts=True)
    group.ack_many(entries[:3], "b")
    assert [e.state for e in entries] == [State.TERMINAL] * 2 + [State.PENDING] * 2
    rest = await streams["a"].take(10)  # the itemised rest of the slice, as entries
    assert rest == entries[2:]
    group.ack_many(rest, "a")
    assert [e.state for e in entries] == [State.TERMINAL] * 3 + [State.HELD]
    assert entries[3].failed == {"b": "boom"} and entries[3].acked_before == {"a"}
    group.targets.publish()
    assert producer.published[("t", 0)][1:] == (3, ())
    await group.stop()


async def test_an_ack_out_of_order_is_counted_per_message() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(4)))
    await turns()
    run = the_slice(group)
    await piece(streams["a"], limit=2)  # its unit of work is still in the sink
    await piece(streams["a"], limit=2)
    group.ack_range(run, 2, 4, "a")
    assert run.entries is not None
    assert [e.state for e in group.itemise(run)] == [State.PENDING] * 2 + [State.TERMINAL] * 2
    group.ack_range(run, 0, 2, "a")
    assert group.in_flight == 0 and [e.state for e in run.chunk or ()] == [State.TERMINAL] * 4
    await group.stop()


async def test_a_per_message_watcher_gets_entries() -> None:
    group, producer, streams = await polling(("a", "b"), batch=("a",))
    producer.feed(*(("t", o) for o in range(3)))
    await turns()
    assert the_slice(group).entries is not None
    assert isinstance(await streams["a"].take_part(10), list)
    await group.stop()


async def test_a_partition_that_ends_drops_its_counted_slices() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(*(("t", o) for o in range(3)))
    await turns()
    run = the_slice(group)
    group._forget(frozenset({("t", 0)}))
    assert run.state is State.DROPPED and group.in_flight == 0
    group.ack_range(run, 0, 3, "a")  # a late acknowledgement changes nothing
    assert group.counters.clean == 0
    producer.feed(("u", 0))
    await turns()
    part = await piece(streams["a"])  # the dropped slice is skipped
    assert part.messages == ["u:0"]
    await group.stop()


async def test_one_batch_takes_several_counted_slices_and_counts_each() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(("t", 0), ("t", 1))
    producer.feed(("t", 2))
    producer.feed(("u", 0))
    await turns()
    part = await piece(streams["a"], limit=3)
    assert part.messages == ["t:0", "t:1", "t:2"] and len(part.parts) == 2
    ack(group, part, "a")
    assert group.in_flight == 1 and all(
        s.state is State.TERMINAL for s in group.ledger.partitions[("t", 0)].slices)
    assert (await piece(streams["a"])).messages == ["u:0"]
    await group.stop()


async def test_a_slice_settled_above_an_open_one_keeps_only_its_offsets() -> None:
    group, producer, streams = await polling(("a",))
    producer.feed(("t", 0))
    producer.feed(("t", 1), ("t", 2))
    await turns()
    first, second = group.ledger.partitions[("t", 0)].slices
    part = await piece(streams["a"], limit=1)
    rest = await piece(streams["a"])
    ack(group, rest, "a")  # the first is still with the filter
    assert second.state is State.TERMINAL and second.records == [] and second.offsets == [1, 2]
    assert group.ledger.partitions[("t", 0)].commit_target() == (0, [1, 2])
    ack(group, part, "a")
    assert group.ledger.partitions[("t", 0)].commit_target() == (3, [])
    assert first.state is State.TERMINAL
    await group.stop()


async def test_a_lookup_by_offset_itemises_only_its_slice() -> None:
    group, producer, _ = await polling(("a",))
    producer.feed(("t", 0), ("t", 1))
    producer.feed(("t", 2))
    await turns()
    lane = group.ledger.partitions[("t", 0)]
    entry = lane.get(2)
    assert entry is not None and entry.state is State.PENDING and entry.pending == 1
    assert [s.entries is None for s in lane.slices] == [True, False]
    await group.stop()
