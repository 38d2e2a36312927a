"""The hand-off's status: what health, ``/status`` and ``/metrics`` read of the consumer.

Readiness and the last error, the adapter's counters, the broker's partition figures,
what does not fetch and why (:class:`~sharedstream.core.backpressure.Pauses`: the one
place a pause is recorded; the consumer state has no "paused"), and since when no
partition is owned.

Thread-safety:

* Writers: the consumer thread (all of it), and the event loop's dead-letter outbox
  (counters, the last error). Readers: any thread (the health server's, the loop's).
* ``_lock`` guards the counters and the (ready, last error) pair, read together.
  The partition figures, the pauses and the wait are each one attribute replaced
  whole, never edited in place: readers take them without the lock and see the old
  value or the new one.
* A thread dying between two writes leaves each value whole, and possibly stale: the
  pauses of its last turn, the figures of its last statistics. Health says the consumer
  is not ready from the failure (HandOff.fail) and the thread's death, not from these.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace

from sharedstream.core.backpressure import FETCHING, Pauses
from sharedstream.core.contract import PartitionStats
from sharedstream.core.counters import AdapterCounters
from sharedstream.core.ledger import Key


class ConsumerStatus:
    """What the consumer thread shows (see module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._last_error: str | None = None
        self._counters = AdapterCounters()
        self._stats: Mapping[Key, PartitionStats] = {}
        self._pauses = FETCHING
        # Since when (time.monotonic()) the consumer owns no partition; None: it owns some.
        self.waiting_since: float | None = None

    # -- readiness ---------------------------------------------------------------------

    def set_ready(self, ready: bool = True) -> None:
        """The broker answered (a batch, a commit, a probe), or the consumer failed."""
        with self._lock:
            self._ready = ready

    @property
    def ready(self) -> bool:
        """Thread: whether to probe the broker (a stale read costs one probe turn)."""
        return self._ready

    def note_error(self, text: str) -> None:
        """A transient broker problem: not ready until the broker answers again."""
        with self._lock:
            self._last_error = text
            self._ready = False

    def readiness(self) -> tuple[bool, str | None]:
        """(ready, the last error), read together."""
        with self._lock:
            return self._ready, self._last_error

    # -- counters ----------------------------------------------------------------------

    def count(self, add: Callable[[AdapterCounters, int], None], n: int = 1) -> None:
        """Bump a counter: ``add(counters, n)`` runs under the lock (one addition)."""
        with self._lock:
            add(self._counters, n)

    def counters(self, consumed: int) -> AdapterCounters:
        """A copy, with ``consumed`` messages (the inbox counts those as the loop takes
        them, under its own lock)."""
        with self._lock:
            return replace(self._counters, messages_consumed=consumed)

    # -- one value each, replaced whole ------------------------------------------------

    def set_stats(self, stats: Mapping[Key, PartitionStats]) -> None:
        self._stats = stats

    def stats(self) -> Mapping[Key, PartitionStats]:
        return self._stats

    def set_pauses(self, pauses: Pauses) -> None:
        """Thread: what does not fetch now (core/backpressure.py decided it)."""
        self._pauses = pauses

    @property
    def pauses(self) -> Pauses:
        return self._pauses

    def set_waiting(self, since: float | None) -> None:
        """Thread: the consumer owns no partition since ``since`` (None: it owns some)."""
        self.waiting_since = since
