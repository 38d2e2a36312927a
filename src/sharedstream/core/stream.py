"""One watcher's view of its group: a bounded queue, an open window, an ack timer.

The stream is what ``filter_shared_stream`` iterates. ``__anext__`` first closes
the window of the previous message (the filter moved past it: that is the ack,
or the hand-off to the unit of work), then returns the next queued message
without suspending when one is there. It suspends (one Future) only when the
queue is empty, so a busy watcher costs no Task, Future or timer per message.

The queue holds chunks, not messages: the group hands each stream one list per
consumed batch (the same list to every watcher, never changed after), so fan-out
costs one call per watcher per batch. A batch watcher's chunk may be a counted
:class:`~sharedstream.core.ledger.Slice` (no entry per message). A batch filter's side,
``take`` and ``take_part``, is :mod:`sharedstream.core.batchtake`'s :class:`BatchTaking`,
a base of :class:`SharedStream` that owns the queue's fields; ``__anext__`` walks the
head chunk itself, one message at a time.

Acks of a per-message filter go to the group together: a message the filter moved past
with nothing bound is acked in one ``ack_many`` with the others when the stream next
suspends, yields (every ``HANDOUT_RUN`` messages), waits on infrastructure, resumes a
paused group, or ends. Failure window: none added; an ack is only later, never lost
(the process dying loses it as it loses any ack not yet committed).

Fairness: a filter that always finds a message queued would never suspend, so
its task would hold the loop for as long as its queue lasts: the group's window
flush, the commit targets and the other watchers would all wait (with 100 watchers and
10,000 messages in flight that was millions of open units of work and a loop
stalled for seconds). After ``HANDOUT_RUN`` messages without a suspension the
stream yields once (``sleep(0)``), which bounds both.

Ack timeout: one timer per stream at most, armed for the open message's deadline
(receipt + ``ack_timeout``) and re-armed lazily when it fires for a message the
filter already left. When it expires the watcher is failed for that message and
its filter task is cancelled so the runner restarts it.

Time the filter spends waiting on infrastructure for the open message
(:meth:`Window.waiting_on_infrastructure`: its state reads) is not its own: the timer
does not fire during such a wait, and the wait's length moves the deadline when it
ends. An ack timeout there would be a counted watcher failure, so a database outage
longer than ``max_attempts x ack_timeout`` dead-lettered every message read meanwhile.
Failure window: a filter stuck in a database call that never returns is never timed
out; it is held until the driver gives up (connect or pool timeout) and the read's
retry loop takes over, visible in readiness from its first failure.

Lifecycle of a stream (:class:`StreamState`; any other move raises
:class:`~sharedstream.core.lifecycle.InvalidState`)::

    ACTIVE -> CLOSED   detach(): the watcher left or the group stopped; iteration ends
    ACTIVE -> FAILED   group_failed(): iteration raises GroupFailedError

CLOSED and FAILED are final. The stream knows its group only as a
:class:`StreamOwner` (the methods it calls back), so this module does not import the
group's.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol

from sharedstream.core.batchtake import HANDOUT_RUN, BatchTaking, Chunk, Counted, TakeOwner
from sharedstream.core.ledger import Entry, State
from sharedstream.core.lifecycle import check_move
from sharedstream.core.message import where_read
from sharedstream.core.streamconfig import (
    ABSENT,
    Clock,
    GroupFailedError,
    InfrastructureError,
    ManagerSettings,
    TimerHandle,
)
from sharedstream.core.window import OPEN, Window, current_stream

if TYPE_CHECKING:
    from sharedstream.core.event import TriggerEvent

log = logging.getLogger(__name__)

PENDING = State.PENDING


class StreamState(enum.Enum):
    """Where a stream is in its lifecycle (the module docstring lists the moves)."""

    ACTIVE = "active"
    CLOSED = "closed"
    FAILED = "failed"


ACTIVE, CLOSED, FAILED = StreamState.ACTIVE, StreamState.CLOSED, StreamState.FAILED
MOVES = {ACTIVE: frozenset({CLOSED, FAILED}), CLOSED: frozenset[StreamState](),
         FAILED: frozenset[StreamState]()}


class StreamOwner(TakeOwner, Protocol):
    """What a stream calls back into: its group (the callbacks keep the import one-way)."""

    @property
    def key(self) -> Hashable: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> ManagerSettings: ...

    def ack(self, entry: Entry, watcher: str) -> None: ...

    def ack_many(self, entries: list[Entry], watcher: str) -> None:
        """``ack`` of every entry of a batch, in one call (a batch filter's ack)."""

    def ack_range(self, run: Counted, start: int, stop: int, watcher: str) -> None:
        """A clean acknowledgement of ``[start, stop)`` of a counted slice or share."""

    def reject(self, entry: Entry, watcher: str, reason: str) -> None: ...

    def fail(self, entry: Entry, watcher: str, why: str, *, counts: bool) -> None: ...

    def submit(self, window: Window) -> None: ...


class SharedStream(BatchTaking):
    """Async iterator of one watcher's messages (``raw`` as the producer yielded it).

    Its group's side of it: :meth:`offer` queues a chunk of entries, :attr:`queued`
    counts the messages queued, :meth:`wake` wakes a filter waiting for one, :meth:`detach` and
    :meth:`group_failed` end it. The runner's side: :attr:`handed` (progress),
    :attr:`on_stuck` (told of an ack timeout) and :attr:`closed`.
    """

    # The queue's fields are BatchTaking's slots.
    __slots__ = ("_acks", "_failure", "_group", "_in_sink", "_now", "_open", "_received",
                 "_state", "_timer", "_wait_since", "_waiter", "_waiting", "_waits", "_window",
                 "batch", "name", "on_release", "on_stuck")

    _group: StreamOwner

    def __init__(self, group: StreamOwner, name: str, now: Callable[[], float]) -> None:
        self.name = name
        self._group = group
        self._now = now
        # Chunks of entries; the head chunk is handed out from ``_pos``; ``_queued``
        # counts the messages not handed out yet; ``_stale``: some queued entry may
        # have been dropped (see :meth:`dropped`).
        self._queue: deque[Chunk] = deque()
        # Set by a batch runner: the group may queue counted slices for this stream.
        self.batch = False
        self._pos = 0
        self._queued = 0
        self._stale = False
        self._interrupted = False
        # Messages the filter moved past with nothing bound: acked together (ack_many)
        # when the stream next suspends or yields, at most HANDOUT_RUN of them.
        self._acks: list[Entry] = []
        self._open: Entry | None = None
        self._window: Window | None = None
        self._received = 0.0
        self._seq = 0
        self._run = 0
        self._timer: TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._state = ACTIVE
        self._in_sink: set[Window] = set()
        self.on_stuck: Callable[[], None] | None = None
        """Called after an ack timeout failed the open message (the runner restarts the
        filter)."""
        self.on_release: Callable[[bool], None] | None = None
        """A batch runner's own release (``fail_pending``), told when the stream stops."""
        self.on_offer: Callable[[], None] | None = None
        """A batch runner's inline hand-over (core/inline.py), instead of a wake."""
        # The window whose filter waits on infrastructure, how many waits, since when.
        self._waiting: Window | None = None
        self._waits = 0
        self._wait_since = 0.0

    # -- iteration ---------------------------------------------------------------

    def __aiter__(self) -> SharedStream:
        return self

    def offer(self, entries: Chunk) -> None:
        """Queue entries for this watcher: one call per consumed batch (the fan-out).
        ``entries`` is shared with the sibling watchers and must not change."""
        self._queue.append(entries)
        self._queued += len(entries)

    def dropped(self) -> None:
        """The group dropped entries (partitions ended): some queued ones may be among
        them, so :meth:`take` checks each entry until the queue has emptied once."""
        if self._queue:
            self._stale = True

    async def __anext__(self) -> Any:
        entry = self._open
        if entry is not None:
            self._open = None
            window = self._window
            if window is None:
                self._acks.append(entry)
            else:
                self._window = None
                self._close_window(window)
        queue = self._queue
        if self._run >= HANDOUT_RUN and queue:
            self._run = 0
            self._flush_acks()
            await asyncio.sleep(0)
        while True:
            while queue:
                chunk = queue[0]  # the next entry of the head chunk, inline: per message
                if not isinstance(chunk, list):  # counted: a batch stream's (not met here)
                    chunk = queue[0] = self._group.itemise(chunk)
                pos = self._pos
                entry = chunk[pos]
                pos += 1
                if pos == len(chunk):
                    queue.popleft()
                    pos = 0
                self._pos = pos
                self._queued -= 1
                if entry.state is PENDING:
                    self._open = entry
                    self._received = self._now()
                    self._seq += 1
                    self._run += 1
                    # A filter runs in one task, so this is set once per task; set()
                    # allocates a new context mapping, get() does not.
                    if current_stream.get() is not self:
                        current_stream.set(self)
                    if self._timer is None:
                        self._arm_timer()
                    group = self._group
                    # Only where this queue crosses the resume mark (or empties):
                    # checking every stream on every message costs O(watchers).
                    if group.paused and (self._queued == group.low_queue or not queue):
                        self._flush_acks()  # what resumes counts what is in flight
                        group.maybe_resume()
                    return entry.raw
            self._resume_check()
            await self._wait_for_more()

    async def _wait_for_more(self) -> None:
        """Suspend until the queue may hold something (the slow path of ``__anext__`` and
        :meth:`take`); end iteration as the stream's state says instead, when it ended."""
        self._flush_acks()
        state = self._state
        if state is FAILED:
            raise GroupFailedError(
                f"shared-stream group {self._group.key!r} failed: {self._failure!r}"
            ) from self._failure
        if state is CLOSED:
            raise StopAsyncIteration
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        self._run = 0

    def _resume_check(self) -> None:
        """The queue ran empty: a paused group may resume. Where it ran empty over entries
        the group dropped (their partition ended while they were queued), no handout
        crossed the resume mark and nothing in flight is left to settle: without this
        check the group would stay paused for good."""
        group = self._group
        if group.paused:
            self._flush_acks()  # what resumes counts what is in flight
            group.maybe_resume()

    def _flush_acks(self) -> None:
        """Ack the messages moved past since the last flush, in one call."""
        acks = self._acks
        if acks:
            self._acks = []
            self._group.ack_many(acks, self.name)

    @property
    def queued(self) -> int:
        """Messages waiting for this watcher (not yet handed to its filter)."""
        return self._queued

    @property
    def handed(self) -> int:
        """Messages handed to the filter so far (the runner's progress mark)."""
        return self._seq

    @property
    def state(self) -> StreamState:
        return self._state

    @property
    def closed(self) -> bool:
        """True once the stream serves no more messages (detached or its group failed)."""
        return self._state is not ACTIVE

    # -- the open window ---------------------------------------------------------

    def current_window(self) -> Window | None:
        """The window of the message being handled, built on first use."""
        entry = self._open
        if entry is None:
            return None
        window = self._window
        if window is None:
            window = self._window = Window(self, entry, self.name, entry.raw, entry.payload)
        return window

    def bind_event(self, event: TriggerEvent) -> bool:
        """Bind a yielded event to the open message; False if it was discarded."""
        window = self.current_window()
        if window is None:
            log.warning("watcher %r yielded %r outside a message window: discarded",
                        self.name, event)
            return False
        if window.state is not OPEN:
            return False  # rejected: binds nothing
        window.events.append(event)
        return True

    def reject(self, reason: str) -> bool:
        """Reject the open message (resolves at once); False outside a window."""
        window = self.current_window()
        if window is None:
            return False
        if window.withdraw(reason):
            self._group.reject(window.entry, self.name, reason)
        return True

    def _close_window(self, window: Window) -> None:
        if window.state is not OPEN:
            return  # rejected or abandoned: already resolved
        if window.close():
            self._in_sink.add(window)
            self._group.submit(window)
        else:
            self._acks.append(window.entry)

    # -- the window's owner (WindowOwner) --------------------------------------------

    def window_confirmed(self, window: Window) -> None:
        self._in_sink.discard(window)
        self._group.ack(window.entry, self.name)

    def window_failed(self, window: Window, exc: BaseException) -> None:
        self._in_sink.discard(window)
        log.warning("unit of work of watcher %r failed for %s: %r (held, retried)",
                    self.name, where_read(window.payload), exc)
        self._group.fail(window.entry, self.name, f"unit of work failed: {exc!r}",
                         counts=False)

    def window_rejected(self, window: Window, reason: str) -> None:
        self._in_sink.discard(window)
        self._group.reject(window.entry, self.name, reason)

    # -- driven by the runner ------------------------------------------------------

    def moved_past(self) -> None:
        """The filter ended normally: it moved past the open message."""
        entry = self._open
        if entry is not None:
            self._open = None
            window = self._window
            self._window = None
            if window is None:
                self._acks.append(entry)
            else:
                self._close_window(window)
        self._flush_acks()

    def fail_open(self, exc: BaseException) -> None:
        """The filter raised while handling the open message: fail it.

        It counts an attempt unless ``exc`` is an :class:`InfrastructureError`.
        """
        self._abandon_open(f"{type(exc).__name__}: {exc}",
                           counts=not isinstance(exc, InfrastructureError))

    def _abandon_open(self, why: str, *, counts: bool = True) -> None:
        self._flush_acks()  # the filter's restart may wait long: ack what it moved past now
        entry = self._open
        if entry is None:
            return
        self._open = None
        window = self._window
        self._window = None
        if window is not None and not window.abandon():
            return  # already rejected
        self._group.fail(entry, self.name, why, counts=counts)

    # -- ack timeout ---------------------------------------------------------------

    def infrastructure_wait(self, window: Window, began: bool) -> None:
        """A wait on infrastructure for ``window`` began or ended (see the module doc)."""
        now = self._group.clock.now()
        if began:
            self._flush_acks()  # an outage must not hold back what was moved past
            if self._waiting is not window:  # a stale count of an earlier window ends here
                self._waiting = window
                self._waits = 0
            self._waits += 1
            if self._waits == 1:
                self._wait_since = now
            return
        if self._waiting is not window or not self._waits:
            return
        self._waits -= 1
        if self._waits:
            return
        self._waiting = None
        if self._state is not ACTIVE or window is not self._window or not window.is_open:
            return
        self._received += now - self._wait_since
        if self._timer is None:
            self._arm_timer()

    def _arm_timer(self) -> None:
        self._timer = self._group.clock.call_at(
            self._received + self._group.settings.ack_timeout, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._open is None or self._state is not ACTIVE:
            return
        window = self._window
        if window is not None and not window.is_open:
            return  # rejected: resolved already
        if window is not None and window is self._waiting:
            return  # waiting on infrastructure: re-armed when the wait ends
        timeout = self._group.settings.ack_timeout
        if self._group.clock.now() < self._received + timeout:
            self._arm_timer()
            return
        log.warning("watcher %r: ack timeout (%ss) on %s", self.name, timeout,
                    where_read(self._open.payload))
        self._abandon_open(f"ack timeout after {timeout}s")
        if self.on_stuck is not None:
            self.on_stuck()

    # -- group side ----------------------------------------------------------------

    def wake(self) -> None:
        """Wake the filter if it waits for a message (cheap when it does not)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self, state: StreamState) -> None:
        self._state = check_move(f"stream of watcher {self.name!r}", MOVES, self._state, state)

    def detach(self, fail_pending: bool) -> None:
        """Stop serving this stream; optionally fail what it still owed (as absent)."""
        self._end(CLOSED)
        self._release(fail_pending)

    def group_failed(self, exc: BaseException) -> None:
        """The group failed with ``exc``: the filter's next message raises it."""
        self._end(FAILED)
        self._failure = exc
        self._release(fail_pending=False)

    def _release(self, fail_pending: bool) -> None:
        self._flush_acks()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        group = self._group
        if fail_pending:
            owed = [entry for i, chunk in enumerate(self._queue)
                    for entries in [chunk if isinstance(chunk, list) else group.itemise(chunk)]
                    for entry in (entries[self._pos:] if i == 0 else entries)]
            if self._open is not None:
                window = self._window
                if window is None or window.is_open:
                    owed.append(self._open)
            owed.extend(w.entry for w in self._in_sink)
            for entry in owed:
                group.fail(entry, self.name, ABSENT, counts=False)
        for window in self._in_sink:
            window.abandon()
        self._in_sink.clear()
        self._queue.clear()
        self._pos = self._queued = 0
        self._stale = False
        self._open = None
        self._window = None
        if self.on_release is not None:
            self.on_release(fail_pending)
        self.wake()


__all__ = ["SharedStream"]
