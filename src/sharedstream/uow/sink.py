"""``DatabaseWorkSink``: windows queued, batched and committed (guarantee 3).

Flow: ``submit`` (event loop, never blocks) encodes each event payload once and queues
the window; a flusher task takes what is queued (at most ``batch_size`` windows) as soon
as the writer is free, and commits it on one dedicated writer thread in ONE
transaction (:mod:`sharedstream.uow.transaction`: what goes in it, in which order, and
what a crash between its steps leaves behind). Only after the commit returns are the
windows confirmed, on the loop, in one hop per batch; the manager then acks them and
the producer may commit past them.

Group commit: an idle writer takes a window into a transaction in the same loop turn
it was submitted in; the windows submitted while a transaction is in flight wait for
it and form the next batch. So the batch size follows the database's speed (one window
per transaction when it keeps up, ``batch_size`` when it does not, and no more windows
than keep its events within ``MAX_BATCH_EVENTS``) and no timer adds latency.
``uow_max_delay`` (0 by default) may ask the flusher to wait that long for a fuller
batch: fewer transactions, later events.

Failure windows (for a crash between the transaction's steps, see
:mod:`sharedstream.uow.transaction`):

* database unavailable, connection reset, deadlock, serialization failure, lock timeout
  (:func:`~sharedstream.statestore.engine.is_transient_error`), and any error that is
  not known to be permanent (a missing table, a bug): the transaction rolls back, the
  batch is kept and retried with capped exponential backoff, forever, counting no
  attempt; nothing is confirmed meanwhile, so nothing is committed to Kafka past it.
  ``healthy`` is False and ``last_error`` says why until a commit succeeds. The
  manager's ``max_in_flight`` bound pauses fetching, so the queue stays bounded during
  a long outage.
* a *permanent* error (:func:`~sharedstream.statestore.engine.is_permanent_error`: a
  constraint or data error, e.g. a state key PostgreSQL refuses because it holds a NUL
  character) comes from one window's data and would fail the batch forever, stalling
  every group behind the shared sink. So the batch is split in halves, each committed
  on its own, recursively, until the window that causes the error stands alone; that
  window becomes its watcher's rejection with the database's error as the reason
  (dead-lettered, or a ``rejected_message`` row, like any rejection), and every other
  window commits. One bad window in a batch of n costs about 2 log2 n extra
  transactions. The halves commit in window order, so the state writes still land as if
  applied one window after the other. A transient error during the split retries that
  part with backoff, as above; the parts already committed stay committed.
  A process dying between two parts' commits: the committed parts' windows are in the
  database (confirmed or not); everything unconfirmed is redelivered, the committed
  parts re-insert nothing (event key) and re-apply their state like any redelivery
  after a commit (invariant 4 of the transaction), and the bad window fails again and
  is rejected then.
  A later window of the same watcher that read a value the rejected window had staged
  (read-your-writes) acted on a value that was never stored; the rejection reason says
  which write the database refused.
* an event payload that cannot be stored (not JSON, too large) is a watcher bug, not
  infrastructure: that window is rejected for that watcher (dead-lettered with the
  reason) at submit time, and never blocks a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from sharedstream import tracing
from sharedstream.core.backoff import Backoff
from sharedstream.core.holds import NOTHING, HoldJournal, Taken
from sharedstream.core.message import where_read
from sharedstream.core.window import Window
from sharedstream.statestore.engine import describe_error, is_permanent_error
from sharedstream.statestore.store import StateStore
from sharedstream.statestore.types import utcnow
from sharedstream.uow.eventrows import (
    MAX_EVENT_BYTES,
    CoordinatesOf,
    PayloadRefused,
    encode_payload,
    kafka_coordinates,
)
from sharedstream.uow.settings import BATCH_SIZE, MAX_DELAY, BatchSettings
from sharedstream.uow.transaction import BatchTransaction, Queued

log = logging.getLogger(__name__)

# Events per transaction, past its first window (a window is never split). Without a
# cap, 500 queued batch windows of 512 events each were one transaction of 256,000
# rows, and every window submitted meanwhile waited for all of it.
MAX_BATCH_EVENTS = 2048



@dataclass
class SinkFigures:
    """What the sink reports: its readiness (read by ``/status`` and the readiness probe)
    and its counters (read by the metrics and the progress line). Written on the event
    loop only, read from any thread: plain ints and a bool, each read whole."""

    healthy: bool = True
    last_error: str | None = None
    batches: int = 0
    events_written: int = 0  # new rows; redelivered duplicates are not counted
    windows_confirmed: int = 0
    windows_rejected: int = 0
    batch_latency_sum: float = 0.0  # seconds from a batch's first attempt to its commit
    batch_latency_count: int = 0
    failures: int = 0  # failed commit attempts (transient: held and retried)
    permanent_failures: int = 0  # commit attempts refused for a window's data

class DatabaseWorkSink:
    """Commits closed windows (events + staged asset state) in batched transactions.

    ``assets`` maps every watcher name to its asset's id (``store.register_asset``
    first); ``settings`` gives ``uow_batch_size`` and ``uow_max_delay``. Use on one event
    loop; the flusher task starts with :meth:`start` or the first ``submit``. Counters
    are plain attributes, read by the metrics collector at scrape time. What a batch
    writes, and how, is its :class:`~sharedstream.uow.transaction.BatchTransaction`'s.
    """

    def __init__(
        self,
        store: StateStore,
        assets: Mapping[str, int],
        settings: BatchSettings | None = None,
        *,
        coordinates: CoordinatesOf = kafka_coordinates,
        max_event_bytes: int = MAX_EVENT_BYTES,
        max_events: int = MAX_BATCH_EVENTS,
        retry_initial: float = 0.1,
        retry_cap: float = 5.0,
        clock: Callable[[], datetime] = utcnow,
        holds: HoldJournal | None = None,
    ) -> None:
        # Holds written with the units of work of the watchers that may move past them.
        self._holds = holds
        self._dialect = store.engine.dialect.name
        self._assets = dict(assets)
        self._batch_size = BATCH_SIZE if settings is None else settings.uow_batch_size
        self._max_events = max_events
        self._max_delay = MAX_DELAY if settings is None else settings.uow_max_delay
        self._max_event_bytes = max_event_bytes
        self._backoff = functools.partial(Backoff, retry_initial, retry_cap)
        # One writer thread: batches commit in order (a later batch's state writes land
        # after an earlier one's), and never queue behind state reads on the store's pool.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="uow-writer")
        # Used on the writer thread only.
        self._transaction = BatchTransaction(store, coordinates=coordinates, clock=clock,
                                             holds=holds)
        self._queue: deque[Queued] = deque()
        self._wake = asyncio.Event()  # queue became non-empty or full, or shutdown
        self._idle = asyncio.Event()  # nothing queued, nothing being committed
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        # Called on the loop after each commit (delivery wakes up to read the new events).
        self.on_commit: list[Callable[[], None]] = []
        self._draining = 0
        self._closing = False
        self._sealed = False  # after the last drain: nothing more is persisted (drain)
        self.figures = SinkFigures()

    @property
    def queued(self) -> int:
        """Windows waiting for a batch (not counting the one being committed)."""
        return len(self._queue)

    # -- intake (event loop) -------------------------------------------------------------------

    def submit(self, windows: Sequence[Window]) -> None:
        """Queue ``windows``; reject at once those whose payloads cannot be stored.
        After the last drain they are dropped: never confirmed, their messages are read
        again after the restart (see :meth:`drain`)."""
        if self._sealed:
            return
        if self._closing and (self._task is None or self._task.done()):
            closed = RuntimeError("the unit-of-work sink is closed")
            for window in windows:
                window.fail(closed)
            return
        self.start()
        now = asyncio.get_running_loop().time()
        queue = self._queue
        was_empty = not queue
        limit = self._max_event_bytes
        tracer = tracing.tracer
        for window in windows:
            asset_id = self._assets[window.watcher]
            watches = None if tracer is None else tracing.start_watches(window)
            try:
                texts = [encode_payload(event.payload, limit) for event in window.events]
            except PayloadRefused as refused:
                log.error("watcher %r: %s; rejecting %s", window.watcher, refused,
                          where_read(window.payload))
                self.figures.windows_rejected += 1
                window.reject(str(refused))
                if watches is not None:
                    tracing.end_watches(watches, "rejected", str(refused))
                continue
            queue.append(Queued(window, asset_id, texts, now, watches))
        if queue:
            self._idle.clear()
            if was_empty or len(queue) >= self._batch_size:
                self._wake.set()

    # -- flusher (event loop) ------------------------------------------------------------------

    def start(self) -> None:
        """Start the flusher task on the running loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="uow-flusher")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        queue = self._queue
        while True:
            if not queue:
                self._idle.set()
                if self._closing:
                    return
                wake.clear()
                await wake.wait()
                continue
            if len(queue) < self._batch_size and not (self._draining or self._closing):
                delay = queue[0].since + self._max_delay - loop.time()
                if delay > 0:
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), delay)
                    continue
            await self._commit(self._take())

    def _take(self) -> list[Queued]:
        """The next batch: the oldest queued windows, at most ``batch_size`` of them and,
        past the first, only while their events stay within ``max_events`` (a window is
        never split: its events commit with its state)."""
        queue = self._queue
        batch = [queue.popleft()]
        events = len(batch[0].texts)
        limit, cap = self._batch_size, self._max_events
        while queue and len(batch) < limit and events + len(queue[0].texts) <= cap:
            events += len(queue[0].texts)
            batch.append(queue.popleft())
        return batch

    async def _commit(self, batch: list[Queued]) -> None:
        """Commit ``batch`` until it succeeds, then confirm its windows (one hop back).

        A permanent error splits the batch (see the module docstring): ``parts`` holds
        what is left to commit, in window order; a part that fails permanently is
        replaced by its two halves, a single window that does is rejected.
        """
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        backoff = self._backoff()
        parts = [batch]
        committed = False
        while parts:
            # A window the manager gave up on (its watcher left, the group stopped) will be
            # redelivered: leave it out rather than commit for nobody.
            part = [q for q in parts[0] if q.window.is_submitted]
            if not part:
                parts.pop(0)
                continue
            started_ns = time.time_ns()
            # Taken on the loop now, after every window of the part was submitted: the
            # holds its watchers opened before moving on commit with them (core.holds).
            holds = self._holds
            taken = NOTHING if holds is None else holds.take(q.window.watcher for q in part)
            try:
                written = await loop.run_in_executor(self._writer, self._write, part, taken)
            except Exception as exc:
                if holds is not None and taken:
                    holds.done(taken, ok=False)
                if is_permanent_error(exc):
                    parts[0:1] = self._isolate(part, exc)
                    continue
                self.figures.failures += 1
                self.figures.healthy = False
                self.figures.last_error = describe_error(exc)
                log.warning("unit of work: commit of %d windows failed (%s); retrying in "
                            "%.2fs", len(part), self.figures.last_error, delay := backoff.next())
                await asyncio.sleep(delay)
                continue
            parts.pop(0)
            committed = True
            if holds is not None and taken:
                holds.done(taken, ok=True)
            if not self.figures.healthy:
                log.info("unit of work: the database answers again")
            self.figures.healthy = True
            self.figures.last_error = None
            self.figures.batches += 1
            self.figures.events_written += written
            for queued in part:
                queued.window.confirm()
            if part[0].watches is not None:
                tracing.committed([q.watches or [] for q in part], started_ns, events=written,
                                  dialect=self._dialect)
            self.figures.windows_confirmed += len(part)
            for callback in self.on_commit:
                callback()
        if committed:
            self.figures.batch_latency_sum += time.perf_counter() - started
            self.figures.batch_latency_count += 1

    def _isolate(self, part: list[Queued], exc: Exception) -> list[list[Queued]]:
        """What to commit instead of ``part``, which failed with the permanent ``exc``:
        its halves, in order; or, for a single window, nothing: that window is rejected
        for its watcher with the database's error as the reason."""
        self.figures.permanent_failures += 1
        if len(part) > 1:
            half = len(part) // 2
            log.warning("unit of work: commit of %d windows refused (%s); committing them "
                        "in halves to find the window that causes it", len(part),
                        describe_error(exc))
            return [part[:half], part[half:]]
        window = part[0].window
        reason = f"the database refused the unit of work: {describe_error(exc)}"
        log.error("watcher %r: %s; rejecting %s", window.watcher, reason,
                  where_read(window.payload))
        self.figures.windows_rejected += 1
        window.reject(reason)
        if part[0].watches is not None:
            tracing.end_watches(part[0].watches, "rejected", reason)
        return []

    # -- writer thread --------------------------------------------------------------------------

    def _write(self, batch: list[Queued], taken: Taken = NOTHING) -> int:
        return self._transaction.write(batch, taken)

    # -- shutdown -------------------------------------------------------------------------------

    async def drain(self, timeout: float | None = None, *,  # noqa: ASYNC109
                    last: bool = False) -> bool:
        """Commit and confirm everything submitted so far, without waiting for
        ``uow_max_delay``; True once nothing is queued or being committed, False on timeout.

        Idle is checked in the step that returns, not only when the flusher found it: a
        watcher handling its queue may submit a window in between, and that one is
        committed and confirmed first.

        At SIGTERM (``last``): after fetching paused and before the manager stops its
        groups, which then commit their offsets from what was confirmed and give up on
        the rest. So intake closes in the step that finds the sink idle: a window
        submitted after it is never persisted (its messages are read again after the
        restart). Persisted after it, its events would sit above the final offset commit
        and its messages would be handled twice after a clean stop. The sink keeps
        running: call :meth:`aclose` last.
        """
        if self._task is None:
            self._sealed = self._sealed or last
            return True
        self._draining += 1
        self._wake.set()
        try:
            async with asyncio.timeout(timeout):
                while not self._idle.is_set():
                    await self._idle.wait()
        except TimeoutError:
            log.warning("unit of work: %d windows not committed within %ss",
                        len(self._queue), timeout)
            return False
        finally:
            self._draining -= 1
            self._sealed = self._sealed or last
        return True

    async def aclose(self) -> None:
        """Commit what is queued, then stop the flusher and the writer thread.

        Cancelled (e.g. by a shutdown timeout while the database is down), the flusher
        stops at once; what it had not confirmed is redelivered after the restart. An
        attempt still running on the writer thread finishes on its own (commit or roll
        back); its windows stay unconfirmed either way.
        """
        self._closing = True
        try:
            if self._task is not None:
                self._wake.set()
                await self._task
        finally:
            self._writer.submit(self._transaction.close)  # after an attempt still running
            self._writer.shutdown(wait=False)
