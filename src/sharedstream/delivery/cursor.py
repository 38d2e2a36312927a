"""A destination's row in ``delivery_cursor``: its cursor, and the lease on delivering.

Several processes may be configured with the same destination (triggerers scaled
out, or a separate ``sharedstream deliver``); exactly one delivers at a time. It holds
the destination's lease (``owner``, ``lease_until``), renews it every round and may
only move the cursor while it holds it: the cursor's update names the owner. A process
that stops renewing (killed, frozen) loses the lease once ``lease_seconds`` pass, and
another takes over from the stored cursor.

Failure windows: events sent but not yet covered by a stored cursor are sent again by
whoever delivers next (after a crash, or a takeover from a frozen holder that then
wakes and finishes its round): at least once, never lost. Each kind says how it keeps
such a repeat from acting twice (idempotency key, a check before posting, a header).
Lease times are this process's clock: clocks of processes sharing a destination must
agree to well under ``lease_seconds``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from sharedstream.statestore.events import newest_id
from sharedstream.statestore.models import delivery_cursor

OWNER = f"{uuid.uuid4().hex[:12]}"  # this process, in lease rows


@dataclass(frozen=True, slots=True)
class Claim:
    """This process holds the lease: deliver from ``cursor``. ``created``: the row was
    made by this claim, so no process can have sent anything past the cursor yet."""

    cursor: int
    created: bool = False


def claim(engine: Engine, destination: str, *, start_at_end: bool, now: datetime,
          lease: timedelta, owner: str = OWNER) -> Claim | None:
    """Take or renew the lease; the stored cursor if this process holds it now, else None.

    A destination seen for the first time gets its row here, its cursor at the newest
    event (``start_at_end``) or at 0 (deliver every stored event).
    """
    c = delivery_cursor.c
    with engine.begin() as connection:
        taken = connection.execute(
            update(delivery_cursor)
            .where(c.destination == destination)
            .where((c.owner == owner) | (c.lease_until < now) | c.owner.is_(None))
            .values(owner=owner, lease_until=now + lease)).rowcount
        if taken:
            return Claim(int(connection.execute(
                select(c.last_id).where(c.destination == destination)).scalar_one()))
        exists = connection.execute(
            select(c.destination).where(c.destination == destination)).first()
        if exists is not None:
            return None
        start = newest_id(connection) if start_at_end else 0
    try:
        with engine.begin() as connection:
            connection.execute(insert(delivery_cursor).values(
                destination=destination, last_id=start, delivered=0, updated_at=now,
                owner=owner, lease_until=now + lease))
    except IntegrityError:
        return None  # another process created it first; it holds the lease
    return Claim(start, created=True)


def advance(engine: Engine, destination: str, last_id: int, delivered: int, *,
            now: datetime, lease: timedelta, owner: str = OWNER) -> bool:
    """Move the cursor forward to ``last_id`` (and renew the lease); False if this process
    no longer holds the lease (nothing is written then)."""
    c = delivery_cursor.c
    with engine.begin() as connection:
        return bool(connection.execute(
            update(delivery_cursor)
            .where(c.destination == destination)
            .where(c.owner == owner)
            .where(c.last_id <= last_id)
            .values(last_id=last_id, delivered=c.delivered + delivered, updated_at=now,
                    lease_until=now + lease)).rowcount)


def release(engine: Engine, destination: str, owner: str = OWNER) -> None:
    """Give the lease up at a clean stop, so another process takes over at once."""
    c = delivery_cursor.c
    with engine.begin() as connection:
        connection.execute(update(delivery_cursor)
                           .where(c.destination == destination).where(c.owner == owner)
                           .values(owner=None, lease_until=None))


def cursors(engine: Engine) -> dict[str, int]:
    """Every destination's stored cursor."""
    c = delivery_cursor.c
    with engine.connect() as connection:
        return {row.destination: int(row.last_id)
                for row in connection.execute(select(c.destination, c.last_id))}
