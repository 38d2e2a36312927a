"""Settings, clock and errors of the shared-stream manager.

The clock is injectable so tests can drive ack timeouts, grace periods and
backoffs deterministically (:class:`ManualClock`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sharedstream.core.backoff import exponential

# Why a watcher is failed for a message it was never handed.
ABSENT = "absent"
# Owed before the partition came to this consumer (a crash, a rebalance): core.holds.
HELD_BEFORE = "held before the restart"


@dataclass(frozen=True, slots=True)
class ManagerSettings:
    """``[triggerer]`` knobs the manager uses (seconds for durations).

    * ``subscriber_queue_size``: messages queued per watcher; a watcher whose queue
      reaches it is lagging and fetching pauses (never fails it: core/flowcontrol.py).
    * ``max_in_flight``: messages per group handed out and not yet fully resolved,
      plus messages held for a watcher; at the bound fetching pauses (never fails anyone).
      Also each partition's bound: messages above its floor that no watcher handles
      (resolved, or held), read past a message not resolved yet.
    * ``ack_timeout``: how long a watcher's filter may stay on one message, from receipt,
      not counting time it waits on infrastructure (its state reads: see ``stream``).
    * ``cohort_grace_period``: how long a group waits for its whole cohort before polling.
    * ``retry_backoff_initial`` / ``retry_backoff_max``: exponential backoff of held
      messages' redelivery and of trigger restarts (sooner when the failure says when to
      try again: ``InfrastructureError.retry_after``).
    * ``max_attempts``: failures (exception or ack timeout) of one watcher on one
      message before its outcome becomes a rejection.
    * ``max_in_flight_bytes``: key + value bytes of a partition's unresolved messages
      (in flight or held) at which that partition pauses, so a few large messages held
      for a failing watcher cannot fill memory before ``max_in_flight`` is reached; also
      the bytes a group's consumer reads ahead of a loop that has not taken them yet.
    """

    subscriber_queue_size: int = 1024
    max_in_flight: int = 10_000
    ack_timeout: float = 300.0
    cohort_grace_period: float = 10.0
    retry_backoff_initial: float = 1.0
    retry_backoff_max: float = 60.0
    max_attempts: int = 10
    max_in_flight_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        for name in ("subscriber_queue_size", "max_in_flight", "max_attempts",
                     "max_in_flight_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("ack_timeout", "retry_backoff_initial", "retry_backoff_max"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.cohort_grace_period >= 0:
            raise ValueError(f"cohort_grace_period must be >= 0, got {self.cohort_grace_period!r}")
        if self.retry_backoff_max < self.retry_backoff_initial:
            raise ValueError("retry_backoff_max must be >= retry_backoff_initial")

    def backoff(self, attempt: int) -> float:
        """The nominal delay before retry number ``attempt`` (1-based): doubling, capped;
        the retry itself waits a :func:`~sharedstream.core.backoff.jittered` share of it."""
        return exponential(attempt, self.retry_backoff_initial, self.retry_backoff_max)


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic time and timers, as the manager sees them."""

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle: ...

    async def sleep(self, delay: float) -> None: ...


class LoopClock:
    """The running event loop's monotonic clock (production)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_at(when, callback)

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(delay)


class _ManualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (tests).

    :meth:`advance` runs every timer due by the new time, in time order, synchronously;
    tasks woken by it (``sleep``) run when the test next yields to the loop.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _ManualTimer(callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    async def sleep(self, delay: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        self.call_at(self._now + delay, wake)
        await future

    def advance(self, delta: float) -> None:
        """Move time forward by ``delta`` seconds, firing due timers."""
        target = self._now + delta
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.callback()
        self._now = target


class SharedStreamError(Exception):
    """Base of the manager's errors."""


class GroupFailedError(SharedStreamError):
    """The group's adapter failed (its stream ended or raised, or it refused a dead letter).

    Raised from every member watcher's stream; the group is evicted, so the next
    subscribe starts a fresh one. ``__cause__`` is the adapter's exception.
    """


class InfrastructureError(SharedStreamError):
    """Raise from a filter when a message cannot be handled *now* for a reason outside it.

    A downstream service that is down (an HTTP API refusing connections) is not the
    message's fault: the message is held and redelivered with backoff like after any
    failure, but the failure never counts towards ``max_attempts``, so an outage of
    any length never dead-letters it. ``ack_timeout`` still applies to each attempt.

    The waiting watcher logs each retry in one line, without a traceback (an outage is
    no bug of the filter). ``reported``: the source logs the outage's start and end
    itself (the schema registry's lookups do), so the retries log at DEBUG only.

    ``retry_after`` (seconds, optional): when trying again can succeed, if the source
    knows. The schema registry's lookups set it while they hold a schema id the registry
    answers 404 for: the time left of ``missing.schema.grace.sec``, so the message is
    decoded or rejected when the grace ends, not at the next backoff step. A filter may
    raise it too (``InfrastructureError("quota", retry_after=12.0)``). The message is
    handed out again, and the filter restarted, at the earlier of the backoff and the
    hint, never before now: the hint only shortens a wait; an outage without one keeps
    its backoff. Failure window: a hint that comes too early costs one more failed try,
    which backs off as usual. A unit of work the sink refuses is retried by backoff only.
    """

    reported: bool = False
    retry_after: float | None = None

    def __init__(self, *args: object, retry_after: float | None = None) -> None:
        super().__init__(*args)
        self.retry_after = retry_after


class ProducerFactoryError(SharedStreamError):
    """``create_shared_stream_producer`` raised: terminal, the watcher is not retried."""
