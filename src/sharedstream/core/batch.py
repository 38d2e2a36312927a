"""Batch filters: one call, and one acknowledgement, per watcher per batch of messages.

A trigger that defines ``async def filter_shared_batch(self, batch)`` is a *batch
watcher*. Its runner (:class:`BatchRunner`) takes what is queued for the watcher, up to
``BATCH_LIMIT`` messages, calls the filter once with a :class:`MessageBatch`, and
settles the batch in one go:

* a message the filter did nothing with is acked with the others, in one call into
  the group (``ack_many``): no per-message window, no per-message await;
* ``batch.emit(message, event)`` binds an event to its message: the event's key
  (watcher, topic id, partition, offset, index within the message) is the one the
  per-message path gives it, so a redelivered batch writes nothing twice;
* ``batch.reject(message, reason)`` resolves that message as this watcher's rejection
  at once (dead letter), dropping its events;
* state the filter reads and writes through ``asset_state_store`` during the call is
  staged in one :class:`BatchWindow` (read-your-writes across the batch) and committed
  in the same transaction as the batch's events. Then every message of the batch
  waits for that commit: the state may be what made a message need no event.

A call that raises is split: each half is called again, recursively, until the message
that raises stands alone. It is failed for this watcher (an attempt: backoff, then
``max attempts`` -> dead letter, as on the per-message path); every other message of the
batch settles as its half said. What a raising call staged or emitted is discarded.
An :class:`~sharedstream.core.streamconfig.InfrastructureError` is not split: the rest of
the batch is held without counting an attempt and the runner backs off.

A trigger whose ``value_deserializer`` has a ``prepare`` step (the registry formats) has
it awaited for every message of a batch before the call, as the per-message stock trigger
does per message: a schema id's first lookup runs in a worker thread, so the filter's
``msg.decoded(...)`` is a cache hit and never holds the event loop on a request. That
wait is not the filter's time (the ack timeout starts after it). A value the step finds
undecodable is kept on the message and raised to the filter when it asks; a registry
that does not answer holds the batch like any ``InfrastructureError``.

A message handed out again (``delivery > 1``: a watcher failed it, or the database
refused its batch's unit of work) goes in a batch of its own, so a poison message is
found by its own failure, and a batch refused by the database as a whole (one event
payload that is not JSON, one state key the database rejects) is retried one message
at a time rather than dead-lettering the good ones with the bad.

The ack timeout counts per call (the watcher's
:class:`~sharedstream.core.deadline.AckDeadline`, the one a per-message filter has): a
call that runs longer than ``ack_timeout`` (not counting its waits on the database)
fails every message of it not yet settled, each counting an attempt, and the filter
task is restarted like a stuck per-message filter.

Failure windows: the process dying before the commit leaves the batch unacked, so it is
redelivered whole; dying between the commit and the acknowledgement redelivers it too,
and the event keys make the re-insert a no-op (state written with ``advance`` is already
there). Messages of a partition revoked while their batch is in flight are dropped by
the ledger: their acknowledgement changes nothing and nothing is committed past them by
this process; a batch already in the unit of work still commits its events, which the
next owner's redelivery re-inserts as no-ops.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any

from sharedstream.core.batchtake import Pieces
from sharedstream.core.deadline import AckDeadline
from sharedstream.core.inline import NOTHING_TAKEN, InlineCalls, Resumed, batch_of
from sharedstream.core.ledger import Entry, State
from sharedstream.core.message import ValueDecodeError, where_read
from sharedstream.core.messagebatch import MessageBatch
from sharedstream.core.shares import Shares
from sharedstream.core.stream import SharedStream, StreamOwner
from sharedstream.core.streamconfig import ABSENT, Clock, InfrastructureError, ManagerSettings
from sharedstream.core.window import Window, current_stream

log = logging.getLogger(__name__)

PENDING = State.PENDING
BATCH_LIMIT = 512
"""The most messages one call of ``filter_shared_batch`` gets (also at most the queue size)."""

BatchFilter = Callable[["MessageBatch"], Coroutine[Any, Any, None]]  # an async def's
Preparer = Callable[[Any], Awaitable[None] | None]


def batch_filter(trigger: Any) -> BatchFilter | None:
    """The trigger's ``filter_shared_batch`` when it defines one (a batch watcher)."""
    call = getattr(trigger, "filter_shared_batch", None)
    return call if callable(call) else None


