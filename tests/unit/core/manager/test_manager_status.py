"""The manager's operational surface: status snapshots and the shutdown pause."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from manager_fakes import Harness, fails_once, settle

from sharedstream.triggers.base import reject_shared_stream_event

pytestmark = pytest.mark.unit


def gated() -> tuple[asyncio.Event, Any]:
    gate = asyncio.Event()

    async def handler(message: str) -> list[Any]:
        await gate.wait()
        return []

    return gate, handler


async def test_status_reports_cohort_presence_polling_and_in_flight() -> None:
    gate, handler = gated()
    h = Harness(["a", "b"], max_in_flight=100)
    h.start("a")
    await settle()
    [status] = h.manager.status()
    assert status.key == "k"
    assert status.cohort == {"a", "b"} and status.present == {"a"}
    assert not status.polling
    h.start("b", handler)
    await settle()
    h.producer.feed(("p0", 0), ("p0", 1))
    await settle()
    [status] = h.manager.status()
    assert status.polling and status.present == {"a", "b"}
    assert status.in_flight == 2 and status.queued == 1  # b holds 0 open, 1 queued
    gate.set()
    await settle()
    assert h.manager.status()[0].in_flight == 0
    await h.stop()


async def test_pause_all_stops_fetching_for_good() -> None:
    gate, handler = gated()
    h = Harness(["a"], max_in_flight=2)
    h.start("a", handler)
    await settle()
    h.producer.feed(("p0", 0), ("p0", 1))
    await settle()
    assert h.producer.paused  # the in-flight bound
    h.manager.pause_all()
    gate.set()
    await settle()
    assert h.manager.status()[0].in_flight == 0
    assert h.producer.paused and h.manager.status()[0].paused, "a quiesced group never resumes"
    await h.stop()


async def test_without_pause_all_the_in_flight_bound_resumes() -> None:
    gate, handler = gated()
    h = Harness(["a"], max_in_flight=2)
    h.start("a", handler)
    await settle()
    h.producer.feed(("p0", 0), ("p0", 1))
    await settle()
    assert h.producer.paused
    gate.set()
    await settle()
    assert not h.producer.paused
    await h.stop()


async def test_counters_count_each_watchers_outcomes() -> None:
    async def rejects_p1(message: str) -> list[Any]:
        if message == "p:1":
            reject_shared_stream_event("bad")
        return []

    h = Harness(["a", "b", "c"], retry_backoff_initial=1.0)
    h.start("a")
    h.start("b", fails_once())
    h.start("c", rejects_p1)
    await settle()
    h.producer.feed(("p", 0), ("p", 1), ("p", 2))
    await settle()
    h.clock.advance(1.0)  # b's filter restarts and p:0 comes back to b only
    await settle()
    counters = h.group.counters
    assert counters.received == 3 and counters.redelivered == 1
    assert counters.outcomes("a") == {"acked": 3, "failed": 0, "rejected": 0}
    assert counters.outcomes("b") == {"acked": 3, "failed": 1, "rejected": 0}
    assert counters.outcomes("c") == {"acked": 2, "failed": 0, "rejected": 1}
    assert h.publish() == {"p": 3}
    await h.stop()
