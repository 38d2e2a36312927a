"""Per-message bookkeeping: entries (in flight or held) and lanes.

Everything here is O(1) per message: an entry is appended to its lane's deque
and to each target watcher's queue, and found again by identity in one dict.
Acks are counted down (``pending``); only failures and rejections allocate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

# Entry states.
IN_FLIGHT = 0  # broadcast in the current round, in its lane's deque
ADVANCING = 1  # handed to advance() clean; re-read copies are dropped until it returns
HELD = 2       # advanced with failed watchers; the producer will read it again
DROPPED = 3    # its lane was forgotten (revoked) or the group stopped: ignore late acks

ABSENT = "absent"
QUEUE_FULL = "queue full"


class Lane:
    """One ordering lane: messages in broadcast order, one ``advance`` in flight at most."""

    __slots__ = ("advancing", "dropped", "key", "queue")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.queue: deque[Entry] = deque()
        self.advancing = False
        self.dropped = False


class Entry:
    """One message the group knows: in flight, being advanced, or held.

    ``targets``: every watcher the message is addressed to. ``round_targets``: the
    watchers of the current delivery round (targets minus those that acked or
    rejected in earlier rounds). ``pending``: round watchers not resolved yet.
    ``failed`` (this round) and ``rejected`` / ``acked_before`` (cumulative) stay
    None on the fast path. ``attempts`` counts exceptions/timeouts per watcher.
    """

    __slots__ = ("acked_before", "attempts", "failed", "ident", "lane", "payload", "pending",
                 "raw", "rejected", "round_targets", "rounds", "state", "targets")

    def __init__(self, ident: Hashable, lane: Lane, raw: Any, payload: Any,
                 targets: frozenset[str]) -> None:
        self.ident = ident
        self.lane = lane
        self.raw = raw
        self.payload = payload
        self.targets = targets
        self.round_targets = targets
        self.pending = 0
        self.failed: dict[str, str] | None = None
        self.rejected: dict[str, str] | None = None
        self.acked_before: frozenset[str] | None = None
        self.attempts: dict[str, int] | None = None
        self.rounds = 1
        self.state = IN_FLIGHT

    def __repr__(self) -> str:
        return f"Entry({self.ident!r}, state={self.state}, pending={self.pending})"
