"""The hand-off: the only object both of the adapter's threads touch.

The event loop (the adapter, the group, the ledger) and the consumer thread (the
``Consumer``, its callbacks) share nothing else. It is in parts with one job each,
named from the loop's side, each with its own lock and its thread-safety rules at its
top; everything crossing is touched once per batch or commit tick, never per message:

* :attr:`HandOff.inbox`, thread -> loop (kafka/handoff_inbox.py): what was read and
  what happened to the partitions, in order;
* :attr:`HandOff.outbox`, loop -> thread (kafka/handoff_outbox.py): commit targets,
  fetch requests, the group's pause, the id check, commands;
* :attr:`HandOff.status`, thread -> any reader (kafka/handoff_status.py): readiness,
  counters, partition figures, what does not fetch and why, the wait for partitions;
* this class: the consumer's lifecycle (its state and its failure) and ``room``, the
  event a holding thread waits on (set by a batch taken, the group resumed, a close
  or a failure).

Consumer states and the transitions allowed (any other raises :class:`InvalidState`)::

    STARTING -> RUNNING | CLOSING | FAILED        (subscribed; closed before; failed)
    RUNNING  -> REVOKING | CLOSING | FAILED
    REVOKING -> RUNNING | CLOSING | FAILED        (the callback returned; closed)
    CLOSING  -> CLOSED | FAILED                   (final commit, leave the group)
    FAILED   -> CLOSED                            (the adapter was closed after)
    CLOSED   -> (none)

A paused consumer is RUNNING: what is paused, and why, is the status's
(:attr:`ConsumerStatus.pauses`), the one place it is kept. A revocation during
``close()`` (librdkafka revokes the assignment then) stays CLOSING; closing asked
during a revocation ends the loop once the callback returns.

Thread-safety: ``_lock`` guards the state and the failure; the thread moves the state
through a revocation and to CLOSED, the loop asks to close, any thread may fail it.
A failure is recorded before the inbox ends, so the loop that takes the end finds it;
:meth:`HandOff.fail` raises nothing between the two, and the thread calls it as it dies
(kafka/consumer_thread.py), so a dead thread has always ended the loop's stream.
"""

from __future__ import annotations

import enum
import threading
from typing import Generic, TypeVar

from sharedstream.core.counters import AdapterCounters
from sharedstream.core.lifecycle import InvalidState
from sharedstream.kafka.handoff_inbox import Inbox
from sharedstream.kafka.handoff_outbox import Outbox
from sharedstream.kafka.handoff_status import ConsumerStatus

PayloadT = TypeVar("PayloadT")


class ConsumerState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    REVOKING = "revoking"
    CLOSING = "closing"
    FAILED = "failed"
    CLOSED = "closed"


S = ConsumerState
TRANSITIONS: dict[ConsumerState, frozenset[ConsumerState]] = {
    S.STARTING: frozenset({S.RUNNING, S.CLOSING, S.FAILED}),
    S.RUNNING: frozenset({S.REVOKING, S.CLOSING, S.FAILED}),
    S.REVOKING: frozenset({S.RUNNING, S.CLOSING, S.FAILED}),
    S.CLOSING: frozenset({S.CLOSED, S.FAILED}),
    S.FAILED: frozenset({S.CLOSED}),
    S.CLOSED: frozenset(),
}
# The consumer loop runs while the state is one of these.
LIVE = frozenset({S.STARTING, S.RUNNING, S.REVOKING})


class StreamNotOpenError(RuntimeError):
    """A broker operation was asked for while no consumer is open."""


class HandOff(Generic[PayloadT]):
    """The consumer's lifecycle, holding the inbox, outbox and status (see module
    docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = S.STARTING
        self._failure: BaseException | None = None
        # Set when the loop took a batch, the group resumed, or the consumer is closing
        # or failed: a holding thread waits on it instead of pausing the partitions.
        self.room = threading.Event()
        self.inbox: Inbox[PayloadT] = Inbox(self.room)
        self.outbox = Outbox(self.room)
        self.status = ConsumerStatus()

    @property
    def state(self) -> ConsumerState:
        return self._state

    def to(self, new: ConsumerState) -> None:
        with self._lock:
            self._to(new)

    def _to(self, new: ConsumerState) -> None:
        if new is self._state:
            return
        if new not in TRANSITIONS[self._state]:
            raise InvalidState(f"consumer state {self._state.value} -> {new.value}")
        self._state = new

    def started(self) -> None:
        """Thread: subscribed (unless closing was asked meanwhile)."""
        with self._lock:
            if self._state is not S.STARTING:
                return
            self._to(S.RUNNING)
        self.status.set_ready()

    def closed(self) -> None:
        """The consumer left the group (thread), or the adapter closed after a failure."""
        with self._lock:
            if self._state in (S.CLOSING, S.FAILED):
                self._to(S.CLOSED)

    def revoking(self) -> None:
        """Thread: a revocation starts (kept CLOSING during close())."""
        with self._lock:
            if self._state is S.RUNNING:
                self._to(S.REVOKING)

    def revoked(self) -> None:
        with self._lock:
            if self._state is S.REVOKING:
                self._to(S.RUNNING)

    @property
    def live(self) -> bool:
        return self._state in LIVE

    def close(self) -> bool:
        """Loop: ask the thread to close; False when closing was asked already."""
        with self._lock:
            if self._state in (S.CLOSING, S.CLOSED):
                return False
            if self._state is not S.FAILED:
                self._to(S.CLOSING)
        self.room.set()
        return True

    def fail(self, exc: BaseException) -> bool:
        """Any thread: the consumer failed for good; the loop's stream raises. False when
        it had failed already, or was closed."""
        with self._lock:
            if self._failure is not None or self._state is S.CLOSED:
                return False
            self._failure = exc
            self._to(S.FAILED)
        self.status.set_ready(False)
        self.room.set()
        self.inbox.end()
        return True

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def counters(self) -> AdapterCounters:
        return self.status.counters(self.inbox.consumed)
