"""Watchers of the fault suite: ``$FAULTS_TOPIC`` (DLQ ``$FAULTS_DLQ``), ``$FAULTS_WATCHERS`` picks.

* ``text``: the stock :class:`KafkaSharedStreamTrigger` (UTF-8 events, tombstones
  skipped, undecodable values rejected): what a user gets without subclassing;
* ``json``: parses each value as JSON and yields the parsed document; rejects what
  does not parse, including documents nested too deep for Python (RecursionError);
* ``sibling``: keeps every ``{"id": n}`` message;
* ``slow``: keeps every message after sleeping ``$FAULTS_SLOW_SECONDS`` on each;
* ``stuck``: keeps every message, but hangs on ids in ``$FAULTS_STUCK_IDS`` while
  the file ``$FAULTS_STUCK_FLAG`` exists (only ``ack_timeout`` gets it off them).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sharedstream import (
    Asset,
    AssetWatcher,
    KafkaMessage,
    KafkaSharedStreamTrigger,
    TriggerEvent,
    reject_shared_stream_event,
)

TOPIC = os.environ["FAULTS_TOPIC"]
DLQ = os.environ.get("FAULTS_DLQ") or None


class Json(KafkaSharedStreamTrigger):
    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            if message.value is None:
                continue
            try:
                document = json.loads(message.value)
            except (ValueError, RecursionError) as error:
                reject_shared_stream_event(f"not JSON: {type(error).__name__}")
                continue
            yield TriggerEvent(document)


class Sibling(KafkaSharedStreamTrigger):
    async def before(self, n: int) -> None:
        """Runs on each message before it is kept (the slow and stuck variants)."""

    async def filter_shared_stream(self, stream: AsyncIterator[Any]
                                   ) -> AsyncIterator[TriggerEvent]:
        message: KafkaMessage
        async for message in stream:
            assert message.value is not None
            n = json.loads(message.value)["id"]
            await self.before(n)
            yield TriggerEvent({"id": n})


class Slow(Sibling):
    async def before(self, n: int) -> None:
        await asyncio.sleep(float(os.environ.get("FAULTS_SLOW_SECONDS", "0.01")))


class Stuck(Sibling):
    async def before(self, n: int) -> None:
        stuck = {int(i) for i in os.environ.get("FAULTS_STUCK_IDS", "").split(",") if i}
        flag = Path(os.environ.get("FAULTS_STUCK_FLAG", "/nonexistent"))
        if n in stuck and await asyncio.to_thread(flag.exists):
            await asyncio.Event().wait()


CATALOGUE: dict[str, type[KafkaSharedStreamTrigger]] = {
    "text": KafkaSharedStreamTrigger, "json": Json, "sibling": Sibling, "slow": Slow,
    "stuck": Stuck}

assets = [
    Asset(name, uri=f"kafka://{TOPIC}?watcher={name}", watchers=[
        AssetWatcher(name, CATALOGUE[name](topics=[TOPIC], kafka_config_id="e2e",
                                           poll_timeout=0.2, dlq_topic=DLQ))])
    for name in os.environ["FAULTS_WATCHERS"].split(",")
]
