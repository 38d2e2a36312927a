"""The partition ledger's slices: one per partition read in a consumed batch.

Admission appends a partition's records of one batch to one slice; trim drops settled
slices whole and cuts the terminal prefix of the first open one; duplicates are found by
read order, not by lookup; the bound counts entries across slices.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from sharedstream.core.ledger import Entry, Fetch, Ledger, PartitionLedger, State

pytestmark = pytest.mark.unit


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    generation: int = 1
    targets: frozenset[str] | None = None

    @property
    def partition_key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def ledger(remembered: frozenset[int] = frozenset(), base: int | None = 0) -> Ledger:
    requests: list[tuple[Any, ...]] = []
    out = Ledger("test", lambda *a: requests.append(a), lambda *a: None)
    out.start(1, [("t", 0, base, remembered), ("t", 1, base, frozenset())])
    return out


def admit(book: Ledger, *offsets: int, partition: int = 0) -> list[Entry]:
    """Admit a batch and itemise its slices (as a group does for per-message watchers)."""
    return [entry for run in book.admit([(o, Record("t", partition, o)) for o in offsets],
                                        lambda raw: 10)
            for entry in run.ledger.itemise(run)]


def fetch(lane: PartitionLedger) -> Fetch:
    return lane.fetch


def test_each_partition_of_a_batch_is_one_slice() -> None:
    book = ledger()
    slices = book.admit([(o, Record("t", p, o)) for p, o in ((0, 0), (0, 1), (1, 0), (0, 2))],
                        lambda raw: 1)
    assert [s.counted_offsets() for s in slices] == [[0, 1, 2], [0]]  # first read first
    lane = book.partitions[("t", 0)]
    assert all(s.entries is None for s in lane.slices)  # counted: no entry per message
    assert [s.open for s in lane.slices] == [3] and lane.count == 3 and lane.next == 3
    book.admit([(3, Record("t", 0, 3))], lambda raw: 1)
    assert [s.counted_offsets() for s in lane.slices] == [[0, 1, 2], [3]]
    assert [e.offset for e in book.partitions[("t", 1)]] == [0]


def test_a_settled_slice_is_dropped_whole_and_an_open_one_cut_at_its_floor() -> None:
    book = ledger()
    book.set_bounds(100)  # weighs what it admits
    first = admit(book, 0, 1, 2)
    second = admit(book, 3, 4)
    lane = book.partitions[("t", 0)]
    book.finish_many(first)
    book.finish(second[0])
    assert lane.commit_target() == (4, [])
    assert len(lane.slices) == 1 and [e.offset for e in lane] == [4]
    assert lane.count == 1 and lane.terminal == 0 and lane.open_bytes == 10
    book.finish(second[1])
    assert lane.commit_target() == (5, []) and not lane.slices and lane.count == 0


def test_terminal_offsets_above_a_held_floor_are_listed_across_slices() -> None:
    book = ledger()
    first = admit(book, 0, 1, 2)
    second = admit(book, 3, 4)
    lane = book.partitions[("t", 0)]
    book.hold(first[1])
    book.finish(first[0])
    book.finish(first[2])
    book.finish_many(second)
    assert lane.commit_target() == (1, [2, 3, 4])
    assert lane.count == 4 and [e.offset for e in lane] == [1, 2, 3, 4]
    book.finish(first[1])
    assert lane.commit_target() == (5, []) and lane.held_count == 0 and not lane.slices


def test_a_refetched_copy_is_skipped_across_slices_and_after_a_trim() -> None:
    book = ledger()
    assert [e.offset for e in admit(book, 0, 1)] == [0, 1]
    assert [e.offset for e in admit(book, 1, 2)] == [2]  # 1 read again: a re-fetch
    lane = book.partitions[("t", 0)]
    book.finish_many([lane.get(0), lane.get(1), lane.get(2)])  # type: ignore[list-item]
    assert lane.commit_target() == (3, [])
    assert admit(book, 2) == [] and lane.count == 0  # below the base now: skipped


def test_lookup_follows_gaps_across_slices() -> None:
    book = ledger()
    admit(book, 0, 5)
    admit(book, 9, 12)
    lane = book.partitions[("t", 0)]
    assert [lane.get(o) is not None for o in (0, 5, 9, 12)] == [True] * 4
    assert [lane.get(o) for o in (3, 10, 13)] == [None] * 3
    assert list(lane.entries) == [0, 5, 9, 12]


def test_a_remembered_offset_inside_a_batch_is_terminal_and_not_handed_out() -> None:
    book = ledger(remembered=frozenset({1}))
    handed = admit(book, 0, 1, 2)
    lane = book.partitions[("t", 0)]
    assert [e.offset for e in handed] == [0, 2]
    assert [(e.offset, e.state) for e in lane] == [(0, State.PENDING), (1, State.TERMINAL),
                                                   (2, State.PENDING)]
    assert lane.slices[0].open == 2 and lane.commit_target() == (0, [1])
    book.finish(handed[0])
    assert lane.commit_target() == (2, [])


def test_a_batch_of_only_remembered_offsets_leaves_a_settled_slice() -> None:
    book = ledger(remembered=frozenset({0, 1}))
    assert admit(book, 0, 1) == []
    lane = book.partitions[("t", 0)]
    assert lane.commit_target() == (2, []) and not lane.slices


def test_the_bound_counts_what_resolved_above_the_floor_and_lifts_as_the_floor_moves() -> None:
    book = ledger()
    book.set_bounds(2)
    first = admit(book, 0, 1, 2, 3)  # not resolved: the group's flight, never this bound
    lane = book.partitions[("t", 0)]
    assert fetch(lane) is Fetch.OPEN and lane.count == 4
    book.finish_many(first[1:3])  # 1 and 2 resolved above the open floor 0
    second = admit(book, 4, 5)  # 4 admitted, then the bound: 5 is read past it
    assert [e.offset for e in second] == [4] and fetch(lane) is Fetch.BOUNDED
    assert lane.resume_at == 5 and lane.kept == 2 and lane.count == 5
    book.finish_many(first[:1])  # the floor moves up to 3
    assert fetch(lane) is Fetch.REWINDING and lane.kept == 0 and lane.count == 2


def test_a_dropped_itemised_slice_is_freed_without_the_garbage_collector() -> None:
    """Entries point back at their slice: a trim that let the slice keep them left every
    per-message watcher's slice a cycle, freed only by a collection (each walking the
    whole in-flight set: ~10% of a per-message run's CPU)."""
    import gc

    def live_entries() -> int:
        return sum(type(o) is Entry for o in gc.get_objects())

    book = ledger()
    gc.collect()
    before = live_entries()
    gc.disable()  # a cycle stays among the tracked objects; what counting frees does not
    try:
        entries = admit(book, 0, 1, 2)
        assert live_entries() == before + 3
        book.finish_many(entries)
        del entries
        book.publish()  # the commit target passes the slice: trimmed
        assert not book.partitions[("t", 0)].slices
        assert live_entries() == before
    finally:
        gc.enable()
