"""A group's commit targets (core/targets.py): one timer for many settlements, a publish
at the end of the step that left nothing in flight, none once the group stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sharedstream.core.group import Group
from sharedstream.core.streamconfig import ManagerSettings, ManualClock
from sharedstream.core.window import Window
from sharedstream.testing.memorystream import MemoryStream

pytestmark = pytest.mark.unit


class Sink:
    def submit(self, windows: Sequence[Window]) -> None:
        raise AssertionError("no window is expected here")


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def make(*, idle: bool) -> tuple[MemoryStream, Group]:
    producer = MemoryStream(commit_interval=3600.0)  # the timer fires only when told
    producer.commit_when_idle = idle
    group = Group("k", frozenset({"a"}), producer,
                  ManagerSettings(), ManualClock(), Sink(), lambda group: None)
    return producer, group


async def test_settlements_share_one_publish_and_a_stopped_group_publishes_nothing() -> None:
    producer, group = make(idle=False)
    stream = group.add("a")
    producer.feed(("t", 0), ("t", 1), ("t", 2))
    await turns()
    armed = group.targets.handle
    assert armed is not None  # the hand-out asked for a publish
    for _ in range(3):
        await anext(stream)
    stream.moved_past()  # three settle: the same timer, not one each
    assert group.targets.handle is armed and group.in_flight == 0
    group.targets.publish()
    assert group.targets.handle is None and producer.published[("t", 0)][1] == 3
    producer.feed(("t", 3))
    await turns()
    group.targets.publish()  # the hand-out's ask, answered before the message settles
    await anext(stream)
    stream.moved_past()  # drains the group: without idle commits, the timer again
    assert isinstance(group.targets.handle, asyncio.TimerHandle)
    await group.stop()
    group.targets.schedule()
    assert group.targets.handle is None  # closing: what resolves now is not committed


async def test_a_group_left_with_nothing_in_flight_publishes_at_the_end_of_that_step() -> None:
    producer, group = make(idle=True)
    stream = group.add("a")
    producer.feed(("t", 0), ("t", 1))
    await turns()
    assert isinstance(group.targets.handle, asyncio.TimerHandle)  # an hour away
    await anext(stream)
    await anext(stream)  # in the filter, not settled: the timer stays
    assert isinstance(group.targets.handle, asyncio.TimerHandle) and group.in_flight > 0
    stream.moved_past()  # they settle: nothing in flight
    soon = group.targets.handle
    assert soon is not None and not isinstance(soon, asyncio.TimerHandle)
    assert ("t", 0) not in producer.published  # not inside the settlement itself
    await asyncio.sleep(0)
    assert group.targets.handle is None and producer.published[("t", 0)][1] == 2
    await group.stop()
