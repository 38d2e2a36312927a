"""What one group holds right now, for ``/status``: partitions and held messages.

Built on the event loop (the ledger is the loop's) on demand, never on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One assigned partition as the ledger sees it.

    ``base``: the committed position the ledger started from; ``floor``: its first
    message not resolved yet (what a commit can reach); ``position``: the next offset
    it expects to read; ``remembered``: offsets above the commit resolved before,
    known from the commit metadata and not read again yet; ``fetch``: ``open``,
    ``bounded`` (paused at a bound) or ``rewinding``.
    """

    topic: str
    partition: int
    base: int | None
    floor: int | None
    position: int | None
    remembered: int
    held: int
    open_bytes: int
    fetch: str


@dataclass(frozen=True, slots=True)
class HeldView:
    """A message held for redelivery: who failed it, why, and when it goes again."""

    topic: str
    partition: int
    offset: int
    reasons: dict[str, str]  # watcher -> why it failed this round
    attempts: dict[str, int]
    rounds: int
    retry_in: float | None  # seconds until it is handed out again (None: not scheduled)


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    partitions: list[PartitionView]
    held: list[HeldView]
