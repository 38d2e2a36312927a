"""Retry delays: exponential, capped, and jittered, from one place.

Every retry in sharedstream (redelivering a held message, committing a unit of work
again, reading state through an outage, resending a dead letter, delivering to a
destination) waits ``exponential(attempt)`` spread by :func:`jittered`: a random delay
between half of it and all of it. Processes that failed together (a database restart,
a broker outage) so come back spread out instead of in lockstep, and no retry comes
sooner than half its nominal delay. A held message's retry and its watcher's restart may
be told when trying again can succeed (:func:`retry_delay`): that only shortens the wait.
"""

from __future__ import annotations

import random

_RNG = random.Random()


def exponential(attempt: int, initial: float, cap: float) -> float:
    """The nominal delay before retry ``attempt`` (1-based): doubling from ``initial``,
    at most ``cap``."""
    return min(cap, initial * 2.0 ** min(max(attempt, 1) - 1, 64))


def jittered(delay: float, rng: random.Random | None = None) -> float:
    """A random delay in ``[delay / 2, delay]``."""
    return (rng or _RNG).uniform(delay / 2, delay)


def retry_delay(nominal: float, retry_after: float | None = None) -> float:
    """The wait before a retry: a jittered share of ``nominal``, cut to ``retry_after``
    when the failure said when trying again can succeed (``InfrastructureError.retry_after``:
    a grace that ends then), and never below zero. Not jittered: the hint is a moment,
    and a retry before it would only fail again."""
    delay = jittered(nominal)
    return delay if retry_after is None else max(0.0, min(delay, retry_after))


class Backoff:
    """Successive jittered delays for one thing that keeps failing; ``reset`` on success."""

    def __init__(self, initial: float, cap: float, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.cap = cap
        self.attempt = 0
        self._rng = rng

    def next(self) -> float:
        self.attempt += 1
        return jittered(exponential(self.attempt, self.initial, self.cap), self._rng)

    def reset(self) -> None:
        self.attempt = 0
