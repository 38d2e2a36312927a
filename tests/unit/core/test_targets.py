"""A group's commit targets (core/targets.py): one timer for many settlements, none
once the group stopped."""

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


async def test_settlements_share_one_publish_and_a_stopped_group_publishes_nothing() -> None:
    producer = MemoryStream(commit_interval=3600.0)  # fires only when the test says
    group = Group("k", frozenset({"a"}), producer,
                  ManagerSettings(), ManualClock(), Sink(), lambda group: None)
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
    await group.stop()
    group.targets.schedule()
    assert group.targets.handle is None  # closing: what resolves now is not committed
