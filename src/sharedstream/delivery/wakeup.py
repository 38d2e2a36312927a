"""Waking deliverers and followers when events commit, instead of polling alone.

In the process that writes events, the unit-of-work sink calls :meth:`Wakeup.notify`
after each commit. Across processes on PostgreSQL, every event transaction sends
``NOTIFY sharedstream_events`` (delivered at its commit) and :func:`listen` turns the
notifications into wake-ups. Elsewhere (SQLite, MariaDB) a waiter polls at its own
interval; a wake-up is only ever a hint to read now, never the data, so a lost one
costs latency, never an event.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from sqlalchemy.engine import Engine

from sharedstream.statestore.events import NOTIFY_CHANNEL

log = logging.getLogger(__name__)


class Wakeup:
    """Wake-ups for any number of waiters on one event loop."""

    def __init__(self) -> None:
        self._events: set[asyncio.Event] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def waiter(self) -> asyncio.Event:
        self._loop = asyncio.get_running_loop()
        event = asyncio.Event()
        self._events.add(event)
        return event

    def notify(self) -> None:
        """Wake every waiter (on the loop)."""
        for event in self._events:
            event.set()

    def notify_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.notify)


async def wait(event: asyncio.Event, timeout: float,  # noqa: ASYNC109
               stop: asyncio.Event | None = None) -> None:
    """Until ``event`` (or ``stop``) is set or ``timeout`` passes; then clear ``event``."""
    waiters = [asyncio.ensure_future(e.wait()) for e in (event, stop) if e is not None]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    event.clear()


def listen(engine: Engine, wakeup: Wakeup, stop: threading.Event) -> None:
    """Turn PostgreSQL notifications on the events channel into wake-ups (a thread's body).

    Reconnects after a failure with a pause; polling covers the gaps meanwhile.
    """
    while not stop.is_set():
        try:
            raw: Any = engine.raw_connection()
            try:
                connection = raw.driver_connection
                connection.autocommit = True
                connection.execute(f"LISTEN {NOTIFY_CHANNEL}")
                while not stop.is_set():
                    for _ in connection.notifies(timeout=1.0, stop_after=1):
                        wakeup.notify_threadsafe()
            finally:
                raw.invalidate()
        except Exception as exc:
            log.info("event notifications unavailable (%s); polling meanwhile",
                     type(exc).__name__)
            stop.wait(5.0)
