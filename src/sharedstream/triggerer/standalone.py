"""Triggers that do not share a stream: their own ``run()`` loop, events persisted one by one.

Such a trigger has no broker offsets to gate, so there is nothing to hold or
redeliver: each event it yields is written (one short transaction) before the
next one is asked for, so a crash loses at most the event being written. The
events are keyed by a per-process run id and a sequence number, which keeps
them unique; they are not deduplicated across restarts (the trigger itself
decides what it re-emits, typically from a cursor in its asset state).
A trigger that raises (``CancelledError`` too, unless the triggerer is cancelling
it) is restarted with the manager's backoff; its siblings keep running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

from sharedstream.core.backoff import jittered
from sharedstream.core.message import Coordinates
from sharedstream.core.streamconfig import ManagerSettings
from sharedstream.statestore import StateStore
from sharedstream.statestore.events import insert_events
from sharedstream.statestore.types import utcnow
from sharedstream.triggerer.loading import LoadedWatcher
from sharedstream.uow.eventrows import (
    MAX_EVENT_BYTES,
    PayloadRefused,
    encode_payload,
    event_rows,
)

log = logging.getLogger(__name__)


async def run_standalone(loaded: LoadedWatcher, store: StateStore, asset_id: int,
                         settings: ManagerSettings) -> None:
    """Run ``loaded.trigger.run()`` for ever, restarting it with backoff when it raises."""
    where = Coordinates(topic="", topic_id=f"run:{uuid.uuid4().hex}", partition=-1, offset=0)
    crashes = 0
    while True:
        try:
            async for event in loaded.trigger.run():
                try:
                    text = encode_payload(event.payload, MAX_EVENT_BYTES)
                except PayloadRefused as exc:
                    log.error("watcher %r: event dropped: %s", loaded.name, exc)
                    continue
                rows = event_rows(asset_id, loaded.name, where, [text], utcnow())
                await store.run_async(_insert, store, rows)
                where = dataclasses.replace(where, offset=where.offset + 1)
                crashes = 0
            log.warning("watcher %r: run() ended; starting it again", loaded.name)
        except (Exception, asyncio.CancelledError) as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and (task is None or task.cancelling()):
                raise  # the triggerer stops this watcher
            # A CancelledError nobody asked for is the trigger's own (a library's call
            # ended cancelled): a failure like any other, or the watcher would end unseen.
            crashes += 1
            log.warning("watcher %r: run() raised %r; restarting (crash %d)", loaded.name,
                        exc, crashes, exc_info=exc)
        await asyncio.sleep(jittered(settings.backoff(max(crashes, 1))))


def _insert(store: StateStore, rows: list[dict[str, Any]]) -> None:
    with store.engine.begin() as connection:
        insert_events(connection, rows)
