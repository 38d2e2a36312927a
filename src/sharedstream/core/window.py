"""The unit-of-work seam: one watcher's window on one message, and the sink it goes to.

A *window* opens when a watcher's stream hands it a message and closes when the
watcher's filter asks for the next one (or ends). While it is open, the
TriggerEvents the filter yields are bound to it and the state-store layer stages
writes into :attr:`Window.staged` (read-your-writes). When it closes:

* rejected                       -> resolved at once (no persistence gate);
* no events and nothing staged   -> acked at once (no window object is even built);
* otherwise                      -> handed to the :class:`WorkSink` in a batch; the
  watcher acks the message only when the sink calls :meth:`Window.confirm`.

Lifecycle of a window (:class:`WindowState`; any other move raises
:class:`~sharedstream.core.lifecycle.InvalidState`)::

    OPEN -> SUBMITTED   close(): it has events or staged state, the sink takes it
    OPEN -> DONE        close() with nothing to persist, withdraw(), abandon()
    SUBMITTED -> COMMITTED   confirm()
    SUBMITTED -> DONE        fail(), reject() (by the sink), abandon() (manager gave up)

COMMITTED and DONE are final. The sink's calls on a window the manager gave up on
(DONE) are ignored, since the sink cannot know; its calls on a window it was never
handed (OPEN) or on one it already confirmed are bugs and raise.

This module imports nothing from sharedstream at run time but the lifecycle error, so
that the trigger side (``reject_shared_stream_event``) and the state-store layer can
both use it.

Failure windows: a sink that commits and then dies before ``confirm`` leaves the
message unacked; it is redelivered and the events' idempotency key (watcher,
topic id, partition, offset, index) stops them from being written twice.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from sharedstream.core.lifecycle import InvalidState
from sharedstream.core.message import where_read

if TYPE_CHECKING:
    from sharedstream.core.event import TriggerEvent


class WindowState(enum.Enum):
    """Where a window is in its lifecycle (the module docstring lists the moves)."""

    OPEN = "open"  # the filter is handling the message
    SUBMITTED = "submitted"  # the sink holds it
    DONE = "done"  # failed, rejected or given up: nothing of it is (or will be) stored
    COMMITTED = "committed"  # confirmed: its events and staged state are stored


OPEN, SUBMITTED = WindowState.OPEN, WindowState.SUBMITTED
DONE, COMMITTED = WindowState.DONE, WindowState.COMMITTED


class WindowOwner(Protocol):
    """What a window calls back into (the watcher's stream).

    An owner that times messages (the stream's ack timeout) also has
    ``infrastructure_wait(window, began: bool)``, told when a wait on infrastructure
    for the window begins and ends; owners that time nothing (test drivers,
    benchmarks) may leave it out.
    """

    def window_confirmed(self, window: Window) -> None: ...

    def window_failed(self, window: Window, exc: BaseException) -> None: ...

    def window_rejected(self, window: Window, reason: str) -> None: ...


class _StreamContext(Protocol):
    """What the current-stream contextvar holds (the watcher's stream)."""

    def current_window(self) -> Window | None: ...

    def reject(self, reason: str) -> bool: ...


class Window:
    """One watcher's handling of one message.

    ``events[i]`` is the i-th TriggerEvent the filter yielded for the message: ``i``
    is its index within the message (part of the event's idempotency key, stable
    across redeliveries because a redelivered message is filtered from scratch).
    ``staged`` belongs to the state-store layer: it must be falsy when nothing is
    staged. ``rejected`` is the reject reason, or None. ``entry`` is the owner's own
    record of the message, opaque to the window.

    :meth:`confirm` and :meth:`fail` must be called on the event loop's thread, once
    per submitted window; a sink running elsewhere hops back with one
    ``call_soon_threadsafe`` per batch, not per window. Calls on a window the manager
    already gave up on (ack timeout, watcher left, group stopped) are ignored.
    """

    __slots__ = ("_owner", "entry", "events", "payload", "raw", "rejected", "staged",
                 "state", "watcher")

    def __init__(self, owner: WindowOwner, entry: Any, watcher: str, raw: Any,
                 payload: Any) -> None:
        self._owner = owner
        self.entry = entry
        self.state: WindowState = OPEN  # read it anywhere; only the methods below move it
        self.watcher = watcher
        self.raw = raw
        self.payload = payload
        self.events: list[TriggerEvent] = []
        self.staged: Any = None
        self.rejected: str | None = None

    @property
    def is_open(self) -> bool:
        """True while the filter is still handling the message (staging is allowed)."""
        return self.state is OPEN

    @property
    def is_submitted(self) -> bool:
        """True while the sink holds the window (neither confirmed, failed, nor given up)."""
        return self.state is SUBMITTED

    @property
    def is_committed(self) -> bool:
        """True once the sink confirmed it: its staged state is what the database holds."""
        return self.state is COMMITTED

    def _not_the_sinks(self, call: str) -> InvalidState:
        """The error for a sink's ``call`` on a window it was never handed or already
        confirmed (a given-up window's calls are ignored instead: the sink cannot know)."""
        return InvalidState(f"window of watcher {self.watcher!r}: {call}() on a "
                            f"{self.state.name} window (the sink settles only the windows "
                            "it was handed, once)")

    def abandon(self) -> bool:
        """The manager gave up on the message (ack timeout, watcher left, group stopped):
        nothing of the window is kept, and the sink's later calls are ignored. False when
        it was already done; InvalidState once it is committed."""
        state = self.state
        if state is OPEN or state is SUBMITTED:
            self.state = DONE
            return True
        if state is DONE:
            return False
        raise InvalidState(f"window of watcher {self.watcher!r}: abandon() on a COMMITTED "
                           "window (its unit of work is stored)")

    def withdraw(self, reason: str) -> bool:
        """The watcher rejected the message while handling it: nothing of the window is
        kept (events and staged writes dropped). False when it was no longer open."""
        if self.state is not OPEN:
            return False
        self.state = DONE
        self.rejected = reason
        self.events.clear()
        self.staged = None
        return True

    def close(self) -> bool:
        """The filter moved past the message: True when the window has something to
        persist (it is now submitted and waits for the sink), False when it is done
        with nothing to persist (the watcher acks at once). A window that is no longer
        open (rejected, abandoned) is left as it is, and False returned."""
        if self.state is not OPEN:
            return False
        if self.events or self.staged:
            self.state = SUBMITTED
            return True
        self.state = DONE
        return False

    def confirm(self) -> None:
        """The unit of work (events + staged state) committed: the watcher acks."""
        state = self.state
        if state is SUBMITTED:
            self.state = COMMITTED
            self._owner.window_confirmed(self)
        elif state is not DONE:
            raise self._not_the_sinks("confirm")

    def fail(self, exc: BaseException) -> None:
        """The unit of work could not commit (infrastructure): held and retried.

        Does not count towards ``max_attempts``: a database outage never dead-letters.
        """
        state = self.state
        if state is SUBMITTED:
            self.state = DONE
            self._owner.window_failed(self, exc)
        elif state is not DONE:
            raise self._not_the_sinks("fail")

    @contextmanager
    def waiting_on_infrastructure(self) -> Iterator[None]:
        """Bracket a wait on infrastructure made for this message (a database call).

        ``ack_timeout`` measures the watcher's own time on a message. A watcher waiting
        on the database (a state read retrying through an outage, or just a slow call)
        is not at fault, so while the bracket is open its ack timeout does not fire, and
        when it closes the wait's length is added to the message's deadline. Otherwise
        every message read during an outage longer than ``max_attempts x ack_timeout``
        would become a "max attempts: ack timeout" dead letter, where the failure policy
        says infrastructure holds and retries forever, counting no attempt.

        Call on the event loop's thread from the filter handling this message. A bracket
        still open on a window the manager gave up on (watcher left, group stopped)
        holds nothing: only the open message's own waits count.
        """
        track: Callable[[Window, bool], None] | None = getattr(
            self._owner, "infrastructure_wait", None)
        if track is None:
            yield
            return
        track(self, True)
        try:
            yield
        finally:
            track(self, False)

    def reject(self, reason: str) -> None:
        """The sink refuses the window's content as a watcher bug (e.g. an event payload
        that is not JSON): resolved as this watcher's rejection, nothing of it persisted.
        """
        state = self.state
        if state is SUBMITTED:
            self.state = DONE
            self.rejected = reason
            self._owner.window_rejected(self, reason)
        elif state is not DONE:
            raise self._not_the_sinks("reject")

    def __repr__(self) -> str:
        return (f"Window(watcher={self.watcher!r}, {where_read(self.payload)}, "
                f"events={len(self.events)}, rejected={self.rejected!r})")


class WorkSink(Protocol):
    """Where closed windows with something to persist go (the unit of work).

    ``submit`` is called on the event loop with every window closed since the last
    call (one call per loop iteration at most) and must not block: queue the work
    and return. Each window later gets exactly one ``confirm()`` or ``fail(exc)``.
    """

    def submit(self, windows: Sequence[Window]) -> None: ...


current_stream: ContextVar[_StreamContext | None] = ContextVar(
    "sharedstream_current_stream", default=None)
"""The stream whose message the running task is handling; set by the stream's ``__anext__``."""


def current_window() -> Window | None:
    """The open window of the message the current watcher is handling, or None.

    The state-store accessor stages writes into ``current_window().staged``; None
    means "outside a message": write through at once.
    """
    stream = current_stream.get()
    return None if stream is None else stream.current_window()


def reject_current(reason: str) -> bool:
    """Reject the message the current watcher is handling; False outside a window."""
    stream = current_stream.get()
    return False if stream is None else stream.reject(reason)
