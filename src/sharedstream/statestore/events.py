"""Operator queries on persisted asset events: list them, delete old ones.

Deleting events is also how an operator makes a deliberate reprocessing produce
events again: events are idempotent on (watcher, topic id, partition, offset,
index), so re-reading offsets whose events still exist creates nothing new.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from sharedstream.core.message import Coordinates
from sharedstream.statestore.maintenance import CleanupReport, delete_in_batches
from sharedstream.statestore.models import asset, asset_event


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One ``asset_event`` row as an operator sees it (``payload`` decoded from JSON)."""

    asset: str
    watcher: str
    origin: Coordinates  # no timestamp: asset_event does not keep it
    event_index: int
    created_at: datetime
    payload: Any

    def as_json(self) -> dict[str, Any]:
        """The flat form ``events list --json`` prints (its keys are a CLI contract)."""
        o = self.origin
        return {"asset": self.asset, "watcher": self.watcher, "topic": o.topic,
                "topic_id": o.topic_id, "partition": o.partition, "offset": o.offset,
                "event_index": self.event_index, "created_at": self.created_at,
                "payload": self.payload}


def list_events(
    engine: Engine,
    *,
    asset_name: str | None = None,
    watcher: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[EventRecord]:
    """Events matching every given filter, newest first (ties: last inserted first)."""
    e, a = asset_event.c, asset.c
    query = (select(a.name, e.watcher, e.topic, e.topic_id, e.partition, e.offset,
                    e.event_index, e.created_at, e.payload)
             .join_from(asset_event, asset, e.asset_id == a.id)
             .order_by(e.created_at.desc(), e.id.desc()))
    if asset_name is not None:
        query = query.where(a.name == asset_name)
    if watcher is not None:
        query = query.where(e.watcher == watcher)
    if since is not None:
        query = query.where(e.created_at >= since)
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [EventRecord(row.name, row.watcher,
                        Coordinates(row.topic, row.topic_id, row.partition, row.offset),
                        row.event_index, row.created_at, json.loads(row.payload))
            for row in rows]


def clean_events(
    engine: Engine, *, now: datetime, older_than: timedelta, batch_size: int, dry_run: bool
) -> CleanupReport:
    """Delete events created before ``now - older_than``, in batches of ``batch_size``
    (0 = one statement), one transaction per batch; see ``delete_in_batches``."""
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    if batch_size < 0:
        raise ValueError("batch_size must be >= 0")
    e = asset_event.c
    return delete_in_batches(engine, e.id, e.created_at < now - older_than,
                             batch_size=batch_size, dry_run=dry_run)
