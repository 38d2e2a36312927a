"""The adapter's parts without a client: the commit driver, the backpressure decision and
the hand-off's consumer states (issue 26). Pure logic, no broker, no threads."""

from __future__ import annotations

import pytest

from sharedstream.core.backpressure import FETCHING, Backlog, Backpressure, PauseReason, Pauses
from sharedstream.kafka.commits import CommitDriver
from sharedstream.kafka.handoff import ConsumerState, HandOff, InvalidState
from sharedstream.kafka.progress import decode_progress

pytestmark = pytest.mark.unit

A, B = ("orders", 0), ("orders", 1)


def test_the_tick_sends_each_target_once_and_a_refusal_sends_it_again() -> None:
    owned = {A: 1, B: 1}
    driver = CommitDriver(owned)
    driver.take({A: (1, 5, ()), B: (1, 7, (9,))})
    sent = dict(driver.requests(synchronous=False))
    assert sent[A] == (5, "") and sent[B][0] == 7 and decode_progress(7, sent[B][1]) == {9}
    assert driver.requests(synchronous=False) == []  # sent, not answered yet: not again
    driver.refused([A])
    assert driver.requests(synchronous=False) == [(A, (5, ""))]
    driver.confirmed(A, (5, ""))
    assert driver.unconfirmed([A, B]) == [B]


def test_a_synchronous_commit_sends_every_target_not_confirmed() -> None:
    """An asynchronous request still unanswered may yet be refused by a rebalance: the
    revocation's commit sends it again, for the revoked partitions only."""
    driver = CommitDriver({A: 1, B: 1})
    driver.take({A: (1, 5, ()), B: (1, 7, ())})
    driver.requests(synchronous=False)  # both in flight, unanswered
    assert driver.requests(synchronous=True, only=frozenset({A})) == [(A, (5, ""))]
    driver.confirmed(A, (5, ""))
    assert driver.requests(synchronous=True, only=frozenset({A})) == []
    assert driver.unconfirmed([A]) == []


def test_a_target_of_another_generation_is_never_sent() -> None:
    owned = {A: 2}  # reassigned since the loop published generation 1
    driver = CommitDriver(owned)
    driver.take({A: (1, 5, ())})
    assert driver.requests(synchronous=True) == [] and driver.target(A) is None
    owned.pop(A)  # gone: a late confirmation is not recorded
    driver.confirmed(A, (5, ""))
    driver.refused([A])
    assert driver.requests(synchronous=False) == []


def test_metadata_too_large_halves_the_budget_and_resends() -> None:
    driver = CommitDriver({A: 1}, max_chars=64)
    driver.take({A: (1, 0, tuple(range(2, 400, 2)))})
    [(_, (_, first))] = driver.requests(synchronous=False)
    driver.refused([A], metadata_too_large=True)
    [(_, (_, second))] = driver.requests(synchronous=False)
    assert driver.metadata_max_chars == 32 and len(second) <= 32 < len(first)


def test_forget_drops_everything_of_a_partition() -> None:
    driver = CommitDriver({A: 1})
    driver.take({A: (1, 5, ())})
    driver.forget(A)
    assert driver.requests(synchronous=True) == [] and driver.unconfirmed([A]) == []


def test_backpressure_holds_back_then_pauses_after_pause_after() -> None:
    bp = Backpressure(max_queued=2, max_queued_bytes=100, pause_after=1.0)
    assert bp.decide(False, Backlog(1, 50), 0.0) == (False, None) and bp.held is None
    assert bp.decide(False, Backlog(2, 50), 10.0) == (True, None)  # hold, not paused
    assert bp.held is PauseReason.LOOP_BACKLOG and bp.assignment is None
    assert bp.decide(False, Backlog(2, 50), 11.0) == (False, PauseReason.LOOP_BACKLOG)
    bp.applied(PauseReason.LOOP_BACKLOG)
    assert bp.decide(True, Backlog(0, 0), 12.0) == (False, PauseReason.GROUP)  # other why
    assert bp.decide(False, Backlog(0, 0), 13.0) == (False, None)


def test_a_loop_backlog_of_few_large_records_holds_back_at_its_bytes() -> None:
    bp = Backpressure(max_queued=10_000, max_queued_bytes=100, pause_after=1.0)
    assert bp.decide(False, Backlog(1, 99), 0.0) == (False, None)
    assert bp.decide(False, Backlog(2, 100), 0.0) == (True, None)
    assert bp.held is PauseReason.LOOP_BACKLOG


def test_a_partition_bound_outlasts_the_assignment_pause() -> None:
    bp = Backpressure(max_queued=8, max_queued_bytes=2**20, pause_after=0.0)
    bp.bound(A, PauseReason.BYTE_BOUND)
    bp.applied(PauseReason.GROUP)
    assert bp.pauses([A, B]) == Pauses({A: PauseReason.BYTE_BOUND, B: PauseReason.GROUP},
                                       PauseReason.GROUP)
    bp.applied(None)
    assert bp.resumable([A, B]) == [B]
    assert bp.pauses([A, B]) == Pauses({A: PauseReason.BYTE_BOUND})
    bp.unbound(A)
    assert bp.pauses([A, B]) is FETCHING and not FETCHING.holding


def test_consumer_states_refuse_transitions_not_in_the_table() -> None:
    hand: HandOff[object] = HandOff()
    hand.started()
    hand.revoking()
    hand.revoked()
    assert hand.state is ConsumerState.RUNNING and hand.status.ready
    assert hand.close() and not hand.close()  # asked once
    with pytest.raises(InvalidState):
        hand.to(ConsumerState.RUNNING)
    hand.closed()
    assert hand.state is ConsumerState.CLOSED and not hand.fail(RuntimeError("late"))
