"""The ack deadline: ``ack_timeout`` of a watcher's own time on its work (issue 42).

Both watcher kinds are timed by it, and only by it: a per-message filter for the message
it holds open (:mod:`sharedstream.core.handout`), a batch filter for the call it runs
(:mod:`sharedstream.core.batch`). The deadline is ``start + ack_timeout``. The owner sets
``start`` when it hands out new work and calls :meth:`AckDeadline.arm`; one timer runs
at most, and when it fires early (the owner moved ``start`` on since it was armed) it
re-arms itself for the current deadline, so a busy per-message filter costs no timer
per message.

What is being timed is the owner's to say, when asked (:meth:`DeadlineOwner.timed`): a
subject (the open window or message, the running call) or None between messages or
calls, or once the stream ended; a timer that finds None stops until the owner next
arms it. Past the deadline the owner is told (:meth:`DeadlineOwner.timed_out`): it fails
the work, counting an attempt, and its filter task is restarted.

Time spent waiting on infrastructure (:meth:`Window.waiting_on_infrastructure
<sharedstream.core.window.Window.waiting_on_infrastructure>`: a state read) is not the
watcher's own: while a wait on the timed subject is open the timer does not expire it,
and when the last such wait ends its length moves ``start`` on. An ack timeout there
would be a counted watcher failure, so a database outage longer than
``max_attempts x ack_timeout`` would dead-letter every message read meanwhile. A wait
left open on a subject no longer timed (a task the filter started, still reading for a
message the filter moved past) holds nothing.

Failure window: a filter stuck in a database call that never returns is never timed
out; it is held until the driver gives up (connect or pool timeout) and the read's retry
loop takes over, visible in readiness from its first failure.
"""

from __future__ import annotations

from typing import Protocol

from sharedstream.core.streamconfig import Clock, TimerHandle


class DeadlineOwner(Protocol):
    """What a deadline asks of the part it times (a stream's hand-out, a batch runner)."""

    def timed(self) -> object | None:
        """The work timed now (compared with what waits on infrastructure), or None."""

    def timed_out(self, timeout: float) -> None:
        """The timed work overran ``timeout`` seconds of its own time: fail it."""


class AckDeadline:
    """One watcher's ack deadline: ``start`` (moved on by its waits) + ``ack_timeout``."""

    __slots__ = ("_clock", "_owner", "_wait_since", "_waiting", "_waits", "start", "timeout",
                 "timer")

    def __init__(self, owner: DeadlineOwner, clock: Clock, timeout: float) -> None:
        self._owner = owner
        self._clock = clock
        self.timeout = timeout
        self.start = 0.0
        """When the timed work was handed out (its receipt), moved on by its waits."""
        self.timer: TimerHandle | None = None
        """The running timer, or None (the per-message hot path tests it before arming)."""
        # The subject waiting on infrastructure, how many waits are open, since when.
        self._waiting: object | None = None
        self._waits = 0
        self._wait_since = 0.0

    def arm(self) -> None:
        """Run a timer for the deadline, unless one runs (it re-arms itself if early)."""
        if self.timer is None:
            self.timer = self._clock.call_at(self.start + self.timeout, self._fire)

    def cancel(self) -> None:
        """Stop the timer (the owner ended)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def wait_began(self, subject: object) -> None:
        """A wait on infrastructure for ``subject`` began (see the module docstring)."""
        if self._owner.timed() is not subject:
            return  # not what is timed: it holds nothing, and must not replace what is
        if self._waiting is not subject:  # a stale count of an earlier subject ends here
            self._waiting = subject
            self._waits = 0
        self._waits += 1
        if self._waits == 1:
            self._wait_since = self._clock.now()

    def wait_ended(self, subject: object) -> None:
        """A wait for ``subject`` ended: the last one moves the deadline by its length,
        when ``subject`` is still what is timed."""
        if self._waiting is not subject or not self._waits:
            return
        self._waits -= 1
        if self._waits:
            return
        self._waiting = None
        if self._owner.timed() is not subject:
            return
        self.start += self._clock.now() - self._wait_since
        self.arm()

    def _fire(self) -> None:
        self.timer = None
        subject = self._owner.timed()
        if subject is None:
            return  # nothing timed: the owner arms again with its next work
        if self._waits and self._waiting is subject:
            return  # waiting on infrastructure: re-armed when the wait ends
        if self._clock.now() < self.start + self.timeout:
            self.arm()
            return
        self._owner.timed_out(self.timeout)


__all__ = ["AckDeadline", "DeadlineOwner"]
