"""What the log says while ``run`` works, and when it stops.

Every ``[triggerer] progress_interval`` seconds (0: never) one line per group:
messages read per second, events persisted per second, the lag (messages behind
the log end of the partitions this process owns, from the committed offsets; asked
of the broker for each line, so it is as old as the line: ``?`` when the broker did
not answer), the messages held for a retry, and the dead letters written since the
previous line. A quiet stream reads ``0.0 msg/s, lag 0``, a stuck one ``0.0 msg/s,
lag 1200, held 1``.

After a stop, one ``stopped`` line per group says what this process committed
(messages every watcher finished, dead letters) and what it leaves to the next
start (messages in flight, not committed, read again: nothing is lost).

Events are persisted by one unit-of-work writer for all groups, which counts them
for the process, not per group: a group's ``events/s`` is the process's when it
runs one group, and the line says ``events/s (all groups)`` when it runs several.
"""

from __future__ import annotations

import asyncio
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


def figures(status: GroupView, lags: Mapping[Hashable, int | None] | None = None
            ) -> Figures:
    """The group's figures; its lag from ``lags`` (asked of the broker now) when that
    has the group, else from the adapter's statistics (an adapter that cannot ask)."""
    producer = status.producer
    counters = dict(producer.counters().items())
    if lags is not None and status.key in lags:
        lag = lags[status.key]
    else:
        stats = producer.partition_stats
        if callable(stats):  # the contract's method; the Kafka adapter's dict before it
            stats = stats()
        found = [s.end - s.committed for s in stats.values()
                 if s.end >= 0 and s.committed >= 0]
        lag = sum(found) if found else None
    return Figures(received=status.counters.received, settled=status.counters.settled,
                   dead_letters=int(counters.get("dead_letters", 0)),
                   held=int(producer.health().held_messages),
                   lag=lag, in_flight=status.in_flight)


class ProgressLog:
    """Turns successive snapshots of the groups into progress lines."""

    def __init__(self, names: Mapping[Hashable, str], now: float, events: int) -> None:
        self._names = dict(names)
        self._last: dict[Hashable, Figures] = {}
        self._at = now
        self._events = events

    def lines(self, statuses: Sequence[GroupView], now: float, events: int,
              lags: Mapping[Hashable, int | None] | None = None) -> list[str]:
        """One line per running group, rates over the time since the previous call;
        ``lags``: each group's lag asked of the broker for this line."""
        elapsed = max(now - self._at, 1e-9)
        event_rate = (events - self._events) / elapsed
        scope = "" if len(statuses) <= 1 else " (all groups)"
        out = []
        for status in statuses:
            current = figures(status, lags)
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


async def fresh_lags(statuses: Sequence[GroupView], request_timeout: float
                     ) -> dict[Hashable, int | None]:
    """Each group's lag asked of the broker now, for the adapters that can ask
    (``lag_now``); a group whose broker did not answer within ``request_timeout`` gets
    None."""
    asking = [(status.key, ask) for status in statuses
              if (ask := getattr(status.producer, "lag_now", None)) is not None]
    answers = await asyncio.gather(*(ask(request_timeout) for _, ask in asking))
    return {key: lag for (key, _), lag in zip(asking, answers, strict=True)}
