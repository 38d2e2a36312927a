"""The group's one flow-control decision (core/flowcontrol.py), on its own."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from sharedstream.core.flowcontrol import FlowControl, Pause
from sharedstream.core.groupstate import Flow

pytestmark = pytest.mark.unit


@dataclass
class Q:
    name: str
    queued: int = 0
    parked: bool = False


def flow_control(max_in_flight: int, queue_bound: int, lagged: Counter[str] | None = None,
                 ) -> tuple[FlowControl, list[bool]]:
    """A flow control and what it applied to the adapter (False: pause, True: resume)."""
    applied: list[bool] = []
    return (FlowControl(max_in_flight, queue_bound, Counter() if lagged is None else lagged,
                        applied.append), applied)


def test_a_busy_watchers_full_queue_is_lag_and_the_flow_waits_for_it_to_drain() -> None:
    lagged: Counter[str] = Counter()
    flow, applied = flow_control(100, 4, lagged)
    flow.in_flight = 10
    slow, fast = Q("slow", 4), Q("fast", 4, parked=True)  # fast takes its batch next step
    flow.handed([slow, fast])
    assert flow.flow is Flow.PAUSED and flow.pause_reason is Pause.LAG and applied == [False]
    assert flow.lagging == {"slow": 4} and lagged == {"slow": 1}
    flow.handed([slow])
    assert lagged == {"slow": 1} and applied == [False]  # one episode, one pause
    slow.queued = 3
    flow.maybe_resume()
    assert flow.flow is Flow.PAUSED  # above half its queue
    slow.queued = 2
    flow.maybe_resume()
    assert flow.flow is Flow.FLOWING and flow.lagging == {} and applied == [False, True]
    assert flow.pause_reason is None


def test_the_in_flight_bound_pauses_and_resumes_at_half() -> None:
    flow, applied = flow_control(10, 4)
    flow.in_flight = 9
    flow.handed([Q("a", 1)])
    assert flow.flow is Flow.FLOWING
    flow.in_flight = 10
    flow.handed([Q("a", 1)])
    assert flow.pause_reason is Pause.IN_FLIGHT and applied == [False]
    flow.in_flight = 6
    flow.maybe_resume()
    assert flow.flow is Flow.PAUSED
    flow.in_flight = 5
    flow.maybe_resume()
    assert flow.flow is Flow.FLOWING and applied == [False, True]


def test_a_watcher_that_leaves_no_longer_holds_the_flow_back() -> None:
    flow, _ = flow_control(10, 4)
    flow.handed([Q("gone", 9)])
    assert flow.pause_reason is Pause.LAG
    flow.maybe_resume()
    assert flow.flow is Flow.PAUSED
    flow.left("gone")
    flow.maybe_resume()
    assert flow.flow is Flow.FLOWING


def test_an_ended_group_never_resumes_and_a_quiesced_one_never_pauses_again() -> None:
    flow, applied = flow_control(10, 4)
    flow.in_flight = 10
    flow.handed([])
    flow.ended()
    flow.in_flight = 0
    flow.maybe_resume()  # the group stopped: the adapter is closing, not resumed
    assert flow.flow is Flow.PAUSED and applied == [False]
    quiet, applied = flow_control(10, 4)
    quiet.quiesce()
    quiet.in_flight = 10
    quiet.handed([Q("a", 9)])
    assert quiet.flow is Flow.QUIESCED and quiet.pause_reason is None and applied == [False]
