"""The hand-off's status is the one record of what does not fetch, and why (issue 42).

Before, a pause was kept three ways: a ``PAUSED`` consumer state, a map of paused
partitions with a "holding" flag beside it, and the thread's own copy of that flag.
Now the consumer state has no pause, and the status holds one value, replaced whole.
"""

from __future__ import annotations

from sharedstream.core.backpressure import FETCHING, Backlog, Backpressure, PauseReason, Pauses
from sharedstream.core.counters import AdapterCounters
from sharedstream.kafka.handoff import ConsumerState, HandOff

A, B = ("t", 0), ("t", 1)


def test_a_paused_consumer_is_running_and_the_status_says_why() -> None:
    hand: HandOff[object] = HandOff()
    hand.started()
    bp = Backpressure(max_queued=8, max_queued_bytes=2**20, pause_after=0.0)
    bp.bound(A, PauseReason.PARTITION_BOUND)
    bp.applied(PauseReason.GROUP)
    hand.status.set_pauses(bp.pauses([A, B]))
    assert "PAUSED" not in ConsumerState.__members__
    assert hand.state is ConsumerState.RUNNING
    assert hand.status.pauses == Pauses({A: PauseReason.PARTITION_BOUND, B: PauseReason.GROUP},
                                        PauseReason.GROUP)
    assert hand.status.pauses.holding


def test_holding_back_without_pausing_shows_why() -> None:
    bp = Backpressure(max_queued=1, max_queued_bytes=2**20, pause_after=60.0)
    hold, want = bp.decide(True, Backlog(0, 0), 0.0)
    assert hold and want is None  # not paused at the broker yet
    assert bp.pauses([A]) == Pauses({}, PauseReason.GROUP)
    bp.decide(False, Backlog(0, 0), 1.0)
    assert bp.pauses([A]) is FETCHING


def test_a_failure_makes_the_status_not_ready_and_counters_add_the_consumed() -> None:
    hand: HandOff[object] = HandOff()
    hand.started()
    hand.status.count(_commit, 2)
    assert hand.status.readiness() == (True, None)
    assert hand.fail(RuntimeError("gone")) and not hand.status.ready
    assert hand.counters() == AdapterCounters(commits=2)


def _commit(c: AdapterCounters, n: int) -> None:
    c.commits += n
