"""A per-message filter's side of its stream: one message at a time, its window, its acks.

:class:`MessageHandout` is what ``async for message in stream`` iterates (the stream's
``__aiter__`` returns it, so iteration costs no delegation). ``__anext__`` first closes
the window of the previous message (the filter moved past it: that is the ack, or the
hand-off to the unit of work), then returns the next queued message without suspending
when one is there. It suspends (one Future, the stream's) only when the queue is empty,
so a busy watcher costs no Task, Future or timer per message. It walks the head chunk
of the stream's :class:`~sharedstream.core.batchtake.ChunkQueue` itself, inline.

Acks go to the group together: a message the filter moved past with nothing bound is
acked in one ``ack_many`` with the others when the stream next suspends, yields (every
``HANDOUT_RUN`` messages), waits on infrastructure, resumes a paused group, or ends.
Failure window: none added; an ack is only later, never lost (the process dying loses
it as it loses any ack not yet committed).

Fairness: a filter that always finds a message queued would never suspend, so its task
would hold the loop for as long as its queue lasts: the group's window flush, the commit
targets and the other watchers would all wait (with 100 watchers and 10,000 messages in
flight that was millions of open units of work and a loop stalled for seconds). After
``HANDOUT_RUN`` messages without a suspension it yields once (``sleep(0)``).

Ack timeout: the open message is timed by the watcher's
:class:`~sharedstream.core.deadline.AckDeadline` from its receipt; when it expires the
watcher is failed for that message and its filter task is cancelled so the runner
restarts it. The hand-out is the owner of the windows it builds (the sink's answers
come back here) and what ``current_stream`` names while its filter runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any, Protocol

from sharedstream.core.batchtake import HANDOUT_RUN, ChunkQueue, Counted, TakeOwner
from sharedstream.core.deadline import AckDeadline
from sharedstream.core.ledger import Entry, Slice, State
from sharedstream.core.message import where_read
from sharedstream.core.streamconfig import Clock, InfrastructureError, ManagerSettings
from sharedstream.core.window import OPEN, Window, current_stream

if TYPE_CHECKING:
    from sharedstream.core.event import TriggerEvent
    from sharedstream.core.shares import Ready

log = logging.getLogger(__name__)

PENDING = State.PENDING


class StreamOwner(TakeOwner, Protocol):
    """What a stream calls back into: its group (the callbacks keep the import one-way)."""

    @property
    def key(self) -> Hashable: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> ManagerSettings: ...

    @property
    def ready(self) -> Ready:
        """The group's runners that call a routed share at once (the stream lists its own
        while that holds)."""

    def ack(self, entry: Entry, watcher: str) -> None: ...

    def ack_many(self, entries: list[Entry], watcher: str) -> None:
        """``ack`` of every entry of a batch, in one call (a batch filter's ack)."""

    def ack_range(self, run: Counted, start: int, stop: int, watcher: str) -> None:
        """A clean acknowledgement of ``[start, stop)`` of a counted slice or share."""

    def share_done(self, run: Slice) -> None:
        """A watcher resolved all of its share of counted slice ``run`` cleanly."""

    def reject(self, entry: Entry, watcher: str, reason: str) -> None: ...

    def fail(self, entry: Entry, watcher: str, why: str, *, counts: bool,
             retry_after: float | None = None) -> None: ...

    def submit(self, window: Window) -> None: ...


class MessageHandout:
    """Hands a per-message filter its messages and settles what it did with each.

    ``wait`` and ``ran_dry`` are the stream's: suspend until the queue may hold
    something (ending iteration when the stream ended), and the queue ran empty (a
    paused group may resume). ``stuck`` is told after an ack timeout failed the open
    message."""

    __slots__ = ("_acks", "_deadline", "_group", "_in_sink", "_now", "_open", "_queue",
                 "_ran_dry", "_stuck", "_wait", "_window", "name")

    def __init__(self, group: StreamOwner, name: str, now: Callable[[], float],
                 queue: ChunkQueue, wait: Callable[[], Awaitable[None]],
                 ran_dry: Callable[[], None], stuck: Callable[[], None]) -> None:
        self.name = name
        self._group = group
        self._now = now
        self._queue = queue
        self._wait = wait
        self._ran_dry = ran_dry
        self._stuck = stuck
        # Messages the filter moved past with nothing bound: acked together (ack_many)
        # when the stream next suspends or yields, at most HANDOUT_RUN of them.
        self._acks: list[Entry] = []
        self._open: Entry | None = None
        self._window: Window | None = None
        self._in_sink: set[Window] = set()
        self._deadline = AckDeadline(self, group.clock, group.settings.ack_timeout)

    def __aiter__(self) -> MessageHandout:
        return self

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
        if queue.run >= HANDOUT_RUN and queue:
            queue.run = 0
            self.flush_acks()
            await asyncio.sleep(0)
        while True:
            while queue:
                chunk = queue[0]  # the next entry of the head chunk, inline: per message
                if not isinstance(chunk, list):  # counted: a batch stream's (not met here)
                    chunk = queue[0] = self._group.itemise(chunk)
                pos = queue.pos
                entry = chunk[pos]
                pos += 1
                if pos == len(chunk):
                    queue.popleft()
                    pos = 0
                queue.pos = pos
                queue.queued -= 1
                if entry.state is PENDING:
                    self._open = entry
                    deadline = self._deadline
                    deadline.start = self._now()
                    queue.handed += 1
                    queue.run += 1
                    # A filter runs in one task, so this is set once per task; set()
                    # allocates a new context mapping, get() does not.
                    if current_stream.get() is not self:
                        current_stream.set(self)
                    if deadline.timer is None:  # arm(), without its call per message
                        deadline.arm()
                    group = self._group
                    # Only where this queue crosses the resume mark (or empties):
                    # checking every stream on every message costs O(watchers).
                    if group.paused and (queue.queued == group.low_queue or not queue):
                        self.flush_acks()  # what resumes counts what is in flight
                        group.maybe_resume()
                    return entry.raw
            self._ran_dry()
            await self._wait()

    def flush_acks(self) -> None:
        """Ack the messages moved past since the last flush, in one call."""
        acks = self._acks
        if acks:
            self._acks = []
            self._group.ack_many(acks, self.name)

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

    # -- the windows' owner (WindowOwner) --------------------------------------------

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

    def infrastructure_wait(self, window: Window, began: bool) -> None:
        """A wait on infrastructure for ``window`` began or ended: the deadline's to
        count (see :mod:`sharedstream.core.deadline`)."""
        if began:
            self.flush_acks()  # an outage must not hold back what was moved past
            self._deadline.wait_began(window)
        else:
            self._deadline.wait_ended(window)

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
        self.flush_acks()

    def fail_open(self, exc: BaseException) -> None:
        """The filter raised while handling the open message: fail it.

        It counts an attempt unless ``exc`` is an :class:`InfrastructureError`, whose
        ``retry_after`` may bring the retry forward.
        """
        outage = exc if isinstance(exc, InfrastructureError) else None
        self._abandon_open(f"{type(exc).__name__}: {exc}", counts=outage is None,
                           retry_after=None if outage is None else outage.retry_after)

    def _abandon_open(self, why: str, *, counts: bool = True,
                      retry_after: float | None = None) -> None:
        self.flush_acks()  # the filter's restart may wait long: ack what it moved past now
        entry = self._open
        if entry is None:
            return
        self._open = None
        window = self._window
        self._window = None
        if window is not None and not window.abandon():
            return  # already rejected
        self._group.fail(entry, self.name, why, counts=counts, retry_after=retry_after)

    # -- the ack deadline's owner (DeadlineOwner) ----------------------------------

    def timed(self) -> object | None:
        """The open message's window (or the message, without one); None when there is
        none, or its window is resolved already (rejected)."""
        entry = self._open
        if entry is None:
            return None
        window = self._window
        if window is None:
            return entry
        return window if window.is_open else None

    def timed_out(self, timeout: float) -> None:
        entry = self._open
        assert entry is not None  # what timed() said is timed
        log.warning("watcher %r: ack timeout (%ss) on %s", self.name, timeout,
                    where_read(entry.payload))
        self._abandon_open(f"ack timeout after {timeout}s")
        self._stuck()

    # -- the stream ended ----------------------------------------------------------

    def owed(self) -> list[Entry]:
        """What the filter holds and has not settled: the open message, unless resolved,
        and those whose unit of work the sink still has."""
        owed = []
        if self._open is not None:
            window = self._window
            if window is None or window.is_open:
                owed.append(self._open)
        owed.extend(w.entry for w in self._in_sink)
        return owed

    def release(self) -> None:
        """The stream ended: stop the deadline, give up the windows in the sink, drop
        the open message (what it owed was failed first, when asked: :meth:`owed`)."""
        self._deadline.cancel()
        for window in self._in_sink:
            window.abandon()
        self._in_sink.clear()
        self._open = None
        self._window = None


__all__ = ["MessageHandout", "StreamOwner"]
