"""A ReadBatch (runs of one partition's reads, core/reads.py) admits exactly as its pairs.

The ledger admits a whole run at once only when that is what admitting its records one
by one would do; every other case falls back to the per-record path. Each test admits
the same records both ways into two fresh ledgers and compares everything the ledger
keeps, the slices it returns and the fetch requests it made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from sharedstream.core.ledger import Ledger, Slice
from sharedstream.core.reads import PartitionRun, ReadBatch

pytestmark = pytest.mark.unit


class Read(NamedTuple):
    """A message that is its own payload (as a Kafka first read is)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None = b"xxxx"
    key: bytes | None = None
    generation: int = 1
    targets: frozenset[str] | None = None

    @property
    def partition_key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def size(raw: Any) -> int:
    return len(raw.value or b"") + len(raw.key or b"")


def run(partition: int, *offsets: int, generation: int = 1, topic: str = "t") -> PartitionRun:
    out = PartitionRun((topic, partition), generation)
    out.reads = [Read(topic, partition, o, generation=generation) for o in offsets]
    out.size = sum(size(r) for r in out.reads)
    out.last = offsets[-1]
    return out


def batch(*parts: PartitionRun | tuple[Any, Any]) -> ReadBatch:
    return ReadBatch(list(parts), sum(1 if isinstance(p, tuple) else len(p.reads)
                                      for p in parts))


def fresh(base: int | None = 0, remembered: frozenset[int] = frozenset(),
          bound: int | None = None, max_bytes: int | None = None
          ) -> tuple[Ledger, list[tuple[Any, ...]]]:
    requests: list[tuple[Any, ...]] = []
    book = Ledger("test", lambda *a: requests.append(a), lambda *a: None)
    book.start(1, [("t", 0, base, remembered), ("t", 1, base, frozenset())])
    if bound is not None:
        book.set_bounds(bound, max_bytes)
    return book, requests


def view(run: Slice) -> tuple[Any, ...]:
    entries = None if run.entries is None else [
        (e.offset, e.state, e.size, e.raw) for e in run.entries]
    return (run.ledger.key, entries, list(run.raws), list(run.records), run.n, run.open,
            run.size)


def state(book: Ledger) -> list[tuple[Any, ...]]:
    return [(key, lane.base, lane.next, lane.count, lane.open_bytes, lane.fetch,
             lane.resume_at, lane.terminal, [view(s) for s in lane.slices])
            for key, lane in book.partitions.items()] + [("admitted", book.admitted)]


def both_ways(items: ReadBatch, counted: bool = True,
              before: Callable[[Ledger], None] | None = None, **setup: Any) -> list[Slice]:
    """Admit ``items`` as a ReadBatch and as its pairs (after ``before`` did the same to
    both ledgers); assert the two ledgers agree."""
    bulk, bulk_requests = fresh(**setup)
    pairs, pair_requests = fresh(**setup)
    if before is not None:
        before(bulk)
        before(pairs)
    got = bulk.admit(items, size, counted)
    want = pairs.admit(list(items), size, counted)
    assert [view(s) for s in got] == [view(s) for s in want]
    assert state(bulk) == state(pairs)
    assert bulk_requests == pair_requests
    for s in got:  # a batch watcher's list is never the ledger's own
        assert s.entries is not None or s.raws is not s.records
    return got


def test_runs_of_two_partitions_make_one_counted_slice_each() -> None:
    first = run(0, 0, 1, 2)
    got = both_ways(batch(first, run(1, 0), run(0, 3, 4)), bound=100)
    assert got[0].records is first.reads  # admitted whole: the run's list, extended
    assert [(s.ledger.partition, s.counted_offsets(), s.size) for s in got] == [
        (0, [0, 1, 2, 3, 4], 20), (1, [0], 4)]


def test_messages_not_resolved_never_reach_the_count_bound() -> None:
    """The count bound is what resolved above the floor; what is not resolved yet is the
    group's ``max_in_flight`` (core/flowcontrol.py), however many of one partition."""
    got = both_ways(batch(run(0, 0, 1, 2, 3, 4)), bound=3)
    assert got[0].counted_offsets() == [0, 1, 2, 3, 4]
    assert got[0].entries is None  # counted: admitted whole


def test_a_run_after_the_count_bound_stops_where_one_by_one_stops() -> None:
    """Three messages resolved above a floor still open: the next run admits its first
    record, as one by one, and stops there."""
    def resolved_above_floor(book: Ledger) -> None:
        [first] = book.admit(batch(run(0, 0, 1, 2, 3)), size, False)
        book.finish_many(first.entries[1:] if first.entries else [])

    got = both_ways(batch(run(0, 4, 5, 6)), bound=3, before=resolved_above_floor)
    assert got[0].counted_offsets() == [4]


@pytest.mark.parametrize("bounds", [{"bound": 100, "max_bytes": 12}])
def test_a_run_ending_exactly_at_a_bound_pauses_its_partition(bounds: dict[str, Any]) -> None:
    both_ways(batch(run(0, 0, 1, 2)), **bounds)
    book, requests = fresh(**bounds)
    book.admit(batch(run(0, 0, 1, 2)), size)
    assert requests and book.partitions[("t", 0)].at_bound


def test_a_run_that_reaches_the_byte_bound_stops_where_one_by_one_stops() -> None:
    got = both_ways(batch(run(0, 0, 1, 2, 3)), bound=100, max_bytes=9)
    assert got[0].counted_offsets() == [0, 1, 2]


def test_a_run_overlapping_what_was_read_skips_the_copies() -> None:
    setups: list[dict[str, Any]] = [{}, {"bound": 100}]
    for book_setup in setups:
        bulk, _ = fresh(**book_setup)
        pairs, _ = fresh(**book_setup)
        for book in (bulk, pairs):
            book.admit(batch(run(0, 0, 1, 2)), size)
        again = batch(run(0, 1, 2, 3))
        bulk.admit(again, size)
        pairs.admit(list(again), size)
        assert state(bulk) == state(pairs)
        assert bulk.partitions[("t", 0)].next == 4


@pytest.mark.parametrize("setup", [{"base": None}, {"remembered": frozenset({1})},
                                   {"base": 5}])
def test_unknown_base_remembered_offsets_and_offsets_below_base(setup: dict[str, Any]) -> None:
    both_ways(batch(run(0, 0, 1, 2), run(1, 7, 8)), **setup)


def test_another_generation_or_an_unassigned_partition_is_skipped_whole() -> None:
    got = both_ways(batch(run(0, 0, 1, generation=2), run(9, 0), run(1, 0, 1)))
    assert [s.ledger.partition for s in got] == [1]


def test_per_message_groups_and_pairs_between_runs_take_the_per_record_path() -> None:
    replay = Read("t", 0, 2, targets=frozenset({"w"}))
    items = batch(run(0, 0, 1), (replay, replay), run(0, 3), run(1, 0))
    both_ways(items, bound=100)
    got = both_ways(items, counted=False, bound=100)
    assert all(s.entries is not None for s in got)


def test_a_read_batch_reads_as_its_pairs() -> None:
    replay = Read("t", 0, 2, targets=frozenset({"w"}))
    items = batch(run(0, 0, 1), (replay, replay))
    first = items.parts[0]
    assert isinstance(first, PartitionRun)
    a, b = first.reads
    assert len(items) == 3 and list(items) == [(a, a), (b, b), (replay, replay)]
    assert items[2] == (replay, replay) and items[:1] == [(a, a)]
