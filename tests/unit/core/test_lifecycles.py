"""The lifecycles of core (issue 26): the group, its flow control, a stream, a window.

Each allowed move works through the object's own methods; every other move raises
InvalidState. Unit tests on the in-memory adapter and a manual clock (logic only).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import pytest

from sharedstream.core.group import Group, ProducerStreamEnded
from sharedstream.core.groupstate import FLOW_MOVES, MOVES, Flow, GroupState
from sharedstream.core.ledger import Entry
from sharedstream.core.lifecycle import InvalidState, check_move
from sharedstream.core.stream import MOVES as STREAM_MOVES
from sharedstream.core.stream import SharedStream, StreamState
from sharedstream.core.streamconfig import (
    Clock,
    GroupFailedError,
    ManagerSettings,
    ManualClock,
)
from sharedstream.core.window import Window, WindowState
from sharedstream.testing.memorystream import MemoryStream

# -- the tables ------------------------------------------------------------------------------

ALLOWED_GROUP = {("GATHERING", "POLLING"), ("GATHERING", "STOPPING"), ("GATHERING", "FAILED"),
                 ("POLLING", "STOPPING"), ("POLLING", "FAILED"), ("STOPPING", "CLOSING")}
ALLOWED_FLOW = {("FLOWING", "PAUSED"), ("PAUSED", "FLOWING"), ("FLOWING", "QUIESCED"),
                ("PAUSED", "QUIESCED")}
ALLOWED_STREAM = {("ACTIVE", "CLOSED"), ("ACTIVE", "FAILED")}


@pytest.mark.parametrize("moves, allowed", [
    (MOVES, ALLOWED_GROUP), (FLOW_MOVES, ALLOWED_FLOW), (STREAM_MOVES, ALLOWED_STREAM)],
    ids=["group", "flow", "stream"])
def test_every_move_outside_the_documented_ones_raises(
        moves: dict[Any, frozenset[Any]], allowed: set[tuple[str, str]]) -> None:
    states = list(moves)
    for old, new in itertools.product(states, states):
        if (old.name, new.name) in allowed:
            assert check_move("x", moves, old, new) is new
        else:
            with pytest.raises(InvalidState, match=f"x: {old.name} -> {new.name} is not allowed"):
                check_move("x", moves, old, new)


# -- the group -------------------------------------------------------------------------------

class Sink:
    def __init__(self) -> None:
        self.windows: list[Window] = []

    def submit(self, windows: Sequence[Window]) -> None:
        self.windows.extend(windows)


def make_group(clock: Clock, cohort: Sequence[str] = ("a", "b"), **settings: Any
               ) -> tuple[Group, MemoryStream, list[Group]]:
    producer = MemoryStream()
    evicted: list[Group] = []
    group = Group("k", frozenset(cohort), producer,
                  ManagerSettings(cohort_grace_period=10.0, **settings), clock, Sink(),
                  evicted.append)
    return group, producer, evicted


def state(group: Group) -> tuple[GroupState, Flow]:
    """The group's state and flow, read afresh (mypy would narrow the attributes)."""
    return group.state, group.flow_control.flow


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_group_gathers_polls_stops_and_closes() -> None:
    group, _, evicted = make_group(ManualClock())
    assert state(group) == (GroupState.GATHERING, Flow.FLOWING)
    group.add("a")
    assert state(group)[0] is GroupState.GATHERING
    group.add("b")
    assert state(group)[0] is GroupState.POLLING
    await group.stop()
    assert state(group)[0] is GroupState.CLOSING
    await group.stop()  # idempotent: no move
    assert state(group)[0] is GroupState.CLOSING and evicted == []


async def test_group_polls_after_the_grace_period_or_stops_while_gathering() -> None:
    clock = ManualClock()
    group, _, _ = make_group(clock)
    group.add("a")
    clock.advance(10.0)
    assert group.state is GroupState.POLLING
    await group.stop()
    gathering, _, _ = make_group(clock)
    await gathering.stop()
    assert gathering.state is GroupState.CLOSING


async def test_a_failed_group_stays_failed_and_its_streams_raise() -> None:
    group, producer, evicted = make_group(ManualClock(), cohort=("a",))
    stream = group.add("a")
    producer.finish()  # open_stream() returns: the group fails
    await turns()
    assert group.state is GroupState.FAILED and evicted == [group]
    assert isinstance(group.failure, ProducerStreamEnded)
    assert stream.state is StreamState.FAILED
    with pytest.raises(GroupFailedError):
        await anext(stream)
    await group.stop()  # no move out of FAILED
    assert group.state is GroupState.FAILED


async def test_flow_pauses_resumes_and_quiesces_for_good() -> None:
    group, producer, _ = make_group(ManualClock(), cohort=("a",), max_in_flight=2)
    stream = group.add("a")
    producer.feed(("t", 0), ("t", 1))
    await turns()
    assert state(group)[1] is Flow.PAUSED and group.paused and producer.paused
    await anext(stream)
    await anext(stream)
    stream.moved_past()  # both acked: in flight 0, queue empty
    assert state(group)[1] is Flow.FLOWING and not group.paused and not producer.paused
    group.flow_control.quiesce()
    group.flow_control.quiesce()  # idempotent: no move
    assert state(group)[1] is Flow.QUIESCED and group.paused and producer.paused
    group.maybe_resume()
    assert state(group)[1] is Flow.QUIESCED
    await group.stop()


