"""The one backpressure decision of a broker adapter: which partitions are paused, and why.

Three pressures meet here, and only here:

* the group's :meth:`~sharedstream.core.contract.SharedStreamProducer.pause` (its
  ``max_in_flight`` messages in flight, or a lagging watcher's full queue: the group's
  one decision, :mod:`sharedstream.core.flowcontrol`);
* the event loop not taking what was read: ``max_queued`` messages handed over, not yet
  taken (the group's ``max_in_flight`` again, so one number bounds both what the
  watchers hold and what waits for them; batches waiting are handed out joined, so
  this is also the largest hand-out, see kafka/handoff_inbox.py), or ``max_queued_bytes``
  of their keys and values (``max_in_flight_bytes``: a bound in messages alone let a
  loop that stopped taking leave 10,000 large records in memory);
* a partition's own bound, decided by the ledger (``max_in_flight`` messages resolved or
  held above its floor, or ``max_in_flight_bytes`` of unresolved payload).

The first two hold the whole assignment back. The consumer thread first just stops
calling ``consume()`` (pausing drops librdkafka's prefetch, which under steady load
costs more than waiting), and pauses the assignment only once the hold outlasts
``pause_after``, so rebalance callbacks are served and the member stays live. A
partition at its bound is paused at once and stays paused until the ledger lifts the
bound, whatever the assignment does. :class:`Backpressure` holds that state and decides;
it does no I/O (the adapter applies what it decides), so it is unit-tested on its own.

Failure window: the decision is the consumer thread's, so up to one batch past a bound
may be read before the pause lands; the ledger discards those records and the
partition is sought back to them on resume.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from sharedstream.core.ledger import Key, PartitionLedger


class PauseReason(enum.Enum):
    """Why a partition does not fetch (the ``/status`` field and the metric's label)."""

    GROUP = "group_in_flight_or_queues_full"  # the group called pause(): in flight, or lag
    LOOP_BACKLOG = "loop_backlog"  # max_queued messages (or bytes) handed over, not taken yet
    PARTITION_BOUND = "partition_in_flight_bound"  # max_in_flight resolved or held above its floor
    BYTE_BOUND = "partition_byte_bound"  # max_in_flight_bytes unresolved
    CLOSING = "closing"  # the final commit serves a rebalance, fetching nothing


def bound_reason(ledger: PartitionLedger, bytes_bound: int) -> PauseReason:
    """Which of its bounds a partition the ledger stopped at reached (on the loop)."""
    return PauseReason.BYTE_BOUND if ledger.open_bytes >= bytes_bound \
        else PauseReason.PARTITION_BOUND


class Backlog(NamedTuple):
    """What the consumer thread handed over and the loop has not taken yet."""

    messages: int
    bytes: int  # their keys and values


@dataclass(frozen=True, slots=True)
class Pauses:
    """What does not fetch, and why: the one representation ``/status``, ``/metrics``
    and health read (published whole by the adapter, never edited in place)."""

    # Every owned partition that does not fetch, with its reason (its own bound first:
    # it outlasts the assignment's pause).
    partitions: Mapping[Key, PauseReason]
    # Why the whole assignment fetches nothing new, paused at the broker or held back
    # without pausing (None: it fetches).
    held: PauseReason | None = None

    @property
    def holding(self) -> bool:
        return self.held is not None


FETCHING = Pauses({})


@dataclass(slots=True)
class Backpressure:
    """The consumer thread's pause state and its decision (see module docstring)."""

    max_queued: int
    max_queued_bytes: int
    pause_after: float
    # Why the whole assignment is paused at the broker (None: it is not).
    assignment: PauseReason | None = None
    # Since when the thread holds back without pausing (None: it does not), and why.
    blocked_since: float | None = None
    blocked_for: PauseReason | None = None
    bounded: dict[Key, PauseReason] = field(default_factory=dict)

    def pressure(self, group_paused: bool, queued: Backlog) -> PauseReason | None:
        """What holds the assignment back now, if anything."""
        if group_paused:
            return PauseReason.GROUP
        if queued.messages >= self.max_queued or queued.bytes >= self.max_queued_bytes:
            return PauseReason.LOOP_BACKLOG
        return None

    def decide(self, group_paused: bool, queued: Backlog, now: float
               ) -> tuple[bool, PauseReason | None]:
        """``(hold, assignment)``: whether this turn must skip ``consume()`` and wait for
        room, and why the assignment should be paused (None: resumed). The caller applies
        a change of the paused state and then calls :meth:`applied`."""
        reason = self.blocked_for = self.pressure(group_paused, queued)
        if reason is None:
            self.blocked_since = None
            return False, None
        if self.blocked_since is None:
            self.blocked_since = now
        if now - self.blocked_since >= self.pause_after:
            return False, reason
        return True, self.assignment

    def applied(self, assignment: PauseReason | None) -> None:
        self.assignment = assignment

    @property
    def held(self) -> PauseReason | None:
        """Why the assignment fetches nothing new: paused at the broker, or held back."""
        return self.assignment if self.assignment is not None else self.blocked_for

    def bound(self, key: Key, reason: PauseReason) -> None:
        self.bounded[key] = reason

    def unbound(self, key: Key) -> None:
        self.bounded.pop(key, None)

    def resumable(self, keys: Iterable[Key]) -> list[Key]:
        """Of ``keys``, those a resumed assignment fetches again (not at their bound)."""
        return [key for key in keys if key not in self.bounded]

    def pauses(self, owned: Iterable[Key]) -> Pauses:
        """What does not fetch among the ``owned`` partitions, and why."""
        out: dict[Key, PauseReason] = {}
        for key in owned:
            reason = self.bounded.get(key, self.assignment)
            if reason is not None:
                out[key] = reason
        held = self.held
        return Pauses(out, held) if out or held is not None else FETCHING
