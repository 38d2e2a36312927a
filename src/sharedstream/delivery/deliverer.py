"""One destination's delivery loop: read by cursor, send, advance only what was taken.

Each round, while this process holds the destination's lease (delivery.cursor):

1. read up to ``batch_size`` events above the cursor, in commit order (every asset:
   the cursor moves over events the destination does not want, too);
2. send the wanted ones (the sender answers for a prefix, see delivery.sender);
3. record the permanently refused ones as undelivered, then store the cursor after the
   last event that was taken, refused or not wanted: never past a transient failure.

A transient failure holds the cursor and waits a jittered backoff (core.backoff, so
processes that failed together do not retry in lockstep), then sends the same events
again, as "maybe sent". The backoff grows only over rounds that delivered nothing: a
round that delivered an event resets it, so a destination that fails now and then is
retried at ``retry_initial``, not at ``retry_max``. Nothing here waits on the ingestion
side: the loop runs in its own task with its own database thread and connections.

Failure windows: a crash between (2) and (3) sends those events again on restart
(at least once; see each kind for how a repeat is recognised). A crash between
recording refusals and storing the cursor records them again (one row each, its
attempt count bumped).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from sharedstream.core.backoff import Backoff
from sharedstream.delivery import cursor as cursors
from sharedstream.delivery import undelivered
from sharedstream.delivery.errors import PermanentDeliveryError, TransientDeliveryError
from sharedstream.delivery.sender import Sender
from sharedstream.delivery.settings import DestinationSettings
from sharedstream.delivery.wakeup import wait
from sharedstream.statestore.engine import describe_error
from sharedstream.statestore.events import EventRecord, events_after, last_event_id
from sharedstream.statestore.types import utcnow

log = logging.getLogger(__name__)

T = TypeVar("T")
POLL_INTERVAL_S = 1.0


@dataclass(slots=True)
class DestinationState:
    """What ``/metrics``, ``/readyz`` and ``/status`` show of one destination."""

    id: str
    kind: str
    holder: bool = False
    cursor: int | None = None
    head: int = 0  # the newest event id seen allocated
    lag_seconds: float = 0.0
    delivered: int = 0
    undeliverable: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failing_since: float | None = None  # monotonic time of the first failure in a row
    last_error: str | None = None

    @property
    def lag_events(self) -> int:
        return max(0, self.head - self.cursor) if self.cursor is not None else 0


class Deliverer:
    """Delivers one destination's events through ``sender`` while holding its lease."""

    def __init__(self, destination: DestinationSettings, sender: Sender, engine: Engine,
                 executor: ThreadPoolExecutor, wake: asyncio.Event, *,
                 now: Callable[[], datetime] = utcnow,
                 rng: random.Random | None = None, owner: str = cursors.OWNER) -> None:
        self.destination = destination
        self.sender = sender
        self.state = DestinationState(destination.id, destination.common.kind)
        self._engine = engine
        self._executor = executor
        self._wake = wake
        self._now = now
        self._rng = rng or random.Random()
        self._lease = timedelta(seconds=destination.common.lease_seconds)
        self._wanted: dict[str, bool] = {}
        self._owner = owner
        self._log = logging.LoggerAdapter(log, {"destination": destination.id})
        self._database_failing = False  # the last failure was the database's

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def wants(self, asset: str) -> bool:
        found = self._wanted.get(asset)
        if found is None:
            found = self._wanted[asset] = any(
                fnmatch.fnmatchcase(asset, pattern) for pattern in self.destination.common.assets)
        return found

    async def run(self, stop: asyncio.Event) -> None:
        """Deliver until ``stop``; stand by while another process holds the lease.

        A database error (the cursor, the lease, the events, the undelivered table) is
        infrastructure: the destination shows as failing with the database's reason,
        and after a backoff the lease is claimed again and delivery resumes from the
        stored cursor, the first batch as "maybe sent" (its send may have happened
        before the cursor could be stored). An error nothing classifies (a sender's
        bug, a client refusing the configured URL) is handled the same way, logged as an
        ``ERROR`` with its traceback and counted as ``unexpected``: the destination is
        retried and shown failing, never left dead behind a ready process. Nothing here
        ends the loop but ``stop``.
        """
        dest = self.destination
        backoff = Backoff(dest.common.retry_initial, dest.common.retry_max, self._rng)
        try:
            while not stop.is_set():
                try:
                    await self._claim_and_deliver(stop)
                    backoff.reset()
                except Exception as exc:
                    self.state.holder = False
                    if isinstance(exc, SQLAlchemyError):
                        self._database_failing = True
                        failure = TransientDeliveryError(f"database: {describe_error(exc)}",
                                                         "database")
                    else:
                        failure = TransientDeliveryError(f"unexpected error: {exc!r}",
                                                         "unexpected")
                    self._failed(failure)
                    delay = backoff.next()
                    if isinstance(exc, SQLAlchemyError):
                        self._log.warning("destination %s: %s; retrying in %.2fs", dest.id,
                                          failure, delay)
                    else:
                        self._log.error("destination %s: %s; restarting it in %.2fs",
                                        dest.id, failure, delay, exc_info=exc)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), delay)
        finally:
            if self.state.holder:
                try:
                    await self._db(cursors.release, self._engine, dest.id, self._owner)
                except SQLAlchemyError as exc:
                    self._log.warning("destination %s: lease not released (%s); it expires "
                                      "after lease_seconds", dest.id, describe_error(exc))

    async def _claim_and_deliver(self, stop: asyncio.Event) -> None:
        dest = self.destination
        claim = await self._db(cursors.claim, self._engine, dest.id,
                               start_at_end=dest.common.start == "latest",
                               now=self._now(), lease=self._lease, owner=self._owner)
        if self._database_failing:
            self._database_failing = False
            self._recovered()
        self.state.holder = claim is not None
        if claim is None:
            await wait(self._wake, dest.common.lease_seconds / 3, stop)
            return
        self.state.cursor = claim.cursor
        self._log.info("destination %s: delivering from event %d", dest.id, claim.cursor)
        await self._deliver(claim.cursor, stop, fresh=claim.created)

    async def _deliver(self, cursor: int, stop: asyncio.Event, *, fresh: bool) -> None:
        """Rounds until ``stop`` or the lease is lost.

        ``suspect`` is the last event id that may have been sent before, and so goes out
        as "maybe sent": none for a destination created by this claim (``fresh``);
        after a takeover, the first batch read (a predecessor sends at most one batch past
        the cursor it stored, processes sharing a destination having one batch_size);
        and each event whose answer a transient failure left unknown.
        """
        common = self.destination.common
        suspect: int | None = cursor if fresh else None  # None: the first batch read
        backoff = Backoff(common.retry_initial, common.retry_max, self._rng)
        renew_by = time.monotonic() + common.lease_seconds / 3
        while not stop.is_set():
            events, head = await self._db(self._read, cursor)
            self.state.head = head
            if suspect is None:  # nothing past the cursor existed: none can have been sent
                suspect = events[-1].id if events else cursor
            if not events:
                self.state.lag_seconds = 0.0
                if time.monotonic() >= renew_by:
                    if not await self._store(cursor, 0):
                        return
                    renew_by = time.monotonic() + common.lease_seconds / 3
                await wait(self._wake, min(POLL_INTERVAL_S, common.lease_seconds / 3), stop)
                continue
            self.state.lag_seconds = max(0.0, (self._now() - events[0].created_at)
                                         .total_seconds())
            wanted = [e for e in events if self.wants(e.asset)]
            results = await self._send(wanted, suspect)
            new_cursor, delivered, refused, failure = self._settle(cursor, events, results)
            if refused:
                await self._db(undelivered.record, self._engine, self.destination.id,
                               refused, self._now())
                self.state.undeliverable += len(refused)
            if new_cursor > cursor or delivered:
                if not await self._store(new_cursor, delivered):
                    return
                cursor = new_cursor
                renew_by = time.monotonic() + common.lease_seconds / 3
            if failure is None:
                backoff.reset()
                self._recovered()
                continue
            suspect = max(suspect, wanted[len(results) - 1].id)  # its answer was lost
            self._failed(failure)
            if delivered:
                backoff.reset()  # it fails now and then, not for good: retry at once
            delay = backoff.next()
            self._log.warning("destination %s: %s; retrying in %.2fs", self.destination.id,
                        failure, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)  # a stop cuts the backoff short

    async def _send(self, wanted: list[EventRecord], suspect: int) -> list[Any]:
        """Send the events that may have been sent before as such, then the others."""
        maybe = [e for e in wanted if e.id <= suspect]
        results: list[Any] = await self.sender.send(maybe, maybe_sent=True) if maybe else []
        rest = wanted[len(maybe):]
        if rest and len(results) == len(maybe) and not (
                results and isinstance(results[-1], TransientDeliveryError)):
            results += await self.sender.send(rest, maybe_sent=False)
        return results

    def _read(self, cursor: int) -> tuple[list[EventRecord], int]:
        with self._engine.connect() as connection:
            events = events_after(connection, cursor, limit=self.destination.common.batch_size)
            return events, last_event_id(connection)

    def _settle(self, cursor: int, events: list[EventRecord], results: list[Any]
                ) -> tuple[int, int, list[tuple[int, str]], TransientDeliveryError | None]:
        """Walk the round in order: the new cursor, how many were taken, the refusals,
        and the transient failure that ended it (None if none did)."""
        answers = iter(results)
        delivered = 0
        refused: list[tuple[int, str]] = []
        for event in events:
            if self.wants(event.asset):
                answer = next(answers, _UNTRIED)
                if answer is _UNTRIED:
                    break
                if isinstance(answer, TransientDeliveryError):
                    return cursor, delivered, refused, answer
                if isinstance(answer, PermanentDeliveryError):
                    refused.append((event.id, str(answer)))
                    self.state.failures[answer.kind] += 1
                else:
                    delivered += 1
            cursor = event.id
        return cursor, delivered, refused, None

    async def _store(self, cursor: int, delivered: int) -> bool:
        held = await self._db(cursors.advance, self._engine, self.destination.id, cursor,
                              delivered, now=self._now(), lease=self._lease, owner=self._owner)
        if held:
            self.state.cursor = cursor
            self.state.delivered += delivered
        else:
            self.state.holder = False
            self._log.warning("destination %s: lease lost to another process; standing by",
                        self.destination.id)
        return held

    def _failed(self, failure: TransientDeliveryError) -> None:
        self.state.failures[failure.kind] += 1
        self.state.last_error = str(failure)
        if self.state.failing_since is None:
            self.state.failing_since = time.monotonic()

    def _recovered(self) -> None:
        if self.state.failing_since is not None:
            self._log.info("destination %s: delivering again", self.destination.id)
        self.state.failing_since = None
        self.state.last_error = None


_UNTRIED = object()
