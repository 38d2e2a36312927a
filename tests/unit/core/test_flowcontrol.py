"""The group's one flow-control decision (core/flowcontrol.py), on its own."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from sharedstream.core.flowcontrol import FlowControl, Pause

pytestmark = pytest.mark.unit


@dataclass
class Q:
    name: str
    queued: int = 0
    parked: bool = False


def test_a_busy_watchers_full_queue_is_lag_and_the_flow_waits_for_it_to_drain() -> None:
    lagged: Counter[str] = Counter()
    flow = FlowControl(max_in_flight=100, queue_bound=4, lagged=lagged)
    slow, fast = Q("slow", 4), Q("fast", 4, parked=True)  # fast takes its batch next step
    assert flow.handed(10, [slow, fast]) is Pause.LAG
    assert flow.lagging == {"slow": 4} and lagged == {"slow": 1}
    assert flow.handed(10, [slow]) is Pause.LAG and lagged == {"slow": 1}  # one episode
    slow.queued = 3
    assert not flow.may_resume(10)  # above half its queue
    slow.queued = 2
    assert flow.may_resume(10) and flow.lagging == {}


def test_the_in_flight_bound_pauses_and_resumes_at_half() -> None:
    flow = FlowControl(max_in_flight=10, queue_bound=4, lagged=Counter())
    assert flow.handed(9, [Q("a", 1)]) is None
    assert flow.handed(10, [Q("a", 1)]) is Pause.IN_FLIGHT
    assert not flow.may_resume(6)
    assert flow.may_resume(5)


def test_a_watcher_that_leaves_no_longer_holds_the_flow_back() -> None:
    flow = FlowControl(max_in_flight=10, queue_bound=4, lagged=Counter())
    assert flow.handed(0, [Q("gone", 9)]) is Pause.LAG
    assert not flow.may_resume(0)
    flow.left("gone")
    assert flow.may_resume(0)