# -- the stream ------------------------------------------------------------------------------

class Owner:
    """The group as a stream sees it (StreamOwner)."""

    key: Hashable = "k"
    paused = False
    low_queue = 1

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.settings = ManagerSettings()

    def ack(self, entry: Entry, watcher: str) -> None: ...

    def reject(self, entry: Entry, watcher: str, reason: str) -> None: ...

    def fail(self, entry: Entry, watcher: str, why: str, *, counts: bool) -> None: ...

    def submit(self, window: Window) -> None: ...

    def maybe_resume(self) -> None: ...


def ended_stream(how: str) -> SharedStream:
    stream = SharedStream(Owner(), "w", lambda: 0.0)
    if how == "CLOSED":
        stream.detach(fail_pending=False)
    elif how == "FAILED":
        stream.group_failed(RuntimeError("boom"))
    return stream


@pytest.mark.parametrize("start", ["ACTIVE", "CLOSED", "FAILED"])
@pytest.mark.parametrize("end", ["detach", "group_failed"])
def test_a_stream_ends_once(start: str, end: str) -> None:
    stream = ended_stream(start)
    call: Callable[[], None] = (lambda: stream.detach(fail_pending=True)) if end == "detach" \
        else (lambda: stream.group_failed(RuntimeError("again")))
    if start == "ACTIVE":
        call()
        assert stream.state is (StreamState.CLOSED if end == "detach" else StreamState.FAILED)
        assert stream.closed
    else:
        with pytest.raises(InvalidState, match=f"stream of watcher 'w': {start} -> "):
            call()
        assert stream.state.name == start


async def test_a_closed_stream_ends_iteration() -> None:
    with pytest.raises(StopAsyncIteration):
        await anext(ended_stream("CLOSED"))


# -- the window ------------------------------------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def window_confirmed(self, window: Window) -> None:
        self.calls.append("confirmed")

    def window_failed(self, window: Window, exc: BaseException) -> None:
        self.calls.append("failed")

    def window_rejected(self, window: Window, reason: str) -> None:
        self.calls.append("rejected")


def window_in(state: str) -> Window:
    window = Window(Recorder(), None, "w", "raw", "payload")
    if state in ("SUBMITTED", "COMMITTED"):
        window.events.append(object())  # type: ignore[arg-type]
        assert window.close()
    if state == "COMMITTED":
        window.confirm()
    if state == "DONE":
        assert window.abandon()
    assert window.state.name == state
    return window


CALLS: dict[str, Callable[[Window], object]] = {
    "close": Window.close, "withdraw": lambda w: w.withdraw("no"), "confirm": Window.confirm,
    "fail": lambda w: w.fail(RuntimeError("db")), "reject": lambda w: w.reject("bad"),
    "abandon": Window.abandon}
# (state, call) -> the state after, or None: InvalidState.
WINDOW_OUTCOMES: dict[tuple[str, str], str | None] = {
    ("OPEN", "close"): "DONE", ("OPEN", "withdraw"): "DONE", ("OPEN", "confirm"): None,
    ("OPEN", "fail"): None, ("OPEN", "reject"): None, ("OPEN", "abandon"): "DONE",
    ("SUBMITTED", "close"): "SUBMITTED", ("SUBMITTED", "withdraw"): "SUBMITTED",
    ("SUBMITTED", "confirm"): "COMMITTED", ("SUBMITTED", "fail"): "DONE",
    ("SUBMITTED", "reject"): "DONE", ("SUBMITTED", "abandon"): "DONE",
    # a committed window is final: the sink settled it once
    ("COMMITTED", "close"): "COMMITTED", ("COMMITTED", "withdraw"): "COMMITTED",
    ("COMMITTED", "confirm"): None, ("COMMITTED", "fail"): None,
    ("COMMITTED", "reject"): None, ("COMMITTED", "abandon"): None,
    # given up on: the sink's calls are ignored (it cannot know)
    ("DONE", "close"): "DONE", ("DONE", "withdraw"): "DONE", ("DONE", "confirm"): "DONE",
    ("DONE", "fail"): "DONE", ("DONE", "reject"): "DONE", ("DONE", "abandon"): "DONE",
}


def test_the_window_table_covers_every_state_and_call() -> None:
    assert set(WINDOW_OUTCOMES) == set(itertools.product(
        [s.name for s in WindowState], CALLS))


@pytest.mark.parametrize("state, call", sorted(WINDOW_OUTCOMES))
def test_window_moves(state: str, call: str) -> None:
    window = window_in(state)
    after = WINDOW_OUTCOMES[(state, call)]
    if after is None:
        with pytest.raises(InvalidState, match=f"window of watcher 'w': {call}\\(\\) on a "
                                               f"{state} window"):
            CALLS[call](window)
        assert window.state.name == state
    else:
        CALLS[call](window)
        assert window.state.name == after
