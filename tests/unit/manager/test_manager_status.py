"""The manager's operational surface: status snapshots and the shutdown pause."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from manager_fakes import Harness, settle

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
