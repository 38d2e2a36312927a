"""One watcher's view of its group: a bounded queue, an open window, an ack timer.

The stream is what ``filter_shared_stream`` iterates. ``__anext__`` first closes
the window of the previous message (the filter moved past it: that is the ack,
or the hand-off to the unit of work), then returns the next queued message
without suspending when one is there. It suspends (one Future) only when the
queue is empty, so a busy watcher costs no Task, Future or timer per message.

Fairness: a filter that always finds a message queued would never suspend, so
its task would hold the loop for as long as its queue lasts: the group's window
flush, the advances and the other watchers would all wait (with 100 watchers and
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
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sharedstream.core.ledger import Entry, State
from sharedstream.core.streamconfig import (
    ABSENT,
    GroupFailedError,
    InfrastructureError,
    TimerHandle,
)
from sharedstream.core.window import DONE, OPEN, Window, current_stream

if TYPE_CHECKING:
    from sharedstream.core.event import TriggerEvent
    from sharedstream.core.group import Group

log = logging.getLogger(__name__)

PENDING = State.PENDING
HANDOUT_RUN = 128
"""Messages handed out in a row before the stream lets the loop run other work."""


class SharedStream:
    """Async iterator of one watcher's messages (``raw`` as the producer yielded it)."""

    __slots__ = ("_closed", "_failure", "_group", "_in_sink", "_now", "_on_stuck", "_open",
                 "_queue", "_received", "_run", "_seq", "_timer", "_wait_since", "_waiter",
                 "_waiting", "_waits", "_window", "name")

    def __init__(self, group: Group, name: str, now: Callable[[], float]) -> None:
        self.name = name
        self._group = group
        self._now = now
        self._queue: deque[Entry] = deque()
        self._open: Entry | None = None
        self._window: Window | None = None
        self._received = 0.0
        self._seq = 0
        self._run = 0
        self._timer: TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._in_sink: set[Window] = set()
        self._on_stuck: Callable[[], None] | None = None
        # The window whose filter waits on infrastructure, how many waits, since when.
        self._waiting: Window | None = None
        self._waits = 0
        self._wait_since = 0.0

    # -- iteration ---------------------------------------------------------------

    def __aiter__(self) -> SharedStream:
        return self

    async def __anext__(self) -> Any:
        entry = self._open
        if entry is not None:
            self._open = None
            window = self._window
            if window is None:
                self._group.ack(entry, self.name)
            else:
                self._window = None
                self._close_window(window)
        queue = self._queue
        if self._run >= HANDOUT_RUN and queue:
            self._run = 0
            await asyncio.sleep(0)
        while True:
            while queue:
                entry = queue.popleft()
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
                    if group.paused and (len(queue) == group.low_queue or not queue):
                        group.maybe_resume()
                    return entry.raw
            if self._failure is not None:
                raise GroupFailedError(
                    f"shared-stream group {self._group.key!r} failed: {self._failure!r}"
                ) from self._failure
            if self._closed:
                raise StopAsyncIteration
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
            self._run = 0

    @property
    def queued(self) -> int:
        """Messages waiting for this watcher (not yet handed to its filter)."""
        return len(self._queue)

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
        if window._state != OPEN:
            return False  # rejected: binds nothing
        window.events.append(event)
        return True

    def reject(self, reason: str) -> bool:
        """Reject the open message (resolves at once); False outside a window."""
        window = self.current_window()
        if window is None:
            return False
        if window.withdraw(reason):
            self._group.reject(window._entry, self.name, reason)
        return True

    def _close_window(self, window: Window) -> None:
        if not window.is_open:
            return  # rejected or abandoned: already resolved
        if window.close():
            self._in_sink.add(window)
            self._group.submit(window)
        else:
            self._group.ack(window._entry, self.name)

    def _window_confirmed(self, window: Window) -> None:
        self._in_sink.discard(window)
        self._group.ack(window._entry, self.name)

    def _window_failed(self, window: Window, exc: BaseException) -> None:
        self._in_sink.discard(window)
        log.warning("unit of work of watcher %r failed for %r: %r (held, retried)",
                    self.name, window.payload, exc)
        self._group.fail(window._entry, self.name, f"unit of work failed: {exc!r}",
                         counts=False)

    def _window_rejected(self, window: Window, reason: str) -> None:
        self._in_sink.discard(window)
        self._group.reject(window._entry, self.name, reason)

    # -- driven by the runner ------------------------------------------------------

    def moved_past(self) -> None:
        """The filter ended normally: it moved past the open message."""
        entry = self._open
        if entry is not None:
            self._open = None
            window = self._window
            self._window = None
            if window is None:
                self._group.ack(entry, self.name)
            else:
                self._close_window(window)

    def fail_open(self, exc: BaseException) -> None:
        """The filter raised while handling the open message: fail it.

        It counts an attempt unless ``exc`` is an :class:`InfrastructureError`.
        """
        self._abandon_open(f"{type(exc).__name__}: {exc}",
                           counts=not isinstance(exc, InfrastructureError))

    def _abandon_open(self, why: str, *, counts: bool = True) -> None:
        entry = self._open
        if entry is None:
            return
        self._open = None
        window = self._window
        self._window = None
        if window is not None:
            if window._state != OPEN:
                return  # already rejected
            window._state = DONE
        self._group.fail(entry, self.name, why, counts=counts)

    # -- ack timeout ---------------------------------------------------------------

    def _infrastructure_wait(self, window: Window, began: bool) -> None:
        """A wait on infrastructure for ``window`` began or ended (see the module doc)."""
        now = self._group.clock.now()
        if began:
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
        if self._closed or window is not self._window or window._state != OPEN:
            return
        self._received += now - self._wait_since
        if self._timer is None:
            self._arm_timer()

    def _arm_timer(self) -> None:
        self._timer = self._group.clock.call_at(
            self._received + self._group.settings.ack_timeout, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._open is None or self._closed:
            return
        window = self._window
        if window is not None and window._state != OPEN:
            return  # rejected: resolved already
        if window is not None and window is self._waiting:
            return  # waiting on infrastructure: re-armed when the wait ends
        timeout = self._group.settings.ack_timeout
        if self._group.clock.now() < self._received + timeout:
            self._arm_timer()
            return
        log.warning("watcher %r: ack timeout (%ss) on %r", self.name, timeout, self._open.payload)
        self._abandon_open(f"ack timeout after {timeout}s")
        if self._on_stuck is not None:
            self._on_stuck()

    # -- group side ----------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _detach(self, fail_pending: bool) -> None:
        """Stop serving this stream; optionally fail what it still owed (as absent)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        group = self._group
        if fail_pending:
            owed = list(self._queue)
            if self._open is not None:
                window = self._window
                if window is None or window._state == OPEN:
                    owed.append(self._open)
            owed.extend(w._entry for w in self._in_sink)
            for entry in owed:
                group.fail(entry, self.name, ABSENT, counts=False)
        for window in self._in_sink:
            window._state = DONE
        self._in_sink.clear()
        self._queue.clear()
        self._open = None
        self._window = None
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._detach(fail_pending=False)


__all__ = ["SharedStream"]