def value_preparer(trigger: Any) -> Preparer | None:
    """The ``prepare`` step of the trigger's ``value_deserializer``, when it has one."""
    prepare = getattr(getattr(trigger, "value_deserializer", None), "prepare", None)
    return prepare if callable(prepare) else None


class BatchWindow(Window):
    """The unit of work of one batch call: its staged state and the events of several
    messages. ``parts`` says whose events they are, in order: ``(record, how many)`` per
    message with events; ``entries`` are the messages acked when it commits."""

    __slots__ = ("entries", "parts")

    def __init__(self, owner: BatchRunner, watcher: str) -> None:
        super().__init__(owner, None, watcher, None, None)
        self.entries: list[Entry] = []
        self.parts: list[tuple[Any, int]] = []


class BatchRunner(InlineCalls):
    """Runs one batch watcher's filter over its stream, for as long as the watcher runs
    (across restarts of its task: units of work in the sink outlive a task). A call is
    made in the runner's task, or inline in the step that queued its messages while the
    task waited for them (:mod:`sharedstream.core.inline`)."""

    def __init__(self, stream: SharedStream, group: StreamOwner, call: BatchFilter,
                 settings: ManagerSettings, clock: Clock,
                 prepare: Preparer | None = None) -> None:
        self.name = stream.name
        self._stream = stream
        self._group = group
        self._call = call
        self._prepare = prepare
        self._limit = min(BATCH_LIMIT, settings.subscriber_queue_size)
        # The batch being handled (a piece of a counted slice, until it needs entries).
        self._taken: list[Entry] | Pieces | Shares = NOTHING_TAKEN
        self._done = 0  # how many of it are settled (halves settle in order: a prefix)
        self._token = 0  # moves when the batch is given up (timeout, release)
        self._calling = False
        self._window: BatchWindow | None = None  # the running call's staging
        self._in_sink: set[BatchWindow] = set()
        self._clock = clock
        self._deadline = AckDeadline(self, clock, settings.ack_timeout)
        self._context: contextvars.Context | None = None  # the task's, once it runs
        self._pending: Callable[[], Awaitable[None]] | None = None
        self._suspended: Coroutine[Any, Any, None] | None = None  # an inline call's rest
        self.past_queue = 0
        stream.on_release = self._release
        stream.batch = True  # the group may queue counted slices for it
        if prepare is None and inspect.iscoroutinefunction(call):  # see core/inline.py
            stream.on_offer = self.offered
            stream.share_caller = self

    async def run(self) -> None:
        """Take batches and handle them until the stream ends (returns) or the group
        fails (GroupFailedError)."""
        current_stream.set(self)
        self._context = contextvars.copy_context()
        take = self._stream.take_part
        while True:
            pending = self._pending
            if pending is not None:  # the rest of a call started inline
                self._pending = self._suspended = None
                await pending()
                self._taken = NOTHING_TAKEN
                continue
            try:
                part = await take(self._limit)
            except StopAsyncIteration:
                return
            if not part:
                continue  # woken for the work an inline call left
            self._taken = part
            self._done = 0
            await self._handle(part, self._token)
            self._taken = NOTHING_TAKEN

    def _entries(self, part: list[Entry] | Pieces) -> list[Entry]:
        """The entries of a batch (counted slices are itemised: something needs them)."""
        if not isinstance(part, Pieces):
            return part
        entries = part.entries(self._group.itemise)
        if self._taken is part:
            self._taken = entries
        return entries

    def _abandon_call(self) -> None:
        """Drop what the failed call staged."""
        window, self._window = self._window, None
        if window is not None:
            window.abandon()

    async def _finish(self, part: list[Entry] | Pieces, batch: MessageBatch, token: int,
                      coro: Coroutine[Any, Any, None], yielded: Any) -> None:
        """The rest of a call started inline that waited: resumed here, in the task."""
        failure: Exception | None = None
        try:
            await Resumed(coro, yielded)
        except Exception as exc:
            failure = exc
        self._calling = False
        if failure is None:
            if token == self._token:
                self._settle(batch, part)
            return
        self._abandon_call()
        await self._failed(part, token, failure)

    async def _failed(self, part: list[Entry] | Pieces, token: int, exc: BaseException) -> None:
        """A call raised: its batch is split to find the message (in the task)."""
        if not isinstance(exc, Exception):
            raise exc  # a cancellation or an exit: the task's to end on
        if token == self._token:
            await self._split(self._entries(part), token, exc)

    async def _handle(self, part: list[Entry] | Pieces, token: int) -> None:
        batch = batch_of(part)
        failure: Exception | None = None
        if self._prepare is not None:
            try:
                await self._prepared(batch)
            except Exception as exc:
                failure = exc
            if token != self._token:
                return  # given up while it waited (the stream stopped)
        if failure is None:
            self._window = None
            self._calling = True
            deadline = self._deadline
            deadline.start = self._clock.now()
            deadline.arm()
            try:
                await self._call(batch)
            except Exception as exc:
                failure = exc
            self._calling = False
            if failure is None:
                if token == self._token:
                    self._settle(batch, part)
                return
            self._abandon_call()
        if token == self._token:  # else given up meanwhile (outside the handler: no
            await self._split(self._entries(part), token, failure)  # chained errors)

    async def _prepared(self, batch: MessageBatch) -> None:
        """Await the deserialiser's ``prepare`` for each message that needs it (a message
        decoded already, or a schema id looked up before, needs nothing)."""
        prepare = self._prepare
        assert prepare is not None
        for message in batch.messages:
            lookup = prepare(message)
            if lookup is not None:
                with suppress(ValueDecodeError):  # kept on the message: msg.decoded raises it
                    await lookup

    async def _split(self, part: list[Entry], token: int, exc: Exception) -> None:
        group, name = self._group, self.name
        why = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, InfrastructureError):
            taken = self._entries(self._opened())
            for entry in taken[self._done:]:
                group.fail(entry, name, why, counts=False, retry_after=exc.retry_after)
            self._done = len(taken)
            raise exc  # the runner backs off, as a per-message filter does
        if len(part) == 1:
            log.warning("watcher %r: filter_shared_batch raised %r on %s", name, exc,
                        where_read(part[0].payload), exc_info=(type(exc), exc, exc.__traceback__),
                        extra={"watcher": name})
            self._done += 1
            group.fail(part[0], name, why, counts=True)
            return
        log.info("watcher %r: a batch of %d raised %r; calling its halves", name, len(part),
                 exc, extra={"watcher": name})
        half = len(part) // 2
        await self._handle(part[:half], token)
        if token == self._token:
            await self._handle(part[half:], token)

    def _settle(self, batch: MessageBatch, taken: list[Entry] | Pieces) -> None:
        self._done += len(batch.messages)
        group, name = self._group, self.name
        window, self._window = self._window, None
        emitted, rejected = batch.emitted, batch.rejected
        staged = window is not None and bool(window.staged)
        if emitted is None and rejected is None and not staged:
            if isinstance(taken, Pieces):  # the usual batch: nothing kept, a count per slice
                taken.settled(group.ack_range, name)
            else:
                group.ack_many(taken, name)
            if window is not None:
                window.close()
            return
        part = self._entries(taken)
        if rejected:
            for i, reason in rejected.items():
                group.reject(part[i], name, reason)
        if window is None:
            window = BatchWindow(self, name)
        acked: list[Entry] = []
        dropped = State.DROPPED
        for i, entry in enumerate(part):
            if rejected and i in rejected:
                continue
            if entry.state is dropped:
                # Its partition moved during the call: the outcome changes nothing, and a
                # counted slice dropped before it was itemised kept no record to write
                # events by; the next owner reads the message again (not committed).
                continue
            events = emitted.get(i) if emitted else None
            if events:
                window.entries.append(entry)
                window.parts.append((entry.payload, len(events)))
                window.events.extend(events)
            elif staged:
                window.entries.append(entry)
            else:
                acked.append(entry)
        if acked:
            group.ack_many(acked, name)
        if not window.entries:
            window.abandon()  # every message rejected: its staged state goes with them
            return
        window.raw, window.payload = window.entries[0].raw, window.entries[0].payload
        if window.close():
            self._in_sink.add(window)
            group.submit(window)

    # -- the running call's context (what state access and rejection find) --------------

    def current_window(self) -> Window | None:
        """The running call's staging window, built on first use (None between calls)."""
        if not self._calling:
            return None
        window = self._window
        if window is None:
            window = self._window = BatchWindow(self, self.name)
        return window

    def reject(self, reason: str) -> bool:
        raise TypeError("reject_shared_stream_event() inside filter_shared_batch: reject "
                        "one message with batch.reject(message, reason)")

    # -- the windows' owner ------------------------------------------------------------------

    def window_confirmed(self, window: Window) -> None:
        assert isinstance(window, BatchWindow)
        self._in_sink.discard(window)
        self._group.ack_many(window.entries, self.name)

    def window_failed(self, window: Window, exc: BaseException) -> None:
        assert isinstance(window, BatchWindow)
        self._in_sink.discard(window)
        log.warning("unit of work of watcher %r failed for a batch of %d: %r (held, retried)",
                    self.name, len(window.entries), exc)
        for entry in window.entries:
            self._group.fail(entry, self.name, f"unit of work failed: {exc!r}", counts=False)

    def window_rejected(self, window: Window, reason: str) -> None:
        """The sink refused the batch's content: one message's rejection when it is alone;
        otherwise every message is held (no attempt) and retried in batches of one."""
        assert isinstance(window, BatchWindow)
        self._in_sink.discard(window)
        group, name = self._group, self.name
        if len(window.entries) == 1:
            group.reject(window.entries[0], name, reason)
            return
        for entry in window.entries:
            group.fail(entry, name, f"its batch was refused ({reason}); retried alone",
                       counts=False)

    # -- the ack deadline ----------------------------------------------------------------------

    def infrastructure_wait(self, window: Window, began: bool) -> None:
        """The running call waits on infrastructure: its deadline does not run meanwhile."""
        if began:
            self._deadline.wait_began(window)
        else:
            self._deadline.wait_ended(window)

    def timed(self) -> object | None:
        """The running call (its staging window, once it has one); None between calls or
        once the stream ended (DeadlineOwner)."""
        if not self._calling or self._stream.closed:
            return None
        window = self._window
        return self if window is None else window

    def timed_out(self, timeout: float) -> None:
        owed = self._give_up()
        log.warning("watcher %r: ack timeout (%ss) on a batch call; failing %d messages",
                    self.name, timeout, len(owed), extra={"watcher": self.name})
        for entry in owed:
            self._group.fail(entry, self.name, f"ack timeout after {timeout}s", counts=True)
        if self._stream.on_stuck is not None:
            self._stream.on_stuck()

    def _give_up(self) -> list[Entry]:
        """Drop the batch being handled; the messages of it not yet settled."""
        owed = self._entries(self._opened())[self._done:]
        self._taken = NOTHING_TAKEN
        self._done = 0
        self._token += 1
        self._calling = False
        self._pending = None  # an inline call's rest not started in the task: dropped
        suspended, self._suspended = self._suspended, None
        if suspended is not None:
            suspended.close()
        self._abandon_call()
        return owed

    def _release(self, fail_pending: bool) -> None:
        """The stream stopped (watcher left, group stopped or failed)."""
        self._deadline.cancel()
        owed = self._give_up()
        for window in self._in_sink:
            owed.extend(window.entries)
            window.abandon()
        self._in_sink.clear()
        if fail_pending:
            for entry in owed:
                self._group.fail(entry, self.name, ABSENT, counts=False)


__all__ = ["BATCH_LIMIT", "BatchRunner", "BatchWindow", "MessageBatch", "batch_filter",
           "value_preparer"]
