"""A standalone trigger (its own ``run()``) whose code raises ``CancelledError`` by itself.

A library a trigger awaits may end its own future cancelled (a connection closed under
it, a cancel scope of its own) and so raise ``asyncio.CancelledError`` from ``run()``
though nobody cancelled the triggerer. That is the trigger's failure, like any other
it raises: it is restarted with backoff and its next events persist. (Before, the
watcher's task ended as cancelled, unseen: the watcher stopped for good while the
process went on as if it ran.) Embedded API, real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from db_schemas import postgres_schema_url

from sharedstream import Asset, AssetWatcher
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.statestore.models import asset_event
from sharedstream.triggerer import Config, DatabaseSettings, ProcessSettings, Triggerer
from sharedstream.triggers import BaseEventTrigger, TriggerEvent
from sharedstream.triggers.base import classpath


class CancelledByItsLibrary(BaseEventTrigger):
    """First run: the awaited library call ends cancelled. Then: one event, and idles."""

    def __init__(self) -> None:
        self.runs = 0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return classpath(self), {}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        self.runs += 1
        if self.runs == 1:
            call = asyncio.get_running_loop().create_future()
            call.cancel()  # what the library does to its own call
            await call
        yield TriggerEvent({"run": self.runs})
        await asyncio.Event().wait()


@pytest.fixture
def postgres_url(database_url: str) -> Iterator[str]:
    yield from postgres_schema_url(database_url)


def payloads(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as db:
            return list(db.execute(sa.select(asset_event.c.payload)).scalars())
    finally:
        engine.dispose()


async def test_a_trigger_raising_cancelled_error_of_its_own_is_restarted(
        postgres_url: str) -> None:
    config = Config(database=DatabaseSettings(url=postgres_url),
                    process=ProcessSettings(health_port=-1),
                    manager=ManagerSettings(retry_backoff_initial=0.05, retry_backoff_max=0.1))
    trigger = CancelledByItsLibrary()
    asset = Asset("ticks", watchers=[AssetWatcher("ticker", trigger)])
    async with Triggerer(config, assets=[asset]) as triggerer:
        # A bound for the old failure (nothing ever persists), far above the ~0.1 s needed.
        async with asyncio.timeout(30):
            while not (found := await asyncio.to_thread(payloads, postgres_url)):
                assert triggerer.failure is None, f"stopped: {triggerer.failure!r}"
                await asyncio.sleep(0.05)
        assert trigger.runs == 2
        assert [json.loads(text) for text in found] == [{"run": 2}], found
