"""``undelivered_event``: events a destination refused for good, with the reason.

The destination's cursor moves past such an event (one bad event must not hold
every later one), so this table is the only record that it was not delivered.
``sharedstream events undelivered`` lists the rows; ``--retry`` sends them again
and deletes the row of each one the destination then takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Engine

from sharedstream.core.text import storable_text
from sharedstream.statestore.events import EventRecord, events_by_id
from sharedstream.statestore.models import undelivered_event
from sharedstream.statestore.sql import insert_ignore_many


@dataclass(frozen=True, slots=True)
class Undelivered:
    """One refused event, with the destination, the reason and how often it was tried."""

    destination: str
    event: EventRecord
    reason: str
    attempts: int
    created_at: datetime


def record(engine: Engine, destination: str, refused: Sequence[tuple[int, str]],
           now: datetime) -> None:
    """Record ``(event id, reason)`` pairs; a pair recorded before counts one more attempt.

    Reasons (a destination's answer, an exception) are made storable first: a NUL or a
    lone surrogate in them must not fail the record, which would hold the destination.
    """
    if not refused:
        return
    refused = [(event_id, storable_text(reason)) for event_id, reason in refused]
    u = undelivered_event.c
    with engine.begin() as connection:
        insert_ignore_many(connection, undelivered_event, [
            {"destination": destination, "event_id": event_id, "reason": reason,
             "attempts": 0, "created_at": now} for event_id, reason in refused])
        for event_id, reason in refused:
            connection.execute(update(undelivered_event)
                               .where(u.destination == destination)
                               .where(u.event_id == event_id)
                               .values(attempts=u.attempts + 1, reason=reason))


def listed(engine: Engine, destination: str | None = None,
           limit: int | None = None) -> list[Undelivered]:
    """Refused events, oldest first; of one destination when given."""
    u = undelivered_event.c
    query = select(u.destination, u.event_id, u.reason, u.attempts, u.created_at).order_by(
        u.event_id, u.destination)
    if destination is not None:
        query = query.where(u.destination == destination)
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
        events = events_by_id(connection, {row.event_id for row in rows})
    return [Undelivered(row.destination, events[row.event_id], row.reason, row.attempts,
                        row.created_at) for row in rows if row.event_id in events]


def forget(engine: Engine, destination: str, event_ids: Sequence[int]) -> None:
    """The destination took these events after all: they are no longer undelivered."""
    if not event_ids:
        return
    u = undelivered_event.c
    with engine.begin() as connection:
        connection.execute(delete(undelivered_event).where(u.destination == destination)
                           .where(u.event_id.in_(list(event_ids))))
