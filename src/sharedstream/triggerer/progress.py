"""What the log says while ``run`` works, and when it stops.

Every ``[triggerer] progress_interval`` seconds (0: never) one line per group:
messages read per second, events persisted per second, the lag (messages behind
the log end, from the committed offsets the broker reports), the messages held
for a retry, and the dead letters written since the previous line. A quiet stream
reads ``0.0 msg/s, lag 0``, a stuck one ``0.0 msg/s, lag 1200, held 1``.

After a stop, one ``stopped`` line per group says what this process committed
(messages every watcher finished, dead letters) and what it leaves to the next
start (messages in flight, not committed, read again: nothing is lost).

Events are persisted by one unit-of-work writer for all groups, which counts them
for the process, not per group: a group's ``events/s`` is the process's when it
runs one group, and the line says ``events/s (all groups)`` when it runs several.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class GroupView(Protocol):
    """What a progress line reads of one running group (``SharedStreamManager.status``)."""

    @property
    def key(self) -> Hashable: ...
    @property
    def producer(self) -> Any: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def counters(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Figures:
    """One group's running totals (and gauges) at one moment."""

    received: int
    settled: int
    dead_letters: int
    held: int
    lag: int | None  # None: the broker has not reported it yet
    in_flight: int


_START = Figures(received=0, settled=0, dead_letters=0, held=0, lag=None, in_flight=0)


def figures(status: GroupView) -> Figures:
    producer = status.producer
    counters = dict(producer.counters().items())
    stats = producer.partition_stats
    if callable(stats):  # the adapter contract's method; the Kafka adapter's dict before it
        stats = stats()
    lags = [s.end - s.committed for s in stats.values() if s.end >= 0 and s.committed >= 0]
    return Figures(received=status.counters.received, settled=status.counters.settled,
                   dead_letters=int(counters.get("dead_letters", 0)),
                   held=int(producer.health().held_messages),
                   lag=sum(lags) if lags else None, in_flight=status.in_flight)


class ProgressLog:
    """Turns successive snapshots of the groups into progress lines."""

    def __init__(self, names: Mapping[Hashable, str], now: float, events: int) -> None:
        self._names = dict(names)
        self._last: dict[Hashable, Figures] = {}
        self._at = now
        self._events = events

    def lines(self, statuses: Sequence[GroupView], now: float, events: int) -> list[str]:
        """One line per running group, rates over the time since the previous call."""
        elapsed = max(now - self._at, 1e-9)
        event_rate = (events - self._events) / elapsed
        scope = "" if len(statuses) <= 1 else " (all groups)"
        out = []
        for status in statuses:
            current = figures(status)
            last = self._last.get(status.key, _START)
            if current.received < last.received:  # a group rebuilt counts from 0 again
                last = _START
            out.append(
                f"group {self._name(status.key)}: "
                f"{(current.received - last.received) / elapsed:.1f} msg/s, "
                f"{event_rate:.1f} events/s{scope}, "
                f"lag {'?' if current.lag is None else current.lag}, held {current.held}, "
                f"dead-lettered {current.dead_letters - last.dead_letters}")
            self._last[status.key] = current
        self._at, self._events = now, events
        return out

    def stopped_lines(self, statuses: Sequence[GroupView], seconds: float,
                      events: int) -> list[str]:
        """What each group committed during this process's life, and what it leaves."""
        out = []
        for status in statuses:
            current = figures(status)
            left = (f"{current.in_flight} in flight not committed (read again by the next "
                    "start)" if current.in_flight else "nothing left uncommitted")
            out.append(f"stopped after {seconds:.0f}s: group {self._name(status.key)} "
                       f"committed {current.settled} messages ({current.dead_letters} "
                       f"dead-lettered), {left}")
        out.append(f"stopped: {events} events persisted")
        return out

    def _name(self, key: Hashable) -> str:
        return self._names.get(key, repr(key))
