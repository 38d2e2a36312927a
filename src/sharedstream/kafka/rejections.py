"""Where rejections go when the dead-letter topic cannot take them.

Two cases: no DLQ is configured for the group, or the broker refuses the
dead-letter record permanently (too large). Either way the rejection is written
through a :class:`RejectionRecorder` (the triggerer plugs in the
``rejected_message`` table) and only then is the message committed past, so a
partition never stalls forever and nothing vanishes (guarantee 1).

Failure window: the recorder runs before the commit. A crash between the two
records the rejection again after restart; recorders must be idempotent by
``identity`` (the state store's insert is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sharedstream.core.message import Coordinates


@dataclass(frozen=True, slots=True)
class RejectedMessage:
    """One rejected message, with enough context to find and reprocess it."""

    origin: Coordinates
    consumer_group: str
    rejections: Mapping[str, str]
    # Why this went to the recorder and not the DLQ ("no dead-letter topic configured",
    # or the broker's error).
    error: str
    key: bytes | None
    value: bytes | None

    @property
    def identity(self) -> str:
        return self.origin.identity


class RejectionRecorder(Protocol):
    """Durably records rejections; returning means they are stored. Raising holds them."""

    async def record(self, rejected: Sequence[RejectedMessage]) -> None: ...


class InMemoryRejectionRecorder:
    """Keeps rejections in a dict by identity: for tests, the demo and benchmarks."""

    def __init__(self) -> None:
        self.rows: dict[str, RejectedMessage] = {}

    async def record(self, rejected: Sequence[RejectedMessage]) -> None:
        for row in rejected:
            self.rows[row.identity] = row
