"""Partition ledger arithmetic: the commit target and the terminal offsets remembered above it."""

from __future__ import annotations

import pytest

from sharedstream.core.ledger import PartitionLedger

pytestmark = pytest.mark.unit


def read(lane: PartitionLedger, *offsets: int) -> None:
    for offset in offsets:
        assert lane.admit(offset) is not None


def finish(lane: PartitionLedger, *offsets: int) -> None:
    for offset in offsets:
        entry = lane.get(offset)
        assert entry is not None
        lane.finish(entry)


def test_nothing_known_has_no_target() -> None:
    assert PartitionLedger("t", 0, 1).commit_target() is None


def test_the_target_follows_the_terminal_prefix_and_forgets_what_it_passed() -> None:
    lane = PartitionLedger("t", 0, 1, base=10)
    read(lane, 10, 11, 12, 13)
    finish(lane, 10, 11)
    assert lane.commit_target() == (12, [])
    assert list(lane.entries) == [12, 13]
    finish(lane, 12, 13)
    assert lane.commit_target() == (14, [])
    assert not lane.entries and lane.terminal == 0


def test_terminal_offsets_above_a_held_floor_are_remembered_in_order() -> None:
    lane = PartitionLedger("t", 0, 1, base=0)
    read(lane, 0, 1, 2, 3, 4)
    held = lane.get(1)
    assert held is not None
    lane.hold(held)
    finish(lane, 0, 2, 4)
    assert lane.commit_target() == (1, [2, 4])
    assert lane.commit_target() == (1, [2, 4])  # asking twice changes nothing
    assert lane.held_count == 1
    lane.release(held)
    assert lane.held_count == 0
    lane.hold(held)
    finish(lane, 1, 3)
    assert lane.commit_target() == (5, [])
    assert lane.terminal == 0 and lane.held_count == 0


def test_finishing_twice_counts_once() -> None:
    lane = PartitionLedger("t", 0, 1, base=0)
    read(lane, 0, 1)
    finish(lane, 1, 1)
    assert lane.commit_target() == (0, [1])
    finish(lane, 0)
    assert lane.commit_target() == (2, [])


def test_gaps_in_offsets_are_followed_not_assumed() -> None:
    lane = PartitionLedger("t", 0, 1, base=0)
    read(lane, 0, 5, 9)  # compaction or transaction markers left gaps
    finish(lane, 0, 5)
    assert lane.commit_target() == (9, [])
    finish(lane, 9)
    assert lane.commit_target() == (10, [])


def test_remembered_progress_skips_reads_and_moves_the_target() -> None:
    lane = PartitionLedger("t", 0, 1, base=3, remembered={4, 6})
    assert lane.admit(3) is not None
    assert lane.admit(4) is None  # handled before the restart: not handed out again
    assert lane.commit_target() == (3, [4, 6])
    finish(lane, 3)
    assert lane.commit_target() == (5, [6])
    assert lane.admit(5) is not None
    assert lane.admit(6) is None
    finish(lane, 5)
    assert lane.commit_target() == (7, [])
