"""The hand-off's outbox: the loop's requests reach the consumer thread whole, once."""

from __future__ import annotations

import threading

import pytest

from sharedstream.core.backpressure import PauseReason
from sharedstream.kafka.handoff_outbox import Outbox

A = ("t", 0)


def test_a_retried_fetch_never_overrides_a_newer_request() -> None:
    outbox = Outbox(threading.Event())
    outbox.request_fetch(A, (1, None, PauseReason.PARTITION_BOUND))
    taken = outbox.take_fetches()
    outbox.request_fetch(A, (1, 7, None))  # the loop lifted the bound meanwhile
    outbox.retry_fetch(A, taken[A])  # the thread could not apply the pause
    assert outbox.take_fetches() == {A: (1, 7, None)} and outbox.take_fetches() == {}


def test_resuming_the_group_makes_room_for_a_holding_thread() -> None:
    room = threading.Event()
    outbox = Outbox(room)
    outbox.pause_group(True)
    assert outbox.group_paused and not room.is_set()
    outbox.pause_group(False)
    assert not outbox.group_paused and room.is_set()


def test_commands_queued_during_a_turn_wait_for_the_next_and_fail_at_the_end() -> None:
    outbox = Outbox(threading.Event())
    later: list[object] = []
    first = outbox.command(lambda consumer: later.append(outbox.command(lambda c: c)))
    outbox.run_commands("consumer")
    assert first.result() is None and len(later) == 1
    outbox.fail_commands(RuntimeError("closed"))
    with pytest.raises(RuntimeError, match="closed"):
        later[0].result()  # type: ignore[attr-defined]
