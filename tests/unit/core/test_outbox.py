"""A group's window outbox (core/outbox.py): one sink hand-off per loop step, and a
refused hand-off fails each of its windows."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sharedstream.core.outbox import WindowOutbox
from sharedstream.core.window import Window

pytestmark = pytest.mark.unit


class Closed:
    """A closed window as the outbox sees it: it can only be failed."""

    def __init__(self) -> None:
        self.failed: BaseException | None = None

    def fail(self, exc: BaseException) -> None:
        self.failed = exc


class Sink:
    def __init__(self, refuse: Exception | None = None) -> None:
        self.handoffs: list[list[Window]] = []
        self.refuse = refuse

    def submit(self, windows: Sequence[Window]) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.handoffs.append(list(windows))


async def test_windows_of_one_step_reach_the_sink_in_one_hand_off() -> None:
    sink = Sink()
    outbox = WindowOutbox("k", sink)
    first, second, third = Closed(), Closed(), Closed()
    outbox.submit(first)  # type: ignore[arg-type]
    outbox.submit(second)  # type: ignore[arg-type]
    assert sink.handoffs == []  # not before the step ends
    await asyncio.sleep(0)
    outbox.submit(third)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert sink.handoffs == [[first, second], [third]]


async def test_a_refused_hand_off_fails_each_of_its_windows() -> None:
    refused = RuntimeError("queue closed")
    outbox = WindowOutbox("k", Sink(refuse=refused))
    windows = [Closed(), Closed()]
    for window in windows:
        outbox.submit(window)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert [w.failed for w in windows] == [refused, refused]
