"""The engine's log lines name a group by its consumer group id, not its key tuple."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Hashable
from typing import Any

import pytest

from sharedstream.core.manager import SharedStreamManager
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.testing.memorystream import MemoryStream
from sharedstream.triggerer.logs import GroupNames
from sharedstream.triggers import TriggerEvent
from sharedstream.triggers.base import BaseEventTrigger

KEY = ("kafka-shared-stream", ("orders",), "kafka_default")


class Reader(BaseEventTrigger):
    def shared_stream_key(self) -> Hashable:
        return KEY

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{__name__}.Reader", {}

    @classmethod
    def create_shared_stream_producer(cls, kwargs: Any) -> MemoryStream:
        return MemoryStream(commit_interval=0.01)

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        async for _ in stream:
            yield TriggerEvent({})


class NoSink:
    async def submit(self, windows: Any) -> None:  # never called: nothing is read
        raise AssertionError("nothing to persist")


async def test_a_missing_cohort_member_is_reported_under_the_consumer_group_id(
        caplog: pytest.LogCaptureFixture) -> None:
    names = GroupNames()
    names.install({KEY: "sharedstream.orders"})
    manager = SharedStreamManager(NoSink(),  # type: ignore[arg-type]
                                  ManagerSettings(cohort_grace_period=0.01))
    manager.declare_cohort(KEY, ["present", "absent"])
    caplog.set_level(logging.WARNING, "sharedstream.core")
    task = asyncio.create_task(manager.run_watcher("present", Reader()))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not any("grace period" in r.getMessage() for r in caplog.records):
            assert loop.time() < deadline, "no grace-period warning"
            await asyncio.sleep(0.01)
    finally:
        await manager.stop_all()
        await asyncio.gather(task, return_exceptions=True)
        names.uninstall()
    [record] = [r for r in caplog.records if "grace period" in r.getMessage()]
    assert record.getMessage().startswith("group sharedstream.orders: starting without")
    assert record.group == "sharedstream.orders"  # type: ignore[attr-defined]


def test_other_arguments_and_unhashable_tuples_are_left_alone() -> None:
    names = GroupNames()
    names.names = {KEY: "g"}
    record = logging.LogRecord("sharedstream.core.group", logging.INFO, __file__, 1,
                               "%r %r %s", (("x", []), KEY, 3), None)
    names.filter(record)
    assert record.getMessage() == "('x', []) g 3"
