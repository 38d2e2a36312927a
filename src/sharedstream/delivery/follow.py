"""``follow``: every event of an asset from a cursor you keep, in commit order, for ever.

::

    from sharedstream.delivery.follow import follow

    async for event in follow("paid_orders", since=load_cursor(), database_url=URL):
        handle(event)            # event.payload, event.watcher, event.origin...
        save_cursor(event.id)    # resume after a restart with since=event.id

Event ids are allocated in commit order (statestore.events), so resuming from a stored
cursor sees every later event exactly once, even with several triggerer processes
writing. On PostgreSQL the follower LISTENs for the commits' notifications and wakes
within milliseconds; on other databases it polls every ``poll_interval`` seconds.
``follow_sync`` is the same for code without an event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from sharedstream.statestore.events import NOTIFY_CHANNEL, EventRecord, events_after
from sharedstream.statestore.models import asset as asset_table


class _Follower:
    """Reads pages after the cursor; waits for a commit notification or a poll."""

    def __init__(self, asset: str | None, since: int, database_url: str | None,
                 engine: Engine | None, poll_interval: float, batch_size: int) -> None:
        if engine is None:
            if database_url is None:
                raise ValueError("follow needs a database_url (or an engine)")
            engine = create_engine(database_url, pool_pre_ping=True)
        self.engine = engine
        self.cursor = since
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.asset_ids = None if asset is None else [self._asset_id(asset)]
        self._listener: Any = None
        if engine.dialect.name == "postgresql":
            # Listen before the first read: a commit between a read and the LISTEN would
            # otherwise wake nobody (and cost a whole poll interval).
            raw: Any = engine.raw_connection()
            raw.driver_connection.autocommit = True
            raw.driver_connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._listener = raw

    def _asset_id(self, name: str) -> int:
        with self.engine.connect() as connection:
            found = connection.execute(
                select(asset_table.c.id).where(asset_table.c.name == name)).scalar()
        if found is None:
            raise LookupError(f"unknown asset {name!r}: no watcher has registered it")
        return int(found)

    def read(self) -> list[EventRecord]:
        with self.engine.connect() as connection:
            events = events_after(connection, self.cursor, limit=self.batch_size,
                                  asset_ids=self.asset_ids)
        if events:
            self.cursor = events[-1].id
        return events

    def wait(self) -> None:
        """Until a commit notification (PostgreSQL) or ``poll_interval`` passes."""
        if self._listener is None:
            time.sleep(self.poll_interval)
            return
        for _ in self._listener.driver_connection.notifies(timeout=self.poll_interval,
                                                           stop_after=1):
            pass

    def close(self) -> None:
        if self._listener is not None:
            self._listener.invalidate()
            self._listener = None


async def follow(asset: str | None = None, since: int = 0, *, database_url: str | None = None,
                 engine: Engine | None = None, poll_interval: float = 0.5,
                 batch_size: int = 500, forever: bool = True) -> AsyncIterator[EventRecord]:
    """Every event of ``asset`` (every asset when None) with an id above ``since``.

    Yields in commit order and then waits for more, for ever (stop by leaving the loop),
    or, with ``forever=False``, ends once it has caught up. Store ``event.id`` as the
    cursor to resume from.
    """
    follower = await asyncio.to_thread(_Follower, asset, since, database_url, engine,
                                       poll_interval, batch_size)
    try:
        while True:
            events = await asyncio.to_thread(follower.read)
            for event in events:
                yield event
            if len(events) < batch_size:
                if not forever:
                    return
                await asyncio.to_thread(follower.wait)
    finally:
        await asyncio.to_thread(follower.close)


def follow_sync(asset: str | None = None, since: int = 0, *, database_url: str | None = None,
                engine: Engine | None = None, poll_interval: float = 0.5,
                batch_size: int = 500, forever: bool = True) -> Iterator[EventRecord]:
    """:func:`follow` without an event loop."""
    follower = _Follower(asset, since, database_url, engine, poll_interval, batch_size)
    try:
        while True:
            events = follower.read()
            yield from events
            if len(events) < batch_size:
                if not forever:
                    return
                follower.wait()
    finally:
        follower.close()
